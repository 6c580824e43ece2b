"""The README's Python program is examples/python/quickstart.py, verbatim, and it trains under
`mitra run` in two stages."""
import json
import os

from conftest import PYTHON, SOURCE_DIR, run_mitra

QUICKSTART = os.path.join(SOURCE_DIR, "examples", "python", "quickstart.py")


def test_the_readme_shows_the_quickstart_program_as_it_is():
    readme = open(os.path.join(SOURCE_DIR, "README.md")).read()
    assert "```python\n" + open(QUICKSTART).read() + "```" in readme


def test_the_quickstart_trains_in_two_stages_under_mitra_run(tmp_path):
    (tmp_path / "machines.txt").write_text("localhost slots=2\n")
    r = run_mitra(["run", "--machines", str(tmp_path / "machines.txt"), "--batch-size", "32",
                   "--nstages", "2", "--chunk-size", "8", "--max-steps", "30", "--run-dir",
                   str(tmp_path / "run"), "--", PYTHON, QUICKSTART], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "shape 2 stages x 1 replica" in r.stdout
    metrics = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    seen = [m["loss"] for m in metrics if "loss" in m]
    assert len(seen) == 30
    assert seen[-1] < seen[0] - 1.0  # from ~5.5 (uniform over 256 bytes) towards the text's
