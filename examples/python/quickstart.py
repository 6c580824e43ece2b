#!/usr/bin/python3
"""The smallest whole mitra program: a byte-level model of Debian's fortunes in PyTorch."""
import torch
import torch.nn.functional as F
from torch import nn

import mitra

CONTEXT = 64


class Fortunes(torch.utils.data.Dataset):
    """Windows of CONTEXT + 1 bytes of one file of Debian's fortunes package."""

    def __init__(self, path="/usr/share/games/fortunes/computers"):
        self.text = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.uint8)

    def __len__(self):
        return (len(self.text) - 1) // CONTEXT

    def __getitem__(self, i):
        window = self.text[i * CONTEXT:(i + 1) * CONTEXT + 1].long()
        return {"tokens": window[:-1], "targets": window[1:]}   # one sample: a dict of tensors


def build():
    return nn.Sequential(
        nn.Embedding(256, 128), nn.Linear(128, 512), nn.GELU(),
        mitra.CutPoint(),                     # the model may be cut into stages here
        nn.Linear(512, 128), nn.GELU(),
        mitra.CutPoint(),                     # ... and here
        nn.LayerNorm(128), nn.Linear(128, 256))


def loss(outputs, batch):
    # The SUM over the micro-batch's samples of each sample's loss (here its mean over tokens).
    per_token = F.cross_entropy(outputs["hidden"].transpose(1, 2), batch["targets"], reduction="none")
    return per_token.mean(1).sum()


spec = mitra.ModelSpec.from_sequential(build, names=["embed", "body", "head"], input="tokens")
spec.loss = loss
spec.tokens_per_sample = CONTEXT
spec.micro_batch_independent = True  # no BatchNorm, no dropout: each sample is computed on its own

if __name__ == "__main__":
    raise SystemExit(mitra.Trainer(spec, Fortunes(), batch_size=32, lr=1e-3, max_steps=200).run())
