"""`pip install --no-build-isolation .`: the package python/mitra with its extension _mitra,
built by CMake for the interpreter that runs pip and the torch it imports.

MITRA_BUILD_DIR names the CMake build folder (default build/pip-<python tag>). A folder
already configured for this interpreter (the same executable, a venv's link resolved) and this
torch is built as it is, without configuring it again: the project's own build/ serves a venv
made with --system-site-packages over Debian's torch, and a second install only relinks what
changed. MITRA_CMAKE_ARGS adds arguments to CMake's configure step.
"""
import os
import shlex
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def torch_prefix():
    """Where this interpreter's torch keeps TorchConfig.cmake, when it ships one (a pip torch);
    Debian's python3-torch does not, and libtorch-dev's is found by CMake by itself."""
    import torch.utils
    path = torch.utils.cmake_prefix_path
    return path if os.path.exists(os.path.join(path, "Torch", "TorchConfig.cmake")) else None


def configured_for_this_python(build, prefix):
    """True when `build` holds a CMake cache made for this interpreter and this torch."""
    try:
        cache = open(os.path.join(build, "CMakeCache.txt")).read().splitlines()
    except OSError:
        return False
    values = dict(line.split("=", 1) for line in cache if "=" in line and not line.startswith(("#", "//")))
    python = values.get("Python_EXECUTABLE:FILEPATH") or values.get("Python_EXECUTABLE:UNINITIALIZED")
    torch_dir = values.get("Torch_DIR:PATH", "")
    same_torch = torch_dir.startswith(prefix) if prefix else "site-packages" not in torch_dir
    return (python is not None and same_torch and
            os.path.realpath(python) == os.path.realpath(sys.executable))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        tag = sysconfig.get_config_var("SOABI") or "python"
        build = os.environ.get("MITRA_BUILD_DIR") or os.path.join(ROOT, "build", f"pip-{tag}")
        configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                     "-DMITRA_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}"]
        prefix = torch_prefix()
        if prefix:
            configure.append(f"-DCMAKE_PREFIX_PATH={prefix}")
        configure += shlex.split(os.environ.get("MITRA_CMAKE_ARGS", ""))
        env = dict(os.environ)
        if not configured_for_this_python(build, prefix) or os.environ.get("MITRA_CMAKE_ARGS"):
            subprocess.run(configure, check=True, env=env)
        subprocess.run(["cmake", "--build", build, "--target", "mitra_python", "-j",
                        str(os.cpu_count() or 1)], check=True, env=env)
        built = os.path.join(build, "python", "mitra")
        extension = next(f for f in os.listdir(built) if f.startswith("_mitra") and f.endswith(".so"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self.copy_file(os.path.join(built, extension), target)


setup(
    packages=["mitra"],
    package_dir={"mitra": "python/mitra"},
    ext_modules=[Extension("mitra._mitra", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build/setuptools"}, "egg_info": {"egg_base": "build"}},
)
