"""docs/tutorial.py, the notebook-style tutorial, runs end to end as a script: it builds a
model from spec text, trains it with taxcompile.fit, checks where it attends, draws and
saves it. Its own asserts (held-out accuracy, the keyword's weight, the same outputs after
a save and load) are the checks; this test runs it and reads its report. As a notebook,
executed in a real Jupyter kernel, its cells show the Table III row as a table and the
diagram as SVG."""

import os
import re
import shutil
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


def _in_a_kernel() -> bool:
    """Whether the tutorial can run in a Jupyter kernel here (the test extra installs it)."""
    import importlib.util

    return shutil.which("dot") is not None and all(
        importlib.util.find_spec(m) for m in ("jupytext", "nbclient", "ipykernel"))


@pytest.fixture(scope="module")
def tutorial():
    """The tutorial run once (some 15 s): in a Jupyter kernel, cell by cell, where one can be
    had (its printed text, and each rich output by MIME type); else as a script (its
    printed text, and None). A failing assert in it fails the run either way."""
    if not _in_a_kernel():
        r = subprocess.run([sys.executable, str(TUTORIAL)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout, None
    import jupytext
    import nbclient

    nb = jupytext.read(TUTORIAL)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT)}}).execute()
    printed, outputs = [], {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            for o in cell.outputs:
                assert o.output_type != "error", o
                if o.output_type == "stream" and o.name == "stdout":
                    printed.append(o.text)
                for kind, value in o.get("data", {}).items():
                    outputs.setdefault(kind, []).append(value)
    return "".join(printed), outputs


def test_the_tutorial_runs_end_to_end(tutorial):
    out, _ = tutorial
    assert re.search(r"loss 0\.\d+ -> 0\.0\d\d; held-out accuracy every 15 steps: \[", out)
    assert float(re.search(r"held-out accuracy: ([\d.]+)", out).group(1)) > 0.95
    assert re.search(r"the keyword takes the largest weight in (9[5-9]|100)\.\d%", out)
    assert "saved and loaded:" in out and "the same outputs" in out


def test_the_tutorial_renders_rich_outputs_in_a_kernel(tutorial):
    """Executed cell by cell in a Jupyter kernel (nbclient), the row cell shows a Markdown
    table and the diagram cell an SVG image: the cells end with the objects."""
    _, outputs = tutorial
    if outputs is None:
        pytest.skip("needs jupytext, nbclient, ipykernel and graphviz's dot")
    table = "\n".join(outputs["text/markdown"])
    assert "| Scoring | Additive | Additive: attention `att` uses the additive score |" in table
    svg = outputs["image/svg+xml"]
    assert len(svg) == 1 and svg[0].lstrip().startswith("<?xml") and "<svg" in svg[0]


def test_dir_lists_the_public_api():
    import taxcompile

    assert dir(taxcompile) == ["__version__", "build", "classify", "diagram", "fit", "module"]
    for name in dir(taxcompile):
        assert getattr(taxcompile, name)
