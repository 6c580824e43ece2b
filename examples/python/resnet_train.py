#!/usr/bin/python3
"""Trains torchvision's ResNet-18 on Fashion-MNIST with mitra, evaluating test accuracy as it
goes.

    mitra run --machines examples/machines.txt --batch-size 32 --chunk-size 8 \\
        -- /usr/bin/python3 examples/python/resnet_train.py --eval-every 100

The model is torchvision.models.resnet18(num_classes=10) adapted to 28 x 28 grey images: its
first convolution is a 3 x 3, stride 1 one over 1 channel (not 7 x 7, stride 2 over 3), and its
max-pool is nn.Identity, so layer1 sees the whole 28 x 28 image and layer4 a 4 x 4 one. It is cut
into six segments, "stem" (conv1, bn1, relu, maxpool), "layer1" .. "layer4" and "head" (avgpool,
flatten, fc), by mitra.ModelSpec.from_sequential. Started by `mitra run` the program takes its
place in the job from the environment; started by hand it trains alone (1 x 1). Run with --help
for the options.
"""
import argparse
import os
import sys
from collections import OrderedDict

import torch.nn.functional as F
import torchvision
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mitra  # noqa: E402
from fashion import DEFAULT_DIR, FashionMnist  # noqa: E402

SEGMENTS = ["stem", "layer1", "layer2", "layer3", "layer4", "head"]


def resnet18():
    """ResNet-18 for 28 x 28 x 1 images, as an nn.Sequential with a CutPoint between segments."""
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")  # as torchvision
    cut = mitra.CutPoint
    return nn.Sequential(OrderedDict([  # named, so parameters read "stem.conv1.weight" ...
        ("conv1", m.conv1), ("bn1", m.bn1), ("relu", m.relu), ("maxpool", nn.Identity()),
        ("cut1", cut()), ("layer1", m.layer1), ("cut2", cut()), ("layer2", m.layer2),
        ("cut3", cut()), ("layer3", m.layer3), ("cut4", cut()), ("layer4", m.layer4),
        ("cut5", cut()), ("avgpool", m.avgpool), ("flatten", nn.Flatten()), ("fc", m.fc)]))


def resnet_spec():
    """The six segments; the loss is the cross-entropy summed over the micro-batch's samples."""
    spec = mitra.ModelSpec.from_sequential(resnet18, names=SEGMENTS, input="image")
    spec.loss = lambda out, batch: F.cross_entropy(out["hidden"], batch["label"], reduction="sum")
    spec.micro_batch_independent = False  # BatchNorm: a sample's output depends on its micro-batch
    return spec


def correct(out, batch):
    """The "accuracy" metric: correct predictions, summed (the runtime divides by the samples)."""
    return (out["hidden"].argmax(1) == batch["label"]).sum().float()


def parse_args(argv):
    d = mitra.trainer.DEFAULTS  # the runtime's own, where this program keeps them
    p = argparse.ArgumentParser(prog="resnet_train.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=DEFAULT_DIR, help="the Fashion-MNIST IDX files")
    p.add_argument("--train-samples", type=int, default=0,
                   help="train on the first N training images (0: all 60,000)")
    p.add_argument("--test-samples", type=int, default=1000,
                   help="evaluate on the first N test images (0: all 10,000)")
    p.add_argument("--eval-every", type=int, default=50,
                   help="evaluate every N steps and after the last (0: after the last only)")
    p.add_argument("--seed", type=int, default=d["seed"])
    p.add_argument("--steps", type=int, default=1000,
                   help="steps to train when mitra run gives no --max-steps")
    p.add_argument("--batch-size", type=int, default=d["batch_size"],
                   help="global batch when run alone")
    p.add_argument("--chunk-size", type=int, default=d["chunk_size"],
                   help="micro-batch when run alone")
    p.add_argument("--schedule", default=d["schedule"], help="gpipe | 1f1b | varuna | zb-h1")
    p.add_argument("--partition", default=d["partition"], help="uniform | params | 2,1,3 ...")
    p.add_argument("--optimizer", default="sgd", help="sgd | adam | adamw")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9, help="sgd")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--cosine-steps", type=int, default=1000, help="0: constant after the warm-up")
    p.add_argument("--clip", type=float, default=0.0, help="gradient-norm clip (0: none)")
    p.add_argument("--checkpoint-dir", default=None, help="checkpoints when run alone")
    p.add_argument("--checkpoint-every", type=int, default=None)
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    train = test = None
    if not mitra.describe_requested():  # describing needs the model, not the data
        try:
            train = FashionMnist("train", args.train_samples, args.data)
            test = FashionMnist("test", args.test_samples, args.data)
        except (OSError, ValueError) as e:
            print(f"resnet_train.py: {e}", file=sys.stderr)
            return 2
    trainer = mitra.Trainer(
        resnet_spec(), train, seed=args.seed, max_steps=args.steps, batch_size=args.batch_size,
        chunk_size=args.chunk_size, schedule=args.schedule, partition=args.partition,
        optimizer=args.optimizer, lr=args.lr,
        momentum=args.momentum if args.optimizer == "sgd" else None,
        weight_decay=args.weight_decay, warmup=args.warmup, cosine_steps=args.cosine_steps,
        clip=args.clip, eval_dataset=test, eval_every=args.eval_every,
        metrics={"accuracy": correct}, checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every)
    return trainer.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
