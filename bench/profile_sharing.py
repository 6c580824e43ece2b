#!/usr/bin/python3
"""How repeatable `mitra profile`'s sharing figures are, in one run (docs/performance.md).

Profiles the bench GPT (batch 32) on `localhost slots=4` --runs times and prints, for each k
(processes computing at once on the machine), one JSON line: the speed per process of every
run, their spread (largest less smallest), and the most work the k processes did together in
any run over the CPUs this process may use (`aggregate_over_cpus`: above 1 no machine can do;
the profile allows 1.1 for timing noise). Then the profile's wall time per run.

  bench/profile_sharing.py [--build build] [--runs 5] [--model bench]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def profile(args, tmp, index):
    out = os.path.join(tmp, f"profile-{index}")
    start = time.monotonic()
    done = subprocess.run(
        [os.path.join(args.build, "bin", "mitra"), "profile", "--machines",
         os.path.join(tmp, "machines.txt"), "--batch-size", "32", "--out", out, "--",
         os.path.join(args.build, "bin", "gpt_train"), "--model", args.model],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-3000:])
    with open(os.path.join(out, "profile.json")) as f:
        return json.load(f)["machines"][0]["speed"], time.monotonic() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default="bench")
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "machines.txt"), "w") as f:
            f.write("localhost slots=4\n")
        runs = [profile(args, tmp, i) for i in range(args.runs)]
    for k in range(2, 5):
        speeds = [speed[k - 1] for speed, _ in runs]
        print(json.dumps({"k": k, "speeds": [round(s, 3) for s in speeds],
                          "spread": round(max(speeds) - min(speeds), 3),
                          "aggregate_over_cpus": round(k * max(speeds) / cpus, 3)}))
    print(json.dumps({"model": args.model, "cpus": cpus,
                      "profile_s": [round(seconds, 1) for _, seconds in runs]}))


if __name__ == "__main__":
    main()
