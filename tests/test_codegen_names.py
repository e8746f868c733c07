"""``taxcompile/codegen/names.py``: the typed leaves of the plan. Sizes render their Config
fields with the owner chosen at render time; whether an expression needs parentheses is read
off its syntax tree (no text rewriting)."""

from __future__ import annotations

from taxcompile.codegen.features import channels_first, channels_last
from taxcompile.codegen.frame import Var
from taxcompile.codegen.expr import ATOM, UNARY
from taxcompile.codegen.names import (CONDITIONAL, PRODUCT, SUM, Dim, atom, cfg_expr, dim_of, paren,
                                     sym_names)


def test_a_size_renders_its_fields_with_the_owner_asked_for():
    d = dim_of(None, "d_model // heads").times(2)
    assert str(d) == "2 * (cfg.d_model // cfg.heads)"
    assert d.render("self") == "2 * (self.d_model // self.heads)"
    assert d.shown() == "2 * (d_model // heads)"
    both = dim_of(None, "d_model") + Dim(3)
    assert str(both.floordiv(dim_of(None, "heads"))) == "(cfg.d_model + 3) // cfg.heads"
    assert str(Dim(12).floordiv(Dim(4))) == "3" and str(Dim(5).times(Dim(2))) == "10"
    assert dim_of(None, "H").times(2).render("self.cfg") == "2 * self.cfg.H"


def test_a_sym_s_names_are_its_identifiers_not_a_number_s_exponent():
    assert cfg_expr("2e3 * d + x_1", "self") == "2e3 * self.d + self.x_1"
    assert sym_names("(a + 1_000) // b2") == ["a", "b2"]


def test_parentheses_follow_the_declared_precedence():
    """What binds looser than an atom is parenthesised, by the precedence its builder
    declared (tests/test_operand_precedence.py checks the declarations against the parser)."""
    assert paren("-x", UNARY) == "(-x)"
    assert paren("a + b", SUM) == "(a + b)" and paren("a * b", PRODUCT) == "(a * b)"
    assert paren("x if c else y", CONDITIONAL) == "(x if c else y)"
    assert paren("x.view(B, -1)[..., 0]", ATOM) == "x.view(B, -1)[..., 0]"
    assert atom(Var("a @ b", None, prec=PRODUCT)) == "(a @ b)" and atom(Var("h", None)) == "h"


def test_a_grid_op_s_channels_last_result_is_read_channels_first_without_a_move_back():
    from taxcompile import checks
    grid = checks.Shape(("H", "W"), 4)
    pooled = channels_last(Var("F.max_pool2d(h, 2)", grid))
    assert pooled.name == "F.max_pool2d(h, 2).movedim(1, -1)"
    assert channels_first(pooled) == "F.max_pool2d(h, 2)"
    # bound to a local, or any other tensor: its channels are moved first
    assert channels_first(Var("y", grid)) == "y.movedim(-1, 1)"
    assert channels_first(Var("a + b", grid, prec=SUM)) == "(a + b).movedim(-1, 1)"
