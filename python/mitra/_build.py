"""The extension's build against the torch that is imported: one check, at import.

The extension links LibTorch's C++ libraries and passes tensors through pybind11, so it must
have been built for the same torch (major.minor), the same C++ ABI, and pybind11 internals that
torch._C shares (same version, compiler, standard library and ABI tag). A mismatch would not
fail cleanly later (a crash, or tensors that do not convert): it is refused here, with the fix.
"""
import importlib

import torch


def mismatches(built, running):
    """The differences between what the extension was built with (`built`, _mitra.build_info())
    and the running torch (`running`, running_info()), as sentences; empty when they agree."""
    found = []
    if built["torch_version"] != running["torch_version"]:
        found.append(f"it was built against LibTorch {built['torch_version']}, but this Python's "
                     f"torch is {running['torch_version']}")
    if built["cxx11_abi"] != running["cxx11_abi"]:
        found.append(f"it was built with _GLIBCXX_USE_CXX11_ABI={int(built['cxx11_abi'])}, torch "
                     f"with {int(running['cxx11_abi'])}")
    for key in ("pybind11_compiler_type", "pybind11_stdlib", "pybind11_build_abi"):
        if running.get(key) is not None and built[key] != running[key]:
            found.append(f"its pybind11 {key[len('pybind11_'):]} is {built[key]!r}, torch's "
                         f"{running[key]!r}")
    return found


def running_info():
    version = torch.__version__.split("+")[0].split(".")
    return {
        "torch_version": ".".join(version[:2]),
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "pybind11_compiler_type": getattr(torch._C, "_PYBIND11_COMPILER_TYPE", None),
        "pybind11_stdlib": getattr(torch._C, "_PYBIND11_STDLIB", None),
        "pybind11_build_abi": getattr(torch._C, "_PYBIND11_BUILD_ABI", None),
    }


FIX = ("rebuild mitra with this interpreter's torch (scripts/setup builds it against Debian's "
       "libtorch-dev for /usr/bin/python3, whose python3-torch is the same build), or run the "
       "program with the interpreter it was built for: /usr/bin/python3")


def load_extension():
    """Imports mitra._mitra, or raises ImportError saying why it does not fit and what to do."""
    try:
        extension = importlib.import_module("mitra._mitra")
    except ImportError as e:
        raise ImportError(f"mitra's extension does not load into this Python ({e}); {FIX}") from e
    found = mismatches(extension.build_info(), running_info())
    if found:
        raise ImportError("mitra's extension does not fit this Python's torch: " +
                          "; ".join(found) + "; " + FIX)
    return extension
