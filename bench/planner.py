#!/usr/bin/python3
"""The planner's predictions against measured step times, in one run (docs/performance.md).

1. `mitra profile` the bench GPT (batch 32) on `localhost slots=2`.
2. `mitra plan --slots 2 --json`: the ranked shapes.
3. Trains the first --shapes distinct shapes (P x D, micro-batch, schedule; the planner's
   partition), the best 1 x 1 among them, --steps steps each with `mitra run`, in --rounds rounds
   (every other one in reverse order), and profiles again after each round. These shared
   machines drift by 10% and more within minutes, for stretches of tens of seconds, so each
   shape's measured time is the median of its rounds' medians (of steps 3 on), its prediction
   the median of the profiles' predictions of the shape it trained (`mitra plan --validate`: its
   partition and schedule as run), and `round_spread` (the largest less the smallest of its
   rounds' medians, over their median) shows the noise the errors sit in. Prints one JSON
   line per shape, then a summary: the median and worst relative error, and how the planner's
   pick measured against the measured best.
4. `mitra plan --slots 10000` (and with a batch of 4096): the planning time.
5. A morph from 4 to 3 slots under auto-configuration (no --nstages; the profile of
   `localhost slots=4`): the shape the planner picks for 3 slots, against the fixed-P shape
   (P as the planner chose at 4 slots, or 2 when it chose 1; D = floor(3 / P)) and against the
   best shape that uses all three slots, each predicted and measured.

  bench/planner.py [--build build] [--shapes 12] [--steps 12] [--rounds 3] [--no-morph] [--keep]
"""
import argparse
import atexit
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 32


def run(cmd, **kw):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if out.returncode != 0:
        raise RuntimeError(" ".join(cmd) + "\n" + out.stdout[-3000:])
    return out.stdout


def machines(tmp, slots):
    path = os.path.join(tmp, f"machines-{slots}.txt")
    with open(path, "w") as f:
        f.write(f"localhost slots={slots}\n")
    return path


def step_times(run_dir, generation=None):
    times = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "step_time_s" in m and (generation is None or m.get("generation") == generation):
                times.append(m["step_time_s"])
    return times


def measure(args, tmp, shape, name):
    """Trains `shape` (a candidate of `mitra plan --json`); its step times, warm-up left out."""
    world = shape["stages"] * shape["replicas"]
    run_dir = os.path.join(tmp, name)
    program = [f"{args.build}/bin/gpt_train", "--model", "bench", "--schedule", shape["schedule"],
               "--partition", shape["partition"]] + (["--recompute"] if shape["recompute"] else [])
    run([f"{args.build}/bin/mitra", "run", "--machines", machines(tmp, world), "--batch-size",
         str(BATCH), "--nstages", str(shape["stages"]), "--chunk-size", str(shape["chunk_size"]),
         "--max-steps", str(args.steps), "--run-dir", run_dir, "--"] + program)
    return step_times(run_dir)[2:]


def plan(args, profile, slots, batch=BATCH, extra=()):
    out = run([f"{args.build}/bin/mitra", "plan", "--profile", profile, "--batch-size", str(batch),
               "--slots", str(slots), "--json", "--top", "200", *extra])
    return json.loads(out)


def predict_run(args, run_dir, profile):
    """The step time `profile` predicts for the shape trained in `run_dir`, in seconds."""
    out = run([f"{args.build}/bin/mitra", "plan", "--validate", run_dir, "--profile", profile])
    found = re.search(r"step\s+predicted ([0-9.]+) ms", out)
    if not found:
        raise RuntimeError("no prediction in `mitra plan --validate " + run_dir + "`:\n" + out)
    return float(found.group(1)) / 1000


def profile_program(args, tmp, name):
    out = os.path.join(tmp, name)
    run([f"{args.build}/bin/mitra", "profile", "--machines", machines(tmp, 2), "--batch-size",
         str(BATCH), "--out", out, "--", f"{args.build}/bin/gpt_train", "--model", "bench"])
    return out


def key(c):
    return (c["stages"], c["replicas"], c["chunk_size"], c["schedule"], c["recompute"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--shapes", type=int, default=12)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-morph", action="store_true",
                        help="leave out part 5, the morph from 4 to 3 slots")
    parser.add_argument("--keep", action="store_true",
                        help="keep the profiles and run directories (over a gigabyte) and print "
                             "where")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="mitra-planner-bench-")
    if args.keep:
        print(json.dumps({"kept_in": tmp}), flush=True)
    else:
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)

    # 1, 2. Profile on 2 slots and plan.
    start = time.monotonic()
    profile = profile_program(args, tmp, "profile")
    print(json.dumps({"profile_s": round(time.monotonic() - start, 1), "slots": 2}), flush=True)
    ranked = plan(args, profile, 2)["candidates"]
    chosen, seen = [], set()
    for c in ranked:
        if key(c) not in seen:
            seen.add(key(c))
            chosen.append(c)
    shapes = chosen[:args.shapes]
    if not any(c["stages"] * c["replicas"] == 1 for c in shapes):
        shapes[-1] = next(c for c in chosen if c["stages"] * c["replicas"] == 1)

    # 3. Measure them, in --rounds rounds (every other one in reverse order), profiling again
    # after each.
    round_medians = {i: [] for i in range(len(shapes))}
    profiles = [profile]
    for round_ in range(args.rounds):
        order = range(len(shapes)) if round_ % 2 == 0 else reversed(range(len(shapes)))
        for i in order:
            run_times = measure(args, tmp, shapes[i], f"shape-{i}-{round_}")
            round_medians[i].append(statistics.median(run_times))
        profiles.append(profile_program(args, tmp, f"profile-after-{round_}"))
    spreads = {i: (max(m) - min(m)) / statistics.median(m) for i, m in round_medians.items()}
    results = []
    for i, c in enumerate(shapes):
        measured = statistics.median(round_medians[i])
        predicted = statistics.median(
            predict_run(args, os.path.join(tmp, f"shape-{i}-0"), p) for p in profiles)
        error = (predicted - measured) / measured
        result = {"rank": chosen.index(c) + 1, "shape": f"{c['stages']}x{c['replicas']}",
                  "chunk_size": c["chunk_size"],
                  "schedule": c["schedule"] + ("+recompute" if c["recompute"] else ""),
                  "partition": c["partition"], "predicted_s": round(predicted, 4),
                  "measured_s": round(measured, 4), "error": round(error, 4),
                  "round_spread": round(spreads.get(i, 0), 4)}
        results.append(result)
        print(json.dumps(result), flush=True)
    errors = sorted(abs(r["error"]) for r in results)
    best = min(results, key=lambda r: r["measured_s"])
    pick = results[0]
    summary = {"shapes": len(results), "median_error": round(statistics.median(errors), 4),
               "max_error": round(errors[-1], 4),
               "median_round_spread": round(statistics.median(r["round_spread"] for r in results), 4),
               "pick": f"{pick['shape']} {pick['chunk_size']} {pick['schedule']}",
               "measured_best": f"{best['shape']} {best['chunk_size']} {best['schedule']}",
               "pick_over_best": round(pick["measured_s"] / best["measured_s"], 4)}

    # 4. Planning at scale.
    for batch in (BATCH, 4096):
        p = plan(args, profile, 10000, batch)
        summary[f"plan_10000_slots_batch_{batch}_s"] = round(p["planning_s"], 3)

    if args.no_morph:
        print(json.dumps(summary), flush=True)
        return

    # 5. A morph from 4 to 3 slots, planned.
    profile4 = os.path.join(tmp, "profile-4")
    run([f"{args.build}/bin/mitra", "profile", "--machines", machines(tmp, 4), "--batch-size",
         str(BATCH), "--out", profile4, "--", f"{args.build}/bin/gpt_train", "--model", "bench"])
    four = plan(args, profile4, 4)["best"]
    three = plan(args, profile4, 3)["best"]
    # P as at 4 slots, or the demo's --nstages 2 when the planner chose no pipeline there.
    fixed_p = four["stages"] if four["stages"] > 1 else 2
    fixed = plan(args, profile4, 3, extra=("--nstages", str(fixed_p)))["best"]
    morph_dir = os.path.join(tmp, "morph")
    list_path = machines(tmp, 4)
    proc = subprocess.Popen(
        [f"{args.build}/bin/mitra", "run", "--machines", list_path, "--batch-size", str(BATCH),
         "--profile", profile4, "--max-steps", "40", "--run-dir", morph_dir, "--",
         f"{args.build}/bin/gpt_train", "--model", "bench"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while len(step_times(morph_dir) if os.path.exists(os.path.join(morph_dir, "metrics.jsonl")) else []) < 5:
        time.sleep(0.2)
    with open(list_path + ".new", "w") as f:
        f.write("localhost slots=3\n")
    os.rename(list_path + ".new", list_path)
    output, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(output[-3000:])
    launches = [json.loads(l) for l in open(os.path.join(morph_dir, "events.jsonl"))
                if '"event":"launch"' in l]
    after = launches[-1]
    planned_measured = statistics.median(step_times(morph_dir, after["generation"])[2:])
    fixed_measured = statistics.median(measure(args, tmp, fixed, "fixed-3"))
    # The best shape that uses all three slots, to check a choice that leaves one idle.
    full = next(c for c in plan(args, profile4, 3)["candidates"]
                if c["stages"] * c["replicas"] == 3)
    full_measured = statistics.median(measure(args, tmp, full, "full-3"))
    summary["morph"] = {
        "before": f"{launches[0]['stages']}x{launches[0]['replicas']}",
        "after": f"{after['stages']}x{after['replicas']}",
        "after_idle_slots": 3 - after["stages"] * after["replicas"],
        "after_predicted_s": round(after.get("predicted_step_s", 0), 4),
        "after_measured_s": round(planned_measured, 4),
        "fixed_p": f"{fixed['stages']}x{fixed['replicas']} {fixed['chunk_size']} {fixed['schedule']}",
        "fixed_predicted_s": round(fixed["predicted_step_s"], 4),
        "fixed_measured_s": round(fixed_measured, 4),
        "all_three": f"{full['stages']}x{full['replicas']} {full['chunk_size']} {full['schedule']}",
        "all_three_predicted_s": round(full["predicted_step_s"], 4),
        "all_three_measured_s": round(full_measured, 4),
        "predicted_gain": round(fixed["predicted_step_s"] / three["predicted_step_s"], 4),
        "measured_gain": round(fixed_measured / planned_measured, 4)}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
