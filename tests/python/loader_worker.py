#!/usr/bin/python3
"""models.py's MLP on a dataset whose __getitem__ costs --cost-ms, loaded by --workers loader
processes (0: on the training thread). --raise-at I: __getitem__(I) raises in a loader;
--die-at I: the loader process loading I kills itself; --pids FILE: the loader processes' pids
are written there (FILE.<pid> under `mitra run`, a file per worker); --sleep-after S: the trainer's process lingers S s after training (so a test
can kill it while its loaders live)."""
import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mitra  # noqa: E402
from models import Blobs, mlp_spec  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=0)
p.add_argument("--threads", action="store_true")
p.add_argument("--steps", type=int, default=6)
p.add_argument("--cost-ms", type=float, default=2.0)
p.add_argument("--raise-at", type=int, default=-1)
p.add_argument("--die-at", type=int, default=-1)
p.add_argument("--pids", default=None)
p.add_argument("--step-hook-kill", action="store_true")
args = p.parse_args()
main_pid = os.getpid()


class Costly(Blobs):
    def __getitem__(self, i):
        time.sleep(args.cost_ms / 1000)
        in_loader = os.getpid() != main_pid
        if i == args.raise_at and in_loader:
            raise ValueError(f"sample {i} is damaged")
        if i == args.die_at and in_loader:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(i)


trainer = mitra.Trainer(mlp_spec(), Costly(), batch_size=32, chunk_size=8, max_steps=args.steps,
                        lr=0.05, sampler="sequential", loader_workers=args.workers,
                        loader="threads" if args.threads else "processes")
if args.pids and trainer._loader is not None and trainer._loader.kind == "processes":
    managed = any(k.startswith("MITRA_") and k != "MITRA_THREADS" for k in os.environ)
    with open(f"{args.pids}.{os.getpid()}" if managed else args.pids, "w") as f:
        f.write(" ".join(str(p) for p in sorted(trainer._loader.pids)))
sys.exit(trainer.run())
