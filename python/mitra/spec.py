"""The model: a chain of segments (ordinary torch.nn.Modules) separated by CutPoints."""
import copy
import functools
import gc
import itertools
import weakref
from collections import OrderedDict

import torch
from torch import nn

from mitra import split as _split_module
from mitra.split import CutPoint  # noqa: F401  (mitra.CutPoint)

HIDDEN = "hidden"
# The fixed seed under which a model given as a callable is built, in every process alike.
BUILD_SEED = 0x6d697472


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
        self._loss = None
        # "qualified": checkpoints name tensors "<segment>.<name>"; "module": the model is one
        # module cut by from_module, and its tensors keep the module's state_dict() keys.
        self.state_dict_keys = "qualified"
        # The last segment's dict -> what the loss and metrics see (from_module: what the
        # model's forward returns).
        self.outputs_of = _identity
        self.tokens_per_sample = 0  # a language model's tokens per sample, for tokens/s
        # True when every sample's loss and gradient depend on that sample alone (no BatchNorm):
        # then the micro-batch size may change from one shape to the next.
        self.micro_batch_independent = False

    @property
    def loss(self):
        """fn(outputs, batch) -> 0-d tensor: the SUM over the micro-batch's samples of each
        sample's loss. `outputs`: the last segment's dict (from_module: what forward returns)."""
        return _on_outputs(self._loss, self.outputs_of)

    @loss.setter
    def loss(self, fn):
        self._loss = fn

    def metric(self, fn):
        """A metric fn(outputs, batch) as the runtime calls it (outputs as the loss sees them)."""
        return _on_outputs(fn, self.outputs_of)

    def add_segment(self, name, factory, input=None):
        """Appends segment `name`, built by `factory()` (a new module at each call; called
        only by the stage that holds it, with torch's generator seeded from the job's seed and
        the segment's index, so its initial weights are the same in every shape). `input`: the
        name of the one tensor the module's forward takes (None: it takes the dict)."""
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
        layer before returned. Every process builds the whole model; a callable's segments are
        let go of but for the stage's at its first forward. When that is too much, use
        add_segment with a factory per segment."""
        source = _Segments(lambda: _split(_built(model, again=True)), _split(_built(model)),
                           built=not _is_builder(model))
        count = source.count
        spec = cls()
        if names is not None and len(names) != count:
            raise ValueError(f"from_sequential: {len(names)} names for {count} segments (the "
                             f"model has {count - 1} CutPoints)")
        for i in range(count):
            spec.add_segment(names[i] if names else f"segment{i}",
                             functools.partial(source.segment, i),
                             input=input if i == 0 else HIDDEN)
        return spec

    @classmethod
    def from_module(cls, model, cut_after=(), inputs=None, leaf_modules=(), names=None):
        """Varuna's way on the model you have: an ordinary nn.Module whose forward calls
        mitra.CutPoint()s (`x = self.cut1(x)`), or is cut after the submodules named in
        `cut_after` (`["layer2", "layer4"]`), or both. torch.fx traces forward and cuts its graph
        there; whatever crosses a cut travels on, parameters used on both sides are tied, and
        the tensors keep the module's own state_dict() keys (docs/python.md, "The model you
        have").

        `model`: the module, or a callable that builds it (called under a fixed seed, so every
        process builds the same weights). `inputs`: the names of forward's
        parameters that the batch supplies (default: those without a default value; the
        others keep their defaults). `leaf_modules`: submodule names or classes that run
        whole, untraced (for control flow fx cannot follow). The loss and metrics receive
        what forward returns. Segments are named by `names` (default "segment0", ...).

        Given a callable, a process keeps only the segments its stage holds once it trains
        (the others are freed at its first forward, and built again, with the whole model,
        if a later shape needs them); given a module, the module keeps them all, and the
        process a copy of the initial values of those it trains (a segment is always built
        again at its initial values)."""
        def split(again=False):
            built = _built(model, again)
            if not isinstance(built, nn.Module):
                raise TypeError(f"from_module takes an nn.Module or a callable that builds one, "
                                f"not a {type(built).__name__}")
            from mitra.layers import Linear, linear
            return _split_module.split(built, cut_after, inputs, leaf_modules,
                                       linear_class=Linear, linear_fn=linear)

        pieces = split()
        source = _Segments(lambda: split(again=True).modules, pieces.modules,
                           built=not _is_builder(model))
        count = source.count
        if names is not None and len(names) != count:
            raise ValueError(f"from_module: {len(names)} names for {count} segments")
        names = list(names) if names else [f"segment{i}" for i in range(count)]
        spec = cls()
        for i, name in enumerate(names):
            spec.add_segment(name, functools.partial(source.segment, i))
        for i, members in enumerate(pieces.ties):
            key = members[0][1]
            spec.tie_weights(key.replace(".", "_"), [f"{names[s]}.{n}" for s, n in members])
        spec.state_dict_keys = "module"
        # Not pieces.outputs: a bound method would keep every segment alive.
        spec.outputs_of = functools.partial(_split_module.outputs_as_returned,
                                            output_spec=pieces.output_spec)
        return spec


class _Segments:
    """The segments a model splits into, as the runtime's factories ask for them. Every call
    for segment i returns it at its initial values: a process that trained a stage and is kept
    for the next generation may build it again, and when that generation starts from step 0 (a
    recovery before any checkpoint) nothing overwrites what the process trained before.

    `split()` splits the model anew: a callable builds it again under BUILD_SEED; a built model
    is copied, and since the copy holds what the process trained, each segment's values are
    kept from the first time it was handed out (a copy of the stage's tensors) and put back.
    The segments split are held only until the first forward of any of them: the stage is
    built by then, and the others are let go."""

    def __init__(self, split, first, built):
        self._split = split
        self.count = len(first)
        self._handed = [None] * self.count  # (weakref to the module handed out, _state_of it)
        self._initial = [None] * self.count if built else None  # a built model's, first handed
        self._hold(first)

    def segment(self, i):
        """Segment i at its initial values: the one handed out before if it is alive, has not
        run a forward and no tensor of it was written in place since (a process that counts a
        segment's parameters and then builds its stage splits once), else a fresh one."""
        if self._handed[i] is not None:
            module, state = self._handed[i][0](), self._handed[i][1]
            if module is not None and _state_of(module) == state:
                return module
        module = self._fresh(i)
        self._handed[i] = (weakref.ref(module), _state_of(module))

        def forget(m, inputs):  # a forward trains it, or is about to
            handle.remove()
            if self._handed[i] is not None and self._handed[i][0]() is m:
                self._handed[i] = None

        handle = module.register_forward_pre_hook(forget)
        return module

    def _fresh(self, i):
        if self._held is None or _state_of(self._held[i]) != self._held_state[i]:
            self._hold(self._split())
        module = self._held[i]
        if self._initial is not None:
            if self._initial[i] is None:
                self._initial[i] = {k: t.detach().clone() for k, t in _tensors_of(module)}
            else:
                with torch.no_grad():
                    for k, t in _tensors_of(module):
                        t.copy_(self._initial[i][k])
                self._held_state[i] = _state_of(module)
        return module

    def _hold(self, segments):
        """Holds `segments` until the first forward of any of them."""
        self._held = list(segments)
        self._held_state = [_state_of(m) for m in self._held]
        handles = []

        def let_go(module, inputs):
            for handle in handles:
                handle.remove()
            self._held = None
            gc.collect()  # a GraphModule and its graph refer to each other

        handles.extend(m.register_forward_pre_hook(let_go) for m in self._held)


def _tensors_of(module):
    return itertools.chain(module.named_parameters(), module.named_buffers())


def _state_of(module):
    """Which tensors `module` holds and how often each was written in place: what an optimizer
    step, a restore or a BatchNorm forward changes."""
    return [(id(t), t._version) for _, t in _tensors_of(module)]


def _is_builder(model):
    return callable(model) and not isinstance(model, nn.Module)


def _built(model, again=False):
    """`model` itself (`again`: a copy of it), or what the callable `model` builds under
    BUILD_SEED (the same weights in every process, whatever the caller's generator holds)."""
    if not _is_builder(model):
        return copy.deepcopy(model) if again else model
    with torch.random.fork_rng():
        torch.manual_seed(BUILD_SEED)
        return model()


def _identity(outputs):
    return outputs


def _on_outputs(fn, outputs_of):
    """`fn(outputs, batch)` called with outputs_of(the last segment's dict)."""
    if fn is None or outputs_of is _identity:
        return fn

    @functools.wraps(fn)
    def call(outputs, batch):
        return fn(outputs_of(outputs), batch)

    return call


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
