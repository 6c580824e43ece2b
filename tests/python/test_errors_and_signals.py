"""A Python exception in any callable ends the worker with exit code 1 and a traceback naming
it; Ctrl-C and SIGUSR1 stop a Python worker after a step, with its checkpoint on disk."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import HERE, PYTHON, records, run_mitra, run_python

WORKER = os.path.join(HERE, "failing_worker.py")


@pytest.mark.parametrize("what,named", [
    ("segment", "the forward of segment 'mid'"),
    ("factory", "the factory of segment 'mid'"),
    ("loss", "the loss"),
    ("dataset", "the dataset's __getitem__("),
    ("sampler", "the sampler's index_at("),
    ("metric", "metric 'accuracy'"),
    ("optimizer", "the optimizer's step()"),
    ("hook", "the step hook (on_step)"),
])
def test_an_exception_ends_the_worker_with_its_traceback_and_what_raised_it(
        standalone, tmp_path, what, named):
    r = run_python([WORKER, "--fail", what], timeout=120, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback (most recent call last):" in r.stderr
    assert f"ValueError: boom in the {what}" in r.stderr
    assert f"mitra: raised in {named}" in r.stderr
    assert f"mitra: a Python exception in {named}" in r.stderr
    assert "raise ValueError(" in r.stderr  # the user's own line, in the traceback


def start_worker(tmp_path, *extra):
    """A standalone worker that trains slowly, with its checkpoints in tmp_path/ck."""
    return subprocess.Popen(
        [PYTHON, WORKER, "--fail", "none", "--steps", "100000", "--checkpoint-dir",
         str(tmp_path / "ck"), "--slow", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))


def wait_for_step(process, step, timeout=60):
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if line.startswith("@mitra") and f'"step":{step},' in line and '"event":"step"' in line:
            return lines
    raise AssertionError("no step %d:\n%s" % (step, "".join(lines)))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGUSR1], ids=["ctrl-c", "sigusr1"])
def test_a_stop_signal_checkpoints_and_exits_zero(standalone, tmp_path, sig):
    worker = start_worker(tmp_path)
    seen = wait_for_step(worker, 3)
    worker.send_signal(sig)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    [stopped] = records("".join(seen) + out, "stopped")
    assert stopped["reason"] == "signal"
    assert os.path.isdir(tmp_path / "ck" / f"step-{stopped['step']}")


def run_failing_job(tmp_path, *extra):
    """`mitra run` of failing_worker.py on one slot, checkpointing every 2 steps, for 8 steps."""
    (tmp_path / "machines.txt").write_text("localhost slots=1\n")
    return run_mitra(["run", "--machines", str(tmp_path / "machines.txt"), "--batch-size", "32",
                      "--chunk-size", "8", "--nstages", "1", "--max-steps", "8",
                      "--checkpoint-every", "2",
                      "--run-dir", str(tmp_path / "run"), "--", PYTHON, WORKER, "--fail", "loss",
                      "--at-step", "5", "--job-step", "--steps", "8", *extra],
                     timeout=180, cwd=tmp_path)


def test_the_same_exception_at_the_same_step_in_two_launches_ends_the_job(tmp_path):
    """Step 5's loss raises in every launch: the relaunch from step 4's checkpoint fails the same
    way, and the job ends after it with the traceback quoted once, not after 5 restarts."""
    r = run_failing_job(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    launches = [json.loads(line) for line in open(tmp_path / "run" / "events.jsonl")
                if '"event":"launch"' in line]
    assert len(launches) == 2, r.stderr
    assert "at the same step, as in the launch before: the program fails the same way at every " \
           "launch, so it is not relaunched again" in r.stderr, r.stderr
    assert r.stderr.count("  | ValueError: boom in the loss") == 1, r.stderr
    assert "mitra: the same error lines as the failure before (in logs/gen-1/rank-0.log)" \
        in r.stderr, r.stderr


def test_an_exception_that_changes_is_retried(tmp_path):
    """Generation 0 raises "boom", generation 1 "bang" at the same step: another failure, so
    the job is relaunched again, and generation 2 trains to the end."""
    r = run_failing_job(tmp_path, "--vary")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ValueError: boom in the loss" in r.stderr and "ValueError: bang in the loss" \
        in r.stderr, r.stderr
    assert "mitra: done: 8 steps" in r.stdout, r.stdout
