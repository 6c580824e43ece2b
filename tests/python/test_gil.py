"""Threads and the GIL: a Python worker under `mitra run` whose Python is busy on two threads
while mitra's own threads communicate, checkpoint every step and send heartbeats."""
import glob
import os
import re

from conftest import HERE, PYTHON, run_mitra


def test_python_threads_and_mitras_threads_run_together_without_deadlock(tmp_path):
    (tmp_path / "machines.txt").write_text("localhost slots=2\n")
    r = run_mitra(["run", "--machines", str(tmp_path / "machines.txt"), "--batch-size", "32",
                   "--chunk-size", "8", "--nstages", "2", "--max-steps", "30",
                   "--checkpoint-every", "1", "--run-dir", str(tmp_path / "run"), "--",
                   PYTHON, os.path.join(HERE, "gil_worker.py")], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    logs = sorted(glob.glob(str(tmp_path / "run" / "logs" / "gen-0" / "rank-*.log")))
    assert len(logs) == 2
    for log in logs:
        text = open(log).read()
        found = re.findall(r"background thread iterations: (\d+)", text)
        assert found, text[-2000:]
        # The Python thread ran while the job trained (the job takes over a second; one
        # iteration takes microseconds): the training thread let go of the GIL.
        assert int(found[0]) > 100, log
    assert os.path.isdir(tmp_path / "run" / "checkpoints" / "step-30")
