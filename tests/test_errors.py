"""Error messages for malformed specs: exact locations, messages and hints.

Every case is a small, complete spec with one mistake. The first diagnostic must sit at
the expected line and column and say the expected message (and, where given, hint).
Cases whose current message is unclear or wrong are marked ``xfail(strict=True)``: they
assert the message we *want*, so they start passing (and must be un-marked) once fixed.

Also here: all errors of a file are reported together, golden snapshots of the CLI's
rendered stderr (``TAXCOMPILE_UPDATE_SNAPSHOTS=1`` rewrites them), and a check that no
malformed spec makes the CLI print a Python traceback.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from taxcompile import pipeline
from taxcompile.diagnostics import MAX_REPORTED, SpecError
from taxcompile.parser import MAX_BYTES, MAX_DEPTH, MAX_EXPR_DEPTH

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "errors"
UPDATE = os.environ.get("TAXCOMPILE_UPDATE_SNAPSHOTS") == "1"

# ---- building blocks -----------------------------------------------------------------
#
# line 1  paper p { cite = "X" }
# line 2  model m {
# line 3      input src: tokens[S] (vocab = 100)
# line 4      feature x = embed(src, 64)
# line 5  <body>                              (BODY: the first line of the case's body)
#         <one valid attention module>
#         }

PAPER = 'paper p { cite = "X" }\n'
HEAD = (
    "model m {\n"
    "    input src: tokens[S] (vocab = 100)\n"
    "    feature x = embed(src, 64)\n"
)
ATT = "    attention a { query = project(x)  keys = x  score = multiplicative }\n"
MODEL = HEAD + ATT + "}\n"  # a complete valid model (lines 2-6 when it follows PAPER)
BODY = 5


def spec(*body: str, att: bool = True) -> str:
    """The valid prefix, then ``body`` (one statement per argument, indented by four
    spaces, starting at line ``BODY``), then a valid attention module and ``}``."""
    return PAPER + HEAD + "".join(f"    {s}\n" for s in body) + (ATT if att else "") + "}\n"


def attn(fields: str) -> str:
    """An attention statement ``b`` with the given fields (for ``spec``)."""
    return "attention b { " + fields + " }"


def top(*lines: str) -> str:
    """The paper, then top-level ``lines`` (from line 2), then a valid model."""
    return PAPER + "".join(line + "\n" for line in lines) + MODEL


# Columns inside `spec(attn(...))` bodies: "    attention b { " is 18 characters.
A = 19  # the column of the first field of `attn(...)`

RANDOM_BYTES = random.Random(1234).randbytes(4096)
TWO_MB = PAPER.encode() + (b"# " + b"x" * 97 + b"\n") * 20_000  # 2,000,023 bytes
LONG_BODY = "feature y = linear(x, " + "1 + " * 245 + "zz)"  # a 1,009-character line
NESTED_PARENS = "let d = " + "(" * 10_000 + "1" + ")" * 10_000
NESTED_BRACES = "model n " + "{" * 10_000 + "}" * 10_000

HOP_LABEL = "expected a hop count after the repeat name, e.g. `repeat encoder 6 { … }`"
STMT_LABEL = ("expected a statement (`input`, `feature`, `query`, `output`, `update`, "
              "`attention`, `affinity`, `repeat` or `let`)")
STMT_HINT = "a model body holds statements such as `feature x = embed(src, 256)`"
TOP_LABEL = "expected `paper`, `let` or `model` at the top level"
TOP_HINT = "a spec holds one `paper { … }` block, `let` constants and `model` blocks"
CHAR_HINT = "names are letters, digits and `_`; comments start with `#`"
IDENT_HINT = "use letters, digits and `_`, e.g. `enc_self`"
BRACE = "unexpected end of file: missing `}` to close the block"
BRACE_HINT = "every `{` needs a matching `}`"
EOF_AT_END = ("an 'unexpected end of file' error points at the start of the last token "
              "(lark raises UnexpectedToken($END), so the UnexpectedEOF branch of "
              "parser._syntax_error that puts the caret at the end of the file never runs); "
              "the caret should be just after the last character")
LABELS = ("parser._EXAMPLES labels are not applied: lark 1.3's match_examples compares "
          "the whole ParserState (stack depth too), so an error that follows a `paper` "
          "block (every real spec) never matches the examples")


@dataclass(frozen=True)
class Case:
    id: str
    text: str | bytes
    line: int
    col: int
    msg: str
    hint: str | None = None  # None: the hint is not checked
    xfail: str | None = None  # why the current message is bad (the test asserts the good one)

    @property
    def data(self) -> bytes:
        return self.text if isinstance(self.text, bytes) else self.text.encode("utf-8")


# A decoder (lines 2-3) for the cases of attention inside a recurrence.
DEC = "model m {\n    input t: tokens[T] (vocab = 100, autoregressive)\n"
IN_LOOP = ("the steps of decoder `{}`, but it runs inside that decoder's step-by-step loop "
           "(`feed = {}`), where only the current step exists")
INTRA_HINT = ("attention inside a recurrence (LSTMN-style intra-attention) is not supported yet: "
              "attend over another input's features, or drop `feed` and attend over the "
              "decoder's outputs once it has run (`mask = causal`)")
VARIANT_UPDATE_HINT = ("updates are ordered, so where a new one would go is ambiguous: define "
                       "the model in full, or name the new version (`feature x2 = …`) and read "
                       "it where it is used")

CASES: list[Case] = [
    # ---- syntax: missing `=` ---------------------------------------------------------
    Case("missing_eq_let", top("let d 512"), 2, 7, "expected `=` after the name; found `512`",
         "statements read `feature x = embed(src, 256)` and `let d = 512`"),
    Case("missing_eq_feature", spec("feature y embed(src, 3)"), BODY, 15,
         "expected `=` after the name; found `embed`",
         "statements read `feature x = embed(src, 256)` and `let d = 512`"),
    Case("missing_eq_field", spec(attn("query = x  keys = x  heads 8")), BODY, 46,
         "expected `=` after the field name; found `8`",
         "write fields as `name = value`, e.g. `heads = 8`"),
    # ---- syntax: end of file in each kind of block -------------------------------------
    Case("eof_in_model", PAPER + HEAD + ATT, 5, 73, BRACE, BRACE_HINT),
    Case("eof_in_attention", PAPER + HEAD + "    attention a { query = x  keys = x\n",
         5, 38, BRACE, BRACE_HINT),
    Case("eof_in_paper", 'paper p { cite = "X"\n', 1, 21, BRACE, BRACE_HINT),
    Case("eof_in_repeat", PAPER + HEAD + "    repeat r 2 {\n        update x = norm(x)\n",
         6, 27, BRACE, BRACE_HINT),
    Case("eof_in_parens", PAPER + "let d = (3 + 4\n", 2, 15,
         "unexpected end of file: unclosed `(`", "every `(` needs a matching `)`"),
    Case("eof_in_call_args", PAPER + "model m {\n    input src: tokens[S] (vocab = 100\n",
         3, 38, "unexpected end of file: unclosed `(`", "every `(` needs a matching `)`"),
    Case("eof_in_brackets", PAPER + "model m {\n    input src: tokens[S\n", 3, 24,
         "unexpected end of file: unclosed `[`", "every `[` needs a matching `]`"),
    Case("eof_after_eq", PAPER + "let d =\n", 2, 8, "missing value after `=`",
         "give a value: a number, a name, a string or a call like `linear(x, 64)`"),
    # ---- syntax: brackets and commas ---------------------------------------------------
    Case("unclosed_paren_before_next_stmt", spec("feature y = linear(x, 64"), BODY + 1, 5,
         "unclosed `(`; found `attention`", "every `(` needs a matching `)`"),
    Case("missing_comma", spec("feature y = linear(x 64)"), BODY, 26,
         "missing `,` between arguments; found `64`",
         "separate arguments with commas: `linear(x, 64)`"),
    Case("extra_close_paren", spec("feature y = norm(x))"), BODY, 24,
         "unmatched `)`", "remove it, or add the `(` it closes"),
    Case("extra_close_brace", spec() + "}\n", 7, 1, "unmatched `}`",
         "remove it, or add the `{` it closes"),
    Case("operator_without_operand", top("let d = 3 + * 4"), 2, 13,
         "operator without a right-hand operand; found `*`",
         "complete the arithmetic, e.g. `d / heads`"),
    # ---- syntax: stray statements, unknown characters, keyword misuse ------------------
    Case("stray_feature_at_top_level", PAPER + "feature x = embed(src, 3)\n", 2, 1,
         TOP_LABEL + "; found `feature`", TOP_HINT),
    Case("stray_assignment_at_top_level", PAPER + "x = 3\n" + MODEL, 2, 1,
         TOP_LABEL + "; found `x`", TOP_HINT),
    Case("stray_update_at_top_level", PAPER + "update x = 3\n" + MODEL, 2, 1,
         TOP_LABEL + "; found `update`", TOP_HINT),
    Case("unknown_char_at", spec("feature y = x @ x"), BODY, 19,
         "unexpected character '@'", CHAR_HINT),
    Case("unknown_char_dollar", top("let $d = 3"), 2, 5, "unexpected character '$'", CHAR_HINT),
    Case("unknown_char_non_ascii_name", spec("feature café = norm(x)"), BODY, 16,
         "unexpected character 'é'", CHAR_HINT),
    Case("field_as_model_statement", spec("heads = 8"), BODY, 5,
         STMT_LABEL + "; found `heads`", STMT_HINT),
    Case("model_inside_model", spec("model n { }"), BODY, 5,
         STMT_LABEL + "; found `model`", STMT_HINT),
    Case("keyword_typo", spec("atention b { query = x  keys = x  score = general }"), BODY, 5,
         STMT_LABEL + "; found `atention`", "did you mean `attention`?"),
    Case("keyword_typo_top_level", top("modle n { }"), 2, 1, TOP_LABEL + "; found `modle`",
         "did you mean `model`?"),
    # ---- syntax: repeat ------------------------------------------------------------------
    Case("repeat_without_count", spec("repeat r { update x = norm(x) }"), BODY, 14,
         HOP_LABEL + "; found `{`", "`repeat NAME COUNT [shared] { … }`"),
    Case("repeat_shared_without_count", spec("repeat r shared { update x = norm(x) }"), BODY, 14,
         HOP_LABEL + "; found `shared`", "`repeat NAME COUNT [shared] { … }`"),
    Case("repeat_misspelt_shared", spec("repeat r 2 sharde { update x = norm(x) }"), BODY, 16,
         "expected `shared` or `{` after the hop count, found `sharde`",
         "`repeat NAME COUNT shared { … }` shares weights across hops"),
    Case("repeat_zero_hops", spec("repeat r 0 { update x = norm(x) }"), BODY, 14,
         "the hop count must be between 1 and 64, got 0",
         "use a value inside that range (a `let` constant is checked the same way)"),
    # ---- mechanisms ------------------------------------------------------------------------
    Case("align_not_a_function", spec(attn("query = x  keys = x  score = general  align = 3")),
         BODY, A + 46, "expected an alignment function", None),
    Case("no_query_names_every_queryless_score", spec(attn("keys = x  score = general")),
         BODY, 15, "attention `b` has no query, which only the `additive` and `concat` scores "
         "allow (eq. 33)", None),
    # ---- identifiers and duplicates ------------------------------------------------------
    Case("ident_python_keyword", spec("feature class = norm(x)"), BODY, 13,
         "feature name `class` is a Python keyword", IDENT_HINT),
    Case("input_named_like_a_forward_option",
         PAPER + MODEL.replace("src", "validate"), 3, 11,
         "input name `validate` is reserved: the generated `forward()` and `generate()` already "
         "use `validate`, a name of its own", "pick another name, e.g. `validate2`"),
    Case("ident_dunder", spec("feature __init__ = norm(x)"), BODY, 13,
         "feature name `__init__` starts with `__` (dunder names are reserved)", IDENT_HINT),
    Case("duplicate_feature", spec("feature x = norm(x)"), BODY, 13,
         "`x` is already defined in this model",
         "use `update NAME = …` to refine a feature, or pick another name"),
    Case("duplicate_constant", top("let d = 3", "let d = 4"), 3, 5,
         "constant `d` is defined twice",
         "define each `let` once; a variant may redefine its base's constants"),
    Case("duplicate_model", PAPER + MODEL + MODEL, 7, 7, "model `m` is defined twice",
         "give each model its own name; a variant is `model NAME : BASE { … }`"),
    Case("duplicate_paper", PAPER + PAPER + MODEL, 2, 7,
         "a spec describes one paper; found a second `paper` block",
         "put each paper in its own .attn file"),
    Case("duplicate_attention_field", spec(attn("query = x  keys = x  score = general  "
                                                "score = general")), BODY, 57,
         "field `score` is given twice",
         "give each field or option once; a variant replaces the whole statement"),
    Case("duplicate_paper_field", 'paper p { cite = "X"  year = 2017  year = 2018 }\n' + MODEL,
         1, 36, "paper field `year` is given twice",
         "give each paper field once"),
    # ---- unknown names, with suggestions ------------------------------------------------
    Case("unknown_name", spec("feature y = norm(xx)"), BODY, 22, "unknown name `xx`",
         "did you mean `x`?"),
    Case("unknown_feature_model", spec("feature y = lienar(x, 64)"), BODY, 17,
         "unknown feature model `lienar`", "did you mean `linear`?"),
    Case("unknown_score", spec(attn("query = project(x)  keys = x  score = multiplicativ")),
         BODY, 57, "unknown score function `multiplicativ`", "did you mean `multiplicative`?"),
    Case("unknown_alignment", spec(attn("query = project(x)  keys = x  score = general  "
                                        "align = lcoal(D = 3)")),
         BODY, 74, "unknown alignment function `lcoal`", "did you mean `local`?"),
    Case("unknown_attention_field", spec(attn("query = project(x)  keys = x  score = general  "
                                              "haeds = 2")),
         BODY, 66, "unknown attention field `haeds`", "did you mean `heads`?"),
    Case("unknown_paper_field", 'paper p { cite = "X"  yaer = 2017 }\n' + MODEL, 1, 23,
         "unknown paper field `yaer`", "did you mean `year`?"),
    Case("unknown_input_kind", PAPER + "model m {\n    input x: sequnce[L, 30]\n" + ATT + "}\n",
         3, 14, "unknown input kind `sequnce`", "did you mean `sequence`?"),
    Case("unknown_parameter", spec("feature y = linear(x, 64, actt = tanh)"), BODY, 31,
         "`linear` has no parameter `actt`", "did you mean `act`?"),
    Case("unknown_base_model", PAPER + "model v : base { }\n" + MODEL, 2, 11,
         "unknown base model `base`", "define the base model first"),
    Case("constant_used_as_feature", top("let d = 3").replace(ATT, "    feature y = norm(d)\n" + ATT),
         6, 22, "`d` is a constant, not a feature", None),
    # ---- wrong parameter types ---------------------------------------------------------
    Case("heads_zero", spec(attn("query = project(x)  keys = x  score = general  heads = 0")),
         BODY, 74, "`heads` must be between 1 and 1024, got 0",
         "use a value inside that range (a `let` constant is checked the same way)"),
    Case("heads_fraction", spec(attn("query = project(x)  keys = x  score = general  "
                                     "heads = 2.5")),
         BODY, 74, "`heads` must be a whole number, got 2.5",
         "sizes, counts and hop numbers are integers: write `64`, not `64.0`; a `let` of a division (`d / 2`) is whole only when it divides exactly"),
    Case("tokens_without_vocab", PAPER + "model m {\n    input src: tokens[S]\n"
         "    feature x = embed(src, 64)\n" + ATT + "}\n", 3, 16,
         "token input `src` needs a vocabulary size",
         "write `input src: tokens[…] (vocab = 30000)`"),
    Case("view_of_unknown_input", PAPER + "model m {\n    input src: tokens[S] (vocab = 100, "
         "of = words)\n    feature x = embed(src, 64)\n" + ATT + "}\n", 3, 45,
         "`of` names an input declared above: the data this input is another view of",
         "e.g. `input chars: tokens[W, C] (vocab = 300, of = words)`"),
    Case("vocab_on_sequence", PAPER + "model m {\n    input x: sequence[L, 30] (vocab = 10)\n"
         + ATT + "}\n", 3, 14, "only token inputs have a vocabulary",
         "drop `vocab = …`, or declare the input as `tokens[S] (vocab = …)`"),
    Case("bool_expected", spec(attn("query = project(x)  keys = x  score = general  "
                                    "heads = 2  penalty = true")),
         BODY, 87, "`penalty` must be a positive number, got true",
         "write a number above zero, e.g. `0.1`"),
    Case("enum_value_unknown", spec("feature y = positional(x, kind = sine)"), BODY, 38,
         "`kind` of `positional` cannot be `sine`", "one of: `sinusoid`, `learned`"),
    Case("required_parameter_missing", spec("feature y = linear(x)"), BODY, 17,
         "`linear` is missing `d`", "write `linear(x, d)`"),
    Case("extra_argument", spec("feature y = scale(x, 3)"), BODY, 26,
         "`scale` takes 1 argument(s); this one is extra",
         "`share` is given by name, e.g. `share = NODE`"),
    Case("local_without_window", spec(attn("query = project(x)  keys = x  score = general  "
                                           "align = local")),
         BODY, 74, "`local` needs `D`", "e.g. `local(D = 10)`"),
    # ---- constant arithmetic -----------------------------------------------------------
    Case("division_by_zero", top("let d = 64 / 0"), 2, 9, "division by zero",
         "divide by a constant that is not 0"),
    Case("division_by_zero_in_model", spec("let k = 3 / (2 - 2)"), BODY, 13, "division by zero",
         "divide by a constant that is not 0"),
    Case("unknown_constant", top("let d = dd * 2"), 2, 9, "unknown constant `dd`",
         "define it first with `let`"),
    Case("unknown_constant_suggestion", top("let d_model = 64", "let d = d_modle / 2"), 3, 9,
         "unknown constant `d_modle`", "did you mean `d_model`?"),
    Case("number_out_of_range", top("let d = 1e300 * 1e300"), 2, 9, "number out of range",
         "numbers in a spec are sizes and rates: write one of reasonable size, e.g. `512` or `1e-4`"),
    Case("vocab_zero", PAPER + "let vocab = 0\n" + MODEL.replace("vocab = 100", "vocab = vocab"),
         4, 35, "`vocab` must be a positive integer, got 0",
         "sizes, counts and hop numbers are 1 or more, e.g. `embed(src, 64)`"),
    Case("vocab_too_large", PAPER + MODEL.replace("vocab = 100", "vocab = 1e308"), 3, 35,
         "`vocab` must be a positive integer of at most 16,777,216, got 1e+308",
         "use a smaller size, or a `let` constant that you can change in one place"),
    Case("flat_sum_too_deep", top("let d = " + " + ".join(["1"] * 1000)), 2, 9,
         f"expression nested more than {MAX_EXPR_DEPTH} deep (each operator and call counts: "
         "`a + b + c` is 2 deep)", "split it into `let` constants or `feature` statements"),
    # ---- update and cycles -------------------------------------------------------------
    Case("update_undefined", spec("update z = norm(x)"), BODY, 12,
         "cannot update `z`: it is not defined yet", "define it first with `feature z = …`"),
    Case("update_input", spec("update src = norm(x)"), BODY, 12,
         "`src` is an input; only features, queries and outputs can be updated",
         "declare a new feature from it instead: `feature x2 = f(x)`"),
    Case("cycle", spec("feature y = norm(z)", "feature z = norm(y)"), BODY + 1, 13,
         "cycle in the dataflow: `y` → `z` → `y`",
         "a model is a dataflow graph; a decoder that reads its previous context uses "
         "`gru(x, 512, feed = ATTENTION)`"),
    Case("self_cycle", spec("feature y = norm(y)"), BODY, 13, "cycle in the dataflow: `y` → `y`"),
    # ---- shapes and mechanism requirements ---------------------------------------------
    Case("add_different_shapes", spec("feature y = linear(x, 32)", "feature z = x + y"),
         BODY + 1, 17, "cannot add `x` (S, 64) and `y` (S, 32): shapes differ",
         "a residual sum (eq. 37) takes equal shapes, or a vector over fewer leading axes with "
         "the same features (`h + q`); project one side with `linear`"),
    Case("multiplicative_dq_ne_dk", spec(attn("query = project(x, 32)  keys = x  "
                                              "score = multiplicative")),
         BODY, 61, "the multiplicative score needs d_q = d_k, but the query has 32 and the "
         "keys have 64", "project one side, e.g. `query = project(x, 64)`"),
    Case("heads_not_dividing_d", spec(attn("query = project(x)  keys = x  score = general  "
                                           "heads = 5")),
         BODY, 15, "attention `b`: d_q = 64 is not divisible by heads = 5",
         "each head gets an equal slice (eq. 38)"),
    Case("query_does_not_fit_keys",
         PAPER + HEAD + "    input doc: tokens[A, C] (vocab = 10)\n"
         "    feature y = embed(doc, 64)\n"
         "    attention a { query = project(y)  keys = x  score = multiplicative }\n}\n",
         7, 27, "query (A, C, 64) does not fit keys (S, 64)",
         "a query is one vector per group of keys, or one per position of a sequence whose "
         "other axes match the keys'"),
    Case("tokens_not_embedded", spec("feature y = norm(src)"), BODY, 22,
         "`src` holds token ids; embed them first", "e.g. `embed(src, 512)`"),
    Case("embed_features", spec("feature y = embed(x, 32)"), BODY, 23,
         "`embed` reads token ids, but `x` already has features (S, 64)",
         "use `linear(x, d)` to map features"),
    Case("location_without_fixed_length", spec(attn("query = mean(x)  keys = x  "
                                                    "score = location")),
         BODY, 54, "the location score predicts one weight per key from the query alone, so "
         "`S` needs a fixed length",
         "give the axis a length where the input is declared, e.g. `(…, S = 50)`"),
    Case("concat_with_query", spec(attn("query = mean(x)  keys = x  score = concat")),
         BODY, 54, "the concat score w^T W [q; k_l] = w^T W1 q + w^T W2 k_l is linear: the "
         "query adds the same number to every key's score, which the alignment cancels, so "
         "the query would be ignored",
         "use `score = additive(…)` (a non-linearity between q and k, eq. 6), or score the "
         "keys alone by dropping the query (eq. 33)"),
    Case("two_feeds_in_one_statement",
         PAPER + "model m {\n    input t: tokens[T] (vocab = 9, autoregressive)\n"
         "    input s: sequence[S, 8]\n"
         "    query h = gru(gru(embed(t, 8), 8, feed = a), 8, feed = a)\n"
         "    attention a { query = h  keys = s  score = multiplicative }\n}\n",
         5, 11, "`h` has 2 recurrent models with `feed`; a statement runs one decoder step by step",
         "give each decoder its own statement"),
    Case("axis_lengths_disagree", spec("input y: sequence[L, 8] (L = 6)",
                                       "input z: sequence[L, 8] (L = 7)"),
         BODY + 1, 11, "axis `L` has length 7 here but 6 in input `y`",
         "one axis has one length in every input"),
    Case("multi_dimensional_non_additive", spec(attn("query = project(x)  keys = x  "
                                                     "score = general  dimensionality = multi")),
         BODY, 57, "multi-dimensional attention scores each feature with W_d^T act(W1 q + W2 k "
         "+ b) (eq. 31); `general` gives one number per key", "use `score = additive(…)`"),
    Case("hard_multi_dimensional", spec(attn("query = project(x)  keys = x  score = additive  "
                                             "dimensionality = multi  align = hard")),
         BODY, 99, "hard alignment picks one value vector (eq. 26); multi-dimensional weights "
         "need a distribution per feature (eq. 32)", "use `dimensionality = single` with "
         "`align = hard`, or a soft alignment with `dimensionality = multi`"),
    Case("capsules_without_learned_query", spec(attn("query = project(x)  keys = x  "
                                                     "score = general  capsules = 3")),
         BODY, 15, "attention `b`: capsule-based attention learns one query per class (eq. 43)",
         "write `query = learned(d)`, or over several hops the output of an earlier capsule "
         "module, one query per class (eq. 41-43)"),
    Case("causal_cross_attention",
         PAPER + HEAD + "    input t: tokens[T] (vocab = 10)\n    feature y = embed(t, 64)\n"
         "    attention a { query = project(y)  keys = x  score = general  mask = causal }\n}\n",
         7, 15, "attention `a`: the causal mask relates positions of one sequence, so query "
         "and keys must run over the same axis",
         "masks are for self-attention (`query = project(F)`, `keys = F`)"),
    Case("penalty_without_heads", spec(attn("query = learned(64)  keys = x  score = additive  "
                                            "penalty = 1.0")),
         BODY, 15, "attention `b`: the penalty ||AAᵀ − I||²_F compares several rows of "
         "attention", "set `heads = r` (Lin et al.: r rows)"),
    Case("monotonic_local_single_query", spec(attn("query = mean(x)  keys = x  score = general  "
                                                   "align = local(D = 3, position = monotonic)")),
         BODY, 71, "monotonic local alignment sets p = the query's position (eq. 27), so the "
         "query must be a sequence", "use `position = predictive` (eq. 28)"),
    Case("affinity_used_as_feature",
         PAPER + HEAD + "    input t: tokens[T] (vocab = 10)\n    feature y = embed(t, 64)\n"
         "    affinity C = affinity(x, y)\n    feature z = C\n" + ATT + "}\n",
         8, 17, "`C` is an affinity matrix; use it in an attention module's `affinity` field",
         "write `affinity = NAME` in the attention module that reads it"),
    Case("affinity_call_in_feature", spec("feature z = affinity(x, x)"), BODY, 17,
         "`affinity(…)` is not a feature: declare the matrix with `affinity z = affinity(…)` "
         "and name it in an attention module's `affinity` field",
         "`affinity(…)` makes a matrix for co-attention (eq. 12-16): only an `affinity NAME = …` "
         "statement calls it"),
    Case("affinity_call_in_keys", spec(attn("keys = affinity(x, x)  query = x  score = general")),
         BODY, A + 7, "`affinity(…)` is not a feature: declare the matrix with "
         "`affinity NAME = affinity(…)` and name it in an attention module's `affinity` field",
         "`affinity(…)` makes a matrix for co-attention (eq. 12-16): only an `affinity NAME = …` "
         "statement calls it"),
    Case("affinity_of_one_input", spec("affinity C = affinity(x, x)"), BODY, 18,
         "an affinity matrix relates two different inputs; both operands run over `S`",
         "for relations within one input use self-attention (`query = project(F)`)"),
    Case("affinity_score_without_affinity", spec(attn("query = project(x)  keys = x  "
                                                      "score = max_pool")),
         BODY, 57, "the `max_pool` score reads an affinity matrix (eq. 12-16)",
         "add `affinity = NAME` with `affinity NAME = affinity(A, B)`"),
    Case("feed_non_autoregressive", spec("feature h = gru(x, 64, feed = a)"), BODY, 17,
         "`feed` makes a decoder read its previous context, so the recurrent model must run "
         "over an autoregressive input", "declare the target input with `(…, autoregressive)`"),
    Case("attention_without_keys", spec(attn("query = project(x)  score = general")), BODY, 15,
         "attention `b` has no keys",
         "say what it attends over: `features = F`, or `keys = …` and `values = …`"),
    Case("attention_without_score", spec(attn("query = project(x)  keys = x")), BODY, 15,
         "attention `b` has no score function",
         "add e.g. `score = additive(d_w = 256)` or `score = scaled_multiplicative` (Table II)"),
    # ---- attention inside a recurrence (issue 14) and `update` in variants ---------------
    Case("intra_attention_in_recurrence", PAPER + DEC +
         "    query h = lstm(embed(t, 64), 64, feed = a)\n"
         "    attention a { query = h  features = h  score = additive(d_w = 64) }\n"
         "    output y = classify(concat(h, a), 100)\n}\n",
         5, 41, f"attention `a` attends over `T`, {IN_LOOP.format('h', 'a')}", INTRA_HINT),
    Case("attention_over_decoder_inputs_in_recurrence", PAPER + DEC +
         "    feature e = embed(t, 64)\n    query h = gru(e, 64, feed = a)\n"
         "    attention a { query = h  features = e  score = multiplicative  mask = causal }\n}\n",
         6, 41, f"attention `a` attends over `T`, {IN_LOOP.format('h', 'a')}", INTRA_HINT),
    Case("self_attention_before_fed_attention", PAPER + DEC +
         "    input src: sequence[S, 64]\n    query h = gru(embed(t, 64), 64, feed = a)\n"
         "    attention s { query = h  features = h  score = multiplicative  mask = causal }\n"
         "    attention a { query = s  features = src  score = multiplicative }\n}\n",
         6, 41, f"attention `s` attends over `T`, {IN_LOOP.format('h', 'a')}", INTRA_HINT),
    Case("pool_in_recurrence", PAPER + DEC +
         "    input src: sequence[S, 64]\n    query h = gru(embed(t, 64), 64, feed = a)\n"
         "    attention a { query = concat(h, mean(h))  features = src  "
         "score = additive(d_w = 64) }\n}\n",
         6, 37, f"`mean` pools over `T`, {IN_LOOP.format('h', 'a')}",
         "compute it outside the loop: from the decoder's input, or from the decoder's outputs "
         "in a node that `a` does not read"),
    Case("feed_context_not_per_step", PAPER + DEC +
         "    input src: sequence[S, 64]\n    query h = gru(embed(t, 64), 64, feed = a)\n"
         "    attention a { query = learned(64)  features = src  score = multiplicative }\n}\n",
         5, 15, '`feed = a`: `a` is not computed in the steps of the decoder `h`: it does not depend on `h`',
         "feed a node computed from `h` in each step (an attention queried by `h`, Luong's h̃), or query the attention with `prev(h)` and feed its context (Bahdanau's c_i)"),
    Case("variant_update_without_base_update", PAPER + MODEL +
         "model n : m {\n    update x = norm(x + a)\n}\n",
         8, 12, "`update x` in a variant replaces the base's `update x`, but `m` has no top-level "
         "`update x`", VARIANT_UPDATE_HINT),
    Case("variant_update_ambiguous", PAPER + HEAD + ATT + "    update x = norm(x + a)\n"
         + ATT.replace("attention a", "attention b") + "    update x = norm(x + b)\n}\n"
         "model n : m {\n    update x = relu(x + a)\n}\n",
         11, 12, "`update x` in a variant replaces the base's `update x`, but `m` has 2 "
         "top-level `update x`", VARIANT_UPDATE_HINT),
    Case("variant_update_twice", PAPER + HEAD + ATT + "    update x = norm(x + a)\n}\n"
         "model n : m {\n    update x = relu(x + a)\n    update x = tanh(x + a)\n}\n",
         10, 12, "`update x` appears twice in this variant",
         "a variant's `update x` replaces the base's; name the extra versions instead "
         "(`feature x2 = …`)"),
    # ---- whole-spec mistakes -----------------------------------------------------------
    Case("no_paper_block", MODEL, 1, 1, "the spec has no `paper` block",
         'start with `paper bahdanau2015 { cite = "Bahdanau et al."  year = 2015 }`'),
    Case("paper_without_cite", 'paper p { year = 2017 }\n' + MODEL, 1, 7,
         "the paper block needs `cite`",
         'the citation label as in Table III, e.g. `cite = "Vaswani et al."`'),
    Case("no_model", PAPER + "let d = 3\n", 1, 1, "the spec defines no model",
         "add `model NAME { … }` with inputs, features and attention modules"),
    Case("model_without_attention", PAPER + HEAD + "}\n", 2, 7,
         "model `m` has no attention module",
         "add `attention NAME { query = …  keys = …  score = … }`"),
    Case("empty_file", "", 1, 1, "the spec has no `paper` block",
         'start with `paper bahdanau2015 { cite = "Bahdanau et al."  year = 2015 }`'),
    # ---- hostile input -----------------------------------------------------------------
    Case("binary_garbage", RANDOM_BYTES, 1, 1, "file is not valid UTF-8 (byte 0xb9)",
         "specs are UTF-8 text; is this a binary file?"),
    Case("invalid_utf8", b'paper p { cite = "Caf\xe9" }\n' + MODEL.encode(), 1, 22,
         "file is not valid UTF-8 (byte 0xe9)", "specs are UTF-8 text; is this a binary file?"),
    Case("nul_byte", PAPER + "let d = 3\x00\n" + MODEL, 2, 10, "file contains a NUL byte",
         "specs are text; is this a binary file?"),
    Case("two_megabytes", TWO_MB, 1, 1,
         f"file is too large ({len(TWO_MB):,} bytes; the limit is {MAX_BYTES:,})",
         "a spec describes one paper's models; split it or remove generated text"),
    Case("nested_parens_10000", top(NESTED_PARENS), 2, 8 + MAX_DEPTH + 1,
         f"brackets nested more than {MAX_DEPTH} deep",
         "flatten the expression with `feature` or `let` statements"),
    Case("nested_braces_10000", PAPER + NESTED_BRACES + "\n", 2, 8 + MAX_DEPTH + 1,
         f"brackets nested more than {MAX_DEPTH} deep",
         "flatten the expression with `feature` or `let` statements"),
    Case("line_of_1000_chars", spec(LONG_BODY), BODY, 4 + LONG_BODY.index("zz") + 1,
         "unknown constant `zz`", "define it first with `let`"),
]

BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "duplicate case ids"


def _param(c: Case):
    marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
    return pytest.param(c, id=c.id, marks=marks)


def _load(c: Case, tmp_path: Path):
    """Run the front end in-process; ``bytes`` cases go through a file (as the CLI reads)."""
    if isinstance(c.text, bytes):
        path = tmp_path / "x.attn"
        path.write_bytes(c.text)
        return pipeline.load(path)
    return pipeline.load_text(c.text, "x.attn")


def _errors(c: Case, tmp_path: Path) -> SpecError:
    with pytest.raises(SpecError) as info:
        _load(c, tmp_path)
    return info.value


# ---- 1. exact location, message and hint of the first diagnostic -----------------------


def test_enough_cases():
    assert len(CASES) >= 40
    assert sum(c.xfail is None for c in CASES) >= 40


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_first_diagnostic(case: Case, tmp_path):
    err = _errors(case, tmp_path)
    first = min(err.diagnostics, key=lambda d: (d.loc.line, d.loc.column))
    assert (first.loc.line, first.loc.column, first.message) == (case.line, case.col, case.msg)
    if case.hint is not None:
        assert first.hint == case.hint
    # The rendered text starts with this diagnostic (sorted by position).
    assert err.render().startswith(f"{first.loc}: error: {case.msg}")


def test_empty_file_reports_both_missing_parts():
    with pytest.raises(SpecError) as info:
        pipeline.load_text("", "x.attn")
    assert [d.message for d in info.value.diagnostics] == [
        "the spec has no `paper` block", "the spec defines no model"]


def pipeline_error_render(c: Case) -> str:
    with pytest.raises(SpecError) as info:
        pipeline.load_text(c.text, "x.attn")
    return info.value.render()


def test_long_line_is_rendered_around_the_column():
    """A 1,000-character line is cut to a window, with the caret still under the error."""
    c = BY_ID["line_of_1000_chars"]
    assert len(c.text.splitlines()[BODY - 1]) >= 1000
    lines = pipeline_error_render(c).splitlines()
    assert lines[0] == f"x.attn:{BODY}:{c.col}: error: unknown constant `zz`"
    source, caret = lines[1], lines[2]
    assert len(source) <= 4 + 200
    assert caret.strip() == "^"
    assert source[caret.index("^"):].startswith("zz)")


def test_nested_brackets_error_shows_the_source_line():
    text = top("let d = " + "(" * 100 + "1" + ")" * 100)
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "x.attn")
    lines = info.value.render().splitlines()
    assert lines[1].strip().startswith("let d = (((")
    assert lines[2].strip() == "^"


# ---- 2. all errors of a file are reported together -------------------------------------


def test_independent_errors_are_reported_together():
    text = spec("feature y1 = norm(q1)", "feature y2 = lienar(x, 3)",
                attn("query = x  keys = x  score = generl"))
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "x.attn")
    got = [(d.loc.line, d.loc.column, d.message) for d in info.value.diagnostics]
    assert got == [
        (BODY, 23, "unknown name `q1`"),
        (BODY + 1, 18, "unknown feature model `lienar`"),
        (BODY + 2, 48, "unknown score function `generl`"),
    ]
    rendered = info.value.render()
    assert rendered.count(": error: ") == 3
    assert "more error" not in rendered


def test_errors_in_several_models_are_reported_together():
    text = (PAPER + HEAD.replace("m {", "m1 {") + "    feature y = norm(q)\n" + ATT + "}\n"
            + "model m2 {\n    input src: tokens[S]\n    feature x = embed(src, 64)\n" + ATT + "}\n")
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "x.attn")
    assert [(d.loc.line, d.message) for d in info.value.diagnostics] == [
        (5, "unknown name `q`"), (9, "token input `src` needs a vocabulary size")]


def test_more_than_twenty_errors_end_with_and_n_more():
    n = MAX_REPORTED + 5
    text = spec(*(f"feature y{i} = norm(q{i})" for i in range(n)))
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "x.attn")
    assert len(info.value.diagnostics) == n
    rendered = info.value.render()
    assert rendered.count(": error: ") == MAX_REPORTED
    assert rendered.endswith("\n… and 5 more errors")
    # The shown errors are the first twenty by position.
    assert f"x.attn:{BODY}:23: error: unknown name `q0`" in rendered
    assert "`q19`" in rendered and "`q20`" not in rendered


def test_exactly_one_more_error_is_singular():
    text = spec(*(f"feature y{i} = norm(q{i})" for i in range(MAX_REPORTED + 1)))
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "x.attn")
    assert info.value.render().endswith("\n… and 1 more error")


# ---- CLI runs ----------------------------------------------------------------------------

SNAPSHOTS = [
    "missing_comma",
    "unknown_char_at",
    "ident_python_keyword",
    "unknown_name",
    "unknown_score",
    "heads_fraction",
    "cycle",
    "add_different_shapes",
    "location_without_fixed_length",
    "causal_cross_attention",
    "no_paper_block",
    "invalid_utf8",
    "intra_attention_in_recurrence",
    "pool_in_recurrence",
    "variant_update_ambiguous",
    "keyword_typo",
]
assert len(SNAPSHOTS) == 16 and all(BY_ID[s].xfail is None for s in SNAPSHOTS)


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``taxcompile ARGS`` as a subprocess from the repository root."""
    return subprocess.run([sys.executable, "-m", "taxcompile", *args], cwd=ROOT,
                          capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=120)


# ---- 3. golden snapshots of the CLI's stderr -------------------------------------------


@pytest.fixture(scope="module")
def snapshot_runs() -> dict[str, subprocess.CompletedProcess]:
    """``taxcompile check tests/data/errors/NAME.attn`` for each snapshot, two at a time.
    With TAXCOMPILE_UPDATE_SNAPSHOTS=1 the .attn inputs are first rewritten from the cases."""
    if UPDATE:
        DATA.mkdir(parents=True, exist_ok=True)
        for name in SNAPSHOTS:
            (DATA / f"{name}.attn").write_bytes(BY_ID[name].data)
    paths = [str((DATA / f"{name}.attn").relative_to(ROOT)) for name in SNAPSHOTS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(SNAPSHOTS, pool.map(lambda p: _cli("check", p), paths)))


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_snapshot_input_matches_case(name, snapshot_runs):
    """The stored .attn is the case's text (regenerate with TAXCOMPILE_UPDATE_SNAPSHOTS=1)."""
    assert (DATA / f"{name}.attn").read_bytes() == BY_ID[name].data


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_cli_snapshot(name, snapshot_runs):
    r = snapshot_runs[name]
    expected = DATA / f"{name}.expected"
    if UPDATE:
        expected.write_text(r.stderr, encoding="utf-8")
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, r.stderr
    assert r.stdout == ""
    assert r.stderr == expected.read_text(encoding="utf-8")


# ---- 4. no user mistake gives a traceback ----------------------------------------------


@dataclass
class CliResult:
    returncode: int
    stderr: str  # this file's part of the output
    ok_line: bool  # the file was reported as passing on stdout


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory) -> dict[str, CliResult]:
    """Every case written to a file and checked by the CLI.

    One subprocess checks all files (the CLI prints each file's errors in turn; a file
    that passes prints an `ok` line on stdout), which keeps this well under a second per
    case. If that batch shows a traceback or an unexpected exit code, each file is run in
    its own subprocess so that the failure is attributed to its case."""
    tmp = tmp_path_factory.mktemp("errors")
    paths = {}
    for c in CASES:
        path = tmp / f"{c.id}.attn"
        path.write_bytes(c.data)
        paths[c.id] = str(path)
    batch = _cli("check", *paths.values())
    if "Traceback" in batch.stderr or batch.returncode != 1:
        return {cid: CliResult(r.returncode, r.stderr, bool(r.stdout.strip()))
                for cid, r in ((cid, _cli("check", p)) for cid, p in paths.items())}
    # Cut stderr into each file's part: a file's errors start with "PATH:LINE:COL: error:".
    starts = []
    pos = 0
    for cid, p in paths.items():
        i = batch.stderr.find(p + ":", pos)
        starts.append((cid, i))
        if i >= 0:
            pos = i + 1
    out = {}
    for k, (cid, i) in enumerate(starts):
        nxt = next((j for _, j in starts[k + 1:] if j >= 0), len(batch.stderr))
        part = batch.stderr[i:nxt] if i >= 0 else ""
        ok = any(line.startswith(paths[cid] + ": ok") for line in batch.stdout.splitlines())
        out[cid] = CliResult(1 if part and not ok else 0, part, ok)
    return out


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_cli_reports_without_traceback(case: Case, cli_results):
    r = cli_results[case.id]
    assert "Traceback" not in r.stderr, r.stderr
    assert not r.ok_line
    assert r.returncode == 1, r.stderr
    first = r.stderr.splitlines()[0]
    assert ": error: " in first
    if not case.xfail:
        assert first.endswith(f".attn:{case.line}:{case.col}: error: {case.msg}"), first


def test_cli_batch_matches_single_run(cli_results, snapshot_runs):
    """The batched output of a file equals what `taxcompile check FILE` prints alone."""
    for name in SNAPSHOTS:
        single = snapshot_runs[name].stderr
        batched = cli_results[name].stderr
        assert batched.split(":", 1)[1] == single.split(":", 1)[1]


def test_article_before_a_word():
    from taxcompile.diagnostics import article

    assert [article(w) for w in ("alignment", "input", "score", "feature", "unit", "update",
                                 "`embed`")] == ["an", "an", "a", "a", "a", "an", "an"]
