"""`pip install --no-build-isolation .` into a fresh venv that sees Debian's torch (made with
--system-site-packages; no index is reachable), then `import mitra` and a short training from
that venv, with no PYTHONPATH pointing at the build. Under ctest MITRA_PIP_BUILD_DIR is the
project's build folder, which setup.py builds in as it is (the same interpreter and torch);
without it pip configures and builds build/pip-<tag> from nothing (minutes)."""
import os
import subprocess

from conftest import SOURCE_DIR, losses

BUILD = os.environ.get("MITRA_PIP_BUILD_DIR")


def test_pip_installs_the_package_for_the_environments_torch(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("MITRA_")}
    if BUILD:
        env["MITRA_BUILD_DIR"] = BUILD
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation",
                              "--no-index", SOURCE_DIR], env=env, capture_output=True, text=True,
                             timeout=3600)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    python = str(venv / "bin" / "python")
    where = subprocess.run([python, "-c", "import mitra, torch; print(mitra.__file__)"],
                           env=env, capture_output=True, text=True, cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(venv)), where.stdout
    run = subprocess.run([python, os.path.join(SOURCE_DIR, "tests", "python", "loader_worker.py"),
                          "--steps", "3", "--workers", "1"], env=dict(env, PYTHONUNBUFFERED="1"),
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    assert len(losses(run.stdout)) == 3
