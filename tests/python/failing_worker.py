#!/usr/bin/python3
"""A worker program whose Python code raises on request, for the error tests.

    failing_worker.py --fail segment|loss|dataset|metric|optimizer|sampler|factory|hook
                      [--at-step N] [--on-stage S] [--steps N] [--job-step] [--vary]

The model is an MLP ("inp" | "mid" | "out", tests/python/models.py's data and loss); what --fail names raises
ValueError("boom in ...") once step N (default 3) has begun (the factory: when it builds), on
stage S only when given. With --job-step, the loss raises at the job's step N (its generation
resumed from MITRA_RESUME_STEP), not this process's; with --vary, only in generations 0 and 1,
and with other words in each ("boom", then "bang").
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import time  # noqa: E402

import torch  # noqa: E402

import mitra  # noqa: E402
from models import Blobs, classify_loss  # noqa: E402

args = argparse.ArgumentParser()
args.add_argument("--fail", required=True)
args.add_argument("--at-step", type=int, default=3)
args.add_argument("--on-stage", type=int, default=None)
args.add_argument("--steps", type=int, default=6)
args.add_argument("--checkpoint-dir", default=None)
args.add_argument("--slow", action="store_true", help="sleep 20 ms in every forward")
args.add_argument("--job-step", action="store_true")
args.add_argument("--vary", action="store_true")
args = args.parse_args()

calls = {"forward": 0}
MICRO_BATCHES = 4  # batch 32 in micro-batches of 8


def stage():
    stage_map = os.environ.get("MITRA_STAGE_TO_RANK_MAP", "0;")
    rank = int(os.environ.get("MITRA_RANK", "0"))
    for s, ranks in enumerate(filter(None, stage_map.split(";"))):
        if str(rank) in ranks.split(","):
            return s
    return 0


def failing_now():
    return args.on_stage is None or args.on_stage == stage()


def steps_begun():
    return (calls["forward"] - 1) // MICRO_BATCHES + 1


class Boom(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        calls["forward"] += 1
        if args.slow:
            time.sleep(0.02)
        if args.fail == "segment" and steps_begun() >= args.at_step and failing_now():
            raise ValueError("boom in the segment")
        return self.fc(x)


def make_middle():
    if args.fail == "factory" and failing_now():
        raise ValueError("boom in the factory")
    return Boom()


spec = mitra.ModelSpec()
spec.add_segment("inp", lambda: torch.nn.Linear(8, 16), input="x")
spec.add_segment("mid", make_middle, input="hidden")
spec.add_segment("out", lambda: torch.nn.Linear(16, 4), input="hidden")
spec.loss = classify_loss

loss = spec.loss


def failing_loss(outputs, batch):
    calls["forward"] += 1
    if args.job_step:
        calls["loss"] = calls.get("loss", 0) + 1
        step = int(os.environ.get("MITRA_RESUME_STEP", "0")) + (calls["loss"] - 1) // 4 + 1
        generation = int(os.environ.get("MITRA_GENERATION", "0"))
        if step == args.at_step and not (args.vary and generation >= 2):
            word = ("boom", "bang")[generation % 2] if args.vary else "boom"
            raise ValueError(f"{word} in the loss")
    elif steps_begun() >= args.at_step and failing_now():
        raise ValueError("boom in the loss")
    return loss(outputs, batch)


if args.fail == "loss":
    spec.loss = failing_loss


class FailingBlobs(Blobs):
    def __getitem__(self, i):
        if args.fail == "dataset" and self.gets >= args.at_step * 32 - 1:
            raise ValueError(f"boom in the dataset at {i}")
        self.gets += 1
        return super().__getitem__(i)


data = FailingBlobs()
data.gets = 0


def failing_metric(outputs, batch):
    raise ValueError("boom in the metric")


class FailingSgd(mitra.Optimizer):
    def __init__(self, params):
        super().__init__(params)
        self.steps = 0

    def step(self, lr):
        self.steps += 1
        if self.steps >= args.at_step:
            raise ValueError("boom in the optimizer")
        with torch.no_grad():
            for p in self.params:
                p.add_(p.grad, alpha=-lr)

    def state(self, param):
        return {}

    def set_state(self, param, state):
        pass


class FailingSampler:
    def __init__(self, size, seed):
        self.size = size

    def index_at(self, position):
        if position >= (args.at_step - 1) * 32:
            raise ValueError("boom in the sampler")
        return position % self.size


options = dict(batch_size=32, chunk_size=8, max_steps=args.steps, lr=0.05,
               checkpoint_dir=args.checkpoint_dir)
if args.fail == "metric":
    options.update(eval_dataset=Blobs(64), eval_every=args.at_step, metrics={"accuracy": failing_metric})
if args.fail == "optimizer":
    options.update(optimizer=FailingSgd)
if args.fail == "sampler":
    options.update(sampler=FailingSampler)
if args.fail == "hook":
    def failing_hook(info):
        if info.step >= args.at_step:
            raise ValueError("boom in the hook")
    options.update(on_step=failing_hook)
sys.exit(mitra.Trainer(spec, data, **options).run())
