"""Samples loaded ahead: the dataset's __getitem__ in worker processes (or threads), for the
steps that come next on this rank.

mitra knows which samples every step consumes (a pure function of seed and step), so the
runtime tells the loader the indices of the next `prefetch_steps` steps (Dataset::Prefetch in
mitra/worker/data.h) and takes each sample by index as before: a sample is always dataset[index],
from a worker or, when it was not asked for ahead, from the training thread. The samples and
their order are therefore those of the synchronous path in every shape and across morphs.
"""
import concurrent.futures
import ctypes
import multiprocessing
import os
import signal

_dataset = None  # in a worker process: the dataset it loads from


def _end_with_parent():
    """A worker process dies with the training process, even a SIGKILLed one (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's to handle


def _start(dataset):
    global _dataset
    _dataset = dataset
    _end_with_parent()


def _load(index):
    return _dataset[index]


def _ready():
    return os.getpid()


class Loader:
    """Wraps `dataset` for Trainer(loader_workers=N, prefetch_steps=K): the runtime calls
    prefetch(indices) for each coming step and __getitem__(index) for each sample it takes."""

    def __init__(self, dataset, workers, prefetch_steps, kind="processes"):
        if workers < 1 or prefetch_steps < 1:
            raise ValueError(f"loader_workers={workers} and prefetch_steps={prefetch_steps}: "
                             f"both must be at least 1 to load ahead (loader_workers=0 loads "
                             f"on the training thread)")
        if kind not in ("processes", "threads"):
            raise ValueError(f"loader='{kind}': it is 'processes' (the default) or 'threads' "
                             f"(for a __getitem__ that releases the GIL)")
        self.dataset = dataset
        self.prefetch_steps = prefetch_steps
        self.kind = kind
        self._pending = {}  # index -> [future], oldest first
        self._window = []   # the indices of each step told of, oldest first
        if kind == "threads":
            self._pool = concurrent.futures.ThreadPoolExecutor(workers, "mitra-loader")
            self._submit = lambda index: self._pool.submit(dataset.__getitem__, index)
        else:
            # Forked now, before the runtime starts its threads; each holds the dataset.
            self._pool = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("fork"), initializer=_start,
                initargs=(dataset,))
            self._pool.submit(_ready).result()  # a fork context starts every worker at once
            self.pids = set(self._pool._processes)
            self._submit = lambda index: self._pool.submit(_load, index)

    def __len__(self):
        return len(self.dataset)

    def prefetch(self, indices):
        """Starts loading one coming step's samples; forgets the oldest step's beyond the
        window (a morph that changed this rank's share leaves those untaken)."""
        self._window.append(list(indices))
        for index in indices:
            self._pending.setdefault(index, []).append(self._submit(index))
        while len(self._window) > self.prefetch_steps + 1:
            for index in self._window.pop(0):
                futures = self._pending.get(index)
                if futures:
                    futures.pop(0).cancel()
                    if not futures:
                        del self._pending[index]

    def __getitem__(self, index):
        futures = self._pending.get(index)
        if not futures:
            return self.dataset[index]
        future = futures.pop(0)
        if not futures:
            del self._pending[index]
        for step in self._window:  # taken: no longer pending in its step
            if index in step:
                step.remove(index)
                break
        try:
            return future.result()
        except concurrent.futures.process.BrokenProcessPool as e:
            raise RuntimeError(f"a loader worker process died while loading sample {index} "
                               f"(killed, or out of memory): the step cannot have its data; "
                               f"the job goes on from its last checkpoint") from e

    def close(self):
        """Ends the workers without waiting for samples no one will take."""
        for futures in self._pending.values():
            for f in futures:
                f.cancel()
        self._pending.clear()
        self._window.clear()
        if self.kind == "processes":
            for p in list(getattr(self._pool, "_processes", {}).values()):
                p.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)
