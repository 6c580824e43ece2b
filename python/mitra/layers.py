"""Layers whose weight gradients a zero-bubble schedule can defer."""
import torch

from mitra import _mitra


def linear(input, weight, bias=None):
    """torch.nn.functional.linear, but under a zero-bubble schedule (zb-h1, zb-v) the weight and
    bias gradients are left to the W instructions, after the input gradient has gone upstream
    (docs/runtime.md, Schedules). Elsewhere the same graph and the same numbers."""
    if _mitra.splitting():
        return _mitra.linear(input, weight, bias)
    return torch.nn.functional.linear(input, weight, bias)


class Linear(torch.nn.Linear):
    """torch.nn.Linear whose weight and bias gradients a zero-bubble schedule computes in its W
    instructions. Elsewhere it is torch.nn.Linear itself. ModelSpec.from_module makes every
    nn.Linear of a model one of these, and every F.linear call mitra.layers.linear."""

    def forward(self, input):
        return linear(input, self.weight, self.bias)
