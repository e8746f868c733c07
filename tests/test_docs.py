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


def test_readme_python_example_runs_on_the_committed_generated_code():
    """The README's PyTorch snippet, run as written against generated/, and the shapes its
    comments promise."""
    import sys

    code = next(b for b in blocks("README.md") if b.startswith("from generated."))
    sys.path.insert(0, str(ROOT))
    try:
        scope: dict = {}
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own documentation
    finally:
        sys.path.remove(str(ROOT))
        for name in [m for m in sys.modules if m == "generated" or m.startswith("generated.")]:
            del sys.modules[name]
    out, inputs = scope["out"], scope["example_inputs"](cfg=scope["cfg"])
    B, T = inputs["tgt"].shape
    S = inputs["src"].shape[1]
    assert tuple(out.output.shape) == (B, T, scope["cfg"].vocab)
    assert tuple(out.attention["decoder[6].cross"].shape) == (B, scope["cfg"].heads, T, S)


def test_relative_paths_in_the_docs_stay_inside_the_repository():
    """Every relative link (`[text](path)`, from the file's folder) and every path in code
    (`../x`, from the repository root, as the docs write paths) of the Markdown files
    resolves inside the repository: a reader of the repository alone can follow them."""
    import re

    bad = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        links = re.findall(r"\]\(([^)\s#]+)[^)]*\)", text)
        paths = re.findall(r"`(\.\.?/[^`\s]*)`", text)
        for target in links + paths:
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            where = ((md.parent if target in links else ROOT) / target).resolve()
            if not where.is_relative_to(ROOT.resolve()):
                bad.append(f"{md.name}: {target} leaves the repository")
    assert not bad, bad
