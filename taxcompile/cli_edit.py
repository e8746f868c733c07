"""`taxcompile fmt` and `taxcompile new`: the commands that write spec text."""

from __future__ import annotations

import sys
from pathlib import Path

from . import cli_parser
from .cli_parser import EXIT_OK, EXIT_SPEC, EXIT_USAGE
from .diagnostics import SpecError


def cmd_fmt(args) -> int:
    from . import fmt, parser, pipeline
    from .files import rewrite

    files = pipeline.expand(args.files)
    if not files:
        print("taxcompile: error: no .attn files found in " + ", ".join(args.files),
              file=sys.stderr)
        return EXIT_USAGE
    stale, failed = [], 0
    for path, _ in files:
        if not path.exists():
            print(f"taxcompile: error: {cli_parser.missing(path)}", file=sys.stderr)
            return EXIT_USAGE
        if not path.is_file():  # fmt rewrites its files: a device or a fifo is no spec
            print(f"taxcompile: error: {path} is not a regular file", file=sys.stderr)
            return EXIT_USAGE
        try:
            # bytes, not read_text(): keep "\r\n" visible so that it gets normalised
            data, size = parser.read_bytes(path)
            if len(data) > parser.MAX_BYTES:
                parser._screen(data, str(path), size)  # raises: too large
            text = data.decode("utf-8")
            new = fmt.format_text(text, str(path))
        except SpecError as e:
            print(e.render(), file=sys.stderr)
            failed += 1
            continue
        except UnicodeDecodeError:
            try:
                parser._screen(data, str(path), size)
            except SpecError as e:
                print(e.render(), file=sys.stderr)
            failed += 1
            continue
        if new != text:
            stale.append(path)
            if not args.check:
                try:
                    rewrite(path, new)
                except OSError as e:
                    print(f"taxcompile: error: cannot write {path}: {e.strerror or e}",
                          file=sys.stderr)
                    failed += 1
                    continue
                print(f"formatted {path}")
    if args.check and stale:
        for path in stale:
            print(f"{path}: not formatted (run `taxcompile fmt {path}`)", file=sys.stderr)
        return EXIT_SPEC
    return EXIT_SPEC if failed else EXIT_OK


def cmd_new(args) -> int:
    from . import fmt
    from .files import write_atomic
    from .lower import bad_identifier

    why = bad_identifier(args.name)
    if why:
        print(f"taxcompile: error: `{args.name}` {why}; a spec name is an identifier such as "
              "`smith2024`", file=sys.stderr)
        return EXIT_USAGE
    path = Path(args.output or f"{args.name}.attn")
    if path.is_dir():
        print(f"taxcompile: error: {path} is a directory; name the file to write, e.g. "
              f"`-o {path / (args.name + '.attn')}`", file=sys.stderr)
        return EXIT_USAGE
    if (path.exists() or path.is_symlink()) and not args.force:
        print(f"taxcompile: error: {path} exists (use --force to overwrite)", file=sys.stderr)
        return EXIT_USAGE
    try:
        write_atomic(path, fmt.starter(args.name))
    except OSError as e:
        print(f"taxcompile: error: cannot write {path}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {path}: check it with `taxcompile check {path}`")
    return EXIT_OK
