"""The ``taxcompile`` command line's words: its subcommands, their arguments and options,
the exit codes and the spec files the arguments name (``expand``; cli.py runs the
commands; study/cli.py adds ``study``'s own words).

Exit codes: 0 success, 1 errors in a spec, 2 a usage error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from . import argtypes

EXIT_OK, EXIT_SPEC, EXIT_USAGE = 0, 1, 2
READING_HELP = ("where the survey's text and its Table III disagree (a stack of "
                "self-attention layers is multi-hop in §3.3.2, not in Table III): follow "
                "the table (default) or the text")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: exit 2 with a short message
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


Commands = dict[str, Callable[[argparse.Namespace], int]]


def build(commands: Commands, version: str, command: str | None = None
          ) -> argparse.ArgumentParser:
    """The parser of ``taxcompile``; ``commands``: each subcommand's function (cli.py).
    With ``command`` (the word the command line starts with) only that subcommand's
    arguments are built: the others are stubs that give ``taxcompile --help`` their names
    and help, and are never parsed (a cold ``taxcompile table`` saves their building)."""
    p = _Parser(prog="taxcompile", description="Build and classify attention models with the "
                "taxonomy of Brauwers & Frasincar.")
    p.add_argument("--version", action="version", version=f"taxcompile {version}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add(name: str, **kwargs) -> argparse.ArgumentParser | None:
        """``name``'s parser to fill, or None where it is a stub."""
        if command is not None and name != command:
            sub.add_parser(name, help=kwargs["help"], add_help=False)
            return None
        s = sub.add_parser(name, **kwargs)
        s.set_defaults(func=commands[name])
        return s

    _reading_commands(add)
    _writing_commands(add)
    _training_commands(add, sub)
    return p


def _reading_commands(add: Callable) -> None:
    """The front end's commands: they read specs and print what they find."""
    if s := add("check", help="parse and check specs",
                description="Parse and check .attn specs; print every error."):
        s.add_argument("files", nargs="+", metavar="FILE")

    if s := add("classify", help="classify each model into Table III's eight dimensions",
                description="Classify each model variant; each value comes with the "
                "nodes that justify it."):
        s.add_argument("files", nargs="*", metavar="FILE")
        s.add_argument("--format", choices=("text", "json"), default="text")
        s.add_argument("--reading", choices=("table", "text"), default="table", help=READING_HELP)
        s.add_argument("--torch", metavar="MODULE:FACTORY",
                       help="classify a PyTorch model instead: FACTORY() returns (model, example "
                       "inputs); its attentions are read from the captured graph "
                       "(docs/classify-code.md)")

    if s := add("table", help="render Table III for specs",
                description="Render Table III. Directories contribute the papers that "
                "are in the survey's Table III (those with a `row`); files named "
                "explicitly are always included. The rows of specs that check are "
                "cached (in $TAXCOMPILE_CACHE_DIR, else ~/.cache/taxcompile) and "
                "reused while the spec and taxcompile are unchanged; "
                "TAXCOMPILE_NO_CACHE=1 turns that off."):
        s.add_argument("paths", nargs="+", metavar="PATH")
        s.add_argument("--format", choices=("md", "csv", "latex"), default="md")
        s.add_argument("--reading", choices=("table", "text"), default="table", help=READING_HELP)
        s.add_argument("--all", action="store_true",
                       help="also include papers that are not in the survey's Table III")

    if s := add("graph", help="export a model's graph",
                description="Export the typed model graph (nodes: inputs, features, "
                "queries, attention modules, outputs; edges with shapes)."):
        s.add_argument("file", metavar="FILE")
        s.add_argument("--model", help="only this model variant")
        s.add_argument("--format", choices=("json", "graphml"), default="json")

    if s := add("diagram", help="draw each model variant with graphviz",
                description="Draw each model variant in the survey's visual language "
                "(inputs, feature models, queries, attention modules, outputs; edges "
                "labelled with tensor shapes). Needs graphviz's `dot` for svg/png/pdf; "
                "without it the .dot source is written."):
        s.add_argument("file", metavar="FILE")
        s.add_argument("-o", "--output", metavar="OUT",
                       help="OUT.svg, OUT.png, OUT.pdf or OUT.dot (default: FILE's name as .svg)")


def _writing_commands(add: Callable) -> None:
    """The commands that write files: the report, generated code, formatted and new specs,
    a JSON Schema."""
    if s := add("report", help="write a static HTML report",
                description="Write a static HTML site: Table III with every cell "
                "linked to its rationale, and one page per paper with its diagram, "
                "classification and highlighted spec. No server, no JavaScript."):
        s.add_argument("paths", nargs="+", metavar="PATH")
        s.add_argument("-o", "--output", metavar="DIR", default="site",
                       help="the site's directory (default: site/)")
        s.add_argument("--train-steps", metavar="N", type=int, default=None,
                       help="train each heatmap's model at most N steps on its synthetic task "
                       "(default 200; 0: untrained); trained weights are cached under "
                       "$XDG_CACHE_HOME/taxcompile")
        s.add_argument("--jobs", metavar="N", type=argtypes.jobs, default=1,
                       help="train the heatmaps' models in N processes, or `auto`: as many as "
                       "the cores the machine's load leaves free (default 1)")
        s.add_argument("--study", metavar="DB", default=None,
                       help="add a page of this study file's results (`taxcompile study run`)")

    if s := add("compile", help="generate a PyTorch module per model variant",
                description="Write one standalone PyTorch file per model variant."):
        s.add_argument("paths", nargs="+", metavar="PATH", help="spec files or directories")
        s.add_argument("-o", "--output", default=None, help="output directory "
                       "(default: generated/; with --layer a file, default generated/layers/)")
        s.add_argument("--check", action="store_true", help="write nothing; exit 1 and name the "
                       "files that differ from what the specs produce")
        s.add_argument("--layer", metavar="NAME", help="write one attention statement of the "
                       "spec as a standalone nn.Module (a drop-in layer) to -o FILE")
        s.add_argument("--model", help="with --layer: the model variant that holds NAME")

    if s := add("fmt", help="format specs canonically",
                description="Rewrite specs in canonical form (comments kept). With "
                "--check, change nothing and exit 1 if a file is not formatted."):
        s.add_argument("files", nargs="+", metavar="FILE")
        s.add_argument("--check", action="store_true")

    if s := add("lift", help="write a .attn sketch of a PyTorch model's attentions",
                description="Capture MODULE:FACTORY's model as `classify --torch` does "
                "and write a spec sketch of what it recognised: its inputs and one "
                "attention statement per recognised attention; comments say what is "
                "not lifted. The sketch is checked before it is written "
                "(docs/classify-code.md)."):
        s.add_argument("--torch", metavar="MODULE:FACTORY", required=True,
                       help="FACTORY() returns (model, example inputs)")
        s.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: stdout)")

    if s := add("lsp", help="run the language server for editors over stdio",
                description="Serve the Language Server Protocol on stdin/stdout: "
                "diagnostics, hover, completion, navigation, formatting (docs/editor.md)."):
        pass  # no arguments

    if s := add("new", help="write a commented starter spec",
                description="Write NAME.attn: a small, commented, valid spec to edit."):
        s.add_argument("name", metavar="NAME")
        s.add_argument("-o", "--output", metavar="FILE")
        s.add_argument("--force", action="store_true", help="overwrite an existing file")

    if s := add("schema", help="print the JSON Schema of a command's JSON output",
                description="Print the JSON Schema of what `classify --format json` "
                "(classify) or `study report --format json` (study) writes."):
        s.add_argument("name", metavar="NAME", help="classify or study")
        s.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead")


def _training_commands(add: Callable, sub) -> None:
    """``train``, and ``study`` listed in --help."""
    if s := add("train", help="train a model of a spec into a checkpoint",
                description="Build a model of the spec (Config.tiny() unless --full) "
                "and train it with AdamW, warm-up and cosine decay on its synthetic "
                "task or on your batches (--data), evaluating held-out batches; the "
                "checkpoint resumes exactly when the command is run again."):
        from .train_cli import add_arguments  # (no torch: the command imports it when run)

        add_arguments(s)

    # `study` has its own command line (study/cli.py); main() hands it everything after
    # the word, so this entry only lists it in --help
    sub.add_parser("study", help="train every mechanism on tasks with gold, report effects "
                   "per dimension (`taxcompile study run|report --help`)", add_help=False)


def expand(paths: list[str]) -> list[tuple[Path, bool]]:
    """(file, given explicitly) per spec named by ``paths``; usage errors exit 2."""
    from . import pipeline

    files = pipeline.expand(paths)
    if not files:
        print("taxcompile: error: no .attn files found in " + ", ".join(paths), file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    for path, explicit in files:
        if explicit and not path.exists():
            print(f"taxcompile: error: {missing(path)}", file=sys.stderr)
            raise SystemExit(EXIT_USAGE)
        if not explicit and path.is_dir():  # `dir/x.attn/`: a directory, not a spec
            print(f"taxcompile: error: {path} is a directory, not a spec file", file=sys.stderr)
            raise SystemExit(EXIT_USAGE)
    return files


def missing(path: Path) -> str:
    """Why a path named on the command line cannot be read: no such file, or a symbolic
    link that leads nowhere (a loop, or a missing target)."""
    import errno
    import os

    if path.is_symlink():
        try:
            os.stat(path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                return f"{path} is a loop of symbolic links"
            return f"{path} is a symbolic link to a missing file ({os.readlink(path)})"
    return f"no such file: {path}"
