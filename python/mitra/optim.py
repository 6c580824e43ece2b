"""Optimizers written in Python, through the interface of mitra's built-in ones.

The runtime reduces and clips the gradients, then calls step(lr) with the step's scheduled
learning rate. Checkpoints keep each parameter's state by segment and parameter name, so a
Python optimizer's state resumes into any shape like AdamW's does.
"""
import torch


class Optimizer:
    """Base of an optimizer written in Python. Made by a factory the Trainer calls with the
    stage's parameters (the module's own tensors): `Trainer(..., optimizer=MyOptimizer)`."""

    def __init__(self, params):
        self.params = list(params)

    def name(self):
        """A short name kept with checkpoints: resuming under another starts the state afresh."""
        return type(self).__name__.lower()

    def describe(self):
        """The settings in words, for the line that starts a run."""
        return type(self).__name__

    def step(self, lr):
        """Updates every parameter from its .grad with learning rate `lr`."""
        raise NotImplementedError

    def state(self, param):
        """The state of `param` as {name: tensor} (empty before its first update). The tensors
        may be the live ones: the checkpoint copies them before the next step."""
        raise NotImplementedError

    def set_state(self, param, state):
        """Replaces the state of `param` with tensors state() returned, read from a checkpoint.
        Raise ValueError, naming the difference, when they do not fit the parameter."""
        raise NotImplementedError

    def state_tensors_per_parameter(self):
        """How many tensors of a parameter's shape its state holds once updated (a hint that
        lets the first checkpoint be as cheap as the others); 0 when unknown."""
        return 0


class TorchOptimizer(Optimizer):
    """Any torch.optim optimizer through mitra's interface:
    `optimizer=mitra.TorchOptimizer(torch.optim.RMSprop, alpha=0.9)`. Its learning rate is the
    runtime's schedule (Trainer's lr, warmup, cosine_steps); its per-parameter state (tensors,
    and numbers kept as 0-d tensors) is checkpointed. Use it as the factory: it makes one
    optimizer per worker over that worker's parameters."""

    def __init__(self, cls, **kwargs):
        if "lr" in kwargs:
            raise ValueError("TorchOptimizer: the learning rate comes from the Trainer (lr=, "
                             "warmup=, cosine_steps=), not from the optimizer's arguments")
        self.cls, self.kwargs = cls, kwargs
        self.optimizer = None

    def __call__(self, params):
        made = TorchOptimizer(self.cls, **self.kwargs)
        made.params = list(params)
        made.optimizer = self.cls(made.params, lr=0.0, **self.kwargs)
        return made

    def name(self):
        return "torch." + self.cls.__name__.lower()

    def describe(self):
        settings = ", ".join(f"{k} {v}" for k, v in self.kwargs.items())
        return f"torch.optim.{self.cls.__name__}" + (f" ({settings})" if settings else "")

    def step(self, lr):
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()

    def state(self, param):
        return {k: v if isinstance(v, torch.Tensor) else torch.tensor(v)
                for k, v in self.optimizer.state.get(param, {}).items()}

    def set_state(self, param, state):
        current = self.optimizer.state.get(param)
        restored = {}
        for k, v in state.items():
            if v.dim() > 0 and v.shape != param.shape:
                raise ValueError(f"optimizer state '{k}' has shape {list(v.shape)}, the "
                                 f"parameter {list(param.shape)}")
            restored[k] = v.clone()
        # Numbers torch keeps as Python numbers come back as such.
        if current:
            for k, v in current.items():
                if k in restored and not isinstance(v, torch.Tensor):
                    restored[k] = type(v)(restored[k].item())
        self.optimizer.state[param] = restored
