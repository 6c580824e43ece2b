"""A checkpoint's model in one process, for evaluation and prediction."""
from mitra import _mitra


class InferenceModel:
    """Every segment of `spec`, built in this process, with the parameters and buffers of a
    checkpoint written in any shape: a step-N directory, a checkpoint directory (its newest
    valid checkpoint), or a file written by `mitra checkpoint export`. The model is in
    evaluation mode (BatchNorm uses its running statistics, dropout is off).

        model = mitra.InferenceModel(spec, "mitra-run/checkpoints")
        out = model({"tokens": tokens})        # every segment, without autograd
        model.segments["head"]                  # the torch.nn.Module, with its weights
    """

    def __init__(self, spec, path):
        self._spec = spec
        self._model = _mitra.InferenceModel(spec, str(path))
        self.segments = dict(self._model.segments())

    @property
    def step(self):
        """Steps trained when the checkpoint was written."""
        return self._model.step

    def __call__(self, batch):
        return self.forward(batch)

    def forward(self, batch):
        """Runs every segment on `batch` (a dict of tensors with a batch dimension); returns the
        last segment's dict (a model cut by from_module: what its forward returns)."""
        return self._spec.outputs_of(self._model.forward(batch))

    def evaluate(self, dataset, metrics=None, max_samples=0, batch_size=64):
        """The loss and each metric's mean over samples [0, n) of `dataset` (n: its length, or
        max_samples when smaller and > 0): {"samples": n, "loss": x, name: value, ...}."""
        metrics = {name: self._spec.metric(fn) for name, fn in (metrics or {}).items()}
        return self._model.evaluate(dataset, metrics, max_samples, batch_size)

    def state_dict(self):
        """{name: tensor} of every segment's parameters and buffers, as checkpoints name them:
        a model cut by from_module by its own state_dict() keys (load it into the original
        class with load_state_dict), any other by qualified names ("<segment>.<name>")."""
        out = {}
        for name, module in self.segments.items():
            for key, value in module.state_dict().items():
                out.setdefault(key if self._spec.state_dict_keys == "module" else f"{name}.{key}",
                               value)
        return out
