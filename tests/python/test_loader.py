"""Trainer(loader_workers=N): samples loaded ahead in worker processes are the synchronous
path's samples; a loader that raises or dies is a failure with its cause, never a hang; no
loader process outlives its trainer, even a SIGKILLed one."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import HERE, PYTHON, losses, run_mitra_editing_machines, run_python

WORKER = os.path.join(HERE, "loader_worker.py")


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def pids_of(path):
    return [int(p) for p in open(path).read().split()]


@pytest.mark.parametrize("extra", [["--workers", "2"], ["--workers", "1"],
                                   ["--workers", "2", "--threads"]],
                         ids=["2 processes", "1 process", "2 threads"])
def test_loaded_ahead_the_job_trains_exactly_as_loaded_on_its_thread(standalone, tmp_path, extra):
    synchronous = run_python([WORKER, "--workers", "0"])
    assert synchronous.returncode == 0, synchronous.stderr
    ahead = run_python([WORKER, "--pids", str(tmp_path / "pids"), *extra])
    assert ahead.returncode == 0, ahead.stderr
    assert losses(ahead.stdout) == losses(synchronous.stdout)  # bit for bit
    assert len(losses(ahead.stdout)) == 6
    if "--threads" not in extra:
        pids = pids_of(tmp_path / "pids")
        assert len(pids) == int(extra[1])
        assert not any(alive(p) for p in pids)  # ended with the training


def test_a_loader_that_raises_ends_the_worker_with_its_traceback(standalone):
    run = run_python([WORKER, "--workers", "2", "--raise-at", "70"], timeout=60)
    assert run.returncode == 1
    assert "sample 70 is damaged" in run.stderr
    assert "loader_worker.py" in run.stderr  # the traceback from the loader process
    assert len(losses(run.stdout)) == 2  # steps 1 and 2 (samples 0-63) trained


def test_a_loader_process_that_dies_is_a_failure_not_a_hang(standalone, tmp_path):
    run = run_python([WORKER, "--workers", "2", "--die-at", "70", "--pids",
                      str(tmp_path / "pids")], timeout=60)
    assert run.returncode == 1
    assert "a loader worker process died while loading sample" in run.stderr
    assert not any(alive(p) for p in pids_of(tmp_path / "pids"))


def test_a_morph_keeps_the_samples_and_leaves_no_loader_behind(standalone, tmp_path):
    """1 x 2 with two loader processes per worker, shrunk to 1 x 1 after step 5: the losses
    are the synchronous 1 x 1 job's, and the loaders of the worker that left are gone."""
    synchronous = run_python([WORKER, "--workers", "0", "--steps", "30"])
    assert synchronous.returncode == 0, synchronous.stderr
    machines = tmp_path / "machines.txt"
    code, out, err = run_mitra_editing_machines(
        ["run", "--machines", str(machines), "--batch-size", "32", "--chunk-size", "8",
         "--nstages", "1", "--max-steps", "30", "--run-dir", str(tmp_path / "run"), "--", PYTHON,
         WORKER, "--workers", "2", "--steps", "30", "--pids", str(tmp_path / "pids")],
        machines, 2, 5, 1)
    assert code == 0, out + err
    assert "mitra: morph done: training again in 1 x 1" in out, out + err
    metrics = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    last = {m["step"]: m["loss"] for m in metrics if "loss" in m}
    assert [last[s] for s in sorted(last)] == pytest.approx(losses(synchronous.stdout),
                                                            abs=2e-5)
    files = list(tmp_path.glob("pids.*"))
    assert len(files) == 2  # one per worker of the first shape
    pids = [p for f in files for p in pids_of(f)]
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_no_loader_process_outlives_a_sigkilled_trainer(standalone, tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    trainer = subprocess.Popen([PYTHON, WORKER, "--workers", "2", "--steps", "100000",
                                "--pids", str(tmp_path / "pids")], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in trainer.stdout:
        if line.startswith("@mitra ") and '"step"' in line:
            break
    pids = pids_of(tmp_path / "pids")
    assert all(alive(p) for p in pids)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)
