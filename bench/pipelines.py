#!/usr/bin/python3
"""Each pipeline cut for its machines, emulated on one box: a pipeline with a slow stage cut for
its machines against the one partition every pipeline shares (docs/performance.md).

Four loopback sshd "hosts" of one slot each, in CPU cgroups as bench/mixed.py makes them: A, B
and C limited to --fast of a core, D to --slow (by default 0.45 and 0.18: D 2.5 times slower,
1.53 cores in all on this 2-core machine). With two stages, ranks fill the hosts in list order:
replica 0 runs on A and B, replica 1 on C and D.

1. `mitra profile` the bench GPT (batch 32) over A, B, C and D.
2. `mitra plan --nstages 2` on that profile: the best 2 x 2 shape in list order whose pipelines
   are cut each its own way (a partition such as 5,5/7,3) gives the partitions, the schedule
   and the micro-batch.
3. Trains, --steps steps each, in --rounds rounds (every other one in reverse order), 2 x 2 on
   the four hosts with even shares, that schedule and that micro-batch:
   - per_pipeline: `--partition P0/P1`, each pipeline its own;
   - one_partition: `--partition P0`, replica 0's for both (what a partition for all gives);
   and, for reference, planned: `mitra run --nstages 2 --profile` (the planner's whole choice:
   shares, machine order and all).
   Each one's measured step is the median of its rounds' medians (steps 3 on); its prediction
   `mitra plan --validate` of its run with the profile.
4. Prints one JSON line per candidate, then a summary: one_partition_over_per_pipeline (step
   time, same shape and shares), and the median and worst prediction error.

  bench/pipelines.py [--build build] [--steps 12] [--rounds 2] [--fast 0.45] [--slow 0.18] [--keep]

Needs root (cgroups, sshd) and sshd; everything it starts is stopped at the end.
"""
import argparse
import json
import os
import shutil
import statistics
import tempfile

from mixed import Mix, launch_of
from planner import predict_run, run, step_times

BATCH = 32
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]  # A, B, C (fast) and D (slow)


def cut_per_pipeline(plan):
    """The fastest 2 x 2 candidate of `plan` (mitra plan --json) in list order whose pipelines
    are cut differently; None when there is none."""
    for c in [plan["best"]] + plan["candidates"]:
        if (c["stages"], c["replicas"]) == (2, 2) and "/" in c["partition"] and \
                "machine_order" not in c:
            return c
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fast", type=float, default=0.45, help="A's, B's and C's CPUs")
    parser.add_argument("--slow", type=float, default=0.18, help="D's CPUs")
    parser.add_argument("--keep", action="store_true", help="keep the profile and the runs")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    program = [f"{args.build}/bin/gpt_train", "--model", "bench"]
    tmp = tempfile.mkdtemp(prefix="mitra-pipelines-")
    mix = Mix(tmp, {HOSTS[0]: args.fast, HOSTS[1]: args.fast, HOSTS[2]: args.fast,
                    HOSTS[3]: args.slow})
    try:
        everyone = mix.machines(HOSTS, "machines.txt")
        profile = os.path.join(tmp, "profile")
        run([f"{args.build}/bin/mitra", "profile", "--machines", everyone, "--batch-size",
             str(BATCH), "--out", profile, *mix.ssh_flags(), "--", *program])
        plan = json.loads(run([f"{args.build}/bin/mitra", "plan", "--profile", profile,
                               "--batch-size", str(BATCH), "--machines", everyone, "--nstages",
                               "2", "--json", "--top", "200"]))
        shape = cut_per_pipeline(plan)
        if shape is None:
            raise SystemExit("the planner cut no 2 x 2 shape per pipeline on this profile: "
                             + json.dumps(plan["best"]))
        first = shape["partition"].split("/")[0]
        fixed = ["--nstages", "2", "--chunk-size", str(shape["chunk_size"])]
        common = ["--batch-size", str(BATCH), "--max-steps", str(args.steps), *mix.ssh_flags()]
        schedule = ["--schedule", shape["schedule"]] + (["--recompute"] if shape["recompute"] else [])
        candidates = {
            "per_pipeline": (fixed, [*schedule, "--partition", shape["partition"]]),
            "one_partition": (fixed, [*schedule, "--partition", first]),
            "planned": (["--nstages", "2", "--profile", profile], []),
        }
        measured = {name: [] for name in candidates}
        runs = {}
        for r in range(args.rounds):
            names = list(candidates) if r % 2 == 0 else list(reversed(candidates))
            for name in names:
                flags, program_flags = candidates[name]
                run_dir = os.path.join(tmp, f"{name}-{r}")
                run([f"{args.build}/bin/mitra", "run", "--machines", everyone, *common, *flags,
                     "--run-dir", run_dir, "--", *program, *program_flags])
                measured[name].append(statistics.median(step_times(run_dir)[2:]))
                runs[name] = run_dir
        rows = []
        for name, medians in measured.items():
            launch = launch_of(runs[name])
            step = statistics.median(medians)
            predicted = predict_run(args, runs[name], profile)
            row = {"candidate": name, "shape": f"{launch['stages']} x {launch['replicas']}",
                   "chunk_size": launch["chunk_size"],
                   "partition": launch.get("partition") or candidates[name][1][-1],
                   "shares": ",".join(map(str, launch.get("shares", []))) or "even",
                   "measured_step_s": round(step, 4), "samples_per_s": round(BATCH / step, 1),
                   "predicted_step_s": round(predicted, 4),
                   "error": round(predicted / step - 1, 3),
                   "round_spread": round((max(medians) - min(medians)) / step, 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        by = {row["candidate"]: row for row in rows}
        errors = [abs(row["error"]) for row in rows]
        print(json.dumps({
            "summary": "pipelines", "fast": args.fast, "slow": args.slow,
            "planned_partition": shape["partition"], "schedule": shape["schedule"],
            "chunk_size": shape["chunk_size"],
            "one_partition_over_per_pipeline": round(by["one_partition"]["measured_step_s"] /
                                                     by["per_pipeline"]["measured_step_s"], 3),
            "one_partition_over_per_pipeline_predicted": round(
                by["one_partition"]["predicted_step_s"] / by["per_pipeline"]["predicted_step_s"], 3),
            "median_error": round(statistics.median(errors), 3),
            "worst_error": round(max(errors), 3)}), flush=True)
    finally:
        mix.close()
        if args.keep:
            print(json.dumps({"kept": tmp}), flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
