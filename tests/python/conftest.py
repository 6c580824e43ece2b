"""Shared helpers of the Python package's tests (run by ctest: tests/CMakeLists.txt sets
PYTHONPATH to the build's package and MITRA_SOURCE_DIR / MITRA_BINARY)."""
import json
import os
import subprocess
import sys

import pytest

SOURCE_DIR = os.environ.get("MITRA_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MITRA_BINARY = os.environ.get("MITRA_BINARY", os.path.join(SOURCE_DIR, "build", "bin", "mitra"))
PYTHON = "/usr/bin/python3"  # the interpreter that has Debian's torch
HERE = os.path.dirname(os.path.abspath(__file__))

# Subprocesses run in other folders: the package's path must not be relative.
if os.environ.get("PYTHONPATH"):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        os.path.abspath(p) for p in os.environ["PYTHONPATH"].split(os.pathsep) if p)

sys.path.insert(0, os.path.join(SOURCE_DIR, "examples", "python"))
sys.path.insert(0, HERE)


def records(text, event=None):
    """The `@mitra {...}` records in `text`, optionally only those of one event."""
    out = []
    for line in text.splitlines():
        if line.startswith("@mitra "):
            r = json.loads(line[len("@mitra "):])
            if event is None or r.get("event") == event:
                out.append(r)
    return out


def losses(text):
    return [r["loss"] for r in records(text, "step")]


def run_python(args, timeout=180, env=None, **kw):
    """Runs /usr/bin/python3 ARGS with this test's environment (plus `env`)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([PYTHON] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, env=full_env, **kw)


def run_mitra(args, timeout=240, env=None, **kw):
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([MITRA_BINARY] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, env=full_env, **kw)


def run_mitra_editing_machines(args, machines, slots, after_step, new_slots, timeout=240):
    """Runs `mitra ARGS` on `machines` listing `localhost slots=SLOTS`; once it prints step
    AFTER_STEP, replaces the list (by a rename, as an editor would) with NEW_SLOTS slots.
    Returns (exit code, stdout, stderr)."""
    machines.write_text(f"localhost slots={slots}\n")
    mitra = subprocess.Popen([MITRA_BINARY] + args, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONUNBUFFERED="1"))
    for line in mitra.stdout:
        if line.startswith(f"step {after_step}/"):
            break
    edited = machines.with_name(machines.name + ".new")
    edited.write_text(f"localhost slots={new_slots}\n")
    os.rename(edited, machines)
    out, err = mitra.communicate(timeout=timeout)
    return mitra.returncode, out, err


@pytest.fixture
def standalone(monkeypatch):
    """A process environment without any of the manager's variables: Trainer.run() trains 1x1."""
    for key in list(os.environ):
        if key.startswith("MITRA_"):
            monkeypatch.delenv(key)
