#!/usr/bin/python3
"""Checkpoint save and load speed against the disk's own speed, in one run.

For the `bench` GPT (1.6 M parameters) and the `large` GPT (~101 M parameters) it runs
`mitra run` 1x1 with a checkpoint after every step and reads the workers' records:
  blocked_s   the training loop blocked by an asynchronous save (tensors copied to memory);
              first_blocked_s is the first save, which also allocates the staging buffers
  sync_s      a synchronous save: the final one, from snapshot to manifest renamed
  write MB/s  checkpoint bytes / sync_s
  load_s      restoring the checkpoint on resume (each tensor read into place, CRC-32C checked)
and in the same run measures the disk with dd: sequential write of the same number of bytes
with fsync (conv=fsync), and a read of the checkpoint files with cat (page cache warm, as for
the load). Prints one JSON line per model. Targets: blocked <= 10% of sync; write >= 50% of dd.

  bench/checkpoint.py [--build build] [--dir /tmp]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def records(log, event):
    out = []
    with open(log) as f:
        for line in f:
            if line.startswith("@mitra ") and f'"event":"{event}"' in line:
                out.append(json.loads(line[7:]))
    return out


def mitra(args, tmp, run_dir, model, batch, chunk, steps):
    machines = os.path.join(tmp, "machines.txt")
    with open(machines, "w") as f:
        f.write("localhost slots=1\n")
    cmd = [f"{args.build}/bin/mitra", "run", "--machines", machines, "--batch-size", str(batch),
           "--chunk-size", str(chunk), "--max-steps", str(steps), "--checkpoint-every", "1",
           "--keep-checkpoints", "2", "--run-dir", run_dir, "--",
           f"{args.build}/bin/gpt_train", "--model", model]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-3000:])
    gens = sorted(os.listdir(os.path.join(run_dir, "logs")))
    return os.path.join(run_dir, "logs", gens[-1], "rank-0.log")


def dd_write(path, nbytes):
    mb = max(1, nbytes // (1 << 20))
    out = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mb}",
                          "conv=fsync"], stderr=subprocess.PIPE, text=True, check=True).stderr
    seconds = float(re.search(r"([0-9.]+) s,", out).group(1))
    os.remove(path)
    return mb * (1 << 20) / seconds / 1e6


def read_files(directory):
    start = time.perf_counter()
    total = 0
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total / (time.perf_counter() - start) / 1e6


def measure(args, model, batch, chunk):
    tmp = tempfile.mkdtemp(dir=args.dir, prefix="mitra-ckpt-bench-")
    try:
        run_dir = os.path.join(tmp, "run")
        log = mitra(args, tmp, run_dir, model, batch, chunk, steps=3)
        # Steps 1 and 2: asynchronous (step 1 allocates the staging buffers, step 2 reuses
        # them, as every later save does); step 3: the final save, synchronous.
        saves = records(log, "checkpoint")
        ckpt = os.path.join(run_dir, "checkpoints", "step-3")
        nbytes = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))
        dd = dd_write(os.path.join(tmp, "dd.bin"), nbytes)
        read = read_files(ckpt)
        log = mitra(args, tmp, run_dir, model, batch, chunk, steps=4)
        load_s = records(log, "restored")[0]["seconds"]
        sync_s = saves[-1]["total_s"]
        return {
            "bench": "checkpoint", "model": model, "bytes": nbytes,
            "first_blocked_s": round(saves[0]["blocked_s"], 4),
            "blocked_s": round(saves[1]["blocked_s"], 4),
            "async_total_s": round(saves[1]["total_s"], 3),
            "sync_s": round(sync_s, 3),
            "blocked_over_sync": round(saves[1]["blocked_s"] / sync_s, 4),
            "write_MBps": round(nbytes / sync_s / 1e6, 1),
            "dd_write_MBps": round(dd, 1),
            "write_over_dd": round(nbytes / sync_s / 1e6 / dd, 3),
            "load_s": round(load_s, 3),
            "load_MBps": round(nbytes / load_s / 1e6, 1),
            "read_MBps": round(read, 1),
            "load_over_read": round(nbytes / load_s / 1e6 / read, 3),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--dir", default=tempfile.gettempdir(), help="where checkpoints are written")
    args = p.parse_args()
    for model, batch, chunk in (("bench", 32, 8), ("large", 1, 1)):
        print(json.dumps(measure(args, model, batch, chunk)), flush=True)


if __name__ == "__main__":
    main()
