#!/usr/bin/python3
"""Machines that differ, emulated on one box: the batch shared by speed against slots treated as
equal, and the planner's predictions on the mix (docs/performance.md).

The mix is an emulation: three loopback sshd "hosts" of one slot each, A with the whole machine,
B and C each in a CPU cgroup of its own limited to 0.4 of one core (cgroup v1's
cpu.cfs_quota_us, v2's cpu.max; the period as short as a 1 ms quota allows, so the slowness is
even). Every process a host's sshd starts is born in its group.

1. `mitra profile` the bench GPT (batch 32) over A, B and C.
2. Trains, --steps steps each, in --rounds rounds (every other one in reverse order):
   - planned: `mitra run --profile` with --nstages 1 (the shapes whose replicas may take uneven
     shares; the planner chooses D, the micro-batch and the shares);
   - equal: the best 1-stage shape of `mitra plan --slots 3` on the same profile (three slots
     like A: the plan that treats slots as equal), trained on A, B and C with even shares;
   - the other 1-stage shapes a user could pick by hand: 1 x 1 on A, 1 x 2 on A and B, 1 x 3
     on all, each with even shares.
   Each one's measured step is the median of its rounds' medians (steps 3 on); its prediction
   the median of `mitra plan --validate` of its run with each of --profiles profiles (the
   first, which planned, and more made after the rounds): a profile on a CPU quota varies by
   several percent from one to the next, as the planner bench's do.
3. Prints one JSON line per candidate, then a summary: planned_over_equal (tokens/s), the
   planned shape against the best measured, and the median and worst prediction error.

  bench/mixed.py [--build build] [--steps 16] [--rounds 2] [--profiles 3] [--quota 0.4] [--keep]

--keep leaves the profile and the runs in the temporary directory it names at the end.

Needs root (cgroups, sshd) and sshd; everything it starts is stopped at the end.
"""
import argparse
import json
import os
import shutil
import statistics
import tempfile

import elastic  # start_sshds
from planner import predict_run, run, step_times

BATCH = 32
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]  # A (whole machine), B and C (the quota)


class CpuGroup:
    """A cgroup whose processes share `cpus` CPUs' time; removed by close()."""

    V1 = "/sys/fs/cgroup/cpu"

    def __init__(self, name, cpus):
        v1 = os.path.exists(os.path.join(self.V1, "cpu.cfs_quota_us"))
        self.root = self.V1 if v1 else "/sys/fs/cgroup"
        self.path = os.path.join(self.root, f"{name}-{os.getpid()}")
        os.makedirs(self.path, exist_ok=True)
        period = round(1000 / min(cpus, 1.0))  # a quota may not be under 1 ms
        quota = round(cpus * period)
        if v1:
            self.write("cpu.cfs_period_us", period)
            self.write("cpu.cfs_quota_us", quota)
        else:
            with open(os.path.join(self.root, "cgroup.subtree_control"), "w") as f:
                f.write("+cpu")
            self.write("cpu.max", f"{quota} {period}")

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def add(self, pid):
        self.write("cgroup.procs", pid)

    def close(self):
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                left = f.read().split()
            for pid in left:
                with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
                    f.write(pid)
            os.rmdir(self.path)
        except OSError:
            pass


class Mix:
    """Loopback hosts, an sshd each, started; `cpus` maps each host to the CPUs its group may
    use (None: the whole machine, no group)."""

    def __init__(self, tmp, cpus):
        self.tmp, self.daemons, self.groups = tmp, {}, []
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        self.port, self.known, self.key = elastic.start_sshds(sshd, tmp, list(cpus), self.daemons)
        for host, limit in cpus.items():
            if limit is None:
                continue
            group = CpuGroup("mitra-bench-" + host, limit)
            group.add(self.daemons[host].pid)
            self.groups.append(group)

    def machines(self, hosts, name):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("".join(f"{h}:{self.port} slots=1\n" for h in hosts))
        return path

    def ssh_flags(self):
        return ["--known-hosts", self.known, "--identity", self.key]

    def close(self):
        for job in self.daemons.values():
            job.stop(grace=2)
        for group in self.groups:
            group.close()


def launch_of(run_dir):
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        return [json.loads(line) for line in f if '"event":"launch"' in line][0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profiles", type=int, default=3, help="profiles the predictions use")
    parser.add_argument("--quota", type=float, default=0.4, help="B's and C's CPUs")
    parser.add_argument("--keep", action="store_true", help="keep the profile and the runs")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    program = [f"{args.build}/bin/gpt_train", "--model", "bench"]
    tmp = tempfile.mkdtemp(prefix="mitra-mixed-")
    mix = Mix(tmp, {HOSTS[0]: None, HOSTS[1]: args.quota, HOSTS[2]: args.quota})
    try:
        everyone = mix.machines(HOSTS, "machines-abc.txt")

        def profile_into(name):
            out = os.path.join(tmp, name)
            run([f"{args.build}/bin/mitra", "profile", "--machines", everyone, "--batch-size",
                 str(BATCH), "--out", out, *mix.ssh_flags(), "--", *program])
            return out

        profile = profile_into("profile")
        equal_plan = json.loads(run([f"{args.build}/bin/mitra", "plan", "--profile", profile,
                                     "--batch-size", str(BATCH), "--slots", "3", "--nstages",
                                     "1", "--json"]))["best"]
        common = ["--batch-size", str(BATCH), "--nstages", "1", "--max-steps", str(args.steps),
                  *mix.ssh_flags()]
        candidates = {
            "planned": (everyone, ["--profile", profile]),
            "equal": (everyone, ["--chunk-size", str(equal_plan["chunk_size"])]),
            "a_alone": (mix.machines(HOSTS[:1], "machines-a.txt"), []),
            "ab_even": (mix.machines(HOSTS[:2], "machines-ab.txt"), []),
        }
        if equal_plan["replicas"] != 3:
            candidates["abc_even"] = (everyone, [])
        measured = {name: [] for name in candidates}
        runs = {}
        for r in range(args.rounds):
            names = list(candidates) if r % 2 == 0 else list(reversed(candidates))
            for name in names:
                machines, flags = candidates[name]
                run_dir = os.path.join(tmp, f"{name}-{r}")
                run([f"{args.build}/bin/mitra", "run", "--machines", machines, *common, *flags,
                     "--run-dir", run_dir, "--", *program])
                measured[name].append(statistics.median(step_times(run_dir)[2:]))
                runs[name] = run_dir
        profiles = [profile] + [profile_into(f"profile-{i}") for i in range(1, args.profiles)]
        rows = []
        for name, medians in measured.items():
            launch = launch_of(runs[name])
            step = statistics.median(medians)
            predicted = statistics.median(predict_run(args, runs[name], p) for p in profiles)
            row = {"candidate": name, "shape": f"{launch['stages']} x {launch['replicas']}",
                   "chunk_size": launch["chunk_size"], "shares": ",".join(map(str, launch.get("shares", []))) or "even",
                   "machines": len(launch["machines"]), "measured_step_s": round(step, 4),
                   "samples_per_s": round(BATCH / step, 1), "predicted_step_s": round(predicted, 4),
                   "error": round(predicted / step - 1, 3),
                   "round_spread": round((max(medians) - min(medians)) / step, 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        by = {row["candidate"]: row for row in rows}
        best = min(rows, key=lambda row: row["measured_step_s"])
        errors = [abs(row["error"]) for row in rows]
        print(json.dumps({
            "summary": "mixed", "quota": args.quota, "equal_plan": f"1 x {equal_plan['replicas']}, "
            f"micro-batch {equal_plan['chunk_size']}",
            "planned_over_equal": round(by["equal"]["measured_step_s"] /
                                        by["planned"]["measured_step_s"], 3),
            "planned_over_best": round(best["measured_step_s"] / by["planned"]["measured_step_s"], 3),
            "best": best["candidate"], "median_error": round(statistics.median(errors), 3),
            "worst_error": round(max(errors), 3)}), flush=True)
    finally:
        mix.close()
        if args.keep:
            print(json.dumps({"kept": tmp}), flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
