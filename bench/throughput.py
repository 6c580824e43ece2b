#!/usr/bin/python3
"""Throughput of mitra's runtime against a plain LibTorch loop and PyTorch, in one run.

Trains the `bench` GPT (batch 32, micro-batch 8, one intra-op thread per process) with:
  plain    bench/plain_gpt.cc: the same model in a plain single-process LibTorch loop
  plain_tuned  the same, with glibc's malloc set as mitra's workers set it (see below)
  mitra    `mitra run` 1x1, 1x2 (D=2) and 2x1 (P=2) on localhost
  pytorch  bench/python/gpt_bench.py: the same model in PyTorch, single process and DDP (2)
Each configuration runs --repeats times, interleaved, and the median tokens/s is kept, so
slow phases of a shared machine hit every configuration alike. Prints one JSON object per
measurement and a final JSON summary with the ratios:
  mitra_1x1 / plain, mitra_1x1 / pytorch            (targets >= 0.98 and >= 1.0)
  mitra_1x1 / plain_tuned                            (the runtime's own overhead)
  mitra_1x2 / mitra_1x1, mitra_2x1 / mitra_1x1      (target >= 0.9; two processes share
  pytorch_ddp / pytorch                              about one core on a 2-vCPU machine)

  bench/throughput.py [--build build] [--steps 20] [--repeats 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in output:\n" + text[-2000:])


def run(cmd, **kw):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    return out.stdout


# What mitra's workers do with mallopt() at start (worker/trainer.cc), as environment variables.
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def plain(args, tuned=False):
    env = dict(os.environ, **TUNED_MALLOC) if tuned else None
    return last_json(run([f"{args.build}/bin/plain_gpt", "--steps", str(args.steps),
                          "--warmup", str(args.warmup)], env=env))["tokens_per_s"]


def pytorch(args, mode):
    cmd = ["/usr/bin/python3", f"{ROOT}/bench/python/gpt_bench.py", "--mode", mode,
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    return last_json(run(cmd))["tokens_per_s"]


def mitra(args, stages, slots):
    with tempfile.TemporaryDirectory() as tmp:
        machines = os.path.join(tmp, "machines.txt")
        with open(machines, "w") as f:
            f.write(f"localhost slots={slots}\n")
        run_dir = os.path.join(tmp, "run")
        run([f"{args.build}/bin/mitra", "run", "--machines", machines, "--batch-size", "32",
             "--nstages", str(stages), "--chunk-size", "8",
             "--max-steps", str(args.warmup + args.steps), "--run-dir", run_dir, "--",
             f"{args.build}/bin/gpt_train", "--model", "bench"])
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            steps = [json.loads(line) for line in f if line.strip()]
    timed = [s for s in steps if s["step"] > args.warmup]
    return sum(s["samples"] * 128 for s in timed) / sum(s["step_time_s"] for s in timed)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    configs = {
        "plain": lambda: plain(args),
        "plain_tuned": lambda: plain(args, tuned=True),
        "mitra_1x1": lambda: mitra(args, 1, 1),
        "pytorch": lambda: pytorch(args, "single"),
        "mitra_1x2": lambda: mitra(args, 1, 2),
        "mitra_2x1": lambda: mitra(args, 2, 2),
        "pytorch_ddp": lambda: pytorch(args, "ddp"),
    }
    samples = {name: [] for name in configs}
    for r in range(args.repeats):
        for name, measure in configs.items():
            tps = measure()
            samples[name].append(tps)
            print(json.dumps({"config": name, "repeat": r, "tokens_per_s": round(tps, 1)}),
                  flush=True)
    med = {name: statistics.median(v) for name, v in samples.items()}
    summary = {
        "bench": "throughput",
        "model": "bench", "batch": 32, "chunk": 8, "threads_per_process": 1,
        "steps": args.steps, "repeats": args.repeats,
        "tokens_per_s": {k: round(v, 1) for k, v in med.items()},
        "ratios": {
            "mitra_1x1_over_plain": round(med["mitra_1x1"] / med["plain"], 3),
            "mitra_1x1_over_plain_tuned": round(med["mitra_1x1"] / med["plain_tuned"], 3),
            "mitra_1x1_over_pytorch": round(med["mitra_1x1"] / med["pytorch"], 3),
            "mitra_1x2_over_mitra_1x1": round(med["mitra_1x2"] / med["mitra_1x1"], 3),
            "mitra_2x1_over_mitra_1x1": round(med["mitra_2x1"] / med["mitra_1x1"], 3),
            "pytorch_ddp_over_pytorch": round(med["pytorch_ddp"] / med["pytorch"], 3),
        },
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
