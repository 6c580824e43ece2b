#!/usr/bin/python3
"""PyTorch reference benchmark for mitra's byte-level GPT ("bench" model).

What it measures
----------------
Training throughput (tokens/s) of a small byte-level GPT on CPU with PyTorch,
so that mitra's C++ runtime can be compared against PyTorch on the same
machine in the same run.  The computation is meant to be identical to the C++
"bench" model:

  * vocab 256 (bytes), context 128, width 128, 4 heads of 32, 8 pre-LN blocks
    ``x = x + attn(ln1(x)); x = x + mlp(ln2(x))``
  * attention: Linear(128, 384) for q,k,v (bias), causal
    softmax(q k^T / sqrt(32)), output Linear(128, 128) (bias)
  * MLP: Linear(128, 512) -> exact (erf) GELU -> Linear(512, 128)
  * learned token (256x128) and position (128x128) embeddings, final
    LayerNorm, logits = x @ tok_emb.weight^T (tied, no bias), no dropout
  * init: Linear/Embedding weights N(0, 0.02), biases 0, LayerNorm 1/0
  * loss: cross entropy averaged over all tokens of the (global) batch
  * optimizer: AdamW(lr=3e-4, betas=(0.9, 0.999), eps=1e-8, wd=0.01)

Data: every regular file under /usr/share/games/fortunes (recursively, not
following symlinks), skipping names ending in ``.dat`` / ``.u8``, sorted by
path (byte order), concatenated.  Sample i = bytes[i*128 : i*128+129]
(input = first 128, target = last 128).  Batch order: torch.randperm
(num_samples) with a generator seeded by --seed; step k (counting warmup
steps too) uses permutation entries [k*B, (k+1)*B) (wrapping around).

Modes
-----
  --mode single  one process, torch.set_num_threads(--threads), batch
                 --batch-size split into micro-batches of --chunk-size with
                 gradient accumulation (each micro-batch loss scaled by its
                 share of the batch).
  --mode ddp     --nproc processes (torch.multiprocessing, spawn), Gloo on
                 127.0.0.1, CPU DistributedDataParallel, 1 thread each; each
                 rank takes an equal slice of the global batch, micro-batches
                 of --chunk-size under no_sync() except the last one.

--warmup untimed steps are followed by --steps timed steps.  Progress goes to
stderr; the last line on stdout is one JSON object, e.g.

  {"bench":"pytorch_gpt","mode":"single","threads":1,"batch":32,"chunk":8,
   "steps":20,"tokens_per_s":12345.6,"step_time_s":0.26,"final_loss":5.1}

tokens_per_s = batch*128*steps / wall seconds of the timed steps.

Run (Debian's python3-torch; use /usr/bin/python3 explicitly):

  /usr/bin/python3 bench/python/gpt_bench.py --mode single --steps 20
  /usr/bin/python3 bench/python/gpt_bench.py --mode ddp --nproc 2 --steps 20
"""

import argparse
import json
import math
import os
import socket
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256
CTX = 128
WIDTH = 128
HEADS = 4
HEAD_DIM = WIDTH // HEADS
LAYERS = 8
MLP_DIM = 4 * WIDTH
FORTUNES_DIR = "/usr/share/games/fortunes"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        # True = masked.  A plain attribute, not a buffer: Gloo cannot
        # broadcast bool tensors, and DDP broadcasts every buffer.
        self.mask = torch.ones(CTX, CTX, dtype=torch.bool).triu(1)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(WIDTH, dim=2)
        q = q.view(b, t, HEADS, HEAD_DIM).transpose(1, 2)  # b,h,t,d
        k = k.view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        v = v.view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(HEAD_DIM))
        att = att.masked_fill(self.mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = torch.matmul(att, v)  # b,h,t,d
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.attn = Attention()
        self.ln2 = nn.LayerNorm(WIDTH)
        self.fc1 = nn.Linear(WIDTH, MLP_DIM)
        self.fc2 = nn.Linear(MLP_DIM, WIDTH)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))  # exact erf GELU
        return x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, WIDTH)
        self.pos_emb = nn.Embedding(CTX, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        b, t = idx.shape
        pos = torch.arange(t, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)[None]
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        return torch.matmul(x, self.tok_emb.weight.t())  # tied, no bias


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

def load_corpus(root=FORTUNES_DIR):
    paths = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".dat") or name.endswith(".u8"):
                continue
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not os.path.islink(p):
                paths.append(p)
    paths.sort(key=os.fsencode)
    chunks = []
    for p in paths:
        with open(p, "rb") as f:
            chunks.append(f.read())
    data = b"".join(chunks)
    if len(data) < CTX + 1:
        raise SystemExit("corpus under %s too small (%d bytes)" % (root, len(data)))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long(), len(paths)


class Batches:
    """Step k -> samples perm[k*B : (k+1)*B] (indices wrap around)."""

    def __init__(self, data, seed):
        self.data = data
        self.num_samples = (data.numel() - 1) // CTX
        g = torch.Generator()
        g.manual_seed(seed)
        self.perm = torch.randperm(self.num_samples, generator=g)

    def get(self, step, global_batch, lo, hi):
        """Return (x, y) for entries [lo, hi) of the global batch of `step`."""
        idx = (torch.arange(lo, hi) + step * global_batch) % self.num_samples
        starts = self.perm[idx] * CTX
        offs = starts[:, None] + torch.arange(CTX + 1)[None, :]
        win = self.data[offs]
        return win[:, :CTX], win[:, 1:]


# --------------------------------------------------------------------------
# Training loop shared by both modes
# --------------------------------------------------------------------------

def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999),
                             eps=1e-8, weight_decay=0.01)


def train_step(model, opt, batches, step, global_batch, lo, hi, chunk, ddp):
    """One optimizer step over entries [lo, hi) of the global batch.

    Returns the sum over micro-batches of (mean loss * share of local batch),
    i.e. the mean loss over the local batch.
    """
    opt.zero_grad(set_to_none=True)
    local = hi - lo
    total = 0.0
    starts = list(range(lo, hi, chunk))
    for i, s in enumerate(starts):
        e = min(s + chunk, hi)
        x, y = batches.get(step, global_batch, s, e)
        scale = (e - s) / local
        last = i == len(starts) - 1
        ctx = model.no_sync() if (ddp and not last) else _nullctx()
        with ctx:
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
            (loss * scale).backward()
        total += loss.item() * scale
    opt.step()
    return total


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def result(args, mode, threads, elapsed, final_loss):
    tokens = args.batch_size * CTX * args.steps
    return {
        "bench": "pytorch_gpt",
        "mode": mode,
        "threads": threads,
        **({"nproc": args.nproc} if mode == "ddp" else {}),
        "batch": args.batch_size,
        "chunk": args.chunk_size,
        "steps": args.steps,
        "tokens_per_s": round(tokens / elapsed, 1),
        "step_time_s": round(elapsed / args.steps, 4),
        "final_loss": round(final_loss, 4),
    }


def run_single(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data, nfiles = load_corpus()
    batches = Batches(data, args.seed)
    log("corpus: %d files, %d bytes, %d samples" % (nfiles, data.numel(), batches.num_samples))
    model = GPT()
    model.train()
    log("params: %d" % sum(p.numel() for p in model.parameters()))
    opt = make_optimizer(model)
    B = args.batch_size
    loss = float("nan")
    t0 = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            t0 = time.perf_counter()
        ts = time.perf_counter()
        loss = train_step(model, opt, batches, step, B, 0, B, args.chunk_size, False)
        tag = "warmup" if step < args.warmup else "step"
        log("%s %d loss %.4f (%.3fs)" % (tag, step, loss, time.perf_counter() - ts))
    elapsed = time.perf_counter() - t0
    return result(args, "single", args.threads, elapsed, loss)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_worker(rank, args, port, queue):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.nproc)
    try:
        torch.manual_seed(args.seed)
        data, nfiles = load_corpus()
        batches = Batches(data, args.seed)
        if rank == 0:
            log("corpus: %d files, %d bytes, %d samples"
                % (nfiles, data.numel(), batches.num_samples))
        model = DDP(GPT())  # broadcasts rank 0's parameters
        model.train()
        opt = make_optimizer(model)
        B = args.batch_size
        per = B // args.nproc
        lo, hi = rank * per, (rank + 1) * per
        loss_t = torch.zeros(1)
        loss = float("nan")
        t0 = None
        for step in range(args.warmup + args.steps):
            if step == args.warmup:
                dist.barrier()
                t0 = time.perf_counter()
            ts = time.perf_counter()
            local = train_step(model, opt, batches, step, B, lo, hi,
                               args.chunk_size, True)
            if rank == 0:
                tag = "warmup" if step < args.warmup else "step"
                log("%s %d rank0 loss %.4f (%.3fs)"
                    % (tag, step, local, time.perf_counter() - ts))
            last_local = local
        dist.barrier()
        elapsed = time.perf_counter() - t0
        # global-batch loss of the last step (outside the timed region)
        loss_t[0] = last_local
        dist.all_reduce(loss_t)
        loss = loss_t.item() / args.nproc
        if rank == 0:
            log("final global loss %.4f" % loss)
            queue.put(result(args, "ddp", 1, elapsed, loss))
    finally:
        dist.destroy_process_group()


def run_ddp(args):
    import torch.multiprocessing as mp

    if args.batch_size % args.nproc:
        raise SystemExit("--batch-size must be divisible by --nproc")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    mp.start_processes(ddp_worker, args=(args, port, queue), nprocs=args.nproc,
                       join=True, start_method="spawn")
    return queue.get()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["single", "ddp"], default="single")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (single mode; ddp uses 1 per process)")
    ap.add_argument("--nproc", type=int, default=2, help="ddp processes")
    ap.add_argument("--batch-size", type=int, default=32, help="global batch")
    ap.add_argument("--chunk-size", type=int, default=8, help="micro-batch")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.steps < 1 or args.batch_size < 1 or args.chunk_size < 1:
        raise SystemExit("--steps, --batch-size, --chunk-size must be >= 1")

    res = run_single(args) if args.mode == "single" else run_ddp(args)
    print(json.dumps(res, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
