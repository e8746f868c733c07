"""`taxcompile report --jobs`: a number of processes, or `auto` (the cores the machine's load
leaves free, at most 8); anything else is one line and exit 2, nothing written."""

import subprocess
import sys

import pytest

from taxcompile import argtypes, cli

from conftest import ROOT


def test_jobs_reads_a_count_or_auto():
    assert argtypes.jobs("3") == 3
    assert argtypes.jobs("auto") == "auto"
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(Exception):
            argtypes.jobs(bad)


def test_auto_is_parsed_by_the_report_command():
    args = cli.make_parser().parse_args(["report", "specs/", "--jobs", "auto"])
    assert args.jobs == "auto"


@pytest.mark.parametrize("bad", ["0", "many"])
def test_a_bad_jobs_value_is_one_line_and_exit_2(tmp_path, bad):
    p = subprocess.run([sys.executable, "-m", "taxcompile", "report", "specs/lin2017.attn",
                        "-o", str(tmp_path / "site"), "--jobs", bad], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "--jobs" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "site").exists()
