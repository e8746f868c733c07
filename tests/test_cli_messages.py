"""Clear messages and the right exit code where a path is odd (issue 23, "Messages"):
`diagram -o .`, a file where a directory goes, a loop of symbolic links, a directory
named like a spec."""

from __future__ import annotations

import pytest

from taxcompile import cli

SPEC = ('paper p { cite = "X" }\n'
        "model m {\n"
        "    input src: tokens[S] (vocab = 100)\n"
        "    feature x = embed(src, 8)\n"
        "    attention a { query = project(x)  keys = x  score = multiplicative }\n"
        "}\n")


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.attn").write_text(SPEC)
    (tmp_path / "afile").write_text("mine\n")
    return tmp_path


def run(capsys, *args: str) -> tuple[int, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # a usage error found while expanding the paths
        code = e.code
    return code, capsys.readouterr().err


def test_diagram_into_the_current_directory_says_it_is_a_directory(here, capsys):
    code, err = run(capsys, "diagram", "s.attn", "-o", ".")
    assert code == 2 and "cannot write the diagram to .: it is a directory" in err
    assert "``" not in err
    code, err = run(capsys, "diagram", "s.attn", "-o", "x.txt")
    assert code == 2 and "cannot write the diagram to x.txt: the diagram formats are" in err


@pytest.mark.parametrize("args", [["diagram", "s.attn", "-o", "afile/x.dot"],
                                  ["compile", "s.attn", "-o", "afile/sub"],
                                  ["compile", "s.attn", "--layer", "a", "-o", "afile/l.py"],
                                  ["new", "foo", "-o", "afile/x.attn"]])
def test_a_file_in_the_way_is_named(here, capsys, args):
    code, err = run(capsys, *args)
    assert code != 0 and "afile is in the way (it is not a directory)" in err, err
    assert "File exists" not in err
    assert (here / "afile").read_text() == "mine\n"


@pytest.mark.parametrize("cmd", ["check", "fmt", "table"])
def test_a_loop_of_links_and_a_link_to_nothing_are_not_no_such_file(here, capsys, cmd):
    (here / "loop.attn").symlink_to("loop.attn")
    (here / "gone.attn").symlink_to("missing.attn")
    code, err = run(capsys, cmd, "loop.attn")
    assert code == 2 and "loop.attn is a loop of symbolic links" in err
    code, err = run(capsys, cmd, "gone.attn")
    assert code == 2 and "gone.attn is a symbolic link to a missing file (missing.attn)" in err


@pytest.mark.parametrize("cmd", ["check", "table", "compile"])
def test_a_directory_named_like_a_spec_is_a_usage_error(here, capsys, cmd):
    (here / "d" / "x.attn").mkdir(parents=True)
    code, err = run(capsys, cmd, "d")
    assert code == 2 and "d/x.attn is a directory, not a spec file" in err
