"""Models as a PyTorch user writes them, for ModelSpec.from_module's tests: a Llama-style decoder
(RMSNorm, rotary tables as non-persistent buffers, SwiGLU, an attention-mask keyword, the
embedding tied to the head) with CutPoints inside its forward, and its data."""
import math

import torch
import torch.nn.functional as F
from torch import nn

import mitra

# The training of user_model_worker.py, which test_from_module.py's plain loop replays.
SETTINGS = dict(batch_size=16, chunk_size=4, lr=3e-3, warmup=3, clip=0.5, weight_decay=0.1,
                betas=(0.9, 0.95), eps=1e-8, sampler="sequential")


class RMSNorm(nn.Module):
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Rotary(nn.Module):
    """cos and sin tables, non-persistent: not in state_dict(), rebuilt by __init__."""

    def __init__(self, head_width, context):
        super().__init__()
        inverse = 1.0 / (10000 ** (torch.arange(0, head_width, 2).float() / head_width))
        angles = torch.outer(torch.arange(context).float(), inverse)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, length):
        return self.cos[:length], self.sin[:length]


def rotate(x, cos, sin):
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)
        scores = scores + mask[:, None, :, :]
        attention = self.dropout(F.softmax(scores, dim=-1))
        return self.proj((attention @ v).transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.attention_norm = RMSNorm(width)
        self.attention = Attention(width, heads, dropout)
        self.mlp_norm = RMSNorm(width)
        self.mlp = SwiGLU(width, 2 * width)

    def forward(self, x, cos, sin, mask):
        x = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    """A decoder whose forward takes the tokens and an attention mask (1 where a position may be
    attended to, 0 for padding), with a CutPoint after every block."""

    def __init__(self, vocab=64, width=32, heads=4, layers=4, context=16, dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rotary = Rotary(width // heads, context)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.cuts = nn.ModuleList(mitra.CutPoint() for _ in range(layers - 1))
        self.norm = RMSNorm(width)

    def forward(self, tokens, attention_mask=None):
        B, T = tokens.shape
        cos, sin = self.rotary(T)
        causal = torch.ones(T, T, device=tokens.device).tril()
        allowed = causal[None] * attention_mask[:, None, :].float()
        mask = (1.0 - allowed) * -1e9
        x = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask)
            if i < len(self.cuts):
                x = self.cuts[i](x)
        return F.linear(self.norm(x), self.embed.weight)  # the head is the embedding


# ResNet-18 as torchvision builds it, trained with SGD and micro-batch BatchNorm.
RESNET_SETTINGS = dict(batch_size=16, chunk_size=4, lr=0.05, warmup=2, clip=0.0,
                       weight_decay=5e-4, momentum=0.9, optimizer="sgd", sampler="sequential")
RESNET_CUTS = ["layer1", "layer2", "layer3", "layer4"]


def resnet():
    import torchvision
    return torchvision.models.resnet18(num_classes=10)


class Images(torch.utils.data.Dataset):
    """`n` 3 x 32 x 32 images in 10 classes, each class a colour and a noise."""

    def __init__(self, n=64):
        g = torch.Generator().manual_seed(3)
        self.y = torch.randint(0, 10, (n,), generator=g)
        colours = torch.rand(10, 3, 1, 1, generator=g)
        self.x = colours[self.y] + 0.3 * torch.randn(n, 3, 32, 32, generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


def image_loss(logits, batch):
    return F.cross_entropy(logits, batch["y"], reduction="sum")


def token_loss(logits, batch):
    """Each sample's mean next-token loss over its attended positions, summed over samples."""
    per_token = F.cross_entropy(logits.transpose(1, 2), batch["targets"], reduction="none")
    mask = batch["attention_mask"].float()
    return ((per_token * mask).sum(1) / mask.sum(1)).sum()


class Tokens(torch.utils.data.Dataset):
    """`n` sequences of a fixed pattern with noise and some padding at the end."""

    def __init__(self, n=128, context=16, vocab=64):
        g = torch.Generator().manual_seed(11)
        start = torch.randint(0, vocab, (n, 1), generator=g)
        seq = (start + torch.arange(context + 1) * 3) % vocab
        noise = torch.rand(n, context + 1, generator=g) < 0.1
        seq = torch.where(noise, torch.randint(0, vocab, seq.shape, generator=g), seq)
        self.tokens, self.targets = seq[:, :-1], seq[:, 1:]
        lengths = torch.randint(context // 2, context + 1, (n,), generator=g)
        self.mask = (torch.arange(context)[None] < lengths[:, None]).long()

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"tokens": self.tokens[i], "attention_mask": self.mask[i],
                "targets": self.targets[i]}
