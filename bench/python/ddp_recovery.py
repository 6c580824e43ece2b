#!/usr/bin/python3
"""A tiny DDP-on-Gloo training job for torchrun, used by bench/elastic.py as the peer of
`mitra run ... -- gpt_train --model tiny` when a worker is killed.

The model has the shape of gpt_train's `tiny` GPT: bytes in (vocab 256), context 32, width 32,
2 heads, 2 pre-LN blocks with a 128-wide GELU MLP, tied output embedding; AdamW. Samples are
windows of the fortunes text. Each rank runs with one intra-op thread and takes its share of
the global batch. After every step rank 0 saves model, optimizer and step with torch.save
(to a temporary name, then renamed), so a restarted job resumes from the last finished step.

Records, one JSON object per line, are appended to --log (one write each, O_APPEND):
  {"event":"start","rank":R,"pid":P,"restart":N,"time":T}   first thing the script does
  {"event":"ready","rank":R,...,"resume_step":S}             process group up, checkpoint loaded
  {"event":"step","rank":0,"step":S,"restart":N,"time":T}    after step S (and its checkpoint)
`restart` is TORCHELASTIC_RESTART_COUNT; `time` is Unix seconds.

  /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 ... \\
      bench/python/ddp_recovery.py --log steps.jsonl --checkpoint ckpt.pt
"""
import json
import os
import time

T_START = time.time()


def record(path, obj):
    line = (json.dumps(obj) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def main():
    import argparse
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True, help="JSON lines file for start/ready/step records")
    p.add_argument("--checkpoint", required=True, help="checkpoint file (torch.save)")
    p.add_argument("--batch-size", type=int, default=16, help="global batch (default 16)")
    p.add_argument("--steps", type=int, default=100000, help="steps to train (default 100000)")
    p.add_argument("--data", default="/usr/share/games/fortunes")
    args = p.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    record(args.log, {"event": "start", "rank": rank, "pid": os.getpid(), "restart": restart,
                      "time": T_START})

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    vocab, ctx, width, heads, layers, mlp = 256, 32, 32, 2, 2, 128

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.out = nn.Linear(width, width)
            self.ln2 = nn.LayerNorm(width)
            self.up = nn.Linear(width, mlp)
            self.down = nn.Linear(mlp, width)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (z.reshape(b, t, heads, width // heads).transpose(1, 2)
                       for z in self.qkv(self.ln1(x)).chunk(3, dim=-1))
            scores = (q @ k.transpose(-1, -2)) / (width // heads) ** 0.5
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, width)
            x = x + self.out(y)
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Embedding(ctx, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(width)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))[None]
            return self.ln(self.blocks(x)) @ self.tok.weight.t()

    files = []
    for d, _, names in os.walk(args.data):
        files += [os.path.join(d, n) for n in names if not n.endswith((".dat", ".u8"))]
    text = b"".join(open(f, "rb").read() for f in sorted(files) if os.path.isfile(f))
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()

    dist.init_process_group("gloo")
    torch.manual_seed(1234)
    model = Gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    step = 0
    if os.path.exists(args.checkpoint):
        # Its own file, holding the optimizer's floats, which torch 1.13's weights_only refuses.
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
    ddp = DistributedDataParallel(model)
    record(args.log, {"event": "ready", "rank": rank, "pid": os.getpid(), "restart": restart,
                      "resume_step": step, "time": time.time()})

    per_rank = args.batch_size // world
    while step < args.steps:
        g = torch.Generator().manual_seed(step * 1000003 + rank)
        starts = torch.randint(0, data.numel() - ctx - 1, (per_rank,), generator=g)
        windows = data[starts[:, None] + torch.arange(ctx + 1)[None]]
        logits = ddp(windows[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), windows[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if rank == 0:
            tmp = args.checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, args.checkpoint)
            record(args.log, {"event": "step", "rank": 0, "step": step, "restart": restart,
                              "loss": round(loss.item(), 4), "time": time.time()})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
