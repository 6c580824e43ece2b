"""The training loop of a worker program: mitra's C++ Trainer, driven from Python."""
import faulthandler
import signal
import sys

from mitra import _mitra
from mitra.loader import Loader

# Options the Python layer handles itself (the rest go to the C++ Trainer).
_PYTHON_OPTIONS = {"loader_workers": 0, "prefetch_steps": 2, "loader": "processes"}

# The settings of mitra's built-in optimizers, by the optimizer that takes each: any other
# optimizer would ignore them.
_OPTIMIZER_SETTINGS = {
    "weight_decay": ("sgd", "adam", "adamw"),
    "betas": ("adam", "adamw"),
    "eps": ("adam", "adamw"),
    "momentum": ("sgd",),
    "dampening": ("sgd",),
    "nesterov": ("sgd",),
}


# Values that turn a setting off: given to an optimizer that does not take it, they change
# nothing it would have done.
_OFF = {"weight_decay": 0, "momentum": 0, "dampening": 0, "nesterov": False}


def _check_optimizer_settings(options):
    """Refuses a built-in optimizer's setting that the chosen optimizer would ignore, naming
    where it belongs (one that turns something off is let through)."""
    optimizer = options.get("optimizer", DEFAULTS["optimizer"])
    given = {k: options[k] for k in _OPTIMIZER_SETTINGS
             if k in options and not (k in _OFF and options[k] == _OFF[k])}
    if isinstance(optimizer, str):
        ignored = {k: v for k, v in given.items() if optimizer not in _OPTIMIZER_SETTINGS[k]}
        if ignored:
            names = ", ".join(f"{k}=" for k in ignored)
            takers = sorted({o for k in ignored for o in _OPTIMIZER_SETTINGS[k]})
            raise TypeError(f"mitra.Trainer: {names} would be ignored: optimizer='{optimizer}' "
                            f"does not take {'it' if len(ignored) == 1 else 'them'} (only "
                            f"{' and '.join(repr(o) for o in takers)} do)")
        return
    if given:
        settings = ", ".join(f"{k}={v!r}" for k, v in given.items())
        cls = getattr(optimizer, "cls", None)
        where = (f"mitra.TorchOptimizer(torch.optim.{cls.__name__}, {settings})" if cls is not None
                 else "your optimizer's own arguments")
        raise TypeError(f"mitra.Trainer: {settings} would be ignored: they are settings of "
                        f"mitra's built-in optimizers, and optimizer= is "
                        f"{getattr(optimizer, '__name__', type(optimizer).__name__)}; give them to "
                        f"it: {where}")

# Keyword -> what it is, as docs/python.md lists them. Values left at None take the runtime's
# defaults (mitra/worker/runtime.h, mitra/worker/trainer.h), or what `mitra run` sets for the job;
# the "(default ...)" of each comes from there too, through _mitra.trainer_defaults().
_DESCRIPTIONS = {
    # the batch (the manager's --batch-size and --chunk-size win over these)
    "batch_size": "global batch in samples (default {})",
    "chunk_size": "micro-batch size (default {})",
    "max_steps": "steps to train when mitra run gives no --max-steps (default {})",
    "seed": "initial weights, sample order and random numbers (default {})",
    # the pipeline (the manager's plan wins over these)
    "schedule": "gpipe | 1f1b | varuna | zb-h1 | interleaved | zb-v (default {})",
    "recompute": "recompute activations in the backward (varuna always does)",
    "partition": "uniform | params | explicit counts such as '1,4,4,3' (default {})",
    "backend": "gloo | nccl (default {})",
    "precision": "fp32 | bf16 | fp16 (default {})",
    "device": "cpu | cuda (default {})",
    "share_gpus": "cuda: local rank r computes on GPU r mod GPUs, so that ranks may share a GPU (tests, small models)",
    "loss_scale": "dynamic loss scaling from this scale (fp16 does it from {} anyway)",
    "bucket_elements": "data-parallel gradient bucket size in elements (default {})",
    "zero": "1: each replica keeps the optimizer state of its share of the stage only (ZeRO-1; default {})",
    # the update
    "optimizer": "sgd | adam | adamw (default {}), or a factory params -> mitra.Optimizer",
    "lr": "peak learning rate (default {})",
    "warmup": "linear warm-up steps (default {})",
    "cosine_steps": "end of the cosine decay (default {}: constant after the warm-up)",
    "min_lr_ratio": "where the cosine ends, as a fraction of lr (default {})",
    "clip": "global gradient-norm clip, 0 disables (default {})",
    "weight_decay": "decoupled for adamw, L2 for sgd and adam (default {})",
    "betas": "adam and adamw (default {})",
    "eps": "adam and adamw (default {})",
    "momentum": "sgd (default {})",
    "dampening": "sgd (default {})",
    "nesterov": "sgd with Nesterov momentum",
    # the data
    "sampler": "shuffled | sequential (default {}), or a factory (size, seed) -> object "
               "with index_at(position)",
    "loader_workers": "processes (or threads) that run __getitem__ ahead of the step (default "
                      "0: on the training thread)",
    "prefetch_steps": "how many steps ahead they load (default 2)",
    "loader": "processes (default) | threads (for a __getitem__ that releases the GIL)",
    # user code
    "on_step": "fn(mitra.StepInfo) after every step the job trains, on the training thread",
    # evaluation
    "eval_dataset": "evaluated every eval_every steps and after the last",
    "eval_every": "{}: only after the last step",
    "eval_max_samples": "evaluate the first N samples only ({}: all)",
    "eval_chunk_size": "micro-batch of the evaluation ({}: the training one)",
    "metrics": "{{name: (outputs, batch) -> sum over the micro-batch}}",
    # checkpoints and output (the manager's settings win over these)
    "checkpoint_dir": "where checkpoints go when run alone (mitra run sets its own)",
    "checkpoint_every": "save every N steps ({}: only at the end and on stop)",
    "keep_checkpoints": "complete checkpoints kept (default {})",
    "async_checkpoints": "write checkpoints in the background (default {})",
    "log_every": "a log line every N steps (default {})",
    "dump_params": "after training, write each stage's parameters to this folder",
    "dump_replica": "which replica dumps them (default {}; -1: every one)",
    "trace": "a chrome trace of one step (the third) to this file",
}


def _number(value):
    """3e-4 as 3e-4, 0.01 as 0.01, 1234 as 1234: the shortest text that reads back."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    return f"{value:g}" if float(f"{value:g}") == value else repr(value)


def _default_text(value):
    if isinstance(value, tuple):
        return "(" + ", ".join(_number(v) for v in value) + ")"
    return _number(value)


DEFAULTS = dict(_mitra.trainer_defaults(), **_PYTHON_OPTIONS)
OPTIONS = {key: text.format(*([_default_text(DEFAULTS[key])] if "{}" in text else []))
           for key, text in _DESCRIPTIONS.items()}


class Trainer:
    """Runs the whole training of one worker: reads its place in the job (or trains alone
    when started by hand), answers the manager's describe request, resumes from the checkpoint
    it is told to, trains, evaluates and checkpoints, parks and regroups on a morph, and stops
    with every other rank on Ctrl-C, SIGUSR1 or `mitra stop`.

        raise SystemExit(mitra.Trainer(spec, dataset, batch_size=32, lr=1e-3).run())

    `dataset`: any object with __len__ and __getitem__(index) returning a dict of tensors for
    one sample (a torch.utils.data.Dataset written that way works as it is); None is allowed
    when describe_requested(). The keywords are listed in mitra.trainer.OPTIONS.
    """

    def __init__(self, spec, dataset, **options):
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"mitra.Trainer: unknown option(s) {', '.join(unknown)}; the options "
                            f"are {', '.join(OPTIONS)}")
        if spec.loss is None:
            raise ValueError("the model has no loss: set spec.loss = fn(outputs, batch) -> the "
                             "sum over the micro-batch's samples")
        self._options = {k: v for k, v in options.items() if v is not None}
        _check_optimizer_settings(self._options)
        metrics = self._options.get("metrics")
        if isinstance(metrics, dict):
            self._options["metrics"] = {name: spec.metric(fn) for name, fn in metrics.items()}
        loading = {k: self._options.pop(k, default) for k, default in _PYTHON_OPTIONS.items()}
        self._loader = None
        if loading["loader_workers"] and dataset is not None and not _mitra.describe_requested():
            self._loader = Loader(dataset, loading["loader_workers"], loading["prefetch_steps"],
                                  loading["loader"])
            dataset = self._loader
        try:
            self._trainer = _mitra.Trainer(spec, dataset, self._options)
        except BaseException:
            if self._loader is not None:
                self._loader.close()
            raise

    def run(self):
        """Trains; returns the process's exit code: 0 done or stopped, 1 a failure (a lost peer),
        2 bad configuration. A Python exception in a segment, the loss, the dataset, the sampler,
        a metric or the optimizer ends the process at once with exit code 1, after printing its
        traceback and which of them raised it: the other ranks notice within milliseconds."""
        # The records the manager reads are whole lines on stdout; Python's own output must not
        # cut into them with a partial block.
        for stream in (sys.stdout, sys.stderr):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(line_buffering=True)
        # A crash in native code (a segment's extension, say) leaves the Python stack in the
        # rank's log instead of nothing.
        if not faulthandler.is_enabled():
            faulthandler.enable()
        # While it trains, mitra handles SIGINT, SIGUSR1, SIGUSR2 and SIGURG (a stop after the
        # same step on every rank, or parking). A worker of `mitra run` keeps those handlers afterwards, as
        # a C++ worker does: a stop signal that arrives late must not end it. Alone (a notebook,
        # a shell), Ctrl-C raises KeyboardInterrupt again once training is over.
        restore_sigint = not _mitra.started_by_manager()
        python_sigint = signal.getsignal(signal.SIGINT)
        try:
            return self._trainer.run()
        finally:
            if self._loader is not None:
                self._loader.close()
            if restore_sigint and python_sigint is not None:
                signal.signal(signal.SIGINT, python_sigint)
