#!/usr/bin/env python3
"""mitra against PyTorch eager on one GPU: a GPT of ~352 M parameters in bf16, 1 x 1.

The model is gpt_train's `--model 350m` (byte vocabulary, context 1024, width 1024, 16 heads,
28 pre-LN blocks with an MLP of 4096, learned positions, the head tied to the token embedding,
causal scaled-dot-product attention); PyTorch's copy below computes the same with the same
optimizer (AdamW, lr 3e-4, weight decay 0.01, clipping the global norm at 1), bf16 autocast
over fp32 weights, and the same batch in the same micro-batches with gradient accumulation.
Both read the same text (--data), 1025-byte samples in a random order.

Printed, one JSON object per micro-batch size (--chunks; the first is the comparison the
targets are about): tokens/s of each, their ratio (mitra / pytorch), and the model
FLOPs utilisation of each: tokens/s x FLOPs per token / the GPU's peak, FLOPs per token =
6 N + 12 L T d (N the parameters of the matrix products, the tied head included; L layers,
T context, d width: the usual count, causal attention counted whole), the peak the datasheet's
dense bf16 figure for the GPUs named below, and also the 8192^3 bf16 matrix product measured
here (`matmul_tflops`). Step times are medians over the timed steps after --warmup steps.
Each also reports `phases_s`: one step timed phase by phase, waiting for the GPU after each
(mitra's step traced with --trace, PyTorch's one more step): where the device's time goes;
and `attention_kernel`, the kernel scaled_dot_product_attention takes in each for the blocks'
shapes (flash_attention, efficient_attention, cudnn_attention or math); and `kernels`: the
device's busy time in each side's traced step and the kernels whose time differs most (from
LibTorch's profiler on both sides; the traces stay in --kernel-traces).
For the first micro-batch size it also runs PyTorch with its optimizer and clipping going
parameter by parameter (`foreach=False`, LibTorch's C++ way) as `pytorch_per_parameter`: what
launching a dozen kernels per parameter tensor costs a step here.

  python3 bench/gpu.py --build build-gpu --data /usr/share/games/fortunes
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS, MLP = 256, 1024, 1024, 16, 28, 4096
ARGS = None  # the command line, once parsed
# Dense bf16 tensor-core peaks from NVIDIA's datasheets (SXM parts), FLOP/s.
DATASHEET_PEAK = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}


def log(text):
    print(text, file=sys.stderr, flush=True)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.fc = nn.Linear(WIDTH, MLP)
        self.out = nn.Linear(MLP, WIDTH)

    def forward(self, x):
        b, t, c = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.size(1), device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def read_text(path):
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs
        if not f.endswith((".dat", ".u8")))
    return b"".join(open(f, "rb").read() for f in files if os.path.isfile(f))


def flops_per_token():
    matrix_params = LAYERS * 12 * WIDTH * WIDTH + VOCAB * WIDTH  # blocks' products + the head
    return 6 * matrix_params + 12 * LAYERS * CONTEXT * WIDTH


def pytorch_eager(args, chunk, foreach=None):
    torch.manual_seed(args.seed)
    device = torch.device("cuda")
    data = torch.frombuffer(bytearray(read_text(args.data)), dtype=torch.uint8).long()
    samples = (data.numel() - 1) // CONTEXT
    model = Gpt().to(device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, foreach=foreach)
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(args.seed))
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        ids = order[(torch.arange(args.batch) + step * args.batch) % samples]
        rows = torch.stack([data[i * CONTEXT:i * CONTEXT + CONTEXT + 1] for i in ids.tolist()])
        rows = rows.to(device, non_blocking=True)
        total = 0.0
        for m in range(0, args.batch, chunk):
            x, y = rows[m:m + chunk, :-1], rows[m:m + chunk, 1:]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                logits = model(x)
            loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
            (loss * x.size(0) / args.batch).backward()
            total += loss.detach() * x.size(0) / args.batch
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=foreach)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total.item())  # synchronizes
        times.append(time.perf_counter() - start)
        log(f"pytorch{'' if foreach is None else ' foreach=' + str(foreach)} chunk {chunk} "
            f"step {step + 1} loss {losses[-1]:.4f} {times[-1]:.3f} s")
    step_s = statistics.median(times[args.warmup:])
    result = {"params": params, "step_time_s": step_s,
              "tokens_per_s": args.batch * CONTEXT / step_s, "last_loss": losses[-1],
              "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}
    if foreach is None:
        trace = kernel_trace_path(args, "pytorch", chunk)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            result["phases_s"] = pytorch_phases(args, chunk, model, opt, data, samples)
        prof.export_chrome_trace(trace)
        result["kernel_trace"] = trace
        result["attention_kernel"] = pytorch_attention_kernel(chunk)
    return result


def pytorch_phases(args, chunk, model, opt, data, samples):
    """One more step, waiting for the GPU after each phase: where the device's time goes (the
    counterpart of the step mitra traces with --trace)."""
    phases = {"data": 0.0, "F": 0.0, "B": 0.0, "clip": 0.0, "optimizer": 0.0}

    def timed(name, run):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = run()
        torch.cuda.synchronize()
        phases[name] += time.perf_counter() - start
        return out

    rows = timed("data", lambda: torch.stack(
        [data[i * CONTEXT:i * CONTEXT + CONTEXT + 1] for i in range(args.batch)]).to("cuda"))
    for m in range(0, args.batch, chunk):
        x, y = rows[m:m + chunk, :-1], rows[m:m + chunk, 1:]

        def forward():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                logits = model(x)
            return F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        loss = timed("F", forward)
        timed("B", lambda: (loss * x.size(0) / args.batch).backward())
    timed("clip", lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    timed("optimizer", opt.step)
    opt.zero_grad(set_to_none=True)
    return {k: round(v, 4) for k, v in phases.items()}


SDP_KERNELS = ["math", "flash_attention", "efficient_attention", "cudnn_attention", "overrideable"]


def pytorch_attention_kernel(chunk):
    """The kernel scaled_dot_product_attention takes for the blocks' q, k and v (the same
    strided views of one qkv product, bf16 under autocast): gpt_train says its own."""
    head = WIDTH // HEADS
    dtype = torch.bfloat16 if ARGS.precision == "bf16" else torch.float32
    # requires_grad as in training: the choice depends on it.
    qkv = torch.empty(chunk, CONTEXT, 3, HEADS, head, device="cuda", dtype=dtype,
                      requires_grad=True)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    try:
        choice = torch._fused_sdp_choice(q, k, v, is_causal=True)
    except (AttributeError, RuntimeError) as e:  # a torch without the query
        log(f"gpu.py: no attention kernel choice: {e}")
        return None
    return SDP_KERNELS[choice] if 0 <= choice < len(SDP_KERNELS) else "error"


def kernel_trace_path(args, who, chunk):
    return os.path.join(args.kernel_traces, f"kernels-{who}-{args.precision}-{chunk}.json")


def kernel_times(path):
    """The device's work in a kernel trace (LibTorch's profiler, chrome format), by name:
    {name: [launches, microseconds]}, kernels, copies and memsets alike."""
    times = {}
    for e in json.load(open(path))["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            entry = times.setdefault(e["name"], [0, 0.0])
            entry[0] += 1
            entry[1] += e.get("dur", 0.0)
    return times


def kernel_differences(mitra_trace, pytorch_trace, top=20):
    """Where one traced step of each spends the device's time differently: the total time the
    device was busy in each, and the kernels whose time differs most (each side's milliseconds
    and launches). Both steps train the same micro-batches and wait for the device after each
    phase, so a kernel only one side runs, or runs longer, is where the difference is."""
    mine, theirs = kernel_times(mitra_trace), kernel_times(pytorch_trace)
    rows = []
    for name in set(mine) | set(theirs):
        m, t = mine.get(name, [0, 0.0]), theirs.get(name, [0, 0.0])
        rows.append({"kernel": name[:160], "mitra_ms": round(m[1] / 1e3, 3),
                     "pytorch_ms": round(t[1] / 1e3, 3), "mitra_n": m[0], "pytorch_n": t[0]})
    rows.sort(key=lambda r: -abs(r["mitra_ms"] - r["pytorch_ms"]))
    busy = lambda times: round(sum(us for _, us in times.values()) / 1e6, 4)
    return {"mitra_busy_s": busy(mine), "pytorch_busy_s": busy(theirs),
            "largest_differences": rows[:top]}


def mitra_phases(trace_path):
    """The traced step's events (the runtime waits for the GPU at the end of each), summed by
    kind: F and B over the micro-batches, then the step's reduce, tied, sync and update."""
    events = [e for e in json.load(open(trace_path))["traceEvents"] if e.get("ph") == "X"]
    phases = {}
    for e in events:
        kind = e["name"].rstrip("0123456789")
        phases[kind] = phases.get(kind, 0.0) + e["dur"] / 1e6
    span = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e6
    phases["between_events"] = span - sum(phases.values())
    return {k: round(v, 4) for k, v in phases.items()}


def mitra(args, chunk):
    trace = os.path.join(args.kernel_traces, f"steps-mitra-{args.precision}-{chunk}.json")
    cmd = [os.path.join(args.build, "bin", "gpt_train"), "--model", "350m", "--data", args.data,
           "--device", "cuda", "--precision", args.precision, "--batch-size", str(args.batch),
           "--chunk-size", str(chunk), "--steps", str(args.warmup + args.steps),
           "--seed", str(args.seed), "--trace", trace]
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    steps = [json.loads(l[len("@mitra "):]) for l in p.stdout.splitlines()
             if l.startswith("@mitra ") and '"event":"step"' in l]
    if p.returncode != 0 or len(steps) < args.warmup + args.steps:
        log(p.stdout[-4000:])
        raise SystemExit(f"gpu.py: gpt_train exited {p.returncode} after {len(steps)} steps")
    for s in steps:
        log(f"mitra chunk {chunk} step {s['step']} loss {s['loss']:.4f} {s['step_time_s']:.3f} s")
    # The traced step (the third) waits for the GPU after each event: left out of the median.
    timed = [s["step_time_s"] for s in steps[args.warmup:] if s["step"] != 3]
    step_s = statistics.median(timed)
    kernel = [l.split("attention kernel ")[1].split()[0] for l in p.stdout.splitlines()
              if l.startswith("gpt_train: attention kernel ")]
    # --trace on a GPU also writes the traced step's kernels beside it.
    kernels = trace[:-len(".json")] + ".kernels.json"
    return {"step_time_s": step_s, "tokens_per_s": args.batch * CONTEXT / step_s,
            "last_loss": steps[-1]["loss"], "phases_s": mitra_phases(trace),
            "attention_kernel": kernel[0] if kernel else None,
            "kernel_trace": kernels if os.path.exists(kernels) else None}


def matmul_tflops():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * 8192**3 * 10 / (start.elapsed_time(end) / 1000) / 1e12


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build-gpu")
    parser.add_argument("--data", default="/usr/share/games/fortunes")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--chunks", default="16,64",
                        help="micro-batch sizes, comma-separated; the first is the comparison")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                        help="fp32: both without autocast (TF32 off, as LibTorch's default)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--only", choices=["pytorch", "mitra"], default=None)
    parser.add_argument("--kernel-traces", default="/tmp/mitra-gpu-bench",
                        help="where each side's traced step and its kernels are written")
    args = parser.parse_args()
    os.makedirs(args.kernel_traces, exist_ok=True)
    global ARGS
    ARGS = args
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in DATASHEET_PEAK.items() if k in name), None)
    matmul = round(matmul_tflops(), 1)
    for i, chunk in enumerate(int(c) for c in args.chunks.split(",")):
        result = {"bench": "gpu_gpt_350m_" + args.precision, "gpu": name, "batch": args.batch,
                  "chunk": chunk, "steps": args.steps, "warmup": args.warmup,
                  "flops_per_token": flops_per_token(), "matmul_tflops": matmul,
                  "datasheet_peak_tflops": peak and peak / 1e12}
        runs = {}
        if args.only != "mitra":
            runs["pytorch"] = pytorch_eager(args, chunk)
            torch.cuda.empty_cache()
            if i == 0:
                runs["pytorch_per_parameter"] = pytorch_eager(args, chunk, foreach=False)
                torch.cuda.empty_cache()
        if args.only != "pytorch":
            runs["mitra"] = mitra(args, chunk)
        for key, run in runs.items():
            achieved = run["tokens_per_s"] * flops_per_token()
            run["achieved_tflops"] = round(achieved / 1e12, 1)
            run["mfu"] = peak and round(achieved / peak, 3)
            run["mfu_of_measured_matmul"] = round(achieved / (matmul * 1e12), 3)
        result.update(runs)
        if "pytorch" in runs and "mitra" in runs:
            result["mitra_over_pytorch"] = round(
                runs["mitra"]["tokens_per_s"] / runs["pytorch"]["tokens_per_s"], 3)
            traces = runs["mitra"].get("kernel_trace"), runs["pytorch"].get("kernel_trace")
            if all(traces):
                result["kernels"] = kernel_differences(*traces)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
