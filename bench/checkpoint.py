#!/usr/bin/python3
"""Checkpoint save and load speed against the disk's own speed, in one run.

For the `bench` GPT (1.6 M parameters) and the `large` GPT (~101 M parameters) it runs
`mitra run` 1x1 with a checkpoint after every step and reads the workers' records:
  blocked_s   the training loop blocked by an asynchronous save (tensors copied to memory);
              first_blocked_s is the first save, which also allocates the staging buffers
  sync_s      a synchronous save: the final one, from snapshot to manifest renamed
  write MB/s  checkpoint bytes / sync_s
  load_s      restoring the checkpoint on resume (each tensor read into place, CRC-32C checked)
and in the same run measures the disk with dd: files of the checkpoint's sizes written next to
it, each fsynced (conv=fsync), once through the page cache (dd_write_MBps) and once around it
(oflag=direct, dd_direct_MBps); write_over_dd compares with the faster of the two. The read
baseline reads the checkpoint's files (page cache warm, as for the load) into newly mapped
memory, as any loader must (read_MBps); read_cached_MBps reads them into one reused buffer.
Prints one JSON line per model. Targets: blocked <= 10% of sync; write >= 50% of dd; load
>= 50% of read.

  bench/checkpoint.py [--build build] [--dir /tmp]
"""
import argparse
import json
import mmap
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
           "--nstages", "1", "--chunk-size", str(chunk), "--max-steps", str(steps), "--checkpoint-every", "1",
           "--keep-checkpoints", "2", "--run-dir", run_dir, "--",
           f"{args.build}/bin/gpt_train", "--model", model]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-3000:])
    gens = sorted(os.listdir(os.path.join(run_dir, "logs")))
    return os.path.join(run_dir, "logs", gens[-1], "rank-0.log")


def dd_write(directory, sizes, direct):
    """dd writing files of the given sizes into `directory`, each fsynced (conv=fsync), as the
    checkpoint's files are; through the page cache, or around it (oflag=direct). MB/s."""
    start = time.perf_counter()
    for i, size in enumerate(sizes):
        path = os.path.join(directory, f"dd-{i}.bin")
        cmd = ["dd", "if=/dev/zero", f"of={path}", "bs=4M", f"count={size}", "iflag=count_bytes",
               "conv=fsync"] + (["oflag=direct"] if direct else [])
        subprocess.run(cmd, stderr=subprocess.PIPE, check=True)
    seconds = time.perf_counter() - start
    for i in range(len(sizes)):
        os.remove(os.path.join(directory, f"dd-{i}.bin"))
    return sum(sizes) / seconds / 1e6


def read_files(directory, fresh):
    """Reads every file of `directory` (page cache warm, as for the load): into one reused
    1 MB buffer, or (fresh) each file into newly mapped memory of its size, as any loader must
    put a checkpoint into memory it allocates. MB/s."""
    names = sorted(os.listdir(directory))
    for name in names:  # warm the page cache
        with open(os.path.join(directory, name), "rb") as f:
            while f.read(1 << 20):
                pass
    start = time.perf_counter()
    total = 0
    for name in names:
        with open(os.path.join(directory, name), "rb", buffering=0) as f:
            if fresh:
                size = os.fstat(f.fileno()).st_size
                memory = mmap.mmap(-1, max(size, 1))
                view = memoryview(memory)
                got = 0
                while got < size and (n := f.readinto(view[got:size])):
                    got += n
                total += got
                view.release()
                memory.close()
            else:
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
        sizes = [os.path.getsize(os.path.join(ckpt, f)) for f in sorted(os.listdir(ckpt))]
        nbytes = sum(sizes)
        dd_dir = os.path.join(run_dir, "checkpoints", "dd")
        os.mkdir(dd_dir)
        dd_cached = dd_write(dd_dir, sizes, direct=False)
        dd_direct = dd_write(dd_dir, sizes, direct=True)
        os.rmdir(dd_dir)
        dd = max(dd_cached, dd_direct)
        read_cached = read_files(ckpt, fresh=False)
        read = read_files(ckpt, fresh=True)
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
            "dd_write_MBps": round(dd_cached, 1),
            "dd_direct_MBps": round(dd_direct, 1),
            "write_over_dd": round(nbytes / sync_s / 1e6 / dd, 3),
            "load_s": round(load_s, 3),
            "load_MBps": round(nbytes / load_s / 1e6, 1),
            "read_cached_MBps": round(read_cached, 1),
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
