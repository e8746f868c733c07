"""What an alignment reads besides q, k and v: reinforced alignment's policy input
(`align = reinforced(policy = s)`, Wang et al. 2019's aspect). The agent's state is each
key k_l with s, so s is a feature vector per example (or per group of keys, where the
module attends once per group): never token ids, never one vector per position."""

from __future__ import annotations

from ..mechanisms import align_reads


def policy_fits(ck, f) -> bool:
    """``ck``: the ``Checker``; ``f``: the statement's ``attention.Fit``."""
    al = f.n.align
    for param, src in align_reads(al):
        s = ck.cm.shapes.get(src)
        if s is None:  # its own error is reported where it is declared
            return False
        where = f"the {param} of attention `{f.n.name}` reads `{src}`"
        if s.dim is None:
            ck.err(al.loc, f"{where}, token ids {s}", "embed and pool them first, e.g. "
                   f"`feature s = mean(embed({src}, 300))`, then `{param} = s`")
            return False
        if s.axes != f.groups[: len(s.axes)]:
            ck.err(al.loc, f"{where} {s}, one vector per position of "
                   f"`{s.axes[-1]}`; the policy reads one vector per example beside each key "
                   "(Wang et al.'s aspect)", f"pool it first, e.g. `feature s = mean({src})`, "
                   f"then `{param} = s`")
            return False
    return True
