#!/usr/bin/python3
"""models.py's MLP as a worker program: --batchnorm, --dropout P, --steps N, --dump DIR;
--sequential builds it with ModelSpec.from_sequential (one model per process, kept from one
generation to the next by a worker that regroups); --slow sleeps 5 ms in every segment;
--hook-log FILE appends a line per step from Trainer(on_step=...) on every rank ("step rank
PxD generation loss"); --checkpoint-every N sets the Trainer's own."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import time  # noqa: E402

from torch import nn  # noqa: E402

import mitra  # noqa: E402
from models import Blobs, Middle, classify_loss, correct, mlp_spec  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--batchnorm", action="store_true")
p.add_argument("--dropout", type=float, default=0.0)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--dump", default=None)
p.add_argument("--sequential", action="store_true")
p.add_argument("--slow", action="store_true")
p.add_argument("--hook-log", default=None)
p.add_argument("--checkpoint-every", type=int, default=None)
args = p.parse_args()


class Slow(nn.Module):
    def forward(self, x):
        time.sleep(0.005)
        return x


def build():
    slow = [Slow()] if args.slow else []
    return [nn.Linear(8, 16, bias=not args.batchnorm), *slow, mitra.CutPoint(), Middle(args.batchnorm, args.dropout),
            *slow, mitra.CutPoint(), nn.Linear(16, 4), *slow]


if args.sequential:
    spec = mitra.ModelSpec.from_sequential(build, names=["inp", "mid", "out"], input="x")
    spec.loss = classify_loss
else:
    spec = mlp_spec(args.batchnorm, args.dropout)


def log_step(info):
    line = f"{info.step} {info.rank} {info.stages}x{info.replicas} {info.generation} {info.loss}\n"
    fd = os.open(args.hook_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, line.encode())  # one write per line: whole lines from every process
    os.close(fd)


sys.exit(mitra.Trainer(spec, Blobs(), batch_size=32,
                       chunk_size=8, max_steps=args.steps, lr=0.05, dump_params=args.dump,
                       eval_dataset=Blobs(64), metrics={"accuracy": correct},
                       on_step=log_step if args.hook_log else None,
                       checkpoint_every=args.checkpoint_every).run())
