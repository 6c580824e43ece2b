"""The extension is refused at import when it was built for another torch."""
import pytest

import mitra
from mitra import _build


def test_this_build_fits_the_imported_torch():
    assert _build.mismatches(mitra._mitra.build_info(), _build.running_info()) == []


@pytest.mark.parametrize("key,value,words", [
    ("torch_version", "2.1", "built against LibTorch 1.13, but this Python's torch is 2.1"),
    ("cxx11_abi", False, "_GLIBCXX_USE_CXX11_ABI=1, torch with 0"),
    ("pybind11_build_abi", "_cxxabi1011", "build_abi is '_cxxabi1017', torch's '_cxxabi1011'"),
    ("pybind11_stdlib", "_libcpp", "stdlib"),
])
def test_a_mismatch_is_refused_with_the_fix(monkeypatch, key, value, words):
    running = dict(_build.running_info(), **{key: value})
    monkeypatch.setattr(_build, "running_info", lambda: running)
    with pytest.raises(ImportError) as e:
        _build.load_extension()
    assert words in str(e.value)
    assert "/usr/bin/python3" in str(e.value)  # the fix
