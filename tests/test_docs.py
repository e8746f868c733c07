"""The examples in README.md and docs/language.md are real specs."""

from conftest import ROOT, classify_text


def blocks(path):
    """Fenced code blocks of a Markdown file."""
    out, current = [], None
    for line in (ROOT / path).read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                out.append("".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return out


def test_readme_example_compiles_and_classifies_like_the_spec():
    example = next(b for b in blocks("README.md") if b.startswith("paper bahdanau2015"))
    assert classify_text(example) == classify_text(
        (ROOT / "specs" / "bahdanau2015.attn").read_text(encoding="utf-8"))


def test_readme_shows_the_real_classify_output():
    import subprocess
    import sys

    shown = next(b for b in blocks("README.md") if b.startswith("$ taxcompile classify"))
    out = subprocess.run([sys.executable, "-m", "taxcompile", "classify",
                          "specs/bahdanau2015.attn"], cwd=ROOT, capture_output=True,
                         text=True).stdout
    assert shown.split("\n", 1)[1] == out
