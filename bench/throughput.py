#!/usr/bin/python3
"""Throughput of mitra's runtime against a plain LibTorch loop and PyTorch, in one run.

Trains the `bench` GPT (batch 32, micro-batch 8, one intra-op thread per process) with:
  plain    bench/plain_gpt.cc: the same model in a plain single-process LibTorch loop
  plain_tuned  the same, with glibc's malloc set as mitra's workers set it (see below)
  mitra    `mitra run` 1x1, 1x2 (D=2) and 2x1 (P=2) on localhost
  python   the same three shapes of `mitra run` with the Python twin of gpt_train,
           examples/python/gpt_train.py (segments are torch.nn.Modules called from mitra's
           C++ runtime; PYTHONPATH=<build>/python is set for the workers)
  pytorch  bench/python/gpt_bench.py: the same model in PyTorch, single process and DDP (2);
           single: batch 32 as 4 micro-batches of 8 with gradient accumulation, as mitra
  mitra_1x2_zero  `mitra run` 1x2 with --zero 1 (ZeRO-1: each replica keeps and updates half
           of the optimizer state); the summary's "optimizer_state_bytes" gives the most any
           rank held of 1x2 with and without it, as each process measured its own tensors
           (its `optimizer_state` record), and their ratio
Each configuration runs --repeats times, interleaved, and the median tokens/s is kept, so
slow phases of a shared machine hit every configuration alike. Prints one JSON object per
measurement and a final JSON summary with the ratios:
  mitra_1x1 / plain, mitra_1x1 / pytorch            (targets >= 0.98 and >= 1.0)
  mitra_1x1 / plain_tuned                            (the runtime's own overhead)
  mitra_1x2 / mitra_1x1, mitra_2x1 / mitra_1x1      (target >= 0.9; two processes share
  pytorch_ddp / pytorch                              about one core on a 2-vCPU machine)
  python_1x1 / mitra_1x1, python_1x1 / pytorch      (targets >= 0.95 and >= 1.0)
  python_1x2 / mitra_1x2, python_2x1 / mitra_2x1    (against the C++ program; >= 0.95 too)
  mitra_1x2_zero / mitra_1x2                         (target >= 0.95; bytes ratio <= 0.55)
  mitra_2x1_zb / mitra_1x2, mitra_2x1 / mitra_1x2    (zb-h1 and 1f1b at P = 2, M = 4; >= 0.93),
  mitra_2x1_zbv / mitra_1x2, mitra_2x1_interleaved / mitra_1x2
                                                     (zb-v and interleaved, two chunks per
                                                     rank), with "theory_over_1x2": what the
                                                     pipeline bubbles of each schedule leave,
                                                     its traced step replayed (below)
For the python ratios, "paired_ratios" also gives the median over repeats of the ratio of the
two runs of the same repeat (run one after the other), which a change of load between repeats
disturbs less.

  bench/throughput.py [--build build] [--steps 20] [--repeats 3] [--only CONFIGS]

--only takes configuration names and groups, comma-separated: "python" is the Python
comparison alone (mitra_*, python_* and pytorch), "cpp" the original seven, "zero" 1x2 with
and without ZeRO-1, "zb" 1x2 against 2x1 in 1f1b, zb-h1, zb-v and interleaved.

The theory of a schedule: the traced step of each 2x1 run (every rank's third step,
logs/gen-0/rank-R.trace.json) replayed with its computations' measured durations and free
messages, each computation starting once its rank is free and its input has been computed (a
forward after the previous virtual stage's, a backward after the next one's); the busy share of
that replay is what the schedule's bubble leaves of 2x1's computing, and "bubble" the rest. It
is not a bound on the measured ratio to 1x2, whose ranks also all-reduce every gradient, update
the whole model and compute the whole model's segments (docs/performance.md). Medians over
repeats; F, B and W are the medians of a chunk's durations.
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


# What mitra's workers do with mallopt() at start (worker/heap.cc) and the huge pages the
# manager asks glibc for (run/worker_env.cc), as environment variables.
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def plain(args, tuned=False):
    env = dict(os.environ, **TUNED_MALLOC) if tuned else None
    return last_json(run([f"{args.build}/bin/plain_gpt", "--steps", str(args.steps),
                          "--warmup", str(args.warmup)], env=env))["tokens_per_s"]


def pytorch(args, mode):
    cmd = ["/usr/bin/python3", f"{ROOT}/bench/python/gpt_bench.py", "--mode", mode,
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    return last_json(run(cmd))["tokens_per_s"]


OPTIMIZER_BYTES = {}  # configuration -> the most optimizer-state bytes a rank held, last run


def optimizer_bytes(run_dir):
    """The most optimizer-state bytes any rank of generation 0 reported holding."""
    most = 0
    logs = os.path.join(run_dir, "logs", "gen-0")
    for name in os.listdir(logs):
        with open(os.path.join(logs, name), errors="replace") as f:
            for line in f:
                if '"event":"optimizer_state"' in line:
                    most = max(most, json.loads(line.split("@mitra ", 1)[1])["bytes"])
    return most


# By schedule: each run's traced step, {rank: [(instruction name, seconds), ...]} in order.
TRACED = {}

# Where each chunk of a position runs in the model, for P = 2 (mitra/planner/schedule.h): the
# virtual stage of (position, chunk).
LAYOUTS = {
    "1f1b": lambda s, c: s,
    "zb-h1": lambda s, c: s,
    "interleaved": lambda s, c: c * 2 + s,
    "zb-v": lambda s, c: s if c == 0 else 3 - s,
}


def mitra(args, stages, slots, python=False, zero=False, name=None, schedule=None,
          partition=None):
    traced = stages == 2 and not python and not zero
    if python:  # the Python twin, with the package from the build tree
        program = ["/usr/bin/python3", f"{ROOT}/examples/python/gpt_train.py"]
        paths = [os.path.join(os.path.abspath(args.build), "python")]
        paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    else:
        program, env = [f"{args.build}/bin/gpt_train"], None
    with tempfile.TemporaryDirectory() as tmp:
        machines = os.path.join(tmp, "machines.txt")
        with open(machines, "w") as f:
            f.write(f"localhost slots={slots}\n")
        run_dir = os.path.join(tmp, "run")
        run([f"{args.build}/bin/mitra", "run", "--machines", machines, "--batch-size", "32",
             "--nstages", str(stages), "--chunk-size", "8",
             "--max-steps", str(args.warmup + args.steps), "--run-dir", run_dir,
             *(["--zero", "1"] if zero else []), "--",
             *program, "--model", "bench", *(["--schedule", schedule] if schedule else []),
             *(["--partition", partition] if partition else [])],
            env=env)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            steps = [json.loads(line) for line in f if line.strip()]
        if name:
            OPTIMIZER_BYTES[name] = optimizer_bytes(run_dir)
        if traced:
            TRACED.setdefault(schedule or "1f1b", []).append(collect_trace(run_dir))
    timed = [s for s in steps if s["step"] > args.warmup]
    return sum(s["samples"] * 128 for s in timed) / sum(s["step_time_s"] for s in timed)


def collect_trace(run_dir):
    """Each rank's traced step: its instructions, in order, with their durations (s)."""
    logs = os.path.join(run_dir, "logs", "gen-0")
    ranks = {}
    for f in sorted(os.listdir(logs)):
        if not f.endswith(".trace.json"):
            continue
        with open(os.path.join(logs, f)) as fh:
            trace = json.load(fh)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        ops = sorted((e["ts"], e["name"], e["dur"] / 1e6) for e in events if e.get("ph") == "X")
        ranks[int(f.split("-")[1].split(".")[0])] = [(name, dur) for _, name, dur in ops]
    return ranks


COMPUTATIONS = ("F", "f", "R", "B", "Bi", "W")


def parse(name):
    """"Bi3.1" -> ("Bi", 3, 1): the op, the micro-batch, the chunk; None for what is not a
    computation of the pipeline (messages, the reduction, the update)."""
    op = name.rstrip("0123456789.")
    if op not in COMPUTATIONS or op == name:
        return None
    mb, _, chunk = name[len(op):].partition(".")
    return op, int(mb), int(chunk or 0)


def replay(ranks, layout):
    """The busy share of the traced step replayed with free messages (the module's docstring)."""
    done = {}  # (op kind, virtual stage, micro-batch) -> when it ended
    queues = {r: [(parse(n), d) for n, d in ops if parse(n)] for r, ops in ranks.items()}
    chunks = 1 + max(c for q in queues.values() for (_, _, c), _ in q)
    last = len(ranks) * chunks - 1  # the model's last virtual stage
    clock = {r: 0.0 for r in ranks}
    busy = sum(d for q in queues.values() for _, d in q)
    while any(queues.values()):
        progressed = False
        for r, q in queues.items():
            while q:
                (op, mb, chunk), dur = q[0]
                j = layout(r, chunk)
                if op in ("F", "f"):
                    need = ("F", j - 1, mb) if j > 0 else None
                elif op in ("B", "Bi"):
                    need = ("B", j + 1, mb) if j < last else ("F", j, mb)
                else:  # W and recomputations follow what the rank did before them
                    need = None
                if need is not None and need not in done:
                    break
                start = max(clock[r], done[need] if need else 0.0)
                clock[r] = start + dur
                if op in ("F", "f"):
                    done[("F", j, mb)] = clock[r]
                if op in ("B", "Bi"):
                    done[("B", j, mb)] = clock[r]
                q.pop(0)
                progressed = True
        if not progressed:
            raise RuntimeError("the traced step does not replay: " + str(queues))
    return busy / (len(ranks) * max(clock.values()))


def theory():
    """By schedule: the replayed efficiency, its bubble, and the median F, B and W of a chunk."""
    out = {}
    for schedule, runs in TRACED.items():
        efficiency = statistics.median(replay(ranks, LAYOUTS[schedule]) for ranks in runs)
        kinds = {}
        for ranks in runs:
            for ops in ranks.values():
                for name, dur in ops:
                    if parse(name):
                        kinds.setdefault(parse(name)[0], []).append(dur)
        entry = {"efficiency": round(efficiency, 3), "bubble": round(1 - efficiency, 3)}
        for kind, key in (("F", "f_s"), ("B", "b_s"), ("Bi", "b_s"), ("W", "w_s")):
            if kind in kinds:
                entry[key] = round(statistics.median(kinds[kind]), 4)
        out[schedule] = entry
    return out


GROUPS = {
    "cpp": ["plain", "plain_tuned", "mitra_1x1", "pytorch", "mitra_1x2", "mitra_2x1",
            "pytorch_ddp"],
    "python": ["mitra_1x1", "python_1x1", "pytorch", "mitra_1x2", "python_1x2", "mitra_2x1",
               "python_2x1"],
    "zero": ["mitra_1x2", "mitra_1x2_zero"],
    "zb": ["mitra_1x2", "mitra_2x1", "mitra_2x1_zb", "mitra_2x1_zbv", "mitra_2x1_interleaved"],
}

RATIOS = [  # (numerator, denominator)
    ("mitra_1x1", "plain"),
    ("mitra_1x1", "plain_tuned"),
    ("mitra_1x1", "pytorch"),
    ("mitra_1x2", "mitra_1x1"),
    ("mitra_2x1", "mitra_1x1"),
    ("pytorch_ddp", "pytorch"),
    ("python_1x1", "mitra_1x1"),
    ("python_1x1", "pytorch"),
    ("python_1x2", "mitra_1x2"),
    ("python_2x1", "mitra_2x1"),
    ("mitra_1x2_zero", "mitra_1x2"),
    ("mitra_2x1", "mitra_1x2"),
    ("mitra_2x1_zb", "mitra_1x2"),
    ("mitra_2x1_zb", "mitra_2x1"),
    ("mitra_2x1_zbv", "mitra_1x2"),
    ("mitra_2x1_interleaved", "mitra_1x2"),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default="cpp",
                   help="configurations and groups to run, comma-separated (default cpp; all:\n"
                        "every one). Groups: " +
                        "; ".join(f"{g} = {','.join(m)}" for g, m in GROUPS.items()))
    args = p.parse_args()

    configs = {  # in the order they run in each repeat: each Python run next to its C++ twin
        "plain": lambda: plain(args),
        "plain_tuned": lambda: plain(args, tuned=True),
        "mitra_1x1": lambda: mitra(args, 1, 1),
        "python_1x1": lambda: mitra(args, 1, 1, python=True),
        "pytorch": lambda: pytorch(args, "single"),
        "mitra_1x2": lambda: mitra(args, 1, 2, name="mitra_1x2"),
        "mitra_1x2_zero": lambda: mitra(args, 1, 2, zero=True, name="mitra_1x2_zero"),
        "python_1x2": lambda: mitra(args, 1, 2, python=True),
        "mitra_2x1": lambda: mitra(args, 2, 2),
        "mitra_2x1_zb": lambda: mitra(args, 2, 2, schedule="zb-h1"),
        # Two chunks per rank, each of two blocks: the bench GPT's 10 segments are the embedding,
        # 8 blocks and the head, so the uniform cut 3,3,2,2 would put 5 blocks on rank 1 of the V.
        "mitra_2x1_zbv": lambda: mitra(args, 2, 2, schedule="zb-v", partition="3,2,2,3"),
        "mitra_2x1_interleaved": lambda: mitra(args, 2, 2, schedule="interleaved",
                                               partition="3,2,2,3"),
        "python_2x1": lambda: mitra(args, 2, 2, python=True),
        "pytorch_ddp": lambda: pytorch(args, "ddp"),
    }
    wanted = set()
    for name in args.only.split(","):
        if name == "all":
            wanted |= set(configs)
        elif name in GROUPS:
            wanted |= set(GROUPS[name])
        elif name in configs:
            wanted.add(name)
        else:
            p.error(f"--only: unknown configuration or group '{name}'")
    configs = {name: f for name, f in configs.items() if name in wanted}
    samples = {name: [] for name in configs}
    for r in range(args.repeats):
        for name, measure in configs.items():
            tps = measure()
            samples[name].append(tps)
            print(json.dumps({"config": name, "repeat": r, "tokens_per_s": round(tps, 1)}),
                  flush=True)
    med = {name: statistics.median(v) for name, v in samples.items()}
    # Each ratio whose two configurations ran.
    ratios = {f"{a}_over_{b}": round(med[a] / med[b], 3) for a, b in RATIOS
              if a in med and b in med}
    paired = {f"{a}_over_{b}": round(statistics.median(x / y for x, y in
                                                       zip(samples[a], samples[b])), 3)
              for a, b in RATIOS if a.startswith("python") and a in med and b in med}
    summary = {
        "bench": "throughput",
        "model": "bench", "batch": 32, "chunk": 8, "threads_per_process": 1,
        "steps": args.steps, "repeats": args.repeats,
        "tokens_per_s": {k: round(v, 1) for k, v in med.items()},
        "ratios": ratios,
    }
    if paired:
        summary["paired_ratios"] = paired
    if "mitra_1x2_zero" in OPTIMIZER_BYTES and "mitra_1x2" in OPTIMIZER_BYTES:
        summary["optimizer_state_bytes"] = {
            "mitra_1x2": OPTIMIZER_BYTES["mitra_1x2"],
            "mitra_1x2_zero": OPTIMIZER_BYTES["mitra_1x2_zero"],
            "ratio": round(OPTIMIZER_BYTES["mitra_1x2_zero"] / OPTIMIZER_BYTES["mitra_1x2"], 3),
        }
    if TRACED:
        summary["theory_over_1x2"] = theory()
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
