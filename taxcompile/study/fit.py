"""How a user's model fits a task: which of its inputs reads which of the task's tensors
(``study run --input x=doc,q=question``), and the ``Config`` fields set so that its
vocabulary, its classes and its fixed lengths are the task's.

A task gives ``x`` (the tokens attended over), ``q`` (the query tokens, one per scored
position) and, for some tasks, ``z`` (``TaskInfo.needs``); an input named ``gold``
(``alignment[…]``) gets the gold links. Without ``--input`` each reads the spec's input
of the same name. A vocabulary, a class count or a fixed length written as a `let` is set
to the task's through the generated ``Config`` (the spec's text is never changed); one
written as a number must already fit. What cannot be mapped is a reason, never a guess.

Torch-free (the plan reads it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import tasks as T
from .runs import StudyError

TENSORS = ("x", "q", "z")  # what a task gives a model (gold aside)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NEEDS = ("a task needs a token input for `x` (and one for `q` where it asks several "
         "queries, `z` for pair_recall) and one output over the task's 64 tokens, per query "
         "position or one per example; see `taxcompile study run --help`")


@dataclass(frozen=True)
class Fit:
    """A model fitted to a task: task tensor -> spec input, and the Config fields set."""

    inputs: tuple[tuple[str, str], ...]
    config: tuple[tuple[str, int], ...]


def parse_sets(text: str) -> tuple[tuple[str, int], ...]:
    """``hidden=32,layers=1`` -> (("hidden", 32), ("layers", 1)), or a ``StudyError``."""
    hint = "--set NAME=N,…: NAME a `let` of your spec, N a positive whole number"
    pairs: dict[str, int] = {}
    for part in text.split(","):
        name, eq, value = (s.strip() for s in part.partition("="))
        if not eq or not IDENT.fullmatch(name) or not value.isdigit() or int(value) < 1:
            raise StudyError(f"--set: `{part.strip()}` is not NAME=N (N a positive whole "
                             "number)", hint)
        if name in pairs:
            raise StudyError(f"--set: `{name}` is set twice", hint)
        pairs[name] = int(value)
    return tuple(pairs.items())


def parse_inputs(text: str) -> tuple[tuple[str, str], ...]:
    """``x=doc,q=question`` -> (("x", "doc"), ("q", "question")), or a ``StudyError``."""
    hint = "--input TASK=SPEC,…: TASK one of x, q, z (what the task gives), SPEC an input " \
        "of your model, e.g. --input x=doc,q=question"
    pairs: dict[str, str] = {}
    for part in text.split(","):
        task, eq, spec = (s.strip() for s in part.partition("="))
        if not eq or not task or not spec:
            raise StudyError(f"--input: `{part.strip()}` is not TASK=SPEC", hint)
        if task not in TENSORS:
            raise StudyError(f"--input: `{task}` is not a tensor the tasks give "
                             f"(they give {', '.join(TENSORS)})", hint)
        if not IDENT.fullmatch(spec):
            raise StudyError(f"--input: `{spec}` is not an input name", hint)
        if task in pairs:
            raise StudyError(f"--input: `{task}` is mapped twice", hint)
        if spec in pairs.values():
            raise StudyError(f"--input: input `{spec}` is given two of the task's tensors",
                             hint)
        pairs[task] = spec
    return tuple(pairs.items())


class _Fitter:
    """One model against one task; ``run`` gives a ``Fit`` or the reason it does not fit."""

    def __init__(self, cs, cm, task: str, given: tuple[tuple[str, str], ...],
                 sets: tuple[tuple[str, int], ...] = ()):
        self.cs, self.cm, self.task, self.info = cs, cm, task, T.TASKS[task]
        self.sets = sets
        self.ins = {n.id: n for n in cm.model.nodes if n.kind_ == "input"}
        self.given = dict(given)
        self.config: dict[str, int] = {}
        lets = dict(cs.spec.const_syms) | {n: s for n, _, s in cm.model.consts}
        # a plain `let` is a Config field the study may set; a derived one is not
        self.fields = {n for n, s in lets.items() if s is None}

    def _set(self, sym: str | None, value: int, what: str) -> str | None:
        """Set Config field ``sym`` to ``value``; the reason when it cannot be."""
        if sym is None or sym not in self.fields:
            return f"{what}, written as a number (name it with a `let` so the study can set it)"
        if self.config.get(sym, value) != value:
            return f"{what}, and its `let {sym}` is also set to {self.config[sym]}"
        self.config[sym] = value
        return None

    def _tokens(self, tensor: str, name: str, axes: int, length: int | None) -> str | None:
        """Input ``name`` reading the task's ``tensor``: tokens over ``axes`` axes; its
        vocabulary set to the task's; its length ``length`` where fixed (None: free)."""
        n = self.ins[name]
        label = f"input `{name}` (the task's `{tensor}`)"
        if n.kind != "tokens" or len(n.axes) != axes:
            shape = f"tokens over {axes} axes" if axes > 1 else "tokens over one axis"
            return f"{label} is {n.kind}[{', '.join(n.axes)}]; the task gives {shape}"
        sym = dict(n.sym)
        if n.vocab != T.V:
            why = self._set(sym.get("vocab"), T.V, f"{label} has a vocabulary of {n.vocab}")
            if why and (n.vocab or 0) < T.V:
                return why + f"; the task uses {T.V} tokens"
        if axes == 1 and length is not None and n.sizes[0] not in (None, length):
            why = self._set(sym.get(f"size:{n.axes[0]}"), length,
                            f"{label} has {n.sizes[0]} positions")
            if why:
                return why + f"; task {self.task} has {length}"
        return None

    def _map(self) -> dict[str, str] | str:
        """Task tensor -> spec input (the given names, else the spec's input of the same
        name), or why not."""
        for tensor, name in self.given.items():
            if name not in self.ins:
                return (f"--input {tensor}={name}: it has no input `{name}` (its inputs: "
                        f"{', '.join(self.ins)})")
        taken = set(self.given.values())
        out = dict(self.given)
        for tensor in TENSORS:
            if tensor not in out and tensor in self.ins and tensor not in taken:
                out[tensor] = tensor
        return out

    def run(self) -> Fit | str:
        info = self.info
        feeds = self._map()
        if isinstance(feeds, str):
            return feeds
        tokens = ", ".join(n for n, i in self.ins.items() if i.kind == "tokens") or "none"
        if "x" not in feeds:
            return (f"the task's `x` (the tokens attended over) reads no input: it has no "
                    f"input `x` (name one with --input x=NAME; its token inputs: {tokens})")
        segmented = info.family == "segmented"
        why = self._tokens("x", feeds["x"], 2 if segmented else 1,
                           None if segmented else info.L)
        if why:
            return why
        if "q" in feeds:
            why = self._tokens("q", feeds["q"], 1, info.T)
            if why:
                return why
        for name, declared, holds in info.needs:
            if name not in feeds:
                return (f"task {self.task} puts {holds} in its `{name}` ({declared}), which no "
                        f"input reads (name one with --input {name}=NAME; its token inputs: "
                        f"{tokens})")
            why = self._tokens(name, feeds[name], 1, None)
            if why:
                return why
        given = {"x", "q", "gold"} | {name for name, _, _ in info.needs}
        feeds = {t: s for t, s in feeds.items() if t in given}
        read = set(feeds.values()) | {"gold"}
        other = [n for n in self.ins if n not in read]
        if other:
            n = self.ins[other[0]]
            return (f"input `{other[0]}` ({n.kind}[{', '.join(n.axes)}]) has no data in task "
                    f"{self.task}, which gives {', '.join(t for t in TENSORS if t in given)}"
                    + (" (map it with --input TASK=NAME)" if n.kind == "tokens" else ""))
        why = self._output(feeds, tokens) or self._user_sets()
        if why:
            return why
        identity = all(t == s for t, s in feeds.items())
        return Fit(() if identity else tuple(sorted(feeds.items())),
                   tuple(sorted(self.config.items())))

    def _user_sets(self) -> str | None:
        """``--set``'s Config fields, or why one cannot be set."""
        for name, value in self.sets:
            if name not in self.fields:
                return (f"--set {name}={value}: it has no `let {name}` set to a number "
                        f"(its lets: {', '.join(sorted(self.fields)) or 'none'})")
            if self.config.get(name, value) != value:
                return (f"--set {name}={value}: task {self.task} sets `{name}` to "
                        f"{self.config[name]}")
            self.config[name] = value
        return None

    def _output(self, feeds: dict[str, str], tokens: str) -> str | None:
        info = self.info
        outs = [n for n in self.cm.model.nodes if n.kind_ == "output"]
        if len(outs) != 1:
            return f"the tasks score one output; it has {len(outs)}"
        out = outs[0]
        shape = self.cm.shapes[out.id]
        label = f"output `{out.name}`"
        # one prediction per query position (q's axis; x's where it has one position per
        # query), or one per example
        q_axis = self.ins[feeds["q"]].axes[0] if "q" in feeds else None
        x_axis = self.ins[feeds["x"]].axes[0]
        axes = tuple(shape.axes)
        per_query = len(axes) == 1 and (axes[0] == q_axis or (
            axes[0] == x_axis and info.L == info.T and info.family != "segmented"))
        if axes and not per_query:
            return (f"{label} is over ({', '.join(axes)}); task {self.task} scores "
                    + ("one prediction per example" if info.T == 1 else
                       f"one prediction per query position ({info.T})"))
        if not axes and info.T != 1:
            return (f"{label} is one prediction per example; task {self.task} asks "
                    f"{info.T} per example" + ("" if "q" in feeds else
                                               f" (one per position of an input that reads "
                                               f"its `q`: --input q=NAME; its token inputs: "
                                               f"{tokens})"))
        classes = shape.dim
        if classes != T.V:
            sym = dict(getattr(out.expr, "sym", ())).get("classes")
            why = self._set(sym, T.V, f"{label} has {classes} classes")
            if why and (classes is None or classes < T.V):
                return why + f"; the task predicts {T.V} tokens"
        return None


def fit(cs, cm, task: str, given: tuple[tuple[str, str], ...] = (),
        sets: tuple[tuple[str, int], ...] = ()) -> Fit | str:
    """How checked model ``cm`` (of checked spec ``cs``) fits ``task`` with the
    ``--input`` mapping ``given`` and the ``--set`` Config fields ``sets``, or why it
    does not."""
    return _Fitter(cs, cm, task, given, sets).run()


def help_text() -> str:
    """What a spec needs to fit each task (``study run --help``'s epilog)."""
    lines = ["what a spec needs to fit each task (inputs by the task's names; --input maps "
             "yours onto them):"]
    for name, info in T.TASKS.items():
        x = "x: tokens[S, W]" if info.family == "segmented" else f"x: tokens[{info.L}]"
        q = f", q: tokens[{info.T}]" if info.T != 1 else ", q: tokens[1] optional"
        z = "".join(f", {n}: {d}" for n, d, _ in info.needs)
        out = "one per example" if info.T == 1 else f"one per query position of q ({info.T})"
        lines.append(f"  {name:13} {x}{q}{z}; output: {out}")
    lines += [f"every task: vocabulary {T.V} (a `let` vocabulary is set to it; a number must "
              f"be at least {T.V}), an output over {T.V} classes (a `let` is set; a number "
              f"must be at least {T.V}), an input `gold: alignment[…]` trains with its gold "
              "links, and no other input"]
    return "\n".join(lines)
