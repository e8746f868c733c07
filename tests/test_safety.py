"""No command destroys a user's files, whatever `-o` points at.

Each case of issue 11 is a test here: the user's files are byte-identical after every
command (a hash of the whole tree before and after), every refusal is one line without a
traceback and exits 2. A property test runs every writing command against random existing
paths and asserts that nothing it did not write has changed."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taxcompile import cli, diagrams, fmt
from taxcompile.files import MANIFEST

ROOT = Path(__file__).resolve().parent.parent

TINY = fmt.format_text('''paper tiny { cite = "Tiny" }
model m {
    input src: tokens[S] (vocab = 50)
    feature x = embed(src, 16)
    attention a { query = project(x)  keys = x  score = multiplicative }
}
''', "tiny.attn")
OTHER = TINY.replace("paper tiny", "paper other").replace('"Tiny"', '"Other"')


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: (kind, content hash or link target, permission bits)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st_ = p.lstat()
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st_.st_mode))
            else:
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(),
                            stat.S_IMODE(st_.st_mode))
    return out


def unchanged(before: dict, after: dict, allowed=lambda rel: False) -> list[str]:
    """Entries of ``before`` that changed or vanished (``allowed`` ones excepted)."""
    return [rel for rel, v in before.items() if after.get(rel) != v and not allowed(rel)]


def run_process(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``taxcompile ARGS`` as the user runs it."""
    return subprocess.run([sys.executable, "-m", "taxcompile", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``taxcompile ARGS`` in this process (fast: torch is imported once); an exception
    escaping ``main`` fails the test as a traceback would."""
    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = cli.main(list(args))
            except SystemExit as e:
                code = e.code
    finally:
        os.chdir(old)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def errors_only(stderr: str) -> list[str]:
    """stderr's lines less the report's progress lines (`heatmaps: …`, `heatmap i/n …`)."""
    return [line for line in stderr.splitlines() if not line.startswith("heatmap")]


def assert_refused(p: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2, one line `taxcompile: error: …`, no traceback, nothing on stdout."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    lines = errors_only(p.stderr)
    assert len(lines) == 1 and lines[0].startswith("taxcompile: error: "), p.stderr
    assert p.stdout == ""
    for w in words:
        assert w in p.stderr, (w, p.stderr)


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    """A user's project: a thesis, specs, notes."""
    d = tmp_path / "proj"
    (d / "specs").mkdir(parents=True)
    (d / "specs" / "tiny.attn").write_text(TINY)
    (d / "specs" / "README").write_text("my notes on the specs\n")
    (d / "thesis.tex").write_text("\\documentclass{article}\n")
    (d / "notes.txt").write_text("do not lose me\n")
    return d


# ---- 1. report -o DIR replaces only what a report wrote --------------------------------


@pytest.mark.parametrize("out, why", [
    (".", "it is the current directory"),
    ("..", "it holds the current directory"),
    ("specs", "it holds the spec specs/tiny.attn"),
    ("specs/site", "it is inside the input directory specs"),
])
def test_report_refuses_the_cwd_and_the_inputs(proj, out, why):
    before = snapshot(proj.parent)
    p = (run_process if out == "." else run)("report", "specs", "-o", out, cwd=proj)
    assert_refused(p, f"cannot write the report to {out}: {why}")
    assert snapshot(proj.parent) == before


def test_report_refuses_a_directory_that_holds_an_explicit_spec(proj):
    before = snapshot(proj.parent)
    p = run("report", "proj/specs/tiny.attn", "-o", "proj", cwd=proj.parent)
    assert_refused(p, "it holds the spec proj/specs/tiny.attn")
    assert snapshot(proj.parent) == before


def test_report_refuses_a_non_empty_directory_without_a_manifest(proj):
    (proj / "site").mkdir()
    (proj / "site" / "keep.txt").write_text("keep me\n")
    before = snapshot(proj)
    p = run("report", "specs", "-o", "site", cwd=proj)
    assert_refused(p, "it is not empty and holds no earlier report", MANIFEST)
    assert snapshot(proj) == before


def test_report_replaces_its_own_files_and_keeps_the_users(proj):
    (proj / "specs" / "other.attn").write_text(OTHER)
    p = run("report", "specs", "-o", "site", cwd=proj)
    assert p.returncode == 0, p.stderr
    site = proj / "site"
    manifest = json.loads((site / MANIFEST).read_text())
    assert set(manifest["files"]) == {"index.html", "style.css", "papers/tiny.html",
                                      "papers/tiny/m.png", "papers/other.html",
                                      "papers/other/m.png"}
    # the user adds files of their own to the site, and drops a spec
    (site / "keep.txt").write_text("mine\n")
    (site / "papers" / "mine.html").write_text("<p>mine</p>\n")
    (site / "papers" / "other").joinpath("notes.md").write_text("mine too\n")
    (proj / "specs" / "other.attn").unlink()
    mine = {k: v for k, v in snapshot(proj).items()
            if k.endswith(("keep.txt", "mine.html", "notes.md")) or not k.startswith("site")}
    p = run("report", "specs", "-o", "site", cwd=proj)
    assert p.returncode == 0, p.stderr
    after = snapshot(proj)
    assert unchanged(mine, after) == []
    # the dropped paper's pages are gone; its directory stays for the user's notes.md
    assert not (site / "papers" / "other.html").exists()
    assert not (site / "papers" / "other" / "m.png").exists()
    assert json.loads((site / MANIFEST).read_text())["files"].keys() == {
        "index.html", "style.css", "papers/tiny.html", "papers/tiny/m.png"}
    assert "papers/other.html" not in (site / "index.html").read_text()


def test_report_refuses_to_replace_a_page_the_user_changed(proj):
    assert run("report", "specs", "-o", "site", cwd=proj).returncode == 0
    index = proj / "site" / "index.html"
    index.write_text(index.read_text() + "<!-- my edit -->\n")
    before = snapshot(proj)
    p = run("report", "specs", "-o", "site", cwd=proj)
    assert_refused(p, "site/index.html was changed since the report wrote it")
    assert snapshot(proj) == before


@pytest.mark.parametrize("umask, dirs, files", [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_report_directories_have_the_umasks_permissions(proj, umask, dirs, files):
    """Not 0700 (the site was made with mkdtemp before)."""
    old = os.umask(umask)
    try:
        p = run("report", "specs", "-o", "site/deeper", cwd=proj)
    finally:
        os.umask(old)
    assert p.returncode == 0, p.stderr
    site = proj / "site" / "deeper"
    for d in (proj / "site", site, site / "papers", site / "papers" / "tiny"):
        assert stat.S_IMODE(d.stat().st_mode) == dirs, (d, oct(d.stat().st_mode))
    for f in (site / "index.html", site / MANIFEST, site / "papers" / "tiny" / "m.png"):
        assert stat.S_IMODE(f.stat().st_mode) == files, f


def test_report_when_dot_fails_says_so_on_the_page(proj, tmp_path, monkeypatch):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "dot").write_text("#!/bin/sh\necho 'dot: out of memory' >&2\nexit 1\n")
    (bin_ / "dot").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    p = run("report", "specs", "-o", "site", cwd=proj)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "this diagram was not drawn: `dot` failed: dot: out of memory" in p.stderr
    assert "`dot` failed" in (proj / "site" / "papers" / "tiny.html").read_text()


# ---- 2. a bad -o is one line, exit 2, nothing moved -------------------------------------


def test_report_into_a_regular_file(proj):
    before = snapshot(proj)
    p = run_process("report", "specs/tiny.attn", "-o", "notes.txt", cwd=proj)
    assert_refused(p, "cannot write the report to notes.txt: it is a file, not a directory")
    assert snapshot(proj) == before  # no .notes.txt.old


def test_report_into_an_unwritable_place(proj):
    before = snapshot(proj)
    p = run("report", "specs/tiny.attn", "-o", "/proc/x", cwd=proj)
    assert_refused(p, "cannot write the report to /proc/x")
    assert snapshot(proj) == before


def test_diagram_onto_a_directory(proj):
    (proj / "d.svg").mkdir()
    (proj / "d.svg" / "inside.txt").write_text("x\n")
    before = snapshot(proj)
    p = run("diagram", "specs/tiny.attn", "-o", "d.svg", cwd=proj)
    assert_refused(p, "cannot write the diagram to d.svg: it is a directory")
    assert snapshot(proj) == before


@pytest.mark.parametrize("out", ["/proc/x.svg", "notes.txt/x.svg"])
def test_diagram_into_an_unwritable_place(proj, out):
    before = snapshot(proj)
    p = run("diagram", "specs/tiny.attn", "-o", out, cwd=proj)
    assert_refused(p, f"cannot write the diagram to {out}")
    assert snapshot(proj) == before


@pytest.mark.parametrize("fmt_", diagrams.FORMATS)
def test_diagram_replaces_its_own_diagram_and_nothing_else(proj, fmt_):
    out = proj / f"d.{fmt_}"
    assert cli.main(["diagram", str(proj / "specs" / "tiny.attn"), "-o", str(out)]) == 0
    assert diagrams.is_diagram(out)
    out.write_bytes(out.read_bytes())  # the same diagram, drawn again: replaced
    assert cli.main(["diagram", str(proj / "specs" / "tiny.attn"), "-o", str(out)]) == 0
    foreign = proj / f"mine.{fmt_}"
    foreign.write_bytes(b"<svg>my own drawing</svg>\n" if fmt_ == "svg" else
                        b"digraph mine { a -> b }\n" if fmt_ == "dot" else b"\x89PNG\r\n\x1a\n"
                        if fmt_ == "png" else b"%PDF-1.4\n%%EOF\n")
    assert not diagrams.is_diagram(foreign)
    before = snapshot(proj)
    p = run("diagram", "specs/tiny.attn", "-o", foreign.name, cwd=proj)
    assert_refused(p, "the file exists and is not a diagram taxcompile drew")
    assert snapshot(proj) == before


def test_rendered_diagrams_are_still_valid(proj):
    from PIL import Image

    for fmt_ in ("png", "svg"):
        out = proj / f"d.{fmt_}"
        assert cli.main(["diagram", str(proj / "specs" / "tiny.attn"), "-o", str(out)]) == 0
    img = Image.open(proj / "d.png")
    img.load()  # the tEXt chunk's CRC is checked while loading
    assert img.info["Software"].startswith("taxcompile diagram sha256=") and img.width > 50
    import xml.etree.ElementTree as ET
    assert ET.parse(proj / "d.svg").getroot().tag.endswith("svg")
    assert cli.main(["diagram", str(proj / "specs" / "tiny.attn"), "-o",
                     str(proj / "d.pdf")]) == 0
    pdf = (proj / "d.pdf").read_bytes()
    # the mark is a comment between the trailer and `startxref`: no offset moved
    xref = int(pdf[pdf.rindex(b"startxref") + 9:].split()[0])
    assert pdf[xref:xref + 4] == b"xref" or pdf[xref:].split()[1] == b"0"


def test_compile_does_not_overwrite_a_file_it_did_not_generate(proj):
    (proj / "generated").mkdir()
    (proj / "generated" / "tiny_m.py").write_text("# my own model\n")
    before = snapshot(proj)
    p = run("compile", "specs", "-o", "generated", cwd=proj)
    assert_refused(p, "cannot write generated/tiny_m.py: it exists and taxcompile did not "
                   "generate it")
    assert snapshot(proj) == before


def test_new_refuses_a_directory_and_an_unwritable_place(proj):
    before = snapshot(proj)
    assert_refused(run("new", "starter", "-o", "specs", cwd=proj), "specs is a directory")
    assert_refused(run("new", "starter", "-o", "/proc/x.attn", cwd=proj), "cannot write")
    assert_refused(run("new", "starter", "-o", "notes.txt", cwd=proj), "exists")
    assert snapshot(proj) == before


# ---- 5. exit codes and messages ----------------------------------------------------------


def test_report_of_a_missing_file_exits_2(proj):
    p = run("report", "missing.attn", "-o", "site", cwd=proj)
    assert_refused(p, "no such file: missing.attn")
    assert not (proj / "site").exists()


def test_report_of_an_empty_directory_exits_2(proj):
    (proj / "empty").mkdir()
    p = run("report", "empty", "-o", "site", cwd=proj)
    assert_refused(p, "no .attn files found in empty")
    assert not (proj / "site").exists()


@pytest.mark.parametrize("args", [
    ["check", "LONG"], ["fmt", "LONG"], ["compile", "specs", "-o", "LONG"],
    ["report", "specs", "-o", "LONG"], ["diagram", "specs/tiny.attn", "-o", "LONG.svg"],
    ["new", "starter", "-o", "LONG"],
])
def test_a_name_the_system_refuses_is_one_line(proj, args):
    long = "a" * 300  # longer than any file name may be (ENAMETOOLONG)
    before = snapshot(proj)
    p = run(*(a.replace("LONG", long) for a in args), cwd=proj)
    assert_refused(p, "File name too long")
    assert snapshot(proj) == before


# ---- the property: random commands against random existing paths ------------------------

# Paths relative to the project (the current directory); the world around it:
#   world/outside/…      someone else's files next to the project
#   world/proj/…         the project: specs, a thesis, directories of the user's files,
#                        files named like taxcompile's outputs, symbolic links
EXISTING = [".", "..", "specs", "specs/tiny.attn", "specs/README", "thesis.tex", "notes",
            "notes/a.txt", "notes/deep", "notes/deep/b.bin", "empty", "generated",
            "generated/tiny_m.py", "d.svg", "pic.svg", "old.dot", "pic.png", "doc.pdf",
            "link_dir", "link.svg", "edited_site", "added_site", "../outside",
            "../outside/data.csv", "/proc/x"]
SUFFIXES = ["", "/new", "/new.svg", "/new.dot", ".svg", ".png", "/site"]


def make_world(root: Path) -> Path:
    proj = root / "proj"
    files = {
        "proj/specs/tiny.attn": TINY.encode(),
        "proj/specs/README": b"notes on the specs\n",
        "proj/thesis.tex": b"\\documentclass{article}\n",
        "proj/notes/a.txt": b"a\n",
        "proj/notes/deep/b.bin": bytes(range(256)),
        "proj/generated/tiny_m.py": b"# my hand-written model, same name as compile's\n",
        "proj/d.svg/inside.txt": b"a directory named like a diagram\n",
        "proj/pic.svg": b"<svg xmlns='http://www.w3.org/2000/svg'/>\n",
        "proj/old.dot": b"digraph old { a -> b }\n",
        "proj/pic.png": b"\x89PNG\r\n\x1a\nnot really\n",
        "proj/doc.pdf": b"%PDF-1.4\n%%EOF\n",
        "outside/data.csv": b"a,b\n1,2\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    # earlier reports: one whose index.html the user has edited since (the manifest has
    # the hash it had), one beside which the user put pages of their own (not listed)
    edited = proj / "edited_site"
    edited.mkdir()
    (edited / MANIFEST).write_text(json.dumps({"written by": "taxcompile report", "files": {
        "index.html": hashlib.sha256(b"<p>as the report wrote it</p>\n").hexdigest()}}))
    (edited / "index.html").write_text("<p>as the user edited it</p>\n")
    added = proj / "added_site"
    (added / "papers").mkdir(parents=True)
    (added / MANIFEST).write_text(json.dumps({"written by": "taxcompile report", "files": {}}))
    (added / "papers" / "tiny.html").write_text("<p>the user's own page</p>\n")
    (proj / "empty").mkdir()
    (proj / "link_dir").symlink_to("notes")
    (proj / "link.svg").symlink_to("thesis.tex")
    return proj


COMMANDS = {
    "compile": lambda o: ["compile", "specs", "-o", o],
    "compile_file": lambda o: ["compile", "specs/tiny.attn", "-o", o],
    "report": lambda o: ["report", "specs", "-o", o],
    "report_file": lambda o: ["report", "specs/tiny.attn", "-o", o],
    "diagram": lambda o: ["diagram", "specs/tiny.attn", "-o", o],
    "new": lambda o: ["new", "starter", "-o", o],
    "fmt": lambda o: ["fmt", "specs/tiny.attn"],
}

step = st.tuples(st.sampled_from(sorted(COMMANDS)), st.sampled_from(EXISTING),
                 st.sampled_from(SUFFIXES))


def run_steps(world: Path, proj: Path, steps) -> None:
    """Run each (command, -o target) in turn; after each, every file of the original world
    is as it was. A failure is one line and changes nothing at all."""
    original = snapshot(world)
    ours: set[str] = set()  # entries taxcompile wrote in this run
    for command, target in steps:
        before = snapshot(world)
        p = run(*COMMANDS[command](target), cwd=proj)
        code, err = p.returncode, p.stderr
        after = snapshot(world)
        where = (command, target, code, err)
        if code != 0:
            assert code in (1, 2), where
            lines = errors_only(err)
            assert len(lines) == 1 and lines[0].startswith("taxcompile: error: "), where
            assert after == before, where  # nothing moved, written or removed
        assert unchanged(original, after) == [], where
        ours |= {rel for rel in after if after.get(rel) != before.get(rel)}
        assert all(rel in after or rel in ours for rel in before), where


def test_every_writing_command_against_every_existing_path():
    """Each command once against each path of the world, in a fresh world each time."""
    for base in EXISTING:
        for command in sorted(COMMANDS):
            with tempfile.TemporaryDirectory() as tmp:
                world = Path(tmp)
                run_steps(world, make_world(world), [(command, base)])


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=4))
def test_no_writing_command_changes_what_it_did_not_write(steps):
    """Random sequences of commands against random paths, existing or new beneath
    existing ones: what taxcompile writes in one step it may replace in the next, but
    nothing of the original world changes."""
    with tempfile.TemporaryDirectory() as tmp:
        world = Path(tmp)
        proj = make_world(world)
        run_steps(world, proj, [
            (command, base + suffix if base != "/proc/x" else base + suffix.lstrip("/"))
            for command, base, suffix in steps])


def test_fmt_through_a_symbolic_link_formats_the_spec_and_keeps_the_link(proj):
    spec = proj / "specs" / "tiny.attn"
    spec.write_text(TINY.replace("    input", "        input"))  # not formatted
    (proj / "link.attn").symlink_to("specs/tiny.attn")
    p = run("fmt", "link.attn", cwd=proj)
    assert p.returncode == 0, p.stderr
    assert (proj / "link.attn").is_symlink() and spec.read_text() == TINY
