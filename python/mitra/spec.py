"""The model: a chain of segments (ordinary torch.nn.Modules) separated by CutPoints."""
import functools
from collections import OrderedDict

import torch
from torch import nn

HIDDEN = "hidden"


class CutPoint(nn.Module):
    """A marker between two layers of an nn.Sequential (or a list of modules): a place where the
    model may be cut into pipeline stages. ModelSpec.from_sequential cuts there; in a model run
    as a whole it is the identity."""

    def forward(self, x):
        return x


def _as_dict(value, segment):
    if isinstance(value, torch.Tensor):
        return {HIDDEN: value}
    if isinstance(value, dict):
        return value
    raise TypeError(f"segment '{segment}' returned a {type(value).__name__}: return a dict of "
                    f"tensors, or one tensor (passed on as {{'{HIDDEN}': tensor}})")


def _runner(name, module, input):
    """The callable the runtime calls for segment `name`: dict of tensors in, dict out."""
    if input is None:
        def run(activations):
            return _as_dict(module(activations), name)
    else:
        def run(activations):
            try:
                x = activations[input]
            except KeyError:
                raise KeyError(f"segment '{name}' takes the tensor '{input}', but its input "
                               f"holds {sorted(activations)}: pass input= the name of one of "
                               f"them to add_segment") from None
            return _as_dict(module(x), name)
    return run


class ModelSpec:
    """What the runtime needs to know of a model: its segments in order, built by factories so
    that a stage builds only its own; the loss; tied weights.

    A segment is any torch.nn.Module. Its forward takes the dict of tensors the segment before
    it returned (the first segment: the batch, a dict of the dataset's tensors with a leading
    batch dimension) and returns a dict of tensors; a segment built with `input="name"` is
    called with that one tensor instead, and a bare tensor it returns counts as {"hidden": t}.
    """

    def __init__(self):
        self._segments = []  # (name, make() -> (module, runner))
        self._ties = []      # (name, [qualified parameter names])
        # (outputs, batch) -> 0-d tensor: the SUM over the micro-batch's samples of each
        # sample's loss (the runtime divides by the global batch; see sum_over_samples).
        self.loss = None
        self.tokens_per_sample = 0  # a language model's tokens per sample, for tokens/s
        # True when every sample's loss and gradient depend on that sample alone (no BatchNorm):
        # then the micro-batch size may change from one shape to the next.
        self.micro_batch_independent = False

    def add_segment(self, name, factory, input=None):
        """Appends segment `name`, built by `factory()` (called only by the stage that holds
        it, with torch's generator seeded from the job's seed and the segment's index, so its
        initial weights are the same in every shape). `input`: the name of the one tensor the
        module's forward takes (None: it takes the dict)."""
        if not callable(factory):
            raise TypeError(f"segment '{name}': the factory must be a callable returning an "
                            f"nn.Module (say lambda: MyBlock(cfg)), not a "
                            f"{type(factory).__name__}")

        def make():
            module = factory()
            if not isinstance(module, nn.Module):
                raise TypeError(f"the factory of segment '{name}' returned a "
                                f"{type(module).__name__}, not a torch.nn.Module")
            return module, _runner(name, module, input)

        self._segments.append((name, make))
        return self

    def tie_weights(self, name, members):
        """Declares one weight held by several segments, by qualified names
        ("embed.wte.weight", "head.weight"): the first member's initial value is copied to the
        others and their gradients are summed, so the copies stay identical."""
        self._ties.append((name, list(members)))
        return self

    @property
    def segment_names(self):
        return [name for name, _ in self._segments]

    @classmethod
    def from_sequential(cls, model, names=None, input=None):
        """Varuna's way: a model written as an nn.Sequential (or a list of modules) with
        mitra.CutPoint() markers becomes the segments between them.

        `model` is the Sequential or list, or a callable that builds it; a callable is called
        once per process, under a fixed seed, so every process builds the same weights (give
        the built model instead only if every process builds it identically). Each segment is
        an nn.Sequential of its layers, named by `names` (default "segment0", "segment1", ...).
        `input` is the batch's tensor the first layer takes; the others take the tensor the
        layer before returned. Every process holds the whole model: when that is too much, use
        add_segment with a factory per segment."""
        build = model if callable(model) and not isinstance(model, nn.Module) else None

        @functools.lru_cache(maxsize=1)
        def pieces():
            if build is None:
                built = model
            else:
                with torch.random.fork_rng():
                    torch.manual_seed(0x6d697472)
                    built = build()
            return _split(built)

        count = len(pieces())
        spec = cls()
        if names is not None and len(names) != count:
            raise ValueError(f"from_sequential: {len(names)} names for {count} segments (the "
                             f"model has {count - 1} CutPoints)")
        for i in range(count):
            spec.add_segment(names[i] if names else f"segment{i}",
                             functools.partial(lambda i: pieces()[i], i),
                             input=input if i == 0 else HIDDEN)
        return spec


def _split(model):
    """The layers of `model` between its CutPoints, each as an nn.Sequential keeping the layers'
    names (so parameter names read as in the model)."""
    if isinstance(model, nn.Sequential):
        layers = list(model.named_children())
    else:
        layers = [(str(i), m) for i, m in enumerate(model)]
    segments, current = [], OrderedDict()
    for layer_name, layer in layers:
        if not isinstance(layer, nn.Module):
            raise TypeError(f"from_sequential: item {layer_name} is a {type(layer).__name__}, "
                            f"not an nn.Module")
        if isinstance(layer, CutPoint):
            segments.append(current)
            current = OrderedDict()
        else:
            current[layer_name] = layer
    segments.append(current)
    for i, s in enumerate(segments):
        if not s:
            raise ValueError(f"from_sequential: segment {i} holds no layer (two CutPoints in a "
                             f"row, or one at an end)")
    return [nn.Sequential(s) for s in segments]


def sum_over_samples(mean_loss):
    """Adapts a loss (or metric) that returns the MEAN over the micro-batch's samples — what
    PyTorch's losses do by default (reduction="mean") — to the sum the runtime expects: the
    mean times the micro-batch's sample count. Exact when the function averages over samples
    (for a per-token mean, average each sample's tokens first, then sum: see docs/python.md)."""

    @functools.wraps(mean_loss)
    def summed(outputs, batch):
        samples = next(iter(batch.values())).shape[0]
        return mean_loss(outputs, batch) * samples

    return summed
