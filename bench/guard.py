#!/usr/bin/python3
"""The five figures a change must not slow, beside the last recorded ones, in one run.

The planner's error is one figure printed as two, its median and its worst.

Runs the benchmarks that measure them, one after the other on a quiet machine (never beside a
build or another benchmark: two processes share these cores differently from run to run):

  - `bench/elastic.py --parts recovery,morph --repeats R`: a planned morph of the bench GPT in
    2 stages, the old shape's last step -> the new shape's first, regrouping in place, for a
    shrink (2 x 2 -> 2 x 1) and a grow (2 x 1 -> 2 x 2); and a SIGKILLed worker -> the next
    step, with a spare parked (tiny GPT, 1 x 2).
  - `bench/planner.py --no-morph --rounds 5`: planning 10,000 slots, and the planner's error
    on 2 slots over its 12 first shapes (median and worst), with the rounds' spread, the noise
    the errors sit in. Five rounds, not the bench's three: two processes on these 2 vCPUs run
    10-20% slower for stretches of tens of seconds, a whole round at times, and a shape's
    figure (the median of its rounds) then stands when two of its rounds fall in one.

Prints the planner bench's line for each shape (predicted, measured, error, its rounds' spread),
then one JSON line per figure (its median over the repeats and its worst, the last recorded
figure and their ratio, the target and whether it was met), then a summary naming the figures
more than --slower (default 20%) above the last recorded ones. `--record` writes this run's
figures as the last recorded (bench/guard_figures.json, with the date and the command).

A benchmark, not a test: it times things, so CI does not run it.

  bench/guard.py [--build build] [--repeats 3] [--record] [--slower 0.2]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDED = os.path.join(ROOT, "bench", "guard_figures.json")
PYTHON = "/usr/bin/python3"
PLANNER_ROUNDS = 5

# name: (target, what it is). Every figure is a time or an error: lower is better.
TARGETS = {
    "morph_shrink_s": (0.5, "planned morph 2x2 -> 2x1, bench GPT, last step -> first step"),
    "morph_grow_s": (0.5, "planned morph 2x1 -> 2x2, bench GPT, last step -> first step"),
    "killed_worker_s": (0.1, "SIGKILLed worker -> next step, --spares 1, tiny GPT 1x2"),
    "plan_10000_slots_s": (0.3, "mitra plan --slots 10000, batch 4096 (the slower of the two)"),
    "planner_median_error": (0.03, "planner error on 2 slots, 12 shapes, median"),
    "planner_worst_error": (0.08, "planner error on 2 slots, 12 shapes, worst"),
}


def rows(cmd):
    """The JSON lines `cmd` prints; its stderr passes through."""
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"guard: {' '.join(cmd)} exited with {out.returncode}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def elastic_figures(args):
    measured = rows([PYTHON, "bench/elastic.py", "--build", args.build, "--repeats",
                     str(args.repeats), "--parts", "recovery,morph"])
    morphs = [r for r in measured if r.get("bench") == "morph" and r.get("path") == "regroup"]
    kills = [r for r in measured if r.get("bench") == "recovery" and r.get("system") == "mitra"]
    series = {
        "morph_shrink_s": [r["last_step_to_first_step_s"] for r in morphs
                           if r["direction"] == "shrink"],
        "morph_grow_s": [r["last_step_to_first_step_s"] for r in morphs
                         if r["direction"] == "grow"],
        "killed_worker_s": [r["kill_to_first_step_s"] for r in kills],
    }
    return {name: (statistics.median(v), max(v), v) for name, v in series.items()}


def planner_figures(args):
    """The figures, the rounds' spread and the bench's line for each shape."""
    printed = rows([PYTHON, "bench/planner.py", "--build", args.build, "--no-morph", "--rounds",
                    str(PLANNER_ROUNDS)])
    summary = printed[-1]
    plan = max(summary["plan_10000_slots_batch_32_s"], summary["plan_10000_slots_batch_4096_s"])
    return {
        "plan_10000_slots_s": (plan, plan, [summary["plan_10000_slots_batch_32_s"],
                                            summary["plan_10000_slots_batch_4096_s"]]),
        "planner_median_error": (summary["median_error"], summary["median_error"], []),
        "planner_worst_error": (summary["max_error"], summary["max_error"], []),
    }, summary["median_round_spread"], [r for r in printed if "shape" in r]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--record", action="store_true",
                        help="write this run's figures to bench/guard_figures.json")
    parser.add_argument("--slower", type=float, default=0.2,
                        help="a figure this much above the last recorded one is named (0.2: 20%%)")
    args = parser.parse_args()
    try:
        with open(RECORDED) as f:
            last = json.load(f)
    except FileNotFoundError:
        last = {"recorded": None, "figures": {}}

    figures = elastic_figures(args)
    planner, spread, shapes = planner_figures(args)
    figures.update(planner)
    for shape in shapes:  # which shapes the planner's error comes from
        print(json.dumps(shape), flush=True)

    slower = []
    for name, (value, worst, each) in figures.items():
        target, what = TARGETS[name]
        before = last["figures"].get(name)
        ratio = round(value / before, 3) if before else None
        if ratio is not None and ratio > 1 + args.slower:
            slower.append(name)
        print(json.dumps({"figure": name, "what": what, "median": round(value, 4),
                          "worst": round(worst, 4), "each": each, "last_recorded": before,
                          "over_last": ratio, "target": target, "met": worst <= target}),
              flush=True)
    summary = {"bench": "guard", "last_recorded_on": last["recorded"],
               "planner_median_round_spread": spread,
               "all_met": all(w <= TARGETS[n][0] for n, (_, w, _) in figures.items()),
               "slower_than_last": slower}
    print(json.dumps(summary), flush=True)
    if args.record:
        with open(RECORDED, "w") as f:
            json.dump({"recorded": datetime.date.today().isoformat(),
                       "command": "bench/guard.py --build build --record",
                       "figures": {n: round(v, 4) for n, (v, _, _) in figures.items()}},
                      f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
