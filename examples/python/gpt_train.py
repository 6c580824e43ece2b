#!/usr/bin/python3
"""Trains the byte-level GPT (gpt.py) with mitra: the Python twin of examples/gpt/gpt_train.

    mitra run --machines examples/machines.txt --batch-size 32 --nstages 2 --chunk-size 8 \\
        -- /usr/bin/python3 examples/python/gpt_train.py --model bench

Started by `mitra run` it takes its place in the job from the environment; started by hand it
trains alone (1 x 1). Run with --help for the options and their defaults (the runtime's own,
from mitra.trainer.DEFAULTS).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mitra  # noqa: E402
from gpt import (DEFAULT_TEXT, GptConfig, TextDataset, gpt_module_spec, gpt_spec,  # noqa: E402
                 with_dropout)


def parse_args(argv):
    d = mitra.trainer.DEFAULTS  # the runtime's own defaults, as gpt_train's
    p = argparse.ArgumentParser(prog="gpt_train.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="bench", choices=["tiny", "bench", "large"])
    p.add_argument("--data", default=DEFAULT_TEXT, help="text file or directory")
    p.add_argument("--from-module", action="store_true",
                   help="the GPT written as one module with CutPoints in forward (gpt.Gpt)")
    p.add_argument("--loader-workers", type=int, default=0,
                   help="processes that load samples ahead of the step")
    p.add_argument("--sample-cost-ms", type=float, default=0.0,
                   help="sleep this long in every __getitem__ (a dataset that decodes)")
    p.add_argument("--seed", type=int, default=d["seed"], help="weights, samples, dropout")
    p.add_argument("--steps", type=int, default=d["max_steps"],
                   help="steps to train when mitra run gives no --max-steps")
    p.add_argument("--batch-size", type=int, default=d["batch_size"],
                   help="global batch when run alone")
    p.add_argument("--chunk-size", type=int, default=d["chunk_size"],
                   help="micro-batch when run alone")
    p.add_argument("--schedule", default=d["schedule"], help="gpipe | 1f1b | varuna | zb-h1")
    p.add_argument("--recompute", action="store_true")
    p.add_argument("--partition", default=d["partition"], help="uniform | params | 1,4,4,3")
    p.add_argument("--lr", type=float, default=d["lr"], help="peak learning rate")
    p.add_argument("--warmup", type=int, default=d["warmup"], help="warm-up steps")
    p.add_argument("--cosine-steps", type=int, default=d["cosine_steps"],
                   help="end of the cosine decay (0: constant after the warm-up)")
    p.add_argument("--optimizer", default=d["optimizer"], help="sgd | adam | adamw")
    p.add_argument("--weight-decay", type=float, default=d["weight_decay"],
                   help="decoupled for adamw, L2 for sgd and adam")
    p.add_argument("--momentum", type=float, default=d["momentum"], help="sgd")
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0, help="after attention and MLP")
    p.add_argument("--sampler", default=d["sampler"], help="shuffled | sequential")
    p.add_argument("--clip", type=float, default=d["clip"], help="0 disables")
    p.add_argument("--backend", default=d["backend"], help="gloo | nccl")
    p.add_argument("--precision", default=d["precision"], help="fp32 | bf16 | fp16")
    p.add_argument("--device", default=d["device"], help="cpu | cuda")
    p.add_argument("--share-gpus", action="store_true", help="ranks may share a GPU")
    p.add_argument("--loss-scale", type=float, default=None, help="dynamic loss scaling from X")
    p.add_argument("--checkpoint-dir", default=None, help="checkpoints when run alone")
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--dump-params", default=None)
    p.add_argument("--trace", default=None)
    args = p.parse_args(argv)
    if not 0 <= args.dropout < 1:
        p.error(f"--dropout {args.dropout} is not in [0, 1)")
    return args


def main(argv):
    args = parse_args(argv)
    config = with_dropout(GptConfig.named(args.model), args.dropout)
    # Describing needs the model, not the data.
    dataset = None if mitra.describe_requested() else TextDataset(args.data, config.context,
                                                                  args.sample_cost_ms)
    spec = gpt_module_spec(config) if args.from_module else gpt_spec(config)
    try:
        trainer = mitra.Trainer(
            spec, dataset, seed=args.seed, max_steps=args.steps,
            batch_size=args.batch_size, chunk_size=args.chunk_size, schedule=args.schedule,
            recompute=args.recompute, partition=args.partition, lr=args.lr, warmup=args.warmup,
            cosine_steps=args.cosine_steps, optimizer=args.optimizer,
            weight_decay=args.weight_decay,
            momentum=args.momentum if args.optimizer == "sgd" else None, nesterov=args.nesterov,
            sampler=args.sampler, clip=args.clip, backend=args.backend,
            precision=args.precision, device=args.device, share_gpus=args.share_gpus,
            loss_scale=args.loss_scale,
            checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
            dump_params=args.dump_params, trace=args.trace, loader_workers=args.loader_workers)
    except ValueError as e:  # a name none of the settings takes: bad configuration
        print(f"gpt_train.py: {e}", file=sys.stderr)
        return 2
    return trainer.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
