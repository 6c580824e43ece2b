#!/usr/bin/python3
"""user_models.py's Llama cut by the CutPoints in its forward (ModelSpec.from_module) as a
worker program, trained with AdamW, a warm-up and clipping on the sequential sampler, so that a
plain PyTorch loop can replay the same job: --steps N, --dropout P, --torch-optimizer (AdamW as
torch.optim's, through mitra.TorchOptimizer), --schedule S, --kill-at STEP (SIGKILL itself at that step, once:
the file --kill-once marks that it did), --slow; --resnet trains torchvision's ResNet-18 cut
by name instead."""
import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import mitra  # noqa: E402
from user_models import (RESNET_CUTS, RESNET_SETTINGS, SETTINGS, Images, Llama,  # noqa: E402
                         Tokens, image_loss, resnet, token_loss)

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
p.add_argument("--dropout", type=float, default=0.0)
p.add_argument("--torch-optimizer", action="store_true")
p.add_argument("--schedule", default=None)
p.add_argument("--kill-at", type=int, default=0)
p.add_argument("--kill-once", default=None)
p.add_argument("--slow", action="store_true", help="the loss sleeps 20 ms per micro-batch")
p.add_argument("--resnet", action="store_true",
               help="torchvision's ResNet-18, cut after its four layers, on Images with SGD")
args = p.parse_args()

if args.resnet:
    spec = mitra.ModelSpec.from_module(resnet, cut_after=RESNET_CUTS)
    spec.loss = image_loss
    sys.exit(mitra.Trainer(spec, Images(), max_steps=args.steps, schedule=args.schedule,
                           **RESNET_SETTINGS).run())

spec = mitra.ModelSpec.from_module(lambda: Llama(dropout=args.dropout),
                                   inputs=["tokens", "attention_mask"])
spec.loss = token_loss
if args.slow:
    def slow_loss(logits, batch):
        time.sleep(0.02)
        return token_loss(logits, batch)
    spec.loss = slow_loss
spec.tokens_per_sample = 16

dataset = Tokens()
if args.kill_at:
    class Killing(Tokens):
        """Kills its own process when it loads the first sample of step --kill-at, once."""

        def __getitem__(self, i):
            position_step = getattr(self, "calls", 0) // SETTINGS["batch_size"]
            self.calls = getattr(self, "calls", 0) + 1
            if position_step == args.kill_at and not os.path.exists(args.kill_once):
                open(args.kill_once, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return super().__getitem__(i)
    dataset = Killing()

options = dict(SETTINGS, max_steps=args.steps, schedule=args.schedule)
if args.torch_optimizer:
    betas, eps, decay = options.pop("betas"), options.pop("eps"), options.pop("weight_decay")
    options["optimizer"] = mitra.TorchOptimizer(torch.optim.AdamW, betas=betas, eps=eps,
                                                weight_decay=decay)
sys.exit(mitra.Trainer(spec, dataset, **options).run())
