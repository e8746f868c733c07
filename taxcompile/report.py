"""A static HTML report: an index with Table III whose cells link to their rationale,
and one page per paper with its diagram (inline SVG), its classification and its spec
highlighted with the ``.attn`` Pygments lexer. No server, no JavaScript.

Templates are named after the files they emit (``templates/report/``)."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from . import __version__, codegen, diagrams, pipeline, table
from .classification import DIMENSIONS
from .diagnostics import visible
from .files import check_site_dir, check_unchanged, make_dirs, remove_dirs, write_site
from .lexer import AttnLexer

TEMPLATES = Path(__file__).resolve().parent / "templates" / "report"


def _ticks(text: str) -> Markup:
    """A rationale with its `node` names as <code>."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))


@dataclass
class Page:
    spec: pipeline.PaperRow
    file: str
    svgs: list  # (model name or "", inline SVG): one per variant
    note: str
    checked: object = None  # the CheckedSpec

    @property
    def id(self) -> str:
        return self.spec.paper.id


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["ticks"] = _ticks
    return env


def _svgs(cs) -> tuple[list[tuple[str, str]], str]:
    """The diagrams as inline SVG, one per model variant so that each keeps a readable
    width (``("", svg)`` for a spec of one model), or a note saying why there are none."""
    if shutil.which("dot") is None:
        return [], ("graphviz's `dot` program was not found, so this diagram was not drawn "
                    "(Debian: `apt-get install -y graphviz`).")
    models = [cm.model.name for cm in cs.models]
    out = []
    for name in models if len(models) > 1 else [None]:
        try:
            text = diagrams.render_svg(cs, models=None if name is None else [name])
        except diagrams.DiagramError as e:  # `dot` failed: the page says so
            return [], f"this diagram was not drawn: {e}"
        out.append((name or "", text[text.index("<svg"):]))  # no XML prolog, no doctype
    return out, ""


class _Clock:
    """The heatmaps' progress: a line per model, with the time left (trained models only:
    a model from the cache takes no time)."""

    def __init__(self, total: int, say):
        self.total, self.say, self.done = total, say, 0
        self.start = self.last = time.perf_counter()

    def tick(self, what: str, trained) -> None:
        self.done += 1
        now = time.perf_counter()
        took, self.last = now - self.last, now
        how = ("no heatmap" if trained is None else "from the cache" if trained.cached
               else f"{trained.steps} steps, {took:.1f} s")
        left = (now - self.start) / self.done * (self.total - self.done)
        eta = f"; about {left:.0f} s left" if self.done < self.total else ""
        self.say(f"heatmap {self.done}/{self.total} {what}: {how}{eta}")


def build(specs: list[tuple[Path, object]], out: Path,
          spec_dirs: list[Path] | tuple = (), train_steps: int | None = None,
          cache: Path | None | bool = True,
          progress=None, jobs: int = 1, study: dict | None = None
          ) -> tuple[list[Path], list[str]]:
    """Write the site of the checked ``specs`` (file, CheckedSpec) to ``out``; returns the
    files written and notes for the user.

    Each heatmap's model is first trained at most ``train_steps`` steps (default
    ``train.STEPS``) on a synthetic task (``train.py``); ``cache``: where trained weights
    are kept (True: ``train.cache_dir()``; None or False: nowhere).

    ``out`` holds only what reports wrote: a manifest (``files.MANIFEST``) lists them, and
    only those are replaced or removed. ``files.OutputError`` (raised before anything is
    written) refuses a directory that is not the report's: see ``files.check_site_dir``;
    ``spec_dirs`` are the directories given as inputs. ``progress``: called with a line
    per model whose heatmap is drawn (its training steps and time, the time left).
    ``jobs`` > 1: the models are first trained into the cache by that many processes
    (``pretrain.py``). ``study``: a study report's
    document (``study.report.document``), shown on its own page, study.html."""
    spec_paths = [Path(p) for p, _ in specs]
    check_unchanged(out, check_site_dir(out, spec_paths, list(spec_dirs)))  # before the slow part
    created = make_dirs(out, "cannot write the report to")  # fail early where -o cannot be
    try:
        return _build(specs, out, spec_paths, list(spec_dirs), train_steps, cache,
                      progress or (lambda line: None), jobs, study)
    except BaseException:
        remove_dirs(created)  # the directories made for a report that was not written
        raise


def _build(specs, out: Path, spec_paths: list[Path], spec_dirs: list[Path], train_steps,
           cache, progress, jobs, study=None):
    from . import train  # imports no torch until a model is trained

    if cache is True:
        cache = train.cache_dir()
    steps = train.STEPS if train_steps is None else max(0, int(train_steps))
    pages: list[Page] = []
    notes: list[str] = []
    for path, cs in specs:
        svgs, note = _svgs(cs)
        if note and note not in notes:
            notes.append(note)
        pages.append(Page(pipeline.classify_spec(cs), str(path), svgs, note, cs))
    ids = [p.id for p in pages]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError("two specs describe the same paper id: " + ", ".join(dupes))
    env = _env()
    fmt = HtmlFormatter(cssclass="highlight", style="friendly")
    titles = {d: table.TITLES[d] for d in DIMENSIONS}
    ordered = table.order([p.spec for p in pages])
    by_id = {p.id: p for p in pages}

    def summary(row: pipeline.PaperRow) -> dict:
        return dict(id=row.paper.id, cite=row.paper.cite, ref=row.paper.ref, row=row.row())

    # a spec of a Table III paper that is not its row (another variant of the same paper,
    # e.g. an example) is listed with that row, not among the other papers
    in_table = {r.paper.ref: r for r in ordered if r.paper.row is not None and r.paper.ref}
    also: dict[str, list] = {}
    for r in ordered:
        if r.paper.row is None and r.paper.ref in in_table:
            also.setdefault(in_table[r.paper.ref].paper.id, []).append(r)

    def listed(r) -> dict:
        return dict(summary(r), also=[dict(id=o.paper.id, models=", ".join(
            v.model for v in o.variants)) for o in also.get(r.paper.id, [])])

    files_out: dict[str, str | bytes] = {
        "index.html": env.get_template("index.html.j2").render(
            dims=DIMENSIONS, titles=titles, version=__version__, study=study is not None,
            table3=[listed(r) for r in ordered if r.paper.row is not None],
            others=[listed(r) for r in ordered
                    if r.paper.row is None and r.paper.ref not in in_table]),
        "style.css": (TEMPLATES / "style.css").read_text(encoding="utf-8")
        + fmt.get_style_defs(".highlight") + "\n",
    }
    clock = _Clock(sum(len(by_id[r.paper.id].checked.models) for r in ordered), progress)
    progress(f"heatmaps: {clock.total} models, each trained up to {steps} steps at toy sizes"
             + (f" (weights cached in {cache})" if cache else "")
             + (f", {jobs} at a time" if jobs > 1 and cache and steps else ""))
    if jobs > 1 and cache and steps:
        from . import pretrain

        pretrain.warm([(page.file, cm.model.name, codegen.generate(
            page.checked, cm, codegen.source_name(page.file)), codegen.output_name(
                page.checked, cm)[:-3]) for page in (by_id[r.paper.id] for r in ordered)
            for cm in page.checked.models], steps, cache, jobs, progress)
        clock.say = lambda line: None  # trained: the report reads them from the cache
    for row in ordered:
        page = by_id[row.paper.id]
        source = Path(page.file).read_text(encoding="utf-8")
        variants = [dict(model=v.model,
                         cells={d: [(val, v.cells[d].values[val]) for val in v.cells[d].labels(d)]
                                for d in DIMENSIONS})
                    for v in row.variants]
        code = [_model_code(page, cm, row, steps, cache, fmt, notes, clock, files_out)
                for cm in page.checked.models]
        home = in_table.get(row.paper.ref) if row.paper.row is None else None
        files_out[f"papers/{row.paper.id}.html"] = env.get_template("paper.html.j2").render(
            p=row.paper, file=visible(page.file), variants=variants, row=row.row(), dims=DIMENSIONS,
            titles=titles, svgs=page.svgs, diagram_note=page.note, version=__version__,
            heldout=train.HELDOUT, learned=train.LEARNED,
            source=highlight(source, AttnLexer(), fmt), code=code,
            home=None if home is None else dict(id=home.paper.id, cite=home.paper.cite))
    if study is not None:
        files_out.update(_study_page(env, study))
    old = check_site_dir(out, spec_paths, list(spec_dirs))  # as it is now, after rendering
    write_site(out, files_out, old)
    return [out / name for name in files_out], notes



def _model_code(page, cm, row, steps, cache, fmt, notes: list[str], clock,
                files_out: dict) -> dict:
    """One model's entry on its paper's page: its generated code, highlighted, and the
    heatmap of a trained instance's weights (its PNG added to ``files_out``; why there is
    none added to ``notes``)."""
    name = codegen.output_name(page.checked, cm)
    src = codegen.generate(page.checked, cm, codegen.source_name(page.file))
    png, why, trained = None, "", None
    try:
        from . import heatmap

        maps, trained = heatmap.weights(src, name[:-3], cm, steps, cache or None)
        failed = trained.heldout is not None and not trained.learned
        png = heatmap.png(maps, f"{row.paper.cite}: model {cm.model.name}"
                          + (" (did not learn its task)" if failed else ""))
    except Exception as e:  # the report still shows the code; say why there is no map
        why = f"no heatmap: {type(e).__name__}: {e}"
        if why not in notes:
            notes.append(why)
    clock.tick(f"{row.paper.id} {cm.model.name}", trained)
    if png is not None:
        files_out[f"papers/{row.paper.id}/{cm.model.name}.png"] = png
    return dict(model=cm.model.name, file=name, why=why,
                png=f"{row.paper.id}/{cm.model.name}.png" if png else None,
                trained=None if trained is None else _trained(trained),
                html=highlight(src, PythonLexer(), fmt))


def _trained(t) -> dict:
    """What a heatmap's caption says of its model's training and its held-out loss."""
    h = t.heldout
    return dict(steps=t.steps, task=t.task, loss=t.loss, describe=t.describe,
                heldout=None if h is None else dict(
                    loss=h.loss, chance=h.chance_text, learned=h.learned))


def _study_page(env: jinja2.Environment, doc: dict) -> dict[str, str | bytes]:
    """study.html (the effects per task, as ``taxcompile study report``) and its plots."""
    from .study import report as study_report

    files: dict[str, str | bytes] = {}
    plots = {}
    for task in doc["base"]:
        png = study_report.plot(doc, task)
        if png is not None:
            plots[task] = f"study/{study_report.plot_name(task)}"
            files[plots[task]] = png
    curves: dict[str, list[tuple[str, str]]] = {}  # task -> (dimension, learning-curve PNG)
    for task, dimension in study_report.curves.plots(doc):
        png = study_report.curves.png(doc, task, dimension)
        if png is not None:
            path = f"study/{study_report.curves.name(task, dimension)}"
            curves.setdefault(task, []).append((dimension, path))
            files[path] = png
    files["study.html"] = env.get_template("study.html.j2").render(
        doc=doc, plots=plots, curves=curves, version=__version__, fmt=study_report.num,
        ci=study_report.ci)
    return files
