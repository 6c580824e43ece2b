"""The byte-level GPT of examples/gpt, written in Python: ordinary torch.nn.Modules, one per
segment (the embedding, each transformer block, the head), built by factories so a stage
builds only its own, with the token embedding tied to the output projection.

Layer for layer and draw for draw the C++ model (examples/gpt/gpt_model.cc): built from the
same seed, the two start from the same weights and train to the same losses.
"""
import math
import os
import time
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

import mitra


@dataclass(frozen=True)
class GptConfig:
    vocab: int = 256
    context: int = 128
    width: int = 128
    heads: int = 4
    layers: int = 8
    mlp_width: int = 512
    dropout: float = 0.0  # after the attention and the MLP of every block, in training

    @staticmethod
    def named(name):
        """"bench" (the README's), "tiny" (tests) or "large" (~101 M parameters)."""
        if name == "bench":
            return GptConfig()
        if name == "large":
            return GptConfig(width=1024, heads=16, mlp_width=4096)
        if name == "tiny":
            return GptConfig(context=32, width=32, heads=2, layers=2, mlp_width=128)
        raise ValueError(f"unknown model '{name}' (expected tiny, bench or large)")


# The causal softmax(q k^T / sqrt(hd)) v as one operator where torch has it (2.x), as the C++
# gpt_train computes it with the same LibTorch: the two programs stay the same computation.
_FUSED_ATTENTION = hasattr(F, "scaled_dot_product_attention")


def _init_linear(linear):
    with torch.no_grad():
        linear.weight.normal_(0.0, 0.02)
        linear.bias.zero_()


def _embeddings(c):
    """The token and position embeddings, drawn as the C++ model draws them."""
    wte, wpe = nn.Embedding(c.vocab, c.width), nn.Embedding(c.context, c.width)
    with torch.no_grad():
        wte.weight.normal_(0.0, 0.02)
        wpe.weight.normal_(0.0, 0.02)
    return wte, wpe


class Embed(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte, self.wpe = _embeddings(c)

    def forward(self, batch):
        tokens = batch["tokens"]
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return {"hidden": self.wte(tokens) + self.wpe(positions)}


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.dropout = c.heads, c.dropout
        self.ln1 = nn.LayerNorm(c.width)
        self.qkv = mitra.Linear(c.width, 3 * c.width)
        self.proj = mitra.Linear(c.width, c.width)
        self.ln2 = nn.LayerNorm(c.width)
        self.fc = mitra.Linear(c.width, c.mlp_width)
        self.out = mitra.Linear(c.mlp_width, c.width)
        for linear in (self.qkv, self.proj, self.fc, self.out):
            _init_linear(linear)

    def attention(self, x):
        b, t, c = x.shape
        hd = c // self.heads
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        if _FUSED_ATTENTION:  # torch 2.x: one fused kernel, as gpt_train takes there
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
            y = torch.matmul(torch.softmax(scores, -1), v)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):  # a bare tensor in and out: {"hidden": x}
        # Dropout draws from the generator mitra seeds per micro-batch and segment.
        x = x + F.dropout(self.attention(self.ln1(x)), self.dropout, self.training)
        x = x + F.dropout(self.out(F.gelu(self.fc(self.ln2(x)))), self.dropout, self.training)
        return x


class Head(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_f = nn.LayerNorm(c.width)
        self.weight = nn.Parameter(torch.empty(c.vocab, c.width))
        with torch.no_grad():
            self.weight.normal_(0.0, 0.02)  # replaced by embed.wte.weight: the two are tied

    def forward(self, x):
        return {"logits": torch.matmul(self.ln_f(x), self.weight.t())}


def token_loss(c, logits, batch):
    """Each sample's mean cross-entropy over its tokens, summed over the micro-batch."""
    targets = batch["targets"]
    per_token = F.cross_entropy(logits.reshape(-1, c.vocab), targets.reshape(-1),
                                reduction="none")
    return per_token.view(targets.shape).mean(1).sum()


def gpt_spec(c):
    """Segments "embed", "block0" .. "block<N-1>", "head"; the loss is each sample's mean
    cross-entropy over its tokens, summed over the micro-batch's samples."""
    spec = mitra.ModelSpec()
    spec.add_segment("embed", lambda: Embed(c))
    for i in range(c.layers):
        spec.add_segment(f"block{i}", lambda: Block(c), input="hidden")
    spec.add_segment("head", lambda: Head(c), input="hidden")
    spec.tie_weights("token_embedding", ["embed.wte.weight", "head.weight"])
    spec.loss = lambda outputs, batch: token_loss(c, outputs["logits"], batch)
    spec.tokens_per_sample = c.context
    # LayerNorm only: every sample is computed on its own. Dropout draws its masks for a whole
    # micro-batch at once: with it, the micro-batch size is kept for the job, so that every
    # shape draws the same.
    spec.micro_batch_independent = c.dropout == 0
    return spec


class Gpt(nn.Module):
    """The same GPT as one module, as a PyTorch user writes it: a CutPoint after the embedding
    and after every block, called in forward; the head reads the token embedding's weight, so
    ModelSpec.from_module ties the two without a declaration."""

    def __init__(self, c):
        super().__init__()
        self.wte, self.wpe = _embeddings(c)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.cuts = nn.ModuleList(mitra.CutPoint() for _ in range(c.layers + 1))
        self.ln_f = nn.LayerNorm(c.width)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.cuts[0](self.wte(tokens) + self.wpe(positions))
        for block, cut in zip(self.blocks, self.cuts[1:]):
            x = cut(block(x))
        return torch.matmul(self.ln_f(x), self.wte.weight.t())


def gpt_module_spec(c):
    """Gpt(c) cut at its CutPoints by ModelSpec.from_module, with gpt_spec's loss."""
    spec = mitra.ModelSpec.from_module(lambda: Gpt(c))
    spec.loss = lambda logits, batch: token_loss(c, logits, batch)
    spec.tokens_per_sample = c.context
    spec.micro_batch_independent = c.dropout == 0
    return spec


DEFAULT_TEXT = "/usr/share/games/fortunes"


class TextDataset(torch.utils.data.Dataset):
    """Windows of context + 1 bytes of a text file, or of every file under a directory (in
    path order, without fortune's .dat index files and .u8 duplicates), as examples/gpt's
    TextDataset reads them: sample i is bytes [i * context, (i + 1) * context]."""

    def __init__(self, path, context, cost_ms=0.0):
        self.cost_s = cost_ms / 1000  # a stand-in for decoding: the loader's benchmark
        files = []
        if os.path.isdir(path):
            for folder, _, names in os.walk(path):
                for name in names:
                    full = os.path.join(folder, name)
                    if os.path.isfile(full) and not name.endswith((".dat", ".u8")):
                        files.append(full)
            files.sort(key=lambda p: p.split(os.sep))  # by path element, as C++'s path order
        elif os.path.isfile(path):
            files = [path]
        else:
            raise FileNotFoundError(f"text data '{path}' is neither a file nor a directory: give "
                                    f"--data a text file, or install Debian's fortunes package")
        text = b"".join(open(f, "rb").read() for f in files)
        if len(text) < context + 1:
            raise ValueError(f"text data '{path}' holds {len(text)} bytes, fewer than one sample "
                             f"of {context + 1}: give more text")
        self.bytes = torch.frombuffer(bytearray(text), dtype=torch.uint8)
        self.context = context

    def __len__(self):
        return (self.bytes.numel() - 1) // self.context

    def __getitem__(self, index):
        if self.cost_s:
            time.sleep(self.cost_s)
        window = self.bytes[index * self.context:index * self.context + self.context + 1].long()
        return {"tokens": window[:-1], "targets": window[1:]}


def with_dropout(config, dropout):
    return replace(config, dropout=dropout)
