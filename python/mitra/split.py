"""A model as the user wrote it, cut into segments: torch.fx traces its forward, and the graph is
split at the CutPoints it calls (or after the submodules named).

What crosses a cut is found from the graph: every value computed before it and used after it
(skip connections, masks, rotary tables, the batch's tensors) travels in the activations dict
under its graph name. Parameters and buffers stay where they are used, under the names the
original module gives them; one used on both sides of a cut is copied into each segment and
tied. Shape arithmetic (x.shape, x.size(1), their products) is recomputed on the far side of a
cut instead of crossing it. docs/python.md, "The model you have", is the contract.
"""
import contextlib
import copy
import dis
import functools
import inspect
import operator
import os

import torch
import torch.fx as fx
from torch import nn
from torch.utils import _pytree

OUTPUT = "output"


class CutPoint(nn.Module):
    """A place where the model may be cut into pipeline stages: call it inside forward
    (`x = self.cut1(x)`) or put it between the layers of an nn.Sequential. Run as a whole, it
    is the identity."""

    def forward(self, x):
        return x


def _cut(value):
    """The graph's mark of a cut: the identity. Never run: the split removes it."""
    return value


class SplitError(ValueError):
    """A model that cannot be cut as asked; the message names the value, the source line and
    the fix."""


class _Tracer(fx.Tracer):
    """Traces a forward keeping CutPoints, the modules named in `cut_after` and the user's leaf
    modules as marks and calls; records each node's source line."""

    def __init__(self, cut_after, leaf_modules):
        super().__init__()
        self.record_stack_traces = True
        self.proxy_buffer_attributes = True  # buffers are read by get_attr, as parameters
        self.cut_after = set(cut_after)
        self.seen_cut_after = set()
        self.leaf_types = tuple(t for t in leaf_modules if isinstance(t, type))
        self.leaf_names = {n for n in leaf_modules if isinstance(n, str)}

    def is_leaf_module(self, m, qualified_name):
        if isinstance(m, CutPoint) or qualified_name in self.leaf_names:
            return True
        if self.leaf_types and isinstance(m, self.leaf_types):
            return True
        return super().is_leaf_module(m, qualified_name)

    def iter(self, obj):
        # `B, T = x.shape`: torch 1.13's Proxy finds the unpacking by instruction index, which
        # Python 3.11's inline caches shift; find it by offset instead.
        frame = inspect.currentframe().f_back.f_back  # iter <- Proxy.__iter__ <- the user
        for inst in dis.get_instructions(frame.f_code):
            if inst.offset == frame.f_lasti:
                if inst.opname == "UNPACK_SEQUENCE":
                    return (obj[i] for i in range(inst.argval))
                break
        raise SplitError(f"{_users_line()}: forward iterates over '{obj.node.name}', a traced "
                         f"value whose length torch.fx cannot know. {_FIX_CONTROL_FLOW}")

    def to_bool(self, obj):
        raise SplitError(f"{_users_line()}: forward branches on the value of "
                         f"'{obj.node.name}', which depends on the data. {_FIX_CONTROL_FLOW}")

    def call_module(self, m, forward, args, kwargs):
        if isinstance(m, CutPoint):
            if len(args) != 1 or kwargs:
                raise SplitError("a CutPoint takes one value and returns it: x = self.cut(x)")
            return self.create_proxy("call_function", _cut, args, {})
        out = super().call_module(m, forward, args, kwargs)
        name = self.path_of_module(m)
        if name in self.cut_after:
            self.seen_cut_after.add(name)
            return self.create_proxy("call_function", _cut, (out,), {})
        return out


# Shape arithmetic: cheap, deterministic, never a tensor; recomputed where it is used.
_SHAPE_METHODS = {"size", "dim"}
_SHAPE_ATTRS = {"shape", "ndim", "dtype", "device"}
_SHAPE_OPS = {operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
              operator.truediv, operator.mod, operator.neg, getattr, len}


def _is_shape_value(node, memo):
    if node in memo:
        return memo[node]
    result = False
    if node.op == "call_method" and node.target in _SHAPE_METHODS:
        result = True
    elif node.op == "call_function" and node.target is getattr:
        result = len(node.args) >= 2 and node.args[1] in _SHAPE_ATTRS
    elif node.op == "call_function" and node.target in _SHAPE_OPS:
        inputs = [a for a in node.all_input_nodes]
        result = bool(inputs) and all(_is_shape_value(a, memo) for a in inputs)
    memo[node] = result
    return result


def _where(node):
    """The user's source line that made `node`, as fx recorded it."""
    trace = node.meta.get("stack_trace") or ""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    # torch 1.13 records the innermost frame first: the first frame that is neither torch's
    # nor this file's is the user's forward.
    for i, line in enumerate(lines):
        if line.startswith("File ") and not any(part in line for part in _NOT_THE_USERS):
            code = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith("File ") else ""
            return f"{line}: {code}"
    return f"graph node '{node.name}'"


_NOT_THE_USERS = (os.sep + "torch" + os.sep, os.path.basename(__file__) + '"', "<frozen ")


_FIX_CONTROL_FLOW = ("Control flow that depends on a tensor's values cannot be split: move it "
                     "into a submodule and name that submodule (or its class) in "
                     "leaf_modules=, so that it runs whole inside one segment, or give the value "
                     "as a constant with inputs=")


def _users_line():
    """'file:line (`code`)' of the innermost frame of the user's own code."""
    for frame in inspect.stack()[1:]:
        if not any(part in f'{frame.filename}"' for part in _NOT_THE_USERS):
            code = frame.code_context[0].strip() if frame.code_context else ""
            return f"{frame.filename}:{frame.lineno} (`{code}`)"
    return "forward"


def _forward_inputs(model, inputs):
    """(names of forward's parameters fed from the batch, {name: default} for the rest)."""
    signature = inspect.signature(model.forward)
    names, concrete = [], {}
    for p in signature.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise SplitError(f"{type(model).__name__}.forward takes *{p.name}: mitra traces "
                             f"forward with named parameters only; name each input")
        wanted = p.name in inputs if inputs is not None else p.default is p.empty
        if wanted:
            names.append(p.name)
        elif p.default is p.empty:
            raise SplitError(f"{type(model).__name__}.forward needs '{p.name}', which is not "
                             f"among inputs={list(inputs)}: add it")
        else:
            concrete[p.name] = p.default
    if inputs is not None:
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise SplitError(f"inputs={list(inputs)} names {unknown}, which "
                             f"{type(model).__name__}.forward does not take (it takes "
                             f"{list(signature.parameters)})")
    return names, concrete


# torch's tensor factories, which torch.fx 1.13 does not record when a size or device comes
# from a traced value (torch.ones(T, T, device=x.device)); trace() records them.
_FACTORIES = ("ones", "zeros", "full", "empty", "arange", "eye", "rand", "randn", "randint",
              "linspace", "tril_indices", "triu_indices")


def _recording(factory):
    @functools.wraps(factory)
    def call(*args, **kwargs):
        proxies = [a for a in _pytree.tree_flatten((args, kwargs))[0] if isinstance(a, fx.Proxy)]
        if proxies:
            return proxies[0].tracer.create_proxy("call_function", factory, args, kwargs)
        return factory(*args, **kwargs)

    return call


@contextlib.contextmanager
def _factories_recorded():
    originals = {name: getattr(torch, name) for name in _FACTORIES}
    try:
        for name, factory in originals.items():
            setattr(torch, name, _recording(factory))
        yield
    finally:
        for name, factory in originals.items():
            setattr(torch, name, factory)


def trace(model, cut_after=(), inputs=None, leaf_modules=()):
    """The model's forward as a torch.fx graph, with a _cut node at each cut point."""
    names, concrete = _forward_inputs(model, inputs)
    tracer = _Tracer(cut_after, leaf_modules)
    was_training = model.training
    model.train()  # what forward does with self.training is traced as in training
    try:
        with _factories_recorded():
            graph = tracer.trace(model, concrete_args=concrete or None)
    except fx.proxy.TraceError as e:
        raise SplitError(f"mitra traces {type(model).__name__}.forward with torch.fx, which "
                         f"cannot follow it: {e}. {_FIX_CONTROL_FLOW}") from e
    finally:
        model.train(was_training)
    missing = sorted(set(cut_after) - tracer.seen_cut_after)
    if missing:
        known = [n for n, _ in model.named_modules() if n]
        raise SplitError(f"cut_after names {missing}, which forward never calls as a module "
                         f"(its submodules: {', '.join(known[:20])}"
                         f"{', ...' if len(known) > 20 else ''})")
    return graph, names


class Segments:
    """The split of one traced model: each segment's GraphModule, the names that cross each
    cut, the ties, and how to rebuild forward's output from the last segment's dict."""

    def __init__(self, modules, ties, output_spec, inputs):
        self.modules = modules          # [GraphModule], forward(dict) -> dict
        self.ties = ties                # [[(segment index, name in it)]], one list a weight
        self.output_spec = output_spec  # pytree spec of forward's output
        self.inputs = inputs            # the batch's names forward takes

    def outputs(self, flat):
        """The last segment's dict as forward returned it (a tensor, tuple, dict...)."""
        return outputs_as_returned(flat, self.output_spec)


def outputs_as_returned(flat, output_spec):
    """The last segment's dict `flat` in the structure `output_spec` of forward's output."""
    leaves = [flat[f"{OUTPUT}{i}"] for i in range(output_spec.num_leaves)]
    return _pytree.tree_unflatten(leaves, output_spec)


class _Plan:
    """Where each node of the traced graph runs and which segments use its value.

    A computing node runs in the segment its cut points put it in. Placeholders (the batch) are
    segment 0's; get_attrs (parameters, buffers) and shape arithmetic have no home of their
    own that matters: every segment that uses one gets its own copy."""

    def __init__(self, graph, model_name):
        self.home, segment = {}, 0
        for node in graph.nodes:
            if node.op == "call_function" and node.target is _cut:
                segment += 1
            elif node.op == "placeholder":
                self.home[node] = 0
            elif node.op not in ("output", "get_attr"):
                self.home[node] = segment
        self.count = segment + 1
        if self.count == 1:
            raise SplitError(f"{model_name}.forward calls no CutPoint and cut_after is empty: "
                             f"mark where it may be cut (self.cut = mitra.CutPoint() in "
                             f"__init__, x = self.cut(x) in forward), or name submodules in "
                             f"cut_after=")
        # A cut is the identity: its users read the value it was given.
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is _cut:
                node.replace_all_uses_with(node.args[0])
                graph.erase_node(node)
        output = next(n for n in graph.nodes if n.op == "output")
        self.outputs, self.output_spec = _pytree.tree_flatten(output.args[0])
        for leaf in self.outputs:
            if not isinstance(leaf, fx.Node):
                raise SplitError(f"{model_name}.forward returns {leaf!r}, a constant: return "
                                 f"tensors only")
        self._shape_memo = {}
        self.users = self._users(graph)

    def _users(self, graph):
        """{node: the segments that use its value}; forward's output is the last one's."""
        users = {}
        for leaf in self.outputs:
            users.setdefault(leaf, set()).add(self.count - 1)
        for node in graph.nodes:
            if node in self.home and node.op != "placeholder":
                for arg in node.all_input_nodes:
                    users.setdefault(arg, set()).add(self.home[node])
        # Shape arithmetic is recomputed where it is used: what it reads is used there too.
        for node in reversed(list(graph.nodes)):
            if node in self.home and self.copied(node):
                for arg in node.all_input_nodes:
                    users.setdefault(arg, set()).update(users.get(node, ()))
        return users

    def copied(self, node):
        """True for a value each segment that uses it computes itself, never sent."""
        return node.op == "get_attr" or (node.op != "placeholder" and
                                         _is_shape_value(node, self._shape_memo))

    def crossing(self, s):
        """The values made in segments <= s and used after s: what segment s sends on."""
        return [node for node, used_by in self.users.items()
                if not self.copied(node) and self.home.get(node, s + 1) <= s < max(used_by)]


def _segment_graph(graph, plan, s, input_names):
    """Segment s's graph: forward(inputs: dict) -> dict of what it sends on (the last: forward's
    outputs, flattened), each value checked to be a tensor."""
    g = fx.Graph()
    received = g.placeholder("inputs")
    env = {}

    def value(node):
        if node not in env:
            if plan.copied(node) and plan.home.get(node) != s:
                env[node] = g.node_copy(node, value)
            elif plan.home.get(node) == s and node.op != "placeholder":
                raise AssertionError(f"{node.name} used before it is made")
            else:
                env[node] = g.call_function(operator.getitem, (received, node.name))
        return env[node]

    for node in graph.nodes:
        if node.op == "placeholder" and s == 0:
            env[node] = g.call_function(_batch_input, (received, node.target, tuple(input_names)))
        elif node.op not in ("placeholder", "get_attr") and plan.home.get(node) == s:
            env[node] = g.node_copy(node, value)
    if s == plan.count - 1:
        sent = {f"{OUTPUT}{i}": leaf for i, leaf in enumerate(plan.outputs)}
    else:
        sent = {node.name: node for node in plan.crossing(s)}
    sources = {key: _where(node) for key, node in sent.items()}
    g.output(g.call_function(_tensors_only, ({k: value(n) for k, n in sent.items()}, s, sources)))
    return g


def split(model, cut_after=(), inputs=None, leaf_modules=(), linear_class=None, linear_fn=None):
    """Cuts `model` (an nn.Module) into Segments at its CutPoints and after `cut_after`.
    `linear_class` replaces the class of each nn.Linear, `linear_fn` each call of F.linear: the
    zero-bubble schedules' layers (mitra.layers), the same numbers elsewhere."""
    graph, input_names = trace(model, cut_after, inputs, leaf_modules)
    plan = _Plan(graph, type(model).__name__)
    modules = []
    for s in range(plan.count):
        g = _segment_graph(graph, plan, s, input_names)
        if linear_fn is not None:
            for node in g.nodes:
                if node.op == "call_function" and node.target in _LINEAR_FUNCTIONS:
                    node.target = linear_fn
        modules.append(fx.GraphModule(model, g, class_name=f"Segment{s}"))
    _keep_persistence(model, modules)
    ties = _untie(modules)
    _lint_unused(model, modules)
    for gm in modules:
        if linear_class is not None:
            for m in gm.modules():
                if type(m) is nn.Linear:
                    m.__class__ = linear_class
        _dropout_as_modules(gm)
    return Segments(modules, ties, plan.output_spec, input_names)


def _batch_input(batch, name, wanted):
    try:
        return batch[name]
    except KeyError:
        raise KeyError(f"the model's forward takes {list(wanted)} from the batch, but the batch "
                       f"holds {sorted(batch)}: return '{name}' from the dataset's "
                       f"__getitem__, or leave it out with from_module(inputs=...)") from None


_LINEAR_FUNCTIONS = {torch.nn.functional.linear, torch._C._nn.linear}


def _tensors_only(outputs, segment, sources):
    """A segment's dict, refused when a value that crosses the cut is not a tensor."""
    for key, value in outputs.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"'{key}' ({sources[key]}) crosses the cut after segment {segment} "
                            f"but is a {type(value).__name__}, not a tensor: only tensors "
                            f"travel between stages. Compute it after the cut (from a tensor "
                            f"that crosses), make it a tensor, or move the cut")
    return outputs


def _dropout_as_modules(gm):
    """F.dropout(x, p, self.training) was traced in training mode, its `training` fixed at
    True; an nn.Dropout in its place follows the segment's train() and eval() as the original
    forward followed self.training."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not torch.nn.functional.dropout:
            continue
        names = ("input", "p", "training", "inplace")
        given = dict(zip(names, node.args), **node.kwargs)
        if given.get("training", True) is not True or given.get("inplace", False):
            continue
        name = f"mitra_dropout{len([n for n, _ in gm.named_children() if n.startswith('mitra_dropout')])}"
        gm.add_submodule(name, nn.Dropout(given.get("p", 0.5)))
        with gm.graph.inserting_after(node):
            module_call = gm.graph.call_module(name, (given["input"],))
        node.replace_all_uses_with(module_call)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()


def _keep_persistence(model, modules):
    """GraphModule registers every buffer it copies as persistent; the original's non-persistent
    buffers (rotary tables, say) stay out of state_dict() as they were."""
    non_persistent = set()
    for name, module in model.named_modules():
        for b in getattr(module, "_non_persistent_buffers_set", ()):
            non_persistent.add(f"{name}.{b}" if name else b)
    for gm in modules:
        for name, module in gm.named_modules():
            for b in list(module._buffers):
                full = f"{name}.{b}" if name else b
                if full in non_persistent:
                    module._non_persistent_buffers_set.add(b)


def _untie(modules):
    """Gives each segment its own copy of a parameter or persistent buffer that an earlier
    segment also holds, and returns the parameters to tie: [(key, [(segment, name)])]."""
    owners = {}  # id(tensor) -> [(segment, name)]
    for s, gm in enumerate(modules):
        for name, p in gm.named_parameters():
            owners.setdefault(id(p), []).append((s, name))
    seen_modules, seen_tensors = set(), set()
    for s, gm in enumerate(modules):
        _copy_shared(gm, seen_modules, seen_tensors, s)
        for m in gm.modules():
            seen_modules.add(id(m))
        for t in list(gm.parameters()) + list(gm.buffers()):
            seen_tensors.add(id(t))
    ties = []
    for members in owners.values():
        segments = sorted({s for s, _ in members})
        if len(segments) > 1:
            first = {}
            for s, name in members:
                first.setdefault(s, name)
            ties.append([(s, first[s]) for s in segments])
    return ties


def _copy_shared(module, seen_modules, seen_tensors, s, path=""):
    for name, child in list(module._modules.items()):
        if child is None:
            continue
        full = f"{path}{name}"
        if id(child) in seen_modules:
            _refuse_running_statistics(child, full, s)
            module._modules[name] = copy.deepcopy(child)
        else:
            _copy_shared(child, seen_modules, seen_tensors, s, full + ".")
    for name, p in list(module._parameters.items()):
        if p is not None and id(p) in seen_tensors:
            module._parameters[name] = nn.Parameter(p.detach().clone(), p.requires_grad)
    for name, b in list(module._buffers.items()):
        if b is not None and id(b) in seen_tensors and name not in module._non_persistent_buffers_set:
            module._buffers[name] = b.clone()


def _refuse_running_statistics(module, name, s):
    for m_name, m in module.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            where = f"{name}.{m_name}" if m_name else name
            raise SplitError(f"'{where}' ({type(m).__name__}) is called on both sides of a cut "
                             f"(segment {s} and an earlier one): its running statistics would "
                             f"differ between the copies. Call it on one side only, or move the "
                             f"cut")


def _lint_unused(model, modules):
    held = set()
    for gm in modules:
        held.update(gm.state_dict().keys())
    unused = [k for k in model.state_dict().keys() if k not in held]
    if unused:
        raise SplitError(f"{type(model).__name__}'s state_dict holds {unused[:5]}"
                         f"{' ...' if len(unused) > 5 else ''}, which forward never uses: "
                         f"mitra trains what forward reads; delete them from the model, or "
                         f"load and save them yourself")
