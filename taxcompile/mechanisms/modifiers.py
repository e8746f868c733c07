"""Score modifiers: position terms in q and k (``position = …``) and additive biases on the
scores before the alignment (``bias = …``); docs/codegen.md has their equations. A term
added to a score leaves its family (Table II) and the alignment as they are: it is noted in
the reason, not a Table III value of its own."""

from __future__ import annotations

from ..params import P, pint
from .record import CtorArg, Mechanism


def _relative_reason(m) -> str:
    return ("Shaw et al.'s relative-position term q_i a^K_ij^T added to q_i k_j^T: still the "
            "same q·k score, with learned embeddings of the clipped distance j - i"
            + (" (and a^V_ij in the values)" if m.values else ""))


def _relative_doc(m, scaled: bool = False) -> str:
    return ("Relative positions (Shaw et al. 2018): e_ij = q_i (k_j + a^K_ij)^T"
            + (" / sqrt(d)" if scaled else "")
            + (", c_i = sum_j a_ij (v_j + a^V_ij)" if m.values else "")
            + ", a_ij = w_clip(j - i, -k, k); clip: k.")


def _relative_label(m) -> str:
    return f"relative positions (k = {m.k}{', values' if m.values else ''})"


POSITIONS: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("position", "relative", (pint("k"), P("values", "bool", False, False)),
              reason=_relative_reason, label=_relative_label, class_part="Rel",
              doc=_relative_doc,
              ctor=(CtorArg("clip", "int", owner="position", field="k",
                            comment="k: distances clipped to [-k, k] (Shaw et al. eq. 15)"),),
              template="position/relative.py.j2",
              helpers=("rel_distance", "score_table", "score_grid", "query_offset"),
              in_scores=True, qk=True, counts_past=True),
    Mechanism("position", "rotary", (P("base", "float", False, 10000.0),),
              reason="rotary positions turn q and k before the dot product, so q'·k' depends "
                     "on j - i: still the same q·k score",
              label="rotary positions", class_part="RoPE",
              doc="Rotary positions (Su et al., RoPE, half-split as GPT-NeoX): q and k of each "
                  "head turned by t * base^(-2f/d) at position t; base: 10000.",
              ctor=(CtorArg("base", "float", "10000.0", owner="position", field="base",
                            unset=10000.0,
                            comment="theta_i = base^(-2i/d) (RoPE)"),),
              template="position/rotary.py.j2", helpers=("rotary", "query_offset"), qk=True,
              pairs=True, detail=" (base {base:g})", counts_past=True, turns_keys=True),
    Mechanism("position", "transformer_xl",
              reason="Transformer-XL's relative terms q_i^T W_R R_(i-j) + u^T k_j + v^T W_R "
                     "R_(i-j) added to q_i^T k_j (Dai et al. 2019, section 3.3): still the same "
                     "q·k score, as Shaw et al.'s term is; u and v are learned biases per head, "
                     "not a query of their own",
              label="Transformer-XL relative positions", class_part="XL",
              doc="Transformer-XL relative positions (Dai et al. 2019, section 3.3): A_ij = "
                  "(q_i + u)^T k_j + (q_i + v)^T W_R R_(i-j), scaled as the score; R_r the "
                  "sinusoids of the distance r = i - j (keys before the first query "
                  "counted), W_R, u and v learned per head.",
              template="position/transformer_xl.py.j2",
              helpers=("rel_sinusoids", "score_table", "score_grid", "query_offset"),
              in_scores=True, qk=True, counts_past=True,
              step_table=True),
)}

BIASES: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("bias", "alibi",
              reason="ALiBi adds -m_h |i - j| to every score before the alignment: a fixed "
                     "bias, the score function is unchanged",
              label="ALiBi bias", class_part="ALiBi",
              doc="ALiBi (Press et al.): -m_h |i - j| added to the scores before the "
                  "alignment, m_h = 2^(-8h/H) (the causal form under the causal mask).",
              template="bias/alibi.py.j2", helpers=("alibi_slopes", "score_grid", "query_offset"),
              in_scores=True, counts_past=True),
    Mechanism("bias", "gaussian",
              reason="Yang et al.'s Gaussian bias -(j - P_i)^2 / (2 sigma_i^2) is added to "
                     "every score before the alignment: the score function is unchanged and "
                     "the alignment still spans all keys (a soft locality, not local "
                     "alignment)",
              label="Gaussian localness bias", class_part="Gauss",
              doc="Gaussian bias (Yang et al. 2018): G_ij = -(j - P_i)^2 / (2 sigma_i^2) "
                  "added to the scores, P_i = I sigmoid(U_p^T tanh(W_p q_i)), sigma_i = "
                  "D_i / 2, D_i = I sigmoid(U_d^T tanh(W_p q_i)), I the length.",
              template="bias/gaussian.py.j2", helpers=("score_grid",), in_scores=True),
)}

MODIFIERS: dict[str, Mechanism] = {**POSITIONS, **BIASES}
