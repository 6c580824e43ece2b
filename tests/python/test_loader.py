"""Trainer(loader_workers=N): samples loaded ahead in worker processes are the synchronous
path's samples; a loader that raises or dies is a failure with its cause, never a hang; no
loader process outlives its trainer, even a SIGKILLed one."""
import os
import signal
import subprocess
import time

import pytest

from conftest import HERE, PYTHON, losses, run_python

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
