"""``taxcompile study run`` and ``taxcompile study report``.

Exit codes as the rest of the command line: 0 success, 1 spec errors or failed runs, 2 a
usage error (an unknown task, a spec no task fits, a study file that cannot be used).
Errors are one ``taxcompile: error: …`` line and a hint, never a traceback; nothing
stored is ever lost. Imports no torch: the engines' workers do."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .. import threads
from ..argtypes import positive_int as _positive
from ..cli_parser import EXIT_OK, EXIT_USAGE, _Parser
from .protocol import PROFILES as _PROFILES

EXIT_FAILED = 1  # spec errors or runs that failed
PROFILES = tuple(_PROFILES)  # smoke, slice, full and the literature's


def _positives(text: str) -> list[int]:
    """``150,600,2400``: positive whole numbers, at least one."""
    try:
        return [_positive(part.strip()) for part in text.split(",")]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e} in {text!r} (a list such as 150,600)") \
            from None


def _inputs(text: str) -> tuple[tuple[str, str], ...]:
    from .fit import parse_inputs
    from .runs import StudyError

    try:
        return parse_inputs(text)
    except StudyError as e:
        raise argparse.ArgumentTypeError(e.message.removeprefix("--input: ")) from None


def _sets(text: str) -> tuple[tuple[str, int], ...]:
    from .fit import parse_sets
    from .runs import StudyError

    try:
        return parse_sets(text)
    except StudyError as e:
        raise argparse.ArgumentTypeError(e.message.removeprefix("--set: ")) from None


def _task_needs() -> str:
    from .fit import help_text

    return help_text()


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="taxcompile study", description="Train every attention mechanism under "
                "one protocol on synthetic tasks with gold alignments, and report its effect "
                "per taxonomy dimension (docs/study.md).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("run", help="train the runs of a profile (or of your specs)",
                       description="Train the runs of a profile, or your own specs on the "
                       "tasks their inputs fit, into one SQLite file. A study that was "
                       "stopped (even killed) resumes where it stopped: runs already in the "
                       "file are not run again.", epilog=_task_needs(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("specs", nargs="*", metavar="SPEC",
                   help="spec files or directories (default: the profile's taxonomy slice)")
    s.add_argument("--profile", choices=PROFILES, default="smoke",
                   help="smoke: minutes, for CI; slice: about an hour on 2 cores; full: "
                   "every combination, for a cluster; literature: zoology's MQAR and "
                   "mad-lab's tasks as language models, one line per mixer (about half an "
                   "hour on 2 cores; literature_smoke: seconds) (default: smoke)")
    s.add_argument("--db", metavar="PATH", default="study.db",
                   help="the study file (default: study.db)")
    s.add_argument("--workers", metavar="N", type=_positive, default=None,
                   help="local processes (default: the cores the machine's load leaves "
                   f"free, here {threads.free(_cores())} of {_cores()})")
    s.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: a process pool; ray: one Ray task per run (pip install "
                   "'taxcompile[ray]')")
    s.add_argument("--address", metavar="ADDR", default=None,
                   help="with --engine ray: the cluster's address (default: RAY_ADDRESS, "
                   "else a local Ray)")
    s.add_argument("--connect-timeout", metavar="SECONDS", type=_seconds, default=30.0,
                   help="with --engine ray: how long to wait for the cluster at the address "
                   "to answer (default: 30)")
    s.add_argument("--params", metavar="N", type=_positive, default=None,
                   help="fit each model's width so that it has N parameters (within 10%%)")
    s.add_argument("--steps", metavar="N,M", type=_positives, default=None,
                   help="train every model under each of these step budgets (default: the "
                   "profile's); the report tells 'slower' from 'does not learn' with them")
    s.add_argument("--width", metavar="A,B", type=_positives, default=None,
                   help="train every model at each of these widths d (default: the "
                   "profile's; a spec of yours through its `let d`)")
    s.add_argument("--tasks", metavar="TASK", nargs="+", default=None,
                   help="only these tasks (default: every task a model fits)")
    s.add_argument("--input", metavar="TASK=SPEC,…", type=_inputs, default=(),
                   help="which input of your spec reads each tensor a task gives: x (the "
                   "tokens attended over), q (the query tokens), z (pair_recall's second "
                   "input), e.g. --input x=doc,q=question (default: the inputs so named). "
                   "A vocabulary, class count or fixed length your spec names with a `let` "
                   "is set to the task's; one written as a number must fit (what each "
                   "task needs: below)")
    s.add_argument("--set", metavar="NAME=N,…", type=_sets, default=(), dest="sets",
                   help="set `let`s of your spec through its Config, e.g. --set "
                   "hidden=32,layers=1 to train a published model at a CPU's size")
    s.add_argument("--dry-run", action="store_true",
                   help="list the runs and an estimate of the time; train nothing")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("report", help="the effects per dimension, from a study file",
                       description="Per task, the effect of each value of each taxonomy "
                       "dimension against the base model (the accuracy difference paired by "
                       "seed, its 95%% t interval and p, Holm-adjusted across the report; the "
                       "solved fraction and steps to threshold), the interactions the runs "
                       "cover, and every run with its learning curve.")
    s.add_argument("db", metavar="DB")
    s.add_argument("-o", "--output", metavar="DIR", default=None,
                   help="write report.md, report.csv, report.json and PNG plots to DIR "
                   "(default: print to stdout)")
    s.add_argument("--format", choices=("md", "csv", "json"), default="md",
                   help="what is printed to stdout (default: md)")
    s.set_defaults(func=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    from .runs import StudyError
    from ..diagnostics import SpecError

    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except StudyError as e:
        _print_error(e)
        return EXIT_USAGE
    except SpecError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        print("\ntaxcompile: stopped; the runs that finished are stored (run the same "
              "command again to go on)", file=sys.stderr)
        return 130


# ---- run -------------------------------------------------------------------------------------


def protocol_record(profile: str) -> dict:
    """What the study file stores as its protocol: the version, the profile and its frozen
    settings, as JSON gives them back (a file of other settings is refused:
    ``Store._check``)."""
    import json

    from . import protocol

    record = {"version": protocol.PROTOCOL_VERSION, "profile": profile,
              "settings": protocol.profile(profile).settings()}
    return json.loads(json.dumps(record))


def _plan(args):
    from . import runs as runs_mod
    from .fit import NEEDS
    from .runs import StudyError

    specs = [str(p) for p in args.specs] or None
    if specs:
        for s in specs:
            if not Path(s).exists():
                raise StudyError(f"no such file or directory: {s}", "name .attn spec files "
                                 "or directories of them")
    mapped = dict(inputs=args.input, sets=args.sets) if args.input or args.sets else {}
    planned, skips = runs_mod.plan(args.profile, specs, args.params, args.tasks, args.steps,
                                   args.width, **mapped)
    if specs:  # a spec the user named that no task fits is an error, with every reason
        ran = {r.source for r in planned}
        lost = sorted({s.source for s in skips} - ran)
        if lost or not planned:
            why = [f"{s.source}: model {s.model}: "
                   f"{f'task {s.task}: ' if s.task else ''}{s.why}"
                   for s in skips if s.source in lost or not planned]
            raise StudyError("no task fits " + (", ".join(lost) or "these specs") + ":\n  "
                             + "\n  ".join(why or ["no model to train"]), NEEDS)
    return planned, skips


# CPU seconds per seed-step and learning rate when no run is stored yet: the smoke profile
# on this project's 2-core machine (39 s of CPU for 4,900 seed-steps at one rate)
GUESS_SECONDS_PER_STEP = 0.008


def _estimate(pending, stored: list[dict], workers: int, profile: str) -> str:
    """About how long the pending runs take at most (every run its full steps): at the
    rate of the runs already in the file, else at ``GUESS_SECONDS_PER_STEP``."""
    from . import protocol
    from .engines import _clock

    if not pending:
        return "nothing to run"
    prof = protocol.profile(profile)
    work = sum(len(r.seeds) * len(r.lrs) * (r.budget or prof.steps) for r in pending)
    if stored:
        rate = sum(r["seconds"] for r in stored) / max(1, sum(r["steps"] for r in stored)
                                                        * len(prof.lrs))
        how = f"at the rate of the {len(stored)} seed results stored"
    else:
        rate, how = GUESS_SECONDS_PER_STEP, "a guess from the smoke profile on 2 cores"
    return f"at most about {_clock(work * rate / max(1, workers))} on {workers} " \
           f"worker(s) ({how})"


def cmd_run(args) -> int:
    from . import engines
    from .store import Store

    planned, skips = _plan(args)
    store = Store.create_or_open(args.db, protocol_record(args.profile)) if not args.dry_run \
        else None
    try:
        if args.dry_run:
            done, stored = _dry_run_state(args.db, args.profile)
        else:
            _say_removed(store)
            # everything read (and checked) before anything is written: a damaged file is
            # refused as it is
            done, stored, _ = store.done_keys(), store.results(), store.skips()
            store.put_skips(skips)
        pending = [r for r in planned if not all(r.key(s) in done for s in r.seeds)]
        workers = _workers(args.workers, len(pending))
        for s in skips:
            print(f"skip: {s.source}: model {s.model}"
                  f"{f' on {s.task}' if s.task else ''}: {s.why}", file=sys.stderr)
        if args.dry_run:
            steps = protocol_record(args.profile)["settings"]["steps"]
            for r in planned:
                state = "pending" if r in pending else "stored"
                print(f"{state:8} {r.task:14} {r.model:24} {r.source} "
                      f"(seeds {len(r.seeds)}, learning rates {len(r.lrs)}"
                      + (f", {r.budget or steps} steps" if args.steps else "")
                      + (f", width {r.width}" if r.width and args.width else "")
                      + f"{', supervised' if r.supervised else ''})")
            print(f"{len(planned)} runs, {len(pending)} to train, {len(skips)} skipped; "
                  + _estimate(pending, stored, workers if args.engine == "ray"
                              else min(workers, _cores()), args.profile))
            return EXIT_OK
        return _execute(args, store, planned, pending, workers, engines)
    finally:
        if store is not None:
            store.close()


def _workers(asked: int | None, pending: int) -> int:
    """The local processes to start: as asked (default: the cores the load leaves free),
    never more than the pending runs; more than the cores is said, as they then share
    them."""
    cores = _cores()
    workers = max(1, min(asked or threads.free(cores), pending))
    if asked is not None and asked > cores:
        print(f"taxcompile: note: --workers {asked} is more than the {cores} cores here; "
              f"starting {workers} (at most one per pending run), which share them",
              file=sys.stderr)
    return workers


def _dry_run_state(db: str, profile: str):
    """(stored keys, stored results) of an existing study file, read only; an empty state
    for a new one (a dry run creates nothing)."""
    from .store import Store

    if not Path(db).exists():
        return set(), []
    with Store.read(db) as store:
        store._check(protocol_record(profile))
        store.skips()  # checked, as a run checks them
        return store.done_keys(), store.results()


def _say_removed(store) -> None:
    if store.removed:
        print(f"taxcompile: note: removed {' and '.join(map(str, store.removed))}, left by a "
              f"deleted study file {store.path} (SQLite would have brought its runs back "
              "into the new one)", file=sys.stderr)


def _execute(args, store, planned, pending, workers, engines) -> int:
    print(f"{len(planned)} runs: {len(planned) - len(pending)} already in {args.db}, "
          f"{len(pending)} to train on "
          f"{'Ray' if args.engine == 'ray' else f'{workers} local worker(s)'}", file=sys.stderr)
    outcomes = engines.ray(pending, args.address, engines.EXECUTE,
                           timeout=args.connect_timeout) if args.engine == "ray" \
        else engines.local(pending, workers, engines.EXECUTE)
    progress, failed, start = engines.Progress(len(pending)), [], time.monotonic()
    for outcome in outcomes:
        if outcome.error is None:
            store.put(outcome.run, outcome.results, args.engine)
        else:
            failed.append(outcome)
        progress.update(outcome)
    for o in failed:
        print(f"taxcompile: run failed: {o.run.source}: model {o.run.model} on {o.run.task}: "
              f"{o.error}", file=sys.stderr)
    print(f"{len(pending) - len(failed)} runs trained in {time.monotonic() - start:.1f} s; "
          f"results in {args.db}" + (f"; {len(failed)} failed (run the same command again "
                                     "to retry them)" if failed else ""), file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


# ---- report ----------------------------------------------------------------------------------


def cmd_report(args) -> int:
    from . import report
    from .store import Store

    with Store.read(args.db) as store:
        doc = report.document(store)
    if args.output:
        for path in _write_report(report, doc, Path(args.output)):
            print(f"wrote {path}", file=sys.stderr)
    sys.stdout.write(report.RENDER[args.format](doc))
    return EXIT_OK


def _write_report(report, doc: dict, out: Path) -> list[Path]:
    """``report.write`` into ``out``, or a ``StudyError`` that says where and why (nothing
    written: the files are written all or none)."""
    from .runs import StudyError

    hint = "choose another -o (a directory, new or existing)"
    if out.exists() and not out.is_dir():
        raise StudyError(f"cannot write the report into {out}: it is a file, not a directory "
                         "(nothing written)", hint)
    try:
        return report.write(doc, out)
    except OSError as e:
        where = f" ({e.filename})" if e.filename and Path(e.filename).parent != out else ""
        raise StudyError(f"cannot write the report into {out}: {e.strerror or e}{where} "
                         "(nothing written)", hint) from None


def read_document(db: str) -> dict | int:
    """The report document of a study file (for the HTML report's study page), or the
    exit code after saying why it cannot be read."""
    from . import report
    from .runs import StudyError
    from .store import Store

    try:
        with Store.read(db) as store:
            return report.document(store)
    except StudyError as e:
        _print_error(e)
        return EXIT_USAGE


def _print_error(e) -> None:
    print(f"taxcompile: error: {e.message}", file=sys.stderr)
    if e.hint:
        print(f"  hint: {e.hint}", file=sys.stderr)
