"""The record of one attention mechanism (``Mechanism``) and of one constructor argument
of the attention class it adds (``CtorArg``). Both are named tuples: immutable, and a
tenth of a frozen dataclass's cost to define at import (the front end imports them). No
``from __future__ import annotations`` here: a named tuple's string annotations would each
be compiled as a forward reference at import.

A record's text fields are either plain strings or ``str.format`` patterns over the IR
object that carries the mechanism (an ``ir.Mech``, whose fields are its name and
parameters): ``"a window of D = {D} around a {position} position"``; a field whose text is
not a pattern of the object's fields is a function of it. ``Mechanism.text`` renders either."""

from typing import Callable, NamedTuple, Union

from ..params import P

Text = Union[str, Callable[..., str], None]

# The kinds of mechanism, in the order a statement lists them (its class name, its
# constructor and its docstring follow this order).
KINDS = ("query", "trait", "qk_norm", "score", "align", "position", "bias", "mask",
         "heads_out", "penalty")


class CtorArg(NamedTuple):
    """One argument of an attention class's constructor that a mechanism adds."""

    name: str
    type: str  # its annotation in the generated signature
    default: str | None = None  # its default, as code; None: required
    # the IR object that holds the value: attention | score | align | position | qk_norm |
    # join (the way heads join, when it has parameters) | heads (the statement's head
    # mechanism named by ``mechanism``)
    owner: str = "attention"
    field: str = ""  # the value's attribute on ``owner`` ('' for values the caller computes)
    sym: str = ""  # its key in the owner's ``sym`` (a Config expression), '' as ``field``
    comment: str = ""  # the drop-in layer's Config comment
    unset: object = None  # an optional argument's value when the spec does not set it
    mechanism: str = ""  # owner "heads": the head mechanism whose parameter it is

    def value(self, n):
        """The value statement ``n`` gives it (None: computed by the caller)."""
        if not self.field:
            return None
        return getattr(self.owner_of(n), self.field)

    def owner_of(self, n):
        """The IR object whose ``sym`` holds the argument's Config expression."""
        if self.owner == "attention":
            return n
        if self.owner == "heads":
            return n.head(self.mechanism)
        return getattr(n, self.owner)

    def passed(self, n) -> bool:
        """Whether a call for ``n`` passes it: a required one always, an optional one when
        the statement sets it (a computed optional one, such as ``share``, is listed only
        where the statement has it)."""
        return self.required or not self.field or self.value(n) != self.unset

    @property
    def required(self) -> bool:
        return self.default is None

    def signature(self) -> str:
        return f"{self.name}: {self.type}" + ("" if self.required else f" = {self.default}")


class Mechanism(NamedTuple):
    """One attention-level mechanism: a score function, an alignment, a position term or
    bias, a penalty, a mask kind, a way of joining heads or another trait of a module."""

    kind: str  # one of KINDS
    name: str  # as a spec writes it (`score = NAME`), or the trait's name
    params: tuple[P, ...] = ()  # its parameters in the spec (lower checks calls against them)
    aliases: tuple[str, ...] = ()  # other spellings a spec may use (`dot`, `soft`)
    reading: Text = None  # its Table III value (scoring / alignment); None: it sets no cell
    reason: Text = ""  # why it reads so: the classifier's rationale (a pattern)
    label: Text = ""  # its short name in diagrams and summaries (a pattern)
    class_part: Text = ""  # its part of the generated class's name
    doc: Text = ""  # its line in the class docstring (a pattern)
    ctor: tuple[CtorArg, ...] = ()  # the arguments it adds to the class's constructor
    template: str | None = None  # its template under templates/codegen/
    helpers: tuple[str, ...] = ()  # helpers (templates/codegen/helpers/) its class calls
    # helpers it needs only when it compares a given query with the keys itself (not over
    # an affinity matrix, not as a gate): the additive score's one-query loop
    query_helpers: tuple[str, ...] = ()
    # a score that is a dot product of (transformed) q and k: what the docstring says it
    # computes, and whether it is scaled by 1/sqrt(d_k) (a fused kernel computes it)
    dot: Text = None
    scaled: bool = False
    extras: tuple[str, ...] = ()  # what the class returns besides c and a (log_prob, penalty)
    note: Text = ""  # a further line of the class docstring's body
    # a score's docstring in other settings: "no_query" (eq. 33), "affinity" (eq. 14-15),
    # "shared_keys" (eq. 9) and "shared_keys_multi" (eq. 9, 31)
    docs: tuple[tuple[str, str], ...] = ()
    equal_qk: bool = False  # a score that needs q and k of one width (q^T k)
    rows_fast: str | None = None  # a score's fast path for multi-dimensional rows ("blocks")
    # alignments: a plain softmax over all keys (fused and FlexAttention kernels compute
    # it); a gate per key position (c_l = a_l v_l) rather than a distribution over keys;
    # the fast path without the weights ("sdpa", "band", "gather", "chunks"; a function of
    # the align)
    plain: bool = False
    gate: bool = False
    fast: Text = None
    in_scores: bool = False  # a modifier that is a term of the scores (a score_mod)
    # What a statement needs of the module, read by the checker (taxcompile/check/).
    # Scores: W1 q + W2 k through a hidden layer of width d_w, the form multi-dimensional
    # attention scores each feature with (eq. 31); linear in q (a query adds one number to
    # every key's score, which the alignment cancels); a sum inside act(…) that takes
    # further terms (coverage's w_c c, eq. 9's W1 q beside eq. 7's W k, a gate's W1 q_l);
    # over an affinity matrix, "pooled" (one context per input, eq. 14-16) or "rows" (one
    # per query position, eq. 12-13); only over one (no weights of its own); one output
    # per key (the keys' axis needs a fixed length); GAT's, scoring a graph's edges only.
    hidden: bool = False
    linear: bool = False
    act_sum: bool = False
    affinity: str = ""
    needs_affinity: bool = False
    per_key: bool = False
    graph: bool = False
    qk: bool = False  # a score with a q·k term; a position term that enters it
    # Alignments: a window centred on a position the query gives; one key picked (eq. 26);
    # a normalised distribution over all the keys (what coverage needs; whether terms added
    # to the scores keep their meaning is the capability "score_terms", below).
    centred: bool = False
    picks_one: bool = False
    normalised: bool = False
    pairs: bool = False  # a position term that turns pairs of features: an even head width
    detail: Text = ""  # a modifier's values that two modules sharing weights compare beyond str()
    # issue 27, the codegen's reading (new fields go last, each with its default):
    # an alignment that centres its window at the query's own position (p = t): forward()
    # takes `start`, the first query's position, which a decoder step passes
    step_start: Union[bool, Callable[..., bool]] = False
    needs: tuple[str, ...] = ()  # forward()'s locals its template reads that are made on demand ("H")
    log_prob: str = ""  # extras["log_prob"] per "query" (N, H, Lq) or per "example" (N,)
    # a score over an affinity matrix that reduces its query rows to one score per key (one
    # context per input, eq. 14-16): "sum" (padded rows add 0) or "max" (they never win)
    affinity_rows: str = ""
    keys_once: bool = False  # a score with a query-free key term (W2 k + b) a decoder computes once
    # generate(): a mask that hides every later key, so a decoding step can run on the new
    # token alone (causal, forward); an alignment that places its keys by the query's
    # index in the whole sequence, so a step needs the whole prefix (local)
    hides_later: bool = False
    by_query_index: bool = False
    # a penalty that a spec writes as a bare coefficient (`penalty = λ`, its one parameter),
    # not a call
    bare: bool = False
    # a way of joining heads whose context is as wide as the values (d_v), as W_O's (eq. 40)
    full_width: bool = False
    # an alignment that hashes the queries and the keys alike (LSH, Kitaev et al. 2020): the
    # query must be the keys (shared QK), checked in taxcompile/check/lsh.py
    shared_qk: bool = False
    # a position term that places query i at Lk - Lq + i (the keys of a KV cache or of a
    # segment memory come first; the class's forward() takes `offset` to place it elsewhere),
    # so generate() can run a step on the new token alone
    counts_past: bool = False
    # a position term with a table over the distances a query sees (Transformer-XL's
    # W_R R_r): forward() takes an earlier call's rows (`table`), so that a generate()
    # step projects its new distances only
    step_table: bool = False
    # a position term or trait that turns each key by itself, by its own position alone
    # (RoPE, qk-norm): generate()'s KV cache keeps the keys after the turn, inside the
    # module (forward()'s `kv_cache`), so a step turns its new keys only
    turns_keys: bool = False
    # What it gives a module, needs of it and cannot go with, as tags (mechanisms/needs.py
    # words them): read by one checker rule (check/needs.py), whose refusal says
    # "<module> has <tag>, which <conflict[0]> cannot go with: <conflict[1]>". Tags it gives:
    # "score_terms" (an alignment that takes terms added to its scores: position terms,
    # biases), "per_key" (one output per key), "window" (a window over the keys' positions),
    # "edges" (a score over a graph's edges), "adds_keys", "mixes_heads".
    caps: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    conflict: tuple[str, str] = ("", "")
    # a way of joining heads whose parameter splits the context's features into equal parts
    # (routing's output capsules): (the parameter, its constructor argument, what the parts
    # are), so the checker and the drop-in layer refuse a number that does not divide them
    parts: tuple[str, str, str] = ("", "", "")
    # values the IR object reads as parameters that a spec does not write: what sets one
    # form of a mechanism apart from another that shares its class (`qk_norm = rms`'s
    # rms = true, and the l2 form's scale and groups it has no use for)
    fixed: tuple[tuple[str, object], ...] = ()
    # a penalty the model computes from a module's weights once the call returns: the call
    # of its helper, a pattern over its parameters, `{a}` (the weights, each step's in a
    # decoder loop), `{qmask}` and `{kmask}` (the padding masks of queries and keys); and
    # where it needs one weight per key and query position, why (a checker's message)
    call: Text = ""
    rows: str = ""
    # why its weights are no distribution over the keys ("" where they are one): what
    # `.weights` and `supervised`, which need one, say when they refuse the module
    not_distribution: Text = ""
    # parameters that a statement in a `repeat` whose hops have weights of their own takes
    # from its layer l (the innermost repeat's hop, 1-based) where the spec leaves them unset
    # (a constant that a paper schedules by depth): (parameter, its value as code, a pattern
    # over `{l}`, the hop number or the generated block's `depth`, and `{math}`, the module
    # (so that the file imports it), and as the text patterns read it). The IR holds None for such a parameter; the generated constructor call
    # computes it (codegen/depth.py).
    by_depth: tuple[tuple[str, str, str], ...] = ()
    # a penalty over several rows of weights (the heads'): why a module with one head is
    # refused and the hint (a checker's message); why multi-dimensional weights are (the
    # hint: `dimensionality = single`)
    several_heads: tuple[str, str] = ("", "")
    single: str = ""
    # a penalty over the heads' own tensors (Li et al.'s disagreement on the values or the
    # outputs): what its class returns as extras["heads"], "values" or "output" ('' for
    # the weights; a function of the IR value); why a module without a query is refused
    # ('' where it is not) and the hint; its call's comment ('' for its ``doc``)
    heads_extra: Text = ""
    no_query: Text = ""
    no_query_hint: str = ""
    call_note: Text = ""
    # a penalty that compares the weights with a target alignment input (supervised
    # attention): the parameter that names the input, an `alignment` over the module's
    # query positions and keys (check/penalties.py); its call, `{target}` the input, runs
    # in training, when the input is given
    target: str = ""
    # How the reader of PyTorch code (taxcompile/torchread) finds it: the names of the graph
    # patterns that give it (patterns.PATTERNS: named after graph shapes, "matmul_product",
    # not after mechanisms; () where no pattern finds it), and its name in the reasons the
    # reader writes ('' for its ``name``)
    recognised_by: tuple[str, ...] = ()
    title: str = ""
    # why it stands outside the combination matrix's one module (combination_space), ''
    # where it is in it
    outside_matrix: str = ""

    def depth_code(self, param: str) -> str:
        """Parameter ``param``'s value at layer ``{l}`` as code ('' when it has none)."""
        return next((code for name, code, _ in self.by_depth if name == param), "")

    def variant_doc(self, setting: str) -> str | None:
        return dict(self.docs).get(setting)

    def text(self, what: str, obj=None, **more) -> str:
        """Field ``what`` rendered for ``obj`` (the IR object carrying the mechanism)."""
        value = getattr(self, what)
        if value is None:
            return ""
        if callable(value):
            return value(obj, **more)
        if "{" not in value:
            return value
        return value.format(**{**fields(obj), **more})

    def holds(self, what: str, obj=None) -> bool:
        """Flag ``what`` for ``obj``: a bool field, or a function of the IR object."""
        value = getattr(self, what)
        return bool(value(obj) if callable(value) else value)


def fields(obj) -> dict:
    """The attributes of an IR object as format fields (a mechanism's record: its name and
    parameters; another record: its fields)."""
    if obj is None:
        return {}
    data = getattr(type(obj), "data", None)
    if data is not None:
        return data(obj)
    names = getattr(type(obj), "fields", None)
    if isinstance(names, dict):
        return {k: getattr(obj, k) for k in names}
    return dict(getattr(obj, "__dict__", {}))  # a number (a penalty's coefficient): none
