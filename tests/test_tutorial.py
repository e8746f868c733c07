"""docs/tutorial.py, the notebook-style tutorial, runs end to end as a script: it builds a
model from spec text, trains it, checks where it attends, draws and saves it. Its own
asserts (held-out accuracy, the keyword's weight, the same outputs after a save and load)
are the checks; this test runs it and reads its report."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")
TUTORIAL = ROOT / "docs" / "tutorial.py"


def test_the_tutorial_is_a_percent_format_notebook():
    text = TUTORIAL.read_text(encoding="utf-8")
    cells = re.findall(r"^# %%( \[markdown\])?$", text, re.M)
    assert text.startswith("# %% [markdown]\n# # ")
    assert sum(1 for c in cells if c) >= 7 and sum(1 for c in cells if not c) >= 7


def test_the_tutorial_runs_end_to_end():
    r = subprocess.run([sys.executable, str(TUTORIAL)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "| Scoring | Additive | Additive: attention `att` uses the additive score |" in out
    assert float(re.search(r"held-out accuracy: ([\d.]+)", out).group(1)) > 0.95
    assert re.search(r"the keyword takes the largest weight in (9[5-9]|100)\.\d%", out)
    assert "saved and loaded:" in out and "the same outputs" in out
