"""The training loop of a worker program: mitra's C++ Trainer, driven from Python."""
import faulthandler
import signal
import sys

from mitra import _mitra
from mitra.loader import Loader

# The options the Python layer handles itself, listed after the C++ table's "sampler": name,
# default, help, note (said after the default). The rest are the C++ Trainer's, one table
# (worker/option_table.cc) that _mitra.trainer_options() returns.
_PYTHON_OPTIONS = [
    ("loader_workers", 0, "processes (or threads) that run __getitem__ ahead of the step",
     "on the training thread"),
    ("prefetch_steps", 2, "how many steps ahead they load", ""),
    ("loader", "processes", "processes | threads (threads: for a __getitem__ that releases the "
     "GIL)", ""),
]
_PYTHON_OPTIONS_FOLLOW = "sampler"

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
             if options.get(k, DEFAULTS[k]) != DEFAULTS[k] and
             not (k in _OFF and options[k] == _OFF[k])}
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

def _number(value):
    """3e-4 as 3e-4, 0.01 as 0.01, 1234 as 1234: the shortest text that reads back."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    return f"{value:g}" if float(f"{value:g}") == value else repr(value)


def _default_text(value):
    if isinstance(value, tuple):
        return "(" + ", ".join(_number(v) for v in value) + ")"
    return _number(value)


def _description(row):
    """What docs/python.md and OPTIONS say of an option: its help, then its default and what
    the note says of it (inside the help's closing parentheses, if it has them), then what may
    be given instead of a name."""
    text, said = row["help"], ""
    if row["default"] is not None:
        said = f"default {_default_text(row['default'])}"
        said += f": {row['note']}" if row["note"] else ""
    elif row["note"]:
        said = row["note"]
    if said and text.endswith(")"):
        text = f"{text[:-1]}; {said})"
    elif said:
        text += f" ({said})"
    return text + (f", {row['instead']}" if row["instead"] else "")


def _option_rows():
    """Every keyword of mitra.Trainer, in the order help() and the docs list them: the C++
    table's rows, with the Python layer's own after "sampler"."""
    rows = []
    for row in _mitra.trainer_options():
        rows.append(row)
        if row["name"] == _PYTHON_OPTIONS_FOLLOW:
            rows += [dict(name=name, type="python", help=help, note=note, instead="",
                          default=default) for name, default, help, note in _PYTHON_OPTIONS]
    return rows


DEFAULTS = {row["name"]: row["default"] for row in _option_rows()}
OPTIONS = {row["name"]: _description(row) for row in _option_rows()}


class Trainer:
    """Runs the whole training of one worker: reads its place in the job (or trains alone
    when started by hand), answers the manager's describe request, resumes from the checkpoint
    it is told to, trains, evaluates and checkpoints, parks and regroups on a morph, and stops
    with every other rank on Ctrl-C, SIGUSR1 or `mitra stop`.

        raise SystemExit(mitra.Trainer(spec, dataset, batch_size=32, lr=1e-3).run())

    `dataset`: any object with __len__ and __getitem__(index) returning a dict of tensors for
    one sample (a torch.utils.data.Dataset written that way works as it is); None is allowed
    when describe_requested(). The keywords are those of __init__, each described in
    mitra.trainer.OPTIONS and docs/python.md.
    """

    # BEGIN made by scripts/trainer-options from the option table; a test finds it stale.
    def __init__(self, spec, dataset, *, batch_size=32, chunk_size=8, max_steps=100, seed=1234,
                 schedule='1f1b', recompute=False, partition='uniform', backend='gloo',
                 precision='fp32', device='cpu', share_gpus=False, loss_scale=None,
                 bucket_elements=262144, zero=0, optimizer='adamw', lr=0.0003, warmup=0,
                 cosine_steps=0, min_lr_ratio=0.1, clip=1.0, weight_decay=0.01, betas=(0.9, 0.999),
                 eps=1e-08, momentum=0.0, dampening=0.0, nesterov=False, sampler='shuffled',
                 loader_workers=0, prefetch_steps=2, loader='processes', on_step=None,
                 eval_dataset=None, eval_every=0, eval_max_samples=0, eval_chunk_size=0,
                 metrics=None, checkpoint_dir=None, checkpoint_every=0, keep_checkpoints=3,
                 async_checkpoints=True, log_every=1, dump_params=None, dump_replica=0, trace=None,
                 **unknown):
        """Makes the trainer; run() trains. The keywords (docs/python.md lists them
        too; None leaves the runtime's default):

        batch_size: global batch in samples (default 32)
        chunk_size: micro-batch size (default 8)
        max_steps: steps to train when mitra run gives no --max-steps (default 100)
        seed: initial weights, sample order and random numbers (default 1234)
        schedule: gpipe | 1f1b | varuna | zb-h1 | interleaved | zb-v (default 1f1b)
        recompute: recompute activations in the backward; varuna always does (default False)
        partition: uniform | params (balances the parameters) | counts such as 1,4,4,3 | counts per
            pipeline such as 1,3/3,1 (default uniform)
        backend: gloo | nccl (nccl: a CUDA build, scripts/gpu-build; default gloo)
        precision: fp32 | bf16 | fp16 (fp16: a GPU only; default fp32)
        device: cpu | cuda (the local rank's GPU; a CUDA build; default cpu)
        share_gpus: cuda: local rank r computes on GPU r mod GPUs, so that ranks may share a GPU
            (tests, small models; default False)
        loss_scale: dynamic loss scaling from this scale (fp16 scales from 65536 anyway)
        bucket_elements: data-parallel gradient bucket size in elements (default 262144)
        zero: 1: each replica keeps the optimizer state of its share of the stage only (ZeRO-1;
            default 0)
        optimizer: sgd | adam | adamw (default adamw), or a factory params -> mitra.Optimizer
        lr: peak learning rate (default 0.0003)
        warmup: linear warm-up steps (default 0)
        cosine_steps: end of the cosine decay (default 0: constant after the warm-up)
        min_lr_ratio: where the cosine ends, as a fraction of lr (default 0.1)
        clip: global gradient-norm clip, 0 or less disables (default 1)
        weight_decay: decoupled for adamw, L2 for sgd and adam (default 0.01)
        betas: adam and adamw (default (0.9, 0.999))
        eps: adam and adamw (default 1e-08)
        momentum: sgd (default 0)
        dampening: sgd (default 0)
        nesterov: sgd with Nesterov momentum (default False)
        sampler: shuffled | sequential (default shuffled), or a factory (size, seed) -> object with
            index_at(position)
        loader_workers: processes (or threads) that run __getitem__ ahead of the step (default 0: on
            the training thread)
        prefetch_steps: how many steps ahead they load (default 2)
        loader: processes | threads (threads: for a __getitem__ that releases the GIL; default
            processes)
        on_step: fn(mitra.StepInfo) after every step the job trains, on the training thread
        eval_dataset: evaluated every eval_every steps and after the last
        eval_every: evaluate every N steps (default 0: only after the last step)
        eval_max_samples: evaluate the first N samples only (default 0: all)
        eval_chunk_size: micro-batch of the evaluation (default 0: the training one)
        metrics: {name: (outputs, batch) -> sum over the micro-batch}
        checkpoint_dir: where checkpoints go when run alone (mitra run sets its own)
        checkpoint_every: save every N steps (default 0: only at the end and on stop)
        keep_checkpoints: complete checkpoints kept, 0: all (default 3)
        async_checkpoints: write checkpoints in the background (default True)
        log_every: a log line every N steps, 0: none (default 1)
        dump_params: after training, write each stage's parameters and buffers to this folder
        dump_replica: which replica dumps them, -1: every one (default 0)
        trace: a chrome trace of one step (the third), per rank (FILE.rank-R.json)
        """
        options = {k: v for k, v in locals().items()
                   if k not in ("self", "spec", "dataset", "unknown")}
        self._start(spec, dataset, options, unknown)
    # END made by scripts/trainer-options

    def _start(self, spec, dataset, options, unknown):
        if unknown:
            raise TypeError(f"mitra.Trainer: unknown option(s) {', '.join(sorted(unknown))}; "
                            f"the options are {', '.join(OPTIONS)}")
        if spec.loss is None:
            raise ValueError("the model has no loss: set spec.loss = fn(outputs, batch) -> the "
                             "sum over the micro-batch's samples")
        self._options = {k: v for k, v in options.items() if v is not None}
        _check_optimizer_settings(self._options)
        metrics = self._options.get("metrics")
        if isinstance(metrics, dict):
            self._options["metrics"] = {name: spec.metric(fn) for name, fn in metrics.items()}
        loading = {name: self._options.pop(name, default)
                   for name, default, _, _ in _PYTHON_OPTIONS}
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
