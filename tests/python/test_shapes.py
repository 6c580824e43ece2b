"""A Python model with BatchNorm and dropout trains the same in every shape under `mitra run`:
the losses, the evaluations, and the parameters and BatchNorm buffers at the end; and the same
when a morph regroups a worker whose model was built once for the process (from_sequential)."""
import json
import os
import subprocess

import pytest
import torch

from conftest import HERE, MITRA_BINARY, PYTHON, run_mitra

# fp32 sums in another order (tests/worker/fidelity_test.cc derives these for the GPT; the
# MLP's sums are shorter).
LOSS_TOLERANCE = 2e-5
TENSOR_TOLERANCE = 2e-6


def command(folder, stages, steps, *extra):
    return ["run", "--machines", str(folder / "machines.txt"), "--batch-size", "32",
            "--chunk-size", "8", "--nstages", str(stages), "--max-steps", str(steps),
            "--run-dir", str(folder / "run"), "--", PYTHON, os.path.join(HERE, "mlp_worker.py"),
            "--batchnorm", "--dropout", "0.2", "--steps", str(steps), "--dump",
            str(folder / "dump"), *extra]


def results(folder):
    metrics = [json.loads(line) for line in open(folder / "run" / "metrics.jsonl")]
    state = {}
    for f in sorted(os.listdir(folder / "dump")):
        state.update(torch.load(folder / "dump" / f, weights_only=True))
    return metrics, state


def train(tmp_path, name, slots, stages, steps=12, *extra):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "machines.txt").write_text(f"localhost slots={slots}\n")
    r = run_mitra(command(folder, stages, steps, *extra), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return results(folder)


def expect_same(one_metrics, one_state, metrics, state):
    assert [m["step"] for m in metrics if "loss" in m] == [m["step"] for m in one_metrics
                                                           if "loss" in m]
    for a, b in zip(one_metrics, metrics):
        for key in ("loss", "eval_loss", "eval_accuracy"):
            if key in a:
                assert b[key] == pytest.approx(a[key], abs=LOSS_TOLERANCE), (key, a.get("step"))
    assert set(state) == set(one_state)
    assert any(name.endswith("norm.running_mean") for name in state)
    for name, value in one_state.items():
        assert torch.allclose(state[name].double(), value.double(), atol=TENSOR_TOLERANCE), name


@pytest.mark.parametrize("slots,stages", [(2, 1), (2, 2)], ids=["1x2", "2x1"])
def test_batchnorm_and_dropout_train_the_same_in_another_shape(tmp_path, slots, stages):
    one_metrics, one_state = train(tmp_path, "one", 1, 1)
    expect_same(one_metrics, one_state, *train(tmp_path, "other", slots, stages))


def test_a_worker_kept_by_a_shrink_trains_its_process_wide_model_on(tmp_path):
    one = train(tmp_path, "one", 1, 1, 40, "--sequential", "--slow")
    folder = tmp_path / "shrunk"
    folder.mkdir()
    (folder / "machines.txt").write_text("localhost slots=2\n")
    mitra = subprocess.Popen([MITRA_BINARY] + command(folder, 1, 40, "--sequential", "--slow"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in mitra.stdout:
        if line.startswith("step 3/"):
            break
    (folder / "machines.new").write_text("localhost slots=1\n")
    os.rename(folder / "machines.new", folder / "machines.txt")
    out, err = mitra.communicate(timeout=180)
    assert mitra.returncode == 0, out + err
    assert "mitra: morph done: training again in 1 x 1" in out, out + err
    assert "1 worker kept, 0 started" in out, out
    expect_same(*one, *results(folder))
