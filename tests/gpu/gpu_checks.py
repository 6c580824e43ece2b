#!/usr/bin/env python3
"""The checks of mitra's CUDA path, run on a GPU machine by scripts/gpu-check.

CI has no GPU, so these run only there; each prints PASS, FAIL or SKIP (with why) and the
figures it compared, and all of them land in OUT/checks.json. The tolerances:

* fidelity (fp32, CPU against CUDA, one process each, 8 steps). Both compute the same math in
  another order: cuBLAS and the CPU's BLAS block their sums differently, and the two devices'
  GELU, softmax and layer-norm kernels round alike only to an ulp or so. For the losses that is
  the reordering the CPU fidelity tests allow for (tests/worker/fidelity_test.cc): fp32 sums
  of n terms differ by about n * 2^-24, losses ~5.5 to ~1e-6 relative, so 2e-5 absolute. The
  parameters are not: AdamW divides each gradient by its own running magnitude, so an element
  whose gradient is near zero turns an ulp-level difference into a visible one. The CPU tests'
  2e-6 (4 steps, one device) was exceeded on an H200 (6.69e-6 after 8 steps); the bound here
  is 2e-5, 2% of one step's update at lr 1e-3: a wrong micro-batch, replica or tied gradient
  moves parameters by a sizeable fraction of lr every step. TF32 is off (LibTorch's default
  for matrix products): with it the products themselves would round to 10 bits.
* bf16 and fp16 against fp32 on the GPU: within 2% of the loss after the steps, the bound
  the CPU's bf16 test asserts (docs/gpu.md).
* shapes on one GPU against 1 x 1 on it: the fidelity tolerance again (a shape reorders the
  sums of micro-batches and replicas, nothing else).
"""

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

LOSS_TOL = 2e-5
PARAM_TOL = 2e-5  # across devices; see above
LOW_PRECISION_TOL = 0.02
DEV = "cuda"  # --device: cpu tries the checks' own logic on a machine without a GPU
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GPT_ARGS = ["--model", "bench", "--seed", "77", "--lr", "1e-3"]

results = []


def log(text, logfile):
    logfile.write(text + "\n")
    logfile.flush()


class Checks:
    def __init__(self, build, out, data):
        self.build = build
        self.out = out
        self.work = os.path.join("/tmp", "mitra-gpu-checks")
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.logfile = open(os.path.join(out, "checks.log"), "a")
        self.gpt = os.path.join(build, "bin", "gpt_train")
        self.mitra = os.path.join(build, "bin", "mitra")
        # The Python twin of gpt_train on this build's package (built for this Python's torch).
        self.package = os.path.join(build, "python", "mitra")
        self.python_gpt = [sys.executable, os.path.join(ROOT, "examples", "python", "gpt_train.py")]
        os.environ["PYTHONPATH"] = os.path.join(os.path.abspath(build), "python") + (
            ":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
        self.data = data

    # ---- running programs ------------------------------------------------------------------
    def run(self, name, cmd, timeout=120):
        log(f"$ {' '.join(cmd)}", self.logfile)
        start = time.time()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=timeout)
            rc, text = p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:
            rc, text = 124, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            subprocess.run(["pkill", "-9", "-f", "gpt_train"])  # workers the manager left
        log(text[-20000:], self.logfile)
        log(f"[{name}: exit {rc} after {time.time() - start:.1f} s]", self.logfile)
        return rc, text

    def train(self, name, *args, steps=8, batch=16, chunk=8, timeout=120, program=None):
        cmd = [*(program or [self.gpt]), "--data", self.data, *GPT_ARGS, "--steps", str(steps),
               "--batch-size", str(batch), "--chunk-size", str(chunk), *args]
        rc, text = self.run(name, cmd, timeout)
        steps_seen = []
        for line in text.splitlines():
            if line.startswith("@mitra "):
                rec = json.loads(line[len("@mitra "):])
                if rec.get("event") == "step":
                    steps_seen.append(rec)
        return rc, text, steps_seen

    def mitra_run(self, name, slots, stages, gpt_args, steps=8, batch=16, chunk=8,
                  flags=(), timeout=180, program=None):
        run_dir = os.path.join(self.work, name)
        machines = os.path.join(self.work, name + ".machines")
        with open(machines, "w") as f:
            f.write(f"localhost slots={slots}\n")
        cmd = [self.mitra, "run", "--machines", machines, "--batch-size", str(batch),
               "--nstages", str(stages), "--chunk-size", str(chunk), "--max-steps", str(steps),
               "--run-dir", run_dir, *flags, "--", *(program or [self.gpt]), "--data", self.data,
               *GPT_ARGS, *gpt_args]
        rc, text = self.run(name, cmd, timeout)
        return rc, text, self.metrics(run_dir)

    @staticmethod
    def metrics(run_dir):
        path = os.path.join(run_dir, "metrics.jsonl")
        if not os.path.exists(path):
            return {}
        losses = {}
        for line in open(path):
            rec = json.loads(line)
            if "loss" in rec and "step" in rec and rec.get("event", "step") == "step":
                losses[rec["step"]] = rec["loss"]  # a step trained again: the last one
        return losses

    # ---- verdicts --------------------------------------------------------------------------
    def verdict(self, name, ok, detail):
        status = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
        results.append({"check": name, "status": status, "detail": detail})
        line = f"{status} {name}: {detail}"
        print(line, flush=True)
        log(line, self.logfile)

    def needs(self, *paths):
        missing = [p for p in paths if not os.path.exists(p)]
        return f"not built: {', '.join(missing)}" if missing else None


def loss_gap(a, b):
    common = sorted(set(a) & set(b))
    if not common:
        return None, 0
    return max(abs(a[s] - b[s]) for s in common), len(common)


def by_step(records):
    return {r["step"]: r["loss"] for r in records}


def param_gap(dir_a, dir_b):
    import torch
    worst, count = 0.0, 0
    for path in sorted(glob.glob(os.path.join(dir_a, "*.pt"))):
        other = os.path.join(dir_b, os.path.basename(path))
        a, b = (torch.load(f, map_location="cpu", weights_only=False) for f in (path, other))
        for key in a:
            worst = max(worst, (a[key].double() - b[key].double()).abs().max().item())
            count += 1
    return worst, count


def fidelity(c):
    name = "fidelity_fp32_1x1_cuda_vs_cpu"
    if (why := c.needs(c.gpt)):
        return c.verdict(name, None, why)
    runs = {}
    for device in ("cpu", DEV):
        dump = os.path.join(c.work, "dump-" + device)
        rc, text, steps = c.train(name + "_" + device, "--device", device, "--dump-params", dump)
        if rc != 0 or len(steps) != 8:
            return c.verdict(name, False, f"{device}: exit {rc}, {len(steps)} steps: "
                             + text.strip().splitlines()[-1][:300] if text.strip() else "")
        runs[device] = (by_step(steps), dump, steps)
    gap, n = loss_gap(runs["cpu"][0], runs[DEV][0])
    pgap, tensors = param_gap(runs["cpu"][1], runs[DEV][1])
    cpu_s = sorted(r["step_time_s"] for r in runs["cpu"][2][2:])[2]
    gpu_s = sorted(r["step_time_s"] for r in runs[DEV][2][2:])[2]
    c.verdict(name, gap <= LOSS_TOL and pgap <= PARAM_TOL and tensors > 0,
              f"{n} steps: largest loss difference {gap:.2e} (<= {LOSS_TOL}), largest parameter "
              f"difference {pgap:.2e} over {tensors} tensors (<= {PARAM_TOL}); "
              f"last loss cpu {runs['cpu'][0][8]:.6f} cuda {runs[DEV][0][8]:.6f}; median step "
              f"cpu {cpu_s:.4f} s, cuda {gpu_s:.4f} s")
    return runs[DEV][0]


def precision(c, fp32):
    for prec in ("bf16", "fp16"):
        name = f"{prec}_cuda_vs_fp32_cuda"
        if (why := c.needs(c.gpt)) or not fp32:
            c.verdict(name, None, why or "no fp32 CUDA run")
            continue
        rc, text, steps = c.train(name, "--device", DEV, "--precision", prec)
        if rc != 0 or len(steps) != 8:
            c.verdict(name, False, f"exit {rc}, {len(steps)} steps: {text.strip()[-300:]}")
            continue
        low = by_step(steps)
        rel = abs(low[8] - fp32[8]) / fp32[8]
        skipped = sum(1 for r in steps if r.get("skipped"))
        c.verdict(name, rel <= LOW_PRECISION_TOL,
                  f"after 8 steps {prec} {low[8]:.5f}, fp32 {fp32[8]:.5f} ({rel * 100:.3f}%, "
                  f"<= 2%); skipped steps {skipped}")
    # A forced overflow: fp16 from a loss scale of 2^40 overflows until the scale halves to fit.
    name = "fp16_overflow_skips_and_recovers"
    if (why := c.needs(c.gpt)):
        return c.verdict(name, None, why)
    rc, text, steps = c.train(name, "--device", DEV, "--precision", "fp16",
                              "--loss-scale", str(2.0 ** 40), steps=40)
    skipped = [r["step"] for r in steps if r.get("skipped")]
    scales = [r.get("loss_scale") for r in steps]
    trained = [r for r in steps if not r.get("skipped")]
    # The first steps overflow and skip, each halving the scale, until one fits; then the job
    # trains. A later skip is the scaler at work too (fp16 overflowing once more after the
    # scale grew, or the forward itself), so it is reported, not refused.
    first_trained = trained[0]["step"] if trained else None
    halved = all(scales[i + 1] == scales[i] / 2 for i in range(len(steps) - 1)
                 if steps[i].get("skipped") and steps[i]["step"] < (first_trained or 0))
    later = [s for s in skipped if first_trained and s > first_trained]
    ok = rc == 0 and first_trained is not None and first_trained > 1 and halved and \
        skipped[:first_trained - 1] == list(range(1, first_trained)) and len(trained) >= 10 and \
        trained[-1]["loss"] < trained[0]["loss"]
    c.verdict(name, ok, f"exit {rc}; steps 1-{(first_trained or 1) - 1} skipped, halving the scale "
              f"{scales[0]:.0f} -> {scales[(first_trained or 1) - 1]:.0f}; then trained "
              f"{len(trained)} steps, loss {trained[0]['loss'] if trained else None} -> "
              f"{trained[-1]['loss'] if trained else None}; later skips {later}")


def checkpoints_across_devices(c):
    for first, then in ((DEV, "cpu"), ("cpu", DEV)):
        name = f"checkpoint_{first}_then_{then}"
        if (why := c.needs(c.gpt)):
            c.verdict(name, None, why)
            continue
        ref_rc, _, ref = c.train(name + "_uninterrupted", "--device", then)
        ckpt = os.path.join(c.work, "ckpt-" + name)
        shutil.rmtree(ckpt, ignore_errors=True)
        rc1, _, a = c.train(name + "_a", "--device", first, "--checkpoint-dir", ckpt, steps=4)
        rc2, text, b = c.train(name + "_b", "--device", then, "--checkpoint-dir", ckpt, steps=8)
        resumed = "resumed from" in text
        gap, n = loss_gap(by_step(b), by_step(ref))
        ok = rc1 == 0 and rc2 == 0 and ref_rc == 0 and resumed and n == 4 and gap <= LOSS_TOL
        c.verdict(name, ok, f"4 steps on {first}, resumed on {then} ({resumed}): steps 5-8 against "
                  f"an uninterrupted {then} job: {n} compared, largest difference "
                  f"{gap if gap is None else f'{gap:.2e}'} (<= {LOSS_TOL})")


SHAPES = [("2x1_gloo", 2, 2, ["--backend", "gloo"]),
          ("1x2_gloo", 2, 1, ["--backend", "gloo"]),
          ("1x1_nccl", 1, 1, ["--backend", "nccl"])]


def shapes(c, one, cases, timeout=180):
    """Multi-rank shapes on the one GPU, each against 1 x 1 on it."""
    for label, slots, stages, extra in cases:
        name = "shape_" + label
        if (why := c.needs(c.gpt, c.mitra)) or not one:
            c.verdict(name, None, why or "no 1x1 CUDA run")
            continue
        rc, text, losses = c.mitra_run(name, slots, stages,
                                       ["--device", DEV, "--share-gpus", *extra],
                                       flags=["--timeout", "20", "--max-restarts", "0"],
                                       timeout=timeout)
        gap, n = loss_gap(losses, one)
        tail = " | ".join(l for l in text.strip().splitlines()[-3:])[-400:]
        c.verdict(name, rc == 0 and n == 8 and gap <= LOSS_TOL,
                  f"exit {rc}, {n} steps against 1x1 cuda, largest difference "
                  f"{gap if gap is None else f'{gap:.2e}'}; last lines: {tail}")


def nccl_sharing_refused(c):
    """NCCL runs one rank of a communicator per GPU (two on one GPU abort at the first
    collective, "invalid usage"): a second rank on the one GPU is refused before it starts,
    exit code 2 with the fix, for each shape."""
    for label, stages in (("2x1", 2), ("1x2", 1)):
        name = f"nccl_{label}_on_one_gpu_refused_with_the_fix"
        if (why := c.needs(c.gpt, c.mitra)):
            c.verdict(name, None, why)
            continue
        rc, text, _ = c.mitra_run(name, 2, stages, ["--device", DEV, "--share-gpus", "--backend",
                                                    "nccl"],
                                  flags=["--timeout", "20", "--max-restarts", "0"], timeout=60)
        lines = [l for l in text.splitlines() if "one rank per GPU" in l][:1]
        c.verdict(name, rc == 2 and bool(lines), f"exit {rc}: {' | '.join(lines)[-400:]}")


def elastic(c, name="morph_and_recovery_on_cuda", program=None, steps=600):
    """A shrink that keeps the worker, a SIGKILL recovered from the checkpoint and a grow that
    heals from the kept rank, on the GPU, against the uninterrupted 1 x 1 job."""
    program = program or [c.gpt]
    if (why := c.needs(program[-1], c.mitra)):
        return c.verdict(name, None, why)
    gpt = ["--device", DEV, "--share-gpus"]
    rc, _, ref = c.mitra_run(name + "_uninterrupted", 1, 1, gpt, steps=steps, chunk=8,
                             program=program)
    run_dir = os.path.join(c.work, name)
    machines = os.path.join(c.work, name + ".machines")
    with open(machines, "w") as f:
        f.write("localhost slots=2\n")
    cmd = [c.mitra, "run", "--machines", machines, "--batch-size", "16", "--nstages", "1",
           "--chunk-size", "8", "--max-steps", str(steps), "--run-dir", run_dir,
           "--checkpoint-every", "25", "--timeout", "20", "--", *program, "--data", c.data,
           *GPT_ARGS, *gpt]
    log("$ " + " ".join(cmd), c.logfile)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    events = []

    def newest_step():
        return max(c.metrics(run_dir) or {0: 0})

    def wait_step(n, limit=60):
        end = time.time() + limit
        while time.time() < end and proc.poll() is None:
            if newest_step() >= n:
                return True
            time.sleep(0.05)
        return False

    def launch_pids():
        path = os.path.join(run_dir, "events.jsonl")
        pids = []
        for line in open(path):
            rec = json.loads(line)
            if rec.get("event") == "launch":
                pids = rec.get("pids", [])
        return pids

    ok = wait_step(steps // 12)
    with open(machines, "w") as f:
        f.write("localhost slots=1\n")  # shrink: 1 x 2 -> 1 x 1, the worker kept
    events.append("shrink after step %d" % newest_step())
    ok = ok and wait_step(steps // 3)
    pids = [p for p in launch_pids() if p] if ok else []
    if pids:
        try:
            os.kill(pids[0], signal.SIGKILL)  # the only rank: recovered from the checkpoint
            events.append("SIGKILL pid %d after step %d" % (pids[0], newest_step()))
        except ProcessLookupError:
            events.append("pid %d gone before its SIGKILL" % pids[0])
    ok = ok and wait_step(2 * steps // 3)
    with open(machines, "w") as f:
        f.write("localhost slots=2\n")  # grow: 1 x 1 -> 1 x 2, the new rank's state from a peer
    events.append("grow after step %d" % newest_step())
    try:
        text, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        text, _ = proc.communicate()
    log(text[-20000:], c.logfile)
    losses = c.metrics(run_dir)
    gap, n = loss_gap(losses, ref)
    lines = [l for l in text.splitlines() if "morph done" in l or "recover" in l or "state:" in l]
    c.verdict(name, proc.returncode == 0 and ok and n == steps and gap <= LOSS_TOL,
              f"exit {proc.returncode}; {'; '.join(events)}; {n} steps against the uninterrupted "
              f"1x1, largest difference {gap if gap is None else f'{gap:.2e}'}; "
              + " | ".join(lines)[-700:])


def python_package(c):
    """The Python package built against this machine's torch imports (its build check passes),
    and the Python GPT trains on CUDA as the C++ gpt_train does from the same seed: the same
    layers from the same generator, the same LibTorch operators on the same samples, so the
    same losses and parameters bit for bit in fp32, and in bf16 (where the same casts round
    alike) within the precision checks' bound at least. Then the Python GPT under mitra run
    through a shrink, a SIGKILL and a grow."""
    name = "python_package_imports"
    if (why := c.needs(c.package)):
        return c.verdict(name, None, why)
    rc, text = c.run(name, [sys.executable, "-c", "import mitra, torch; print('mitra', "
                            "mitra.__file__, 'torch', torch.__version__)"])
    c.verdict(name, rc == 0, f"exit {rc}: {text.strip()[-400:]}")
    if rc != 0:
        return
    python_trains = True
    for prec in ("fp32", "bf16"):
        name = f"python_gpt_equals_cpp_gpt_{prec}_cuda"
        dumps = {who: os.path.join(c.work, f"dump-{who}-{prec}") for who in ("cpp", "python")}
        rc_c, text_c, cpp = c.train(name + "_cpp", "--device", DEV, "--precision", prec,
                                    "--dump-params", dumps["cpp"])
        rc_p, text_p, py = c.train(name + "_python", "--device", DEV, "--precision", prec,
                                   "--dump-params", dumps["python"], program=c.python_gpt)
        python_trains = python_trains and rc_p == 0
        if rc_c != 0 or rc_p != 0 or len(cpp) != 8 or len(py) != 8:
            c.verdict(name, False, f"C++ exit {rc_c}, {len(cpp)} steps; Python exit {rc_p}, "
                      f"{len(py)} steps: {(text_p if rc_p else text_c).strip()[-400:]}")
            continue
        gap, n = loss_gap(by_step(py), by_step(cpp))
        pgap, tensors = param_gap(dumps["python"], dumps["cpp"])
        last_c, last_p = by_step(cpp)[8], by_step(py)[8]
        # Bit for bit is what the two programs should give; the bound asserted is the fidelity
        # checks' (fp32) and the precision checks' (bf16), so that the figures always print.
        ok = gap <= LOSS_TOL and pgap <= PARAM_TOL and tensors > 0 if prec == "fp32" else \
            abs(last_p - last_c) / last_c <= LOW_PRECISION_TOL
        same = "bit for bit" if gap == 0 and pgap == 0 else "not bit for bit"
        c.verdict(name, ok, f"{n} steps, {same}: largest loss difference {gap:.2e}, largest "
                  f"parameter difference {pgap:.2e} over {tensors} tensors (fp32 <= {LOSS_TOL}"
                  f" and {PARAM_TOL}; bf16 within 2%); last loss C++ {last_c:.6f} Python "
                  f"{last_p:.6f}")
    if not python_trains:
        return c.verdict("python_morph_and_recovery_on_cuda", None,
                         "the Python GPT did not train alone")
    elastic(c, "python_morph_and_recovery_on_cuda", program=c.python_gpt, steps=300)


def dropout(c, timeout=180):
    """Dropout on CUDA draws from the CUDA generator, seeded per (step, micro-batch, segment) like
    the CPU's: 2 x 1 and a 1 x 1 that recomputes its forward in the backward give the 1 x 1
    job's losses. Unseeded, the stages of 2 x 1 would draw other masks than 1 x 1's one
    process, and a recomputed forward other masks than the forward it replaces."""
    name = "dropout_cuda_shapes_and_recompute"
    if (why := c.needs(c.gpt, c.mitra)):
        return c.verdict(name, None, why)
    drop = ["--device", DEV, "--dropout", "0.1"]
    rc, text, one = c.train(name + "_1x1", *drop)
    if rc != 0 or len(one) != 8:
        return c.verdict(name, False, f"1x1: exit {rc}, {len(one)} steps: {text.strip()[-300:]}")
    one = by_step(one)
    rc_r, text_r, rec = c.train(name + "_1x1_recompute", *drop, "--recompute")
    rc_s, text_s, two = c.mitra_run(name + "_2x1", 2, 2, [*drop, "--share-gpus", "--backend",
                                                         "gloo"],
                                    flags=["--timeout", "20", "--max-restarts", "0"],
                                    timeout=timeout)
    gap_r, n_r = loss_gap(by_step(rec), one)
    gap_s, n_s = loss_gap(two, one)
    # Dropout changes the loss by far more than the tolerance: with other masks the check fails.
    fmt = lambda g: g if g is None else f"{g:.2e}"
    c.verdict(name, rc_r == 0 and rc_s == 0 and n_r == 8 and n_s == 8 and gap_r <= LOSS_TOL
              and gap_s <= LOSS_TOL,
              f"dropout 0.1 against 1x1 cuda over 8 steps: 1x1 recomputing exit {rc_r}, "
              f"{n_r} steps, largest difference {fmt(gap_r)}; 2x1 exit {rc_s}, {n_s} steps, "
              f"largest difference {fmt(gap_s)} (<= {LOSS_TOL}); last loss 1x1 {one[8]:.6f}")


def planned_job_refused(c):
    """The profiler measures segments on the CPU: a job on a GPU without --nstages is refused
    with the fix (exit code 2) rather than planned from a CPU profile."""
    name = "planned_job_on_gpu_refused_with_the_fix"
    if (why := c.needs(c.gpt, c.mitra)):
        return c.verdict(name, None, why)
    run_dir = os.path.join(c.work, name)
    machines = os.path.join(c.work, name + ".machines")
    with open(machines, "w") as f:
        f.write("localhost slots=1\n")
    rc, text = c.run(name, [c.mitra, "run", "--machines", machines, "--batch-size", "16",
                            "--max-steps", "8", "--run-dir", run_dir, "--timeout", "60", "--",
                            c.gpt, "--data", c.data, *GPT_ARGS, "--device", DEV], timeout=180)
    fix = "--nstages" in text
    lines = [l for l in text.splitlines() if "nstages" in l][:2]
    c.verdict(name, rc == 2 and fix, f"exit {rc}: {' | '.join(lines)[-400:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build-gpu")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    parser.add_argument("--data", default="/usr/share/games/fortunes")
    parser.add_argument("--only", default="", help="comma-separated: fidelity,bench,precision,"
                        "checkpoints,shapes,elastic,dropout,plan,python")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    global DEV
    DEV = args.device
    os.makedirs(args.out, exist_ok=True)
    c = Checks(args.build, args.out, args.data)
    only = set(filter(None, args.only.split(",")))
    want = lambda k: not only or k in only
    one = fidelity(c) if want("fidelity") or want("precision") or want("shapes") else None
    if want("bench") and os.path.exists(c.gpt):
        bench = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "..",
                                                             "bench", "gpu.py"),
                                "--build", c.build, "--data", c.data],
                               stdout=subprocess.PIPE, stderr=c.logfile, text=True)
        with open(os.path.join(c.out, "bench.json"), "w") as f:
            f.write(bench.stdout)
        print("bench: " + bench.stdout.strip(), flush=True)
    if want("precision"):
        precision(c, one)
    if want("checkpoints"):
        checkpoints_across_devices(c)
    if want("shapes"):
        shapes(c, one, SHAPES)
    if want("elastic"):
        elastic(c)
    if want("dropout"):
        dropout(c)
    if want("plan"):
        planned_job_refused(c)
    if want("python"):
        python_package(c)
    if want("shapes"):
        nccl_sharing_refused(c)
    with open(os.path.join(args.out, "checks.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps({s: sum(r["status"] == s for r in results) for s in ("PASS", "FAIL", "SKIP")}))


if __name__ == "__main__":
    sys.exit(main())
