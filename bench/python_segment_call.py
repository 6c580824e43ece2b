#!/usr/bin/python3
"""The cost of one Python segment call: a torch.nn.Module called by mitra's C++ runtime.

Two measurements, one intra-op thread, each configuration's repeats interleaved and the
median kept (the machine is shared):

  block  One transformer block of examples/python/gpt.py at the `bench` width (128, 4 heads,
         MLP 512), on inputs of 8 x 128 tokens and of 1 x 4 tokens; and a segment that computes
         nothing (forward returns its input: the bare call), on 1 x 4 x 128. Per call:
           direct_fwd_us     module(x) called in Python, under torch.no_grad()
           direct_fwdbwd_us  the same with autograd, and the backward of the chain's sum
           mitra_fwd_us      the same module as a segment of mitra.InferenceModel: Python calls
                             the C++ runtime once, which calls each segment (Stage::Forward:
                             seed the forward's generator, take the GIL, the activations to a
                             dict, the spec's runner, the module, the dict back to C++)
         A chain of 1 and of 16 such segments (separate modules, the same weights) is timed,
         so that the fixed cost per InferenceModel.forward() drops out:
           segment_call_us   ((mitra - direct) at 16  -  (mitra - direct) at 1) / 15
           forward_entry_us  (mitra - direct) at 1, less one segment_call_us
         The backward calls no Python (autograd's graph of the Python ops is C++ nodes, run by
         C++'s engine), so a training segment call costs direct_fwdbwd_us + segment_call_us;
         InferenceModel is the one way the package lets a program call segments through the
         runtime without training.

  step   A whole training step, alone in one process (no `mitra run`): the C++ gpt_train
         against the Python examples/python/gpt_train.py, `tiny` GPT (width 32, context 32,
         2 blocks: 4 segments), batch 8 in micro-batches of 1, so the work per call is small
         and the Python calls per step are many: per step, 8 x 4 = 32 segment forward calls,
         8 calls of the Python loss and 8 of the dataset's __getitem__. Median step_time_s of
         the steps after --warmup, per run; the median over runs.
           extra_us_per_segment_call  (python - cpp step time) / 32: everything Python adds,
                                      the loss, the data and torch's Python op dispatch inside
                                      the modules included, put on the segment calls
           extra_us_per_python_call   the same over all 48 calls into Python

Prints one JSON line per measurement and a summary line.

  bench/python_segment_call.py [--build build] [--repeats 15] [--steps 100] [--runs 5]
                               [--only block|step]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHAIN = 16  # segments in the long chain (the short one has 1)


def timed(fn, seconds):
    """Seconds per call of fn, over as many calls as fill about `seconds`."""
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    n = max(1, int(seconds / max(once, 1e-9)))
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def block_bench(args, mitra, torch, gpt):
    config = gpt.GptConfig()  # bench: width 128, 4 heads, MLP 512

    class Passthrough(torch.nn.Module):  # a segment that computes nothing: the bare call
        def forward(self, x):
            return x

    factories = {"block": lambda: gpt.Block(config), "passthrough": Passthrough}
    tmp = tempfile.mkdtemp(prefix="mitra-segment-call-")
    models = {}
    for kind, make in factories.items():
        for k in (1, CHAIN):
            spec = mitra.ModelSpec()
            for i in range(k):
                spec.add_segment(f"s{i}", make, input="hidden")
            spec.loss = lambda outputs, batch: outputs["hidden"].sum()
            torch.manual_seed(0)
            module = make()
            state = {f"s{i}.{name}": t for i in range(k) for name, t in module.state_dict().items()}
            path = os.path.join(tmp, f"{kind}{k}.pt")
            # Two keys: LibTorch's unpickler reads no SETITEM (pickle's opcode for 1-item dicts).
            torch.save({"model": state, "bench": "python_segment_call"}, path)
            models[kind, k] = mitra.InferenceModel(spec, path)
            os.remove(path)
    os.rmdir(tmp)

    results = []
    for kind, batch, tokens in (("block", 8, 128), ("block", 1, 4), ("passthrough", 1, 4)):
        torch.manual_seed(1)
        x = torch.randn(batch, tokens, config.width)

        def direct(k):
            modules = list(models[kind, k].segments.values())

            def run():
                with torch.no_grad():
                    y = x
                    for m in modules:
                        y = m(y)
                return y
            return run

        def direct_fwdbwd(k):
            modules = list(models[kind, k].segments.values())

            def run():
                y = x.detach().requires_grad_()
                for m in modules:
                    y = m(y)
                y.sum().backward()
            return run

        def through_mitra(k):
            model = models[kind, k]
            return lambda: model({"hidden": x})["hidden"]

        fns = {("direct", 1): direct(1), ("mitra", 1): through_mitra(1),
               ("direct", CHAIN): direct(CHAIN), ("mitra", CHAIN): through_mitra(CHAIN),
               ("fwdbwd", CHAIN): direct_fwdbwd(CHAIN)}
        assert torch.equal(fns["mitra", CHAIN](), fns["direct", CHAIN]()), \
            "InferenceModel and the direct calls computed different outputs"
        samples = {key: [] for key in fns}
        for _ in range(args.repeats):
            for key, fn in fns.items():
                samples[key].append(timed(fn, args.seconds) * 1e6)
        # Per repeat (interleaved, so the same phase of the machine), then the median.
        call = statistics.median(
            ((mk - dk) - (m1 - d1)) / (CHAIN - 1) for mk, dk, m1, d1 in
            zip(samples["mitra", CHAIN], samples["direct", CHAIN], samples["mitra", 1],
                samples["direct", 1]))
        entry = statistics.median(m1 - d1 for m1, d1 in
                                  zip(samples["mitra", 1], samples["direct", 1])) - call
        med = {key: statistics.median(v) / key[1] for key, v in samples.items()}  # per call
        result = {
            "bench": "python_segment_call", "part": "block", "segment": kind,
            "tokens": f"{batch}x{tokens}", "width": config.width, "chain": CHAIN,
            "repeats": args.repeats,
            "direct_fwd_us": round(med["direct", CHAIN], 1),
            "direct_fwdbwd_us": round(med["fwdbwd", CHAIN], 1),
            "mitra_fwd_us": round(med["mitra", CHAIN], 1),
            "segment_call_us": round(call, 2),
            "forward_entry_us": round(entry, 1),
        }
        if kind == "block":
            result["call_over_direct_fwd"] = round(call / med["direct", CHAIN], 4)
            result["call_over_direct_fwdbwd"] = round(call / med["fwdbwd", CHAIN], 4)
        print(json.dumps(result), flush=True)
        results.append(result)
    return results


def step_time(cmd, env, warmup):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    times = []
    for line in out.stdout.splitlines():
        if line.startswith("@mitra "):
            record = json.loads(line[len("@mitra "):])
            if record.get("event") == "step" and record["step"] > warmup:
                times.append(record["step_time_s"])
    if not times:
        raise RuntimeError(f"{' '.join(cmd)} printed no step records:\n{out.stdout[-2000:]}")
    return statistics.median(times)


def step_bench(args):
    layers, batch, chunk = 2, 8, 1  # the tiny GPT; micro-batches of one sample
    flags = ["--model", "tiny", "--steps", str(args.warmup + args.steps), "--batch-size",
             str(batch), "--chunk-size", str(chunk)]
    paths = [os.path.join(os.path.abspath(args.build), "python")]
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), MITRA_THREADS="1")
    cmds = {"cpp": [f"{args.build}/bin/gpt_train", *flags],
            "python": ["/usr/bin/python3", f"{ROOT}/examples/python/gpt_train.py", *flags]}
    samples = {name: [] for name in cmds}
    for _ in range(args.runs):
        for name, cmd in cmds.items():
            samples[name].append(step_time(cmd, env, args.warmup))
    cpp, py = (statistics.median(samples[n]) for n in ("cpp", "python"))
    micro_batches = batch // chunk
    segment_calls = micro_batches * (layers + 2)
    python_calls = segment_calls + micro_batches + batch  # + the loss, + __getitem__
    result = {
        "bench": "python_segment_call", "part": "step", "model": "tiny", "batch": batch,
        "chunk": chunk, "steps": args.steps, "runs": args.runs,
        "cpp_step_ms": round(cpp * 1e3, 3), "python_step_ms": round(py * 1e3, 3),
        "python_over_cpp_time": round(py / cpp, 3),
        "segment_calls_per_step": segment_calls, "python_calls_per_step": python_calls,
        "extra_us_per_segment_call": round((py - cpp) / segment_calls * 1e6, 1),
        "extra_us_per_python_call": round((py - cpp) / python_calls * 1e6, 1),
    }
    print(json.dumps(result), flush=True)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--repeats", type=int, default=15, help="block: interleaved repeats")
    p.add_argument("--seconds", type=float, default=0.1,
                   help="block: seconds per timed batch of calls")
    p.add_argument("--steps", type=int, default=100, help="step: timed steps per run")
    p.add_argument("--warmup", type=int, default=10, help="step: untimed steps per run")
    p.add_argument("--runs", type=int, default=5, help="step: runs of each program")
    p.add_argument("--only", choices=["block", "step"], default=None)
    args = p.parse_args()

    summary = {"bench": "python_segment_call"}
    if args.only in (None, "block"):
        sys.path.insert(0, os.path.join(os.path.abspath(args.build), "python"))
        sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
        import torch
        torch.set_num_threads(1)
        import mitra
        import gpt
        for r in block_bench(args, mitra, torch, gpt):
            case = f"{r['segment']}_{r['tokens']}"
            summary[f"segment_call_us_{case}"] = r["segment_call_us"]
            if r["segment"] == "block":
                summary[f"direct_fwd_us_{case}"] = r["direct_fwd_us"]
                summary[f"direct_fwdbwd_us_{case}"] = r["direct_fwdbwd_us"]
    if args.only in (None, "step"):
        r = step_bench(args)
        summary["tiny_step_extra_us_per_segment_call"] = r["extra_us_per_segment_call"]
        summary["tiny_step_extra_us_per_python_call"] = r["extra_us_per_python_call"]
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
