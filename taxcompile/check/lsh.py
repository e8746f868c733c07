"""LSH attention (`align = lsh(buckets, rounds, chunk)`, Kitaev et al. 2020, Reformer): what
a module must be for its hashing to mean what the paper's does. Checked here on the IR once
the statement's roles are known (``taxcompile/check/__init__.py`` says what goes where).

- The query is the keys (shared-QK attention, the paper's §2.1): one hash per position
  puts a query and its key in the same bucket, and the queries and the keys share one
  sorted order, so a chunk of queries meets the chunk of keys it should. With separate q and
  k a query's bucket could hold no key at all (the paper's reason for sharing them).
- A plain q^T k score (multiplicative or scaled): the hash is of the vectors the dot product
  compares, so a bucket gathers the large scores (a W between them would break that).
- `buckets` is even: h(x) = argmax([xR; −xR]) with R of buckets / 2 columns.
- What the sort-and-chunk path does not compute (multi-dimensional weights, an affinity,
  a position term, head mechanisms that change q, k or the keys, …) is its record's
  ``excludes``, refused by the checker's one rule for every mechanism (mechanisms/needs.py)."""

from __future__ import annotations

from .. import ir
from .. import mechanisms as mech


def lsh_fits(checker, f) -> bool:
    """Whether statement ``f.n`` may hash its queries and keys (an error is recorded if not)."""
    n, where, al = f.n, f.where, f.n.align
    if al.buckets % 2:
        checker.err(al.loc, f"{where}: LSH hashes h(x) = argmax([xR; −xR]) into an even number "
                    f"of buckets (Kitaev et al. 2020, §2), got buckets = {al.buckets}",
                    f"use buckets = {al.buckets + 1}")
        return False
    same = isinstance(n.query, ir.Ref) and isinstance(n.keys, ir.Ref) \
        and n.query.node == n.keys.node
    if not same:
        loc = n.query.loc if n.query is not None else al.loc
        checker.err(loc, f"{where}: LSH attention shares one projection between the query "
                    "and the keys (Reformer's shared-QK attention): a query must hash to the "
                    "bucket of its own key, and queries and keys share one sorted order",
                    "name one feature for both, e.g. `feature qk = project(x)` then "
                    "`query = qk  keys = qk`")
        return False
    rec = mech.SCORES[n.score.fn]
    if not rec.qk:
        checker.err(n.score.loc, f"{where}: LSH buckets gather the keys with a large q^T k; "
                    f"the {n.score.fn.replace('_', ' ')} score is not q^T k",
                    "use `score = scaled_multiplicative` (or `multiplicative`)")
        return False
    return True
