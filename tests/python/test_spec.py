"""The model description: segments, CutPoints, bare tensors, sum_over_samples."""
import pytest
import torch
from torch import nn

import mitra
from mitra.spec import _runner


def test_from_sequential_cuts_at_every_cutpoint_and_keeps_the_layer_names():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), mitra.CutPoint(), nn.Linear(4, 2))
    spec = mitra.ModelSpec.from_sequential(model, names=["body", "head"], input="x")
    assert spec.segment_names == ["body", "head"]
    body, _ = spec._segments[0][1]()
    head, _ = spec._segments[1][1]()
    assert list(dict(body.named_parameters())) == ["0.weight", "0.bias"]
    assert list(dict(head.named_parameters())) == ["3.weight", "3.bias"]
    assert body[0] is model[0]  # the model's own layers, not copies


def test_from_sequential_builds_a_callable_once_under_a_fixed_seed():
    calls = []

    def build():
        calls.append(1)
        return [nn.Linear(3, 3), mitra.CutPoint(), nn.Linear(3, 3)]

    a = mitra.ModelSpec.from_sequential(build)
    first = a._segments[1][1]()[0][0].weight.detach().clone()
    a._segments[0][1]()
    assert len(calls) == 1
    torch.manual_seed(999)  # the caller's generator does not matter
    b = mitra.ModelSpec.from_sequential(build)
    assert torch.equal(b._segments[1][1]()[0][0].weight, first)


@pytest.mark.parametrize("layers,message", [
    ([nn.Linear(2, 2), mitra.CutPoint(), mitra.CutPoint(), nn.Linear(2, 2)], "holds no layer"),
    ([mitra.CutPoint(), nn.Linear(2, 2)], "holds no layer"),
])
def test_from_sequential_refuses_an_empty_segment(layers, message):
    with pytest.raises(ValueError, match=message):
        mitra.ModelSpec.from_sequential(layers)


def test_from_sequential_refuses_a_wrong_number_of_names():
    with pytest.raises(ValueError, match="2 names for 3 segments"):
        mitra.ModelSpec.from_sequential(
            [nn.ReLU(), mitra.CutPoint(), nn.ReLU(), mitra.CutPoint(), nn.ReLU()], names=["a", "b"])


def test_a_bare_tensor_in_and_out_travels_as_hidden():
    run = _runner("s", nn.Identity(), input="hidden")
    t = torch.ones(2)
    out = run({"hidden": t, "mask": t})
    assert list(out) == ["hidden"] and out["hidden"] is t


def test_a_segment_taking_a_missing_tensor_names_what_its_input_holds():
    run = _runner("stem", nn.Identity(), input="image")
    with pytest.raises(KeyError, match=r"segment 'stem' takes the tensor 'image'.*\['pixels'\]"):
        run({"pixels": torch.ones(1)})


def test_a_segment_returning_something_else_says_what_to_return():
    run = _runner("s", lambda d: [1, 2], input=None)
    with pytest.raises(TypeError, match="segment 's' returned a list: return a dict of tensors"):
        run({})


def test_add_segment_refuses_a_module_where_a_factory_is_expected():
    with pytest.raises(TypeError, match="the factory must be a callable returning an nn.Module"):
        mitra.ModelSpec().add_segment("a", 3)


def test_sum_over_samples_turns_a_mean_into_the_per_sample_sum():
    logits = torch.randn(5, 3)
    y = torch.tensor([0, 1, 2, 1, 0])
    mean = lambda out, batch: torch.nn.functional.cross_entropy(out["logits"], batch["y"])  # noqa: E731
    summed = mitra.sum_over_samples(mean)({"logits": logits}, {"y": y, "other": y})
    expected = torch.nn.functional.cross_entropy(logits, y, reduction="sum")
    assert torch.allclose(summed, expected)
