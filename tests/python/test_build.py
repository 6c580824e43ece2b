"""The extension is refused at import when it was built for another torch, and at build time
when it carries its own copy of libstdc++."""
import os
import shutil
import subprocess

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


CHECK = os.path.join(os.path.dirname(__file__), "..", "..", "python", "check_libstdcxx.cmake")
PROBE = ("#include <sstream>\n#include <string>\n"
         "std::string f(double x) { std::ostringstream o; o << x; return o.str(); }\n")


def check_libstdcxx(tmp_path, *link_flags):
    """Links a shared object that formats a number, as the extension does, and runs the check
    the build runs on the extension after linking it."""
    (tmp_path / "probe.cc").write_text(PROBE)
    elf = tmp_path / "probe.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(elf), str(tmp_path / "probe.cc"),
                    *link_flags], check=True)
    check = subprocess.run(["cmake", f"-DELF={elf}", f"-DREADELF={shutil.which('readelf')}",
                            "-P", CHECK], capture_output=True, text=True)
    return check, elf


def test_an_extension_that_loads_libstdcxx_passes_the_build_check(tmp_path):
    check, elf = check_libstdcxx(tmp_path)
    assert check.returncode == 0, check.stderr
    assert elf.exists()


def test_an_extension_with_its_own_libstdcxx_is_refused_and_removed(tmp_path):
    # What a GCC configured with --with-static-standard-libraries links by default: such an
    # extension crashed beside torch's libstdc++ at its first formatted number.
    check, elf = check_libstdcxx(tmp_path, "-static-libstdc++")
    assert check.returncode != 0
    assert "carries its own copy of libstdc++" in check.stderr
    assert "-DCMAKE_CXX_COMPILER=" in check.stderr  # the fix
    assert not elf.exists()
