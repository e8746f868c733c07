"""The ``taxcompile`` command line: each subcommand, run (its arguments: cli_parser.py).

Exit codes: 0 success, 1 errors in a spec, 2 a usage error."""

from __future__ import annotations

import argparse
import contextlib
import gc
import re
import sys
from pathlib import Path

from . import __version__, cli_edit, cli_parser
from .cli_parser import EXIT_OK, EXIT_SPEC, EXIT_USAGE
from .diagnostics import SpecError, visible


_FRONT_END = False  # imported by _front_end


def _front_end() -> None:
    """Import the front end (lark, the parser, checker and classifier) with the cyclic
    garbage collector paused, then freeze what the imports made (``gc.freeze``): they live
    as long as the process, and every later collection would walk them again. A fifth of
    a cold ``table specs/`` (0.37 -> 0.29 s). Once per process; the command line only, so
    a library user's collector is left alone."""
    global _FRONT_END
    if _FRONT_END:
        return
    _FRONT_END = True
    enabled = gc.isenabled()
    gc.disable()
    try:
        from . import checks, classification, graph, lower, parser  # noqa: F401

        parser.prepare()  # lark and its tables too: they live as long as the process
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _collector_paused():
    """The cyclic garbage collector paused while specs are read: a spec's syntax tree and
    IR live until its row is made, and a collection would walk them all; the cycles left
    behind (some thousands of objects a spec) wait for ``collect_if_grown``."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


GARBAGE_LIMIT = 200_000  # objects made since the last collection before a paused loop collects


def _collect_if_grown() -> None:
    """Collect the cycles of the specs read so far once they are many (a long list of
    specs stays bounded in memory); the 18 of specs/ never are: the 15 ms their collections
    took, spec by spec, are spent by nobody in a process that ends."""
    if gc.get_count()[0] > GARBAGE_LIMIT:
        gc.collect()


def _load_all(paths: list[str]):
    """(file, given explicitly, CheckedSpec) per spec; errors printed, counted."""
    from . import pipeline

    _front_end()
    files = cli_parser.expand(paths)
    results, failed = [], 0
    for path, explicit in files:
        try:
            results.append((path, explicit, pipeline.load(path)))
        except SpecError as e:
            print(e.render(), file=sys.stderr)
            failed += 1
    return results, failed


def _load_one(file: str, verb: str):
    """The checked spec of one file, or the exit code after reporting why not."""
    if Path(file).is_dir():
        print(f"taxcompile: error: {file} is a directory; {verb} one spec file", file=sys.stderr)
        return EXIT_USAGE
    results, failed = _load_all([file])
    return EXIT_SPEC if failed else results[0][2]


SUMMARY_NAMES = 8  # model names listed by `check` before "… and N more"


def _models_summary(names: list[str]) -> str:
    """``4 models: a, b, c, d``; a long list is cut after ``SUMMARY_NAMES`` names."""
    shown = ", ".join(names[:SUMMARY_NAMES])
    if len(names) > SUMMARY_NAMES:
        shown += f", … and {len(names) - SUMMARY_NAMES:,} more"
    return f"{len(names):,} model{'s' * (len(names) != 1)}: {shown}"


def cmd_check(args) -> int:
    results, failed = _load_all(args.files)
    for path, _, cs in results:
        print(f"{path}: ok ({_models_summary([m.model.name for m in cs.models])})")
    return EXIT_SPEC if failed else EXIT_OK


def cmd_classify(args) -> int:
    from . import pipeline
    from .classification import DIMENSIONS

    if args.torch:
        from .torchread.cli import classify_torch
        return classify_torch(args.torch, bool(args.files), args.format)

    results, failed = _load_all(args.files)
    docs = []
    for path, _, cs in results:
        row = pipeline.classify_spec(cs, args.reading)
        docs.append({
            "file": str(path), "paper": row.paper.cite, "ref": row.paper.ref,
            "row": row.row(),
            "variants": [{
                "model": v.model,
                "dimensions": {d: [{"value": val, "because": v.cells[d].values[val]}
                                   for val in v.cells[d].labels(d)] for d in DIMENSIONS},
                "notes": {d: v.cells[d].notes for d in DIMENSIONS if v.cells[d].notes},
            } for v in row.variants],
        })
    if args.format == "json":
        from .schemas import dump

        print(dump("classify", docs))
    else:
        for doc in docs:
            ref = f" [{doc['ref']}]" if doc["ref"] is not None else ""
            print(f"{doc['paper']}{ref}  ({doc['file']})")
            for v in doc["variants"]:
                print(f"  model {v['model']}")
                for d, vals in v["dimensions"].items():
                    print(f"    {d.replace('_', ' ')}: " + " + ".join(x["value"] for x in vals))
                    for x in vals:
                        for why in x["because"]:
                            print(f"      {x['value']}: {why}")
                    for note in v["notes"].get(d, ()):
                        print(f"      note, {note}")
    return EXIT_SPEC if failed else EXIT_OK


def cmd_table(args) -> int:
    from . import cache, pipeline, table

    # A spec whose row is in the cache (cache.py) is not loaded: most of a cold run is
    # importing the front end.
    rows, failed = [], 0
    with _collector_paused():
        for path, explicit in cli_parser.expand(args.paths):
            entry_key, data = cache.key(path, args.reading) or (None, None)
            entry = cache.load(entry_key, table.COLUMNS)
            if entry is None:
                _front_end()
                try:
                    entry = _table_entry(path, data, args.reading)
                except SpecError as e:
                    print(e.render(), file=sys.stderr)
                    failed += 1
                    continue
                finally:
                    _collect_if_grown()
                cache.store(entry_key, entry)
            if explicit or args.all or entry["survey_row"] is not None:
                rows.append(table.Row(entry["row"], entry["survey_row"], str(path)))
        sys.stdout.write(table.RENDER[args.format](table.order(rows)))
    return EXIT_SPEC if failed else EXIT_OK


def _table_entry(path: Path, data: bytes | None, reading: str) -> dict:
    """A spec's row for the table (and the cache); its checked spec goes on return."""
    from . import pipeline

    cs = pipeline.load(path) if data is None else pipeline.load_bytes(data, path)
    return {"row": pipeline.classify_spec(cs, reading).row(), "survey_row": cs.spec.paper.row}


def cmd_graph(args) -> int:
    from . import graph

    cs = _load_one(args.file, "`graph` exports")
    if isinstance(cs, int):
        return cs
    models = [m for m in cs.models if args.model in (None, m.model.name)]
    if not models:
        print(f"taxcompile: error: no model `{args.model}` in {args.file}", file=sys.stderr)
        return EXIT_USAGE
    render = graph.to_json if args.format == "json" else graph.to_graphml
    out = [render(graph.build(m)) for m in models]
    if args.format == "json" and len(out) > 1:
        print("[\n" + ",\n".join(out) + "\n]")
    else:
        print("\n".join(out))
    return EXIT_OK


def cmd_diagram(args) -> int:
    from . import diagrams
    from .files import OutputError

    cs = _load_one(args.file, "`diagram` draws")
    if isinstance(cs, int):
        return cs
    out = Path(args.output) if args.output else Path(Path(args.file).with_suffix(".svg").name)
    try:
        written, note = diagrams.write(cs, out)
    except (diagrams.DiagramError, OutputError) as e:
        print(f"taxcompile: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    for path in written:
        print(f"wrote {path}")
    if note:
        print(f"taxcompile: {note}", file=sys.stderr)
        return EXIT_SPEC if not written else EXIT_OK
    return EXIT_OK


def cmd_layer(args) -> int:
    """`compile SPEC --layer NAME -o FILE`: one attention statement as a drop-in layer."""
    from . import outputs
    from .codegen import layer
    from .files import write_all_atomic

    if len(args.paths) != 1:
        print("taxcompile: error: --layer compiles one spec file", file=sys.stderr)
        return EXIT_USAGE
    cs = _load_one(args.paths[0], "--layer compiles")
    if isinstance(cs, int):
        return cs
    models = [m for m in cs.models if args.model in (None, m.model.name)]
    if not models or (args.model is None and len(models) > 1):
        names = ", ".join(m.model.name for m in cs.models)
        what = f"no model `{args.model}`" if args.model else "several models"
        print(f"taxcompile: error: {what} in {args.paths[0]}: choose one with --model "
              f"({names})", file=sys.stderr)
        return EXIT_USAGE
    try:
        text = outputs.layer_text(cs, models[0], args.layer, args.paths[0])
    except layer.LayerError as e:
        print(f"taxcompile: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.output or "generated/layers")
    if args.output is None or out.is_dir() or args.output.endswith(("/", "\\")):
        out = out / f"{cs.spec.paper.id}_{models[0].model.name}_{re.sub(r'[^A-Za-z0-9]+', '_', args.layer).strip('_')}.py"
    if args.check:
        if not outputs.is_current(out, text):
            print(f"{out}: {'missing' if not out.is_file() else 'differs from its spec'}",
                  file=sys.stderr)
            return EXIT_SPEC
        print(f"{out}: up to date")
        return EXIT_OK
    why = outputs.not_ours(out, layer_file=True)
    if why:
        print(f"taxcompile: error: cannot write {out}: {why} (move it away, or choose "
              "another -o; nothing written)", file=sys.stderr)
        return EXIT_USAGE
    try:
        write_all_atomic({out: text})
    except OSError as e:
        print(f"taxcompile: error: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return EXIT_SPEC
    print(f"wrote {out}")
    return EXIT_OK


def cmd_compile(args) -> int:
    from . import codegen, outputs
    from .files import write_all_atomic

    if args.layer is not None:
        return cmd_layer(args)
    results, failed = _load_all(args.paths)
    if failed:
        print("taxcompile: nothing written: fix the spec errors first", file=sys.stderr)
        return EXIT_SPEC
    out_dir = Path(args.output or "generated")
    if out_dir.exists() and not out_dir.is_dir():
        print(f"taxcompile: error: -o {out_dir}: it is a file, not a directory: compile "
              "writes one .py file per model variant into the directory -o names "
              "(nothing written)", file=sys.stderr)
        return EXIT_USAGE
    files: dict[Path, str] = {}
    for path, _, cs in results:
        source = codegen.source_name(path)
        for cm in cs.models:
            target = out_dir / codegen.output_name(cs, cm)
            if target in files:
                print(f"taxcompile: error: two specs write {target} (paper ids must differ)",
                      file=sys.stderr)
                return EXIT_SPEC
            files[target] = codegen.generate(cs, cm, source)
    # files an earlier compile of these specs wrote that no model produces any more
    orphans, doubtful = outputs.orphans(out_dir, files, results)
    stale = [f for f, text in files.items() if not outputs.is_current(f, text)]
    # the drop-in layers under OUT/layers/ that these specs wrote (`compile --layer`)
    layers, gone = outputs.layer_goldens(out_dir, results)
    stale_layers = [f for f, text in layers.items() if not outputs.is_current(f, text)]
    if args.check:
        for f in stale + stale_layers:
            why = "missing" if not f.is_file() else "differs from its spec"
            print(f"{f}: {why} (run `taxcompile compile {' '.join(args.paths)} -o {out_dir}`)",
                  file=sys.stderr)
        for f in orphans:
            print(f"{f}: no model produces it any more (delete it)", file=sys.stderr)
        for f, why in gone:
            print(f"{f}: {why} (delete it)", file=sys.stderr)
        if stale or orphans or stale_layers or gone:
            return EXIT_SPEC
        print(f"{out_dir}: {len(files)} files up to date")
        return EXIT_OK
    # never overwrite a file that taxcompile did not generate (its first line says so; a
    # layer's also carries its text's hash)
    for f, why in [(f, outputs.not_ours(f)) for f in stale] + \
            [(f, outputs.not_ours(f, layer_file=True)) for f in stale_layers]:
        if why:
            print(f"taxcompile: error: cannot write {f}: {why} (move it away, or choose "
                  "another -o; nothing written)", file=sys.stderr)
            return EXIT_USAGE
    try:
        write_all_atomic({f: files[f] for f in stale} | {f: layers[f] for f in stale_layers})
    except OSError as e:
        print(f"taxcompile: error: cannot write {e.filename or out_dir}: {e.strerror or e} "
              "(nothing written)", file=sys.stderr)
        return EXIT_SPEC
    for f in orphans:
        f.unlink()
        print(f"removed {f} (no model produces it any more)")
    for f in stale_layers:
        print(f"wrote {f} (a drop-in layer of these specs)")
    for f, why in gone:
        print(f"taxcompile: note: {f}: {why}", file=sys.stderr)
    for f in doubtful:
        print(f"taxcompile: note: {f}: no model produces it any more, but its header names "
              "its spec by file name only (the spec is outside the working directory), so "
              "another spec of that name may have written it: not removed", file=sys.stderr)
    print(f"wrote {len(stale)} of {len(files)} files to {out_dir}/ ({len(files) - len(stale)} "
          "already up to date)")
    return EXIT_OK


def cmd_report(args) -> int:
    from . import report
    from .files import OutputError

    results, failed = _load_all(args.paths)
    if failed:
        print("taxcompile: no report written: fix the spec first", file=sys.stderr)
        return EXIT_SPEC
    spec_dirs = [Path(p) for p in args.paths if Path(p).is_dir()]
    study = None
    if args.study:  # the study's page: its document, read as `study report` reads it
        from .study.cli import read_document
        study = read_document(args.study)
        if isinstance(study, int):
            return study
    from .threads import free
    jobs = min(8, free()) if args.jobs == "auto" else args.jobs  # at most 8: memory
    try:
        files, notes = report.build([(path, cs) for path, _, cs in results], Path(args.output),
                                    spec_dirs, train_steps=args.train_steps,
                                    progress=lambda line: print(line, file=sys.stderr, flush=True),
                                    jobs=jobs, study=study)
    except OutputError as e:
        print(f"taxcompile: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as e:
        print(f"taxcompile: error: {e}", file=sys.stderr)
        return EXIT_SPEC
    for note in notes:
        print(f"taxcompile: {note}", file=sys.stderr)
    pages = sum(1 for f in files if f.suffix == ".html")
    print(f"wrote {pages} pages to {args.output}/: open {Path(args.output) / 'index.html'}")
    return EXIT_OK


def cmd_lift(args) -> int:
    from .torchread.cli import lift_torch  # (torch is imported only when it runs)

    return lift_torch(args.torch, args.output)


def cmd_schema(args) -> int:
    from .schemas import command

    return command(args.name, args.output)


def make_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``command``, only that subcommand's in full."""
    return cli_parser.build({
        "check": cmd_check, "classify": cmd_classify, "table": cmd_table, "graph": cmd_graph,
        "diagram": cmd_diagram, "report": cmd_report, "compile": cmd_compile,
        "fmt": cli_edit.cmd_fmt, "new": cli_edit.cmd_new, "schema": cmd_schema,
        "lift": cmd_lift, "train": _cmd_train, "lsp": _cmd_lsp}, __version__, command)


def _cmd_lsp(args) -> int:
    try:
        from .lsp.server import main
    except ImportError:
        print("taxcompile: error: the language server needs pygls: "
              "pip install 'taxcompile[lsp]'", file=sys.stderr)
        return EXIT_USAGE
    return main()


def _cmd_train(args) -> int:
    from .train_cli import cmd_train

    return cmd_train(args)


class _Visible:
    """A text stream that writes control characters as visible escapes: a file name, a
    cite or a source line with an ESC or a BEL never acts on the user's terminal."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text))
        return len(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Visible(out), _Visible(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["study"]:
        from .study.cli import main as study

        return study(argv[1:])
    parser = make_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if args.func is cmd_classify and not args.files and not args.torch:
        parser.error("classify: the following arguments are required: FILE "
                     "(or --torch MODULE:FACTORY)")
    try:
        return args.func(args)
    except BrokenPipeError:  # `taxcompile table specs/ | head`
        return EXIT_OK
    except OSError as e:  # a path the system refuses (a name too long, a loop of links, …)
        name = f"{str(e.filename)[:120]}{'…' if len(str(e.filename)) > 120 else ''}: " \
            if e.filename else ""
        print(f"taxcompile: error: {name}{e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
