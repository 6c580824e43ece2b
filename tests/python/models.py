"""Small models and data for the Python package's tests."""
import torch
import torch.nn.functional as F
from torch import nn

import mitra


class Blobs(torch.utils.data.Dataset):
    """`n` samples of 8 features in 4 classes, the same for every seed of the job."""

    def __init__(self, n=256):
        g = torch.Generator().manual_seed(5)
        self.y = torch.randint(0, 4, (n,), generator=g)
        centers = torch.randn(4, 8, generator=g) * 2
        self.x = centers[self.y] + torch.randn(n, 8, generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


class Middle(nn.Module):
    def __init__(self, batchnorm, dropout):
        super().__init__()
        self.norm = nn.BatchNorm1d(16) if batchnorm else nn.Identity()
        self.fc = nn.Linear(16, 16)
        self.dropout = dropout

    def forward(self, x):
        return F.dropout(self.fc(torch.relu(self.norm(x))), self.dropout, self.training)


def classify_loss(outputs, batch):
    return F.cross_entropy(outputs["hidden"], batch["y"], reduction="sum")


def correct(outputs, batch):
    return (outputs["hidden"].argmax(1) == batch["y"]).sum().float()


def mlp_spec(batchnorm=False, dropout=0.0, built=None):
    """Segments "inp" | "mid" | "out"; `built` (a list) receives every module a factory builds."""

    def keep(module):
        if built is not None:
            built.append(module)
        return module

    spec = mitra.ModelSpec()
    # Before a BatchNorm, no bias: BatchNorm removes it, so its gradient is rounding noise that
    # Adam would turn into full-size steps of a shape-dependent sign (as in ResNet's convs).
    spec.add_segment("inp", lambda: keep(nn.Linear(8, 16, bias=not batchnorm)), input="x")
    spec.add_segment("mid", lambda: keep(Middle(batchnorm, dropout)), input="hidden")
    spec.add_segment("out", lambda: keep(nn.Linear(16, 4)), input="hidden")
    spec.loss = classify_loss
    spec.micro_batch_independent = not batchnorm
    return spec
