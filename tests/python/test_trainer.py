"""Trainer.run() alone (1 x 1, in this process): one storage with the Python modules,
BatchNorm buffers and Python optimizers in checkpoints, export and InferenceModel."""
import inspect
import json
import os
import re
import subprocess

import pytest
import torch
from torch import nn

import mitra
from conftest import HERE, MITRA_BINARY, SOURCE_DIR, losses, records, run_python
from models import Blobs, correct, mlp_spec

COMMON = dict(batch_size=32, chunk_size=8, lr=0.05, seed=3, log_every=0)


def train(capfd, spec, **options):
    code = mitra.Trainer(spec, Blobs(), **dict(COMMON, **options)).run()
    out, err = capfd.readouterr()
    assert code == 0, err
    return out


def test_the_modules_parameters_are_the_tensors_the_runtime_trains(standalone, capfd, tmp_path):
    built = []
    spec = mlp_spec(built=built)
    train(capfd, spec, max_steps=5, dump_params=str(tmp_path))
    dumped = torch.load(tmp_path / "stage-0.pt", weights_only=True)
    assert len(built) == 3
    modules = dict(zip(["inp", "mid", "out"], built))
    for name, module in modules.items():
        for key, value in module.state_dict().items():
            assert torch.equal(dumped[f"{name}.{key}"], value), f"{name}.{key}"
    fresh = []
    mitra.Trainer(mlp_spec(built=fresh), Blobs(), **COMMON)  # builds nothing before run()
    assert fresh == []


def test_the_loss_falls_and_a_from_sequential_model_trains(standalone, capfd):
    spec = mitra.ModelSpec.from_sequential(
        [nn.Linear(8, 16), nn.ReLU(), mitra.CutPoint(), nn.Linear(16, 4)], input="x")
    spec.loss = lambda out, batch: nn.functional.cross_entropy(out["hidden"], batch["y"],
                                                               reduction="sum")
    seen = losses(train(capfd, spec, max_steps=30, optimizer="sgd", momentum=0.9))
    assert len(seen) == 30
    assert seen[-1] < 0.5 * seen[0]


class _RunsCode:
    """Pickled, it names a function and its argument: unpickling it calls os.system."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_an_export_that_carries_code_is_refused_and_its_code_never_runs(tmp_path):
    """A file in torch.save's format whose pickle names a function (what a plain torch.load of
    torch 1.13 would call): InferenceModel refuses it and nothing runs."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt"
    torch.save({"model": {"in.weight": torch.zeros(2)}, "trainer": _RunsCode(marker)}, evil)
    with pytest.raises(Exception, match="is not a file written by `mitra checkpoint export`"):
        mitra.InferenceModel(mlp_spec(), evil)
    assert not marker.exists()
    with pytest.raises(Exception, match="Weights only load failed|Unsupported"):
        torch.load(evil, weights_only=True)  # what the docs say to use refuses it too
    assert not marker.exists()


def test_batchnorm_buffers_are_checkpointed_exported_and_loaded_for_inference(
        standalone, capfd, tmp_path):
    built = []
    spec = mlp_spec(batchnorm=True, built=built)
    out = train(capfd, spec, max_steps=6, checkpoint_dir=str(tmp_path / "ck"),
                eval_dataset=Blobs(64), metrics={"accuracy": correct})
    mid = built[1]
    assert int(mid.norm.num_batches_tracked) == 6 * 4  # 4 micro-batches a step
    export = tmp_path / "model.pt"
    subprocess.run([MITRA_BINARY, "checkpoint", "export", str(tmp_path / "ck"), str(export)],
                   check=True, capture_output=True)
    saved = torch.load(export, weights_only=True)
    assert torch.equal(saved["model"]["mid.norm.running_mean"], mid.norm.running_mean)
    assert torch.equal(saved["model"]["mid.norm.running_var"], mid.norm.running_var)
    assert saved["model"]["mid.norm.num_batches_tracked"] == 24
    assert set(saved["optimizer"]) == {"exp_avg", "exp_avg_sq", "step"}  # AdamW's
    assert set(saved["optimizer"]["exp_avg"]) == {k for k in saved["model"] if "running" not in
                                                  k and "num_batches" not in k}

    for path in (export, tmp_path / "ck"):
        model = mitra.InferenceModel(mlp_spec(batchnorm=True), path)
        assert model.step == 6
        assert not model.segments["mid"].training
        assert torch.equal(model.segments["mid"].norm.running_mean, mid.norm.running_mean)
        batch = {"x": Blobs().x[:10]}
        for m in built:
            m.eval()
        with torch.no_grad():
            expected = built[2](built[1](built[0](batch["x"])))
        assert torch.allclose(model(batch)["hidden"], expected, atol=1e-6)
        result = model.evaluate(Blobs(64), metrics={"accuracy": correct}, batch_size=16)
        [final_eval] = [r for r in records(out, "eval") if r["step"] == 6]
        assert result["samples"] == 64
        assert result["accuracy"] == pytest.approx(final_eval["accuracy"], abs=1e-6)


class PySgd(mitra.Optimizer):
    """SGD with momentum written in Python: the same update as the built-in sgd."""

    def __init__(self, params, momentum=0.9):
        super().__init__(params)
        self.momentum = momentum
        self.buffers = {}

    def describe(self):
        return f"PySgd (momentum {self.momentum})"

    def step(self, lr):
        with torch.no_grad():
            for p in self.params:
                if p.grad is None:
                    continue
                b = self.buffers.get(p)
                if b is None:
                    b = self.buffers[p] = p.grad.detach().clone()
                else:
                    b.mul_(self.momentum).add_(p.grad)
                p.add_(b, alpha=-lr)

    def state(self, param):
        return {"momentum_buffer": self.buffers[param]} if param in self.buffers else {}

    def set_state(self, param, state):
        b = state["momentum_buffer"]
        if b.shape != param.shape:
            raise ValueError(f"momentum_buffer has shape {list(b.shape)}, not {list(param.shape)}")
        self.buffers[param] = b.clone()

    def state_tensors_per_parameter(self):
        return 1


@pytest.mark.parametrize("optimizer", [PySgd, mitra.TorchOptimizer(torch.optim.SGD, momentum=0.9)],
                         ids=["mitra.Optimizer", "TorchOptimizer"])
def test_a_python_optimizer_trains_like_the_built_in_one_and_resumes(
        standalone, capfd, tmp_path, optimizer):
    options = dict(max_steps=8, weight_decay=0.0, clip=0)
    builtin = losses(train(capfd, mlp_spec(), optimizer="sgd", momentum=0.9, **options))
    mine = losses(train(capfd, mlp_spec(), optimizer=optimizer, **options))
    assert mine == pytest.approx(builtin, abs=1e-6)
    # Stopped after step 4 and resumed from its checkpoint: the state came back.
    ck = str(tmp_path / "ck")
    first = losses(train(capfd, mlp_spec(), optimizer=optimizer, checkpoint_dir=ck,
                         **dict(options, max_steps=4)))
    second = losses(train(capfd, mlp_spec(), optimizer=optimizer, checkpoint_dir=ck, **options))
    assert first + second == pytest.approx(builtin, abs=1e-6)
    export = tmp_path / "model.pt"
    subprocess.run([MITRA_BINARY, "checkpoint", "export", ck, str(export)], check=True,
                   capture_output=True)
    state = torch.load(export, weights_only=True)["optimizer"]
    assert set(state) == {"momentum_buffer"}
    assert set(state["momentum_buffer"]) == {"inp.weight", "inp.bias", "mid.fc.weight",
                                             "mid.fc.bias", "out.weight", "out.bias"}


def test_unknown_options_and_a_missing_loss_are_refused_with_the_fix():
    with pytest.raises(TypeError, match="unknown option.*batchsize.*batch_size"):
        mitra.Trainer(mlp_spec(), Blobs(), batchsize=3)
    spec = mlp_spec()
    spec.loss = None
    with pytest.raises(ValueError, match="set spec.loss"):
        mitra.Trainer(spec, Blobs())


def test_a_setting_the_chosen_optimizer_would_ignore_is_refused_naming_where_it_goes():
    with pytest.raises(TypeError, match=re.escape(
            "weight_decay=0.5, betas=(0.8, 0.9) would be ignored: they are settings of mitra's "
            "built-in optimizers, and optimizer= is TorchOptimizer; give them to it: "
            "mitra.TorchOptimizer(torch.optim.AdamW, weight_decay=0.5, betas=(0.8, 0.9))")):
        mitra.Trainer(mlp_spec(), Blobs(), optimizer=mitra.TorchOptimizer(torch.optim.AdamW),
                      weight_decay=0.5, betas=(0.8, 0.9))
    with pytest.raises(TypeError, match="momentum= would be ignored: optimizer='adamw' does not "
                                        "take it \\(only 'sgd' do\\)"):
        mitra.Trainer(mlp_spec(), Blobs(), momentum=0.9)
    with pytest.raises(TypeError, match="your optimizer's own arguments"):
        mitra.Trainer(mlp_spec(), Blobs(), optimizer=lambda params: None, eps=1e-6)
    # What the chosen optimizer takes is taken.
    mitra.Trainer(mlp_spec(), Blobs(), optimizer="sgd", momentum=0.9, weight_decay=0.1)
    mitra.Trainer(mlp_spec(), Blobs(), betas=(0.8, 0.9), eps=1e-6)


def test_the_step_hook_sees_every_step_once_across_a_morph(tmp_path):
    """Trainer(on_step=fn) on every rank, 1 x 2 shrunk to 1 x 1 after step 6: steps 1 to 30
    each told once to rank 0, in the shape that trained them; the loss is the job's, the same
    on both ranks. The program's own checkpoint_every, replaced by mitra run's, is said."""
    from conftest import PYTHON, run_mitra_editing_machines
    log = tmp_path / "hook.log"
    machines = tmp_path / "machines.txt"
    code, out, err = run_mitra_editing_machines(
        ["run", "--machines", str(machines), "--batch-size", "32", "--chunk-size", "8",
         "--nstages", "1", "--max-steps", "30", "--checkpoint-every", "4", "--run-dir",
         str(tmp_path / "run"), "--", PYTHON, os.path.join(HERE, "mlp_worker.py"), "--steps",
         "30", "--sequential", "--slow", "--hook-log", str(log), "--checkpoint-every", "50"],
        machines, 2, 6, 1)
    assert code == 0, out + err
    assert "mitra: morph done: training again in 1 x 1" in out, out + err
    said = [json.loads(line)["message"] for line in open(tmp_path / "run" / "events.jsonl")
            if '"event":"settings_replaced"' in line]
    assert said == ["mitra run's settings replace the program's: checkpoint_every 4 "
                    "(--checkpoint-every) instead of the program's 50"], said  # once
    told = [line.split() for line in log.read_text().splitlines()]
    rank0 = [(int(step), shape) for step, rank, shape, _, _ in told if rank == "0"]
    assert [step for step, _ in rank0] == list(range(1, 31)), told
    assert rank0[0][1] == "1x2" and rank0[-1][1] == "1x1", rank0
    # The package says the program runs before torch is imported: the log's first line.
    first = (tmp_path / "run" / "logs" / "gen-0" / "rank-1.log").read_text().splitlines()[0]
    assert first == '@mitra {"event":"starting","rank":1}', first
    losses = {}
    for step, rank, shape, _, loss in told:
        losses.setdefault(step, set()).add(loss)
    assert all(len(v) == 1 for v in losses.values()), losses


def test_a_setting_mitra_run_is_not_given_stays_the_programs(tmp_path):
    """Without --checkpoint-every, mitra run leaves the interval to the program: its
    checkpoint_every=3 checkpoints steps 3 and 6 (and 7, the end), and nothing is said replaced."""
    machines = tmp_path / "machines.txt"
    machines.write_text("localhost slots=1\n")
    run_dir = tmp_path / "run"
    from conftest import PYTHON, run_mitra
    r = run_mitra(["run", "--machines", str(machines), "--batch-size", "16", "--nstages", "1",
                   "--run-dir", str(run_dir), "--", PYTHON, os.path.join(HERE, "mlp_worker.py"),
                   "--steps", "7", "--checkpoint-every", "3"])
    assert r.returncode == 0, r.stdout + r.stderr
    steps = sorted(int(d.name.split("-")[1]) for d in (run_dir / "checkpoints").iterdir()
                   if d.name.startswith("step-"))
    assert steps == [3, 6, 7], steps
    assert "settings_replaced" not in (run_dir / "events.jsonl").read_text()


def test_a_bad_name_is_refused_when_the_trainer_is_made_naming_the_choices():
    with pytest.raises(ValueError, match=r"schedule: unknown schedule 'zb-x' \(expected gpipe, "
                                         r"1f1b, varuna, zb-h1, interleaved or zb-v\)"):
        mitra.Trainer(mlp_spec(), Blobs(), schedule="zb-x")
    for key, value, says in [("partition", "1,x", "'x' is not a segment count"),
                             ("precision", "fp8", "expected fp32, bf16 or fp16"),
                             ("device", "tpu", "expected cpu or cuda"),
                             ("backend", "mpi", "expected gloo or nccl"),
                             ("sampler", "random", "expected shuffled or sequential")]:
        with pytest.raises(ValueError, match=says):
            mitra.Trainer(mlp_spec(), Blobs(), **{key: value})


def test_the_options_defaults_are_the_runtimes_and_the_signature_shows_them():
    defaults = mitra.trainer.DEFAULTS
    assert (defaults["schedule"], defaults["partition"], defaults["precision"],
            defaults["sampler"], defaults["batch_size"], defaults["loss_scale"]) == (
                "1f1b", "uniform", "fp32", "shuffled", 32, None)
    assert (mitra.trainer.OPTIONS["schedule"] ==
            "gpipe | 1f1b | varuna | zb-h1 | interleaved | zb-v (default 1f1b)")
    # help(mitra.Trainer) and an IDE see every keyword with its default, keyword-only.
    parameters = inspect.signature(mitra.Trainer.__init__).parameters
    keywords = {name: p.default for name, p in parameters.items()
                if p.kind == inspect.Parameter.KEYWORD_ONLY}
    assert keywords == defaults
    assert list(keywords) == list(mitra.trainer.OPTIONS)
    assert "batch_size: global batch in samples (default 32)" in mitra.Trainer.__init__.__doc__


def trainer_options(*args, env=None):
    return subprocess.run(["/usr/bin/python3", os.path.join(SOURCE_DIR, "scripts",
                                                            "trainer-options"), *args],
                          capture_output=True, text=True, env=env)


def test_the_signature_and_the_docs_table_are_made_from_the_option_table(tmp_path):
    """scripts/trainer-options --check finds python/mitra/trainer.py's signature and
    docs/python.md's table as the table makes them; the guard: a copy with one default changed
    and one row of the docs gone is found stale, both files named."""
    checked = trainer_options("--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for part, old, new in [("python/mitra/trainer.py", "batch_size=32,", "batch_size=33,"),
                           ("docs/python.md", "| `seed` |", "| `sed` |")]:
        with open(os.path.join(SOURCE_DIR, part)) as f:
            text = f.read()
        assert old in text
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / part).write_text(text.replace(old, new))
    stale = trainer_options("--check", "--source", str(tmp_path))
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert "trainer.py" in stale.stdout and "python.md" in stale.stdout
    # Without --check it writes them as they should be.
    assert trainer_options("--source", str(tmp_path)).returncode == 0
    assert trainer_options("--check", "--source", str(tmp_path)).returncode == 0


def test_a_value_of_another_type_or_out_of_range_is_refused_saying_what_to_give():
    for options, error, says in [
            (dict(batch_size="32"), TypeError, "batch_size takes a whole number, not '32'"),
            (dict(batch_size=0), ValueError, "batch_size: '0' is not a whole number >= 1"),
            (dict(zero=2), ValueError, "zero: '2' is not a whole number from 0 to 1"),
            (dict(recompute=1), TypeError, "recompute takes True or False, not 1"),
            (dict(lr=-0.1), ValueError, "lr: '-0.1' is not a number >= 0"),
            (dict(betas=0.9), TypeError, "betas takes two numbers, not 0.9")]:
        with pytest.raises(error, match=re.escape("mitra.Trainer: " + says)):
            mitra.Trainer(mlp_spec(), Blobs(), **options)


class Sequential:
    """A Python sampler: what the built-in "sequential" does."""

    def __init__(self, size, seed):
        self.size = size

    def index_at(self, position):
        return position % self.size


def test_a_python_sampler_decides_the_samples_of_every_step(standalone, capfd):
    builtin = losses(train(capfd, mlp_spec(), max_steps=10, sampler="sequential"))
    mine = losses(train(capfd, mlp_spec(), max_steps=10, sampler=Sequential))
    shuffled = losses(train(capfd, mlp_spec(), max_steps=10))
    assert mine == builtin
    assert mine != shuffled  # the guard: the sampler does change what is trained


class NumbersAndArrays(Blobs):
    """Blobs whose samples hold a NumPy array and a Python int, as many datasets return them."""

    def __getitem__(self, i):
        return {"x": self.x[i].numpy(), "y": int(self.y[i])}


def test_a_sample_may_hold_numbers_and_numpy_arrays(standalone, capfd):
    assert losses(train_on(capfd, NumbersAndArrays())) == losses(train_on(capfd, Blobs()))


def train_on(capfd, dataset):
    code = mitra.Trainer(mlp_spec(), dataset, **dict(COMMON, max_steps=4)).run()
    out, err = capfd.readouterr()
    assert code == 0, err
    return out


def test_a_sample_of_another_type_is_refused_naming_what_was_expected(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(
        "import sys; sys.path.insert(0, %r)\n"
        "import mitra\n"
        "from models import Blobs, mlp_spec\n"
        "class Tuples(Blobs):\n"
        "    def __getitem__(self, i):\n"
        "        return self.x[i], self.y[i]\n"
        "raise SystemExit(mitra.Trainer(mlp_spec(), Tuples(), max_steps=2).run())\n" % HERE)
    r = run_python([str(script)], cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "the dataset's __getitem__(" in r.stderr
    assert "returned a tuple where a dict of tensors was expected" in r.stderr
