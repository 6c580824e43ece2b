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
        self._model = _mitra.InferenceModel(spec, str(path))
        self.segments = dict(self._model.segments())

    @property
    def step(self):
        """Steps trained when the checkpoint was written."""
        return self._model.step

    def __call__(self, batch):
        return self.forward(batch)

    def forward(self, batch):
        """Runs every segment on `batch` (a dict of tensors with a batch dimension)."""
        return self._model.forward(batch)

    def evaluate(self, dataset, metrics=None, max_samples=0, batch_size=64):
        """The loss and each metric's mean over samples [0, n) of `dataset` (n: its length, or
        max_samples when smaller and > 0): {"samples": n, "loss": x, name: value, ...}."""
        return self._model.evaluate(dataset, metrics or {}, max_samples, batch_size)

    def state_dict(self):
        """{qualified name: tensor} of every segment's parameters and buffers, as checkpoints
        name them ("<segment>.<name in the module>")."""
        return {f"{name}.{key}": value for name, module in self.segments.items()
                for key, value in module.state_dict().items()}
