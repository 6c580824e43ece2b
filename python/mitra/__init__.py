"""mitra: elastic pipeline x data-parallel training of ordinary torch.nn.Modules.

    import mitra
    spec = mitra.ModelSpec()
    spec.add_segment("embed", lambda: Embed(cfg))      # a stage builds only its own segments
    for i in range(cfg.layers):
        spec.add_segment(f"block{i}", lambda: Block(cfg))
    spec.add_segment("head", lambda: Head(cfg))
    spec.loss = lambda out, batch: ...                 # the SUM over the micro-batch's samples
    raise SystemExit(mitra.Trainer(spec, dataset, batch_size=32).run())

Started by `mitra run`, the program trains in its place of the job's grid; started by hand it
trains alone. The training itself is mitra's C++ runtime: the modules' parameters and buffers
are the tensors it reduces, updates and checkpoints. docs/python.md has the whole contract.
"""
import os as _os


def _say_starting():
    """Tells the manager that the program runs, before torch is imported (seconds, or tens of
    them on a busy machine or a shared file system): a rank that said so is starting, and the
    manager says which ranks have not (docs/worker-contract.md, `starting`)."""
    if "MITRA_RANK" not in _os.environ or "1" in (_os.environ.get("MITRA_DESCRIBE"),
                                                   _os.environ.get("MITRA_PROFILE")):
        return
    try:
        _os.write(1, b'@mitra {"event":"starting","rank":%d}\n' % int(_os.environ["MITRA_RANK"]))
    except (ValueError, OSError):
        pass  # the placement's own check names a bad MITRA_RANK; no stdout: nobody listens


_say_starting()

import torch  # noqa: F401,E402  (before the extension: it links torch's own libraries)

from mitra._build import load_extension

_mitra = load_extension()

from mitra.layers import Linear  # noqa: E402
from mitra.spec import CutPoint, ModelSpec, sum_over_samples  # noqa: E402
from mitra.split import SplitError  # noqa: E402
from mitra.optim import Optimizer, TorchOptimizer  # noqa: E402
from mitra.trainer import Trainer  # noqa: E402
StepInfo = _mitra.StepInfo  # what Trainer(on_step=fn) passes to fn
from mitra.inference import InferenceModel  # noqa: E402


def describe_requested():
    """True when the manager started this process only to describe the model (`mitra run`'s
    first look at a program): the program may then skip loading its data."""
    return _mitra.describe_requested()


__all__ = ["CutPoint", "InferenceModel", "Linear", "ModelSpec", "Optimizer", "SplitError",
           "StepInfo", "TorchOptimizer", "Trainer", "describe_requested", "sum_over_samples"]
