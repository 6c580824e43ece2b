#!/usr/bin/python3
"""The model you have, at mitra's speed: ModelSpec.from_module and the loader, in one run.

Both parts train the `bench` GPT (examples/python/gpt_train.py: 8 blocks, width 128, context
128) alone in one process (1 x 1, no `mitra run`), batch 32 in micro-batches of 8, one
intra-op thread; each configuration runs --runs times, interleaved with the others, and each
run's median step_time_s over the steps after --warmup is kept, then the median over runs.

  gpt     factory: gpt_spec, the model written in mitra's shape (a factory per segment)
          module:  gpt_module_spec, the same layers written as one nn.Module with CutPoints in
                   its forward, cut by torch.fx (--from-module)
            module_over_factory  tokens/s of module / factory              (target >= 0.98)
            module_over_factory_paired  the median of each round's ratio (the machine's
                                 speed drifts by more than 10% between rounds here)
  loader  free:    the dataset as it is (a slice of a tensor per sample)
          costly:  each __getitem__ sleeps --cost-ms first (a stand-in for decoding that waits
                   on a file or a native library; it uses no CPU), on the training thread
          ahead:   the same with loader_workers=2 (two loader processes, prefetch_steps 2)
            ahead_over_free    tokens/s of ahead / free                     (target >= 0.9)
            costly_over_free   what the same job costs without the loader

Prints one JSON line per run and a summary line.

  bench/from_module.py [--build build] [--runs 5] [--steps 20] [--warmup 3] [--cost-ms 2]
                       [--only gpt|loader]
"""
import argparse
import json
import os
import statistics

import python_segment_call  # bench/: the same measure of one run
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "examples", "python", "gpt_train.py")
BATCH, CONTEXT = 32, 128


def step_time(flags, args, env):
    """The median step_time_s of one run after the warm-up steps."""
    return python_segment_call.step_time(
        ["/usr/bin/python3", PROGRAM, "--model", "bench", "--steps",
         str(args.warmup + args.steps), "--batch-size", str(BATCH), "--chunk-size", "8",
         "--sampler", "sequential", *flags], env, args.warmup)


def measure(part, configs, args, env):
    runs = {name: [] for name in configs}
    for r in range(args.runs):
        for name, flags in configs.items():
            t = step_time(flags, args, env)
            runs[name].append(t)
            print(json.dumps({"bench": "from_module", "part": part, "config": name, "run": r,
                              "tokens_per_s": round(BATCH * CONTEXT / t, 1)}), flush=True)
    return ({name: BATCH * CONTEXT / statistics.median(times) for name, times in runs.items()},
            runs)


def paired(runs, name, baseline):
    """The median over runs of tokens/s of `name` over `baseline` in the same round: a slow
    phase of the machine that spans a round cancels out."""
    return statistics.median(b / a for a, b in zip(runs[name], runs[baseline]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--cost-ms", type=float, default=2.0)
    p.add_argument("--only", choices=["gpt", "loader"])
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MITRA_")}
    env.update(PYTHONPATH=os.path.join(os.path.abspath(args.build), "python"), MITRA_THREADS="1",
               PYTHONUNBUFFERED="1")
    summary = {"bench": "from_module", "summary": True, "runs": args.runs, "steps": args.steps,
               "cpus": os.cpu_count()}
    if args.only in (None, "gpt"):
        tps, runs = measure("gpt", {"factory": [], "module": ["--from-module"]}, args, env)
        summary["gpt_tokens_per_s"] = {k: round(v, 1) for k, v in tps.items()}
        summary["module_over_factory"] = round(tps["module"] / tps["factory"], 4)
        summary["module_over_factory_paired"] = round(paired(runs, "module", "factory"), 4)
    if args.only in (None, "loader"):
        cost = ["--sample-cost-ms", str(args.cost_ms)]
        tps, runs = measure("loader", {"free": [], "costly": cost,
                                       "ahead": [*cost, "--loader-workers", "2"]}, args, env)
        summary["loader_tokens_per_s"] = {k: round(v, 1) for k, v in tps.items()}
        summary["cost_ms"] = args.cost_ms
        summary["ahead_over_free"] = round(tps["ahead"] / tps["free"], 4)
        summary["costly_over_free"] = round(tps["costly"] / tps["free"], 4)
        summary["ahead_over_free_paired"] = round(paired(runs, "ahead", "free"), 4)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
