"""Loading a pickled model runs the generated source stored in it, and the docs say so.

The hash in the module's name is checked against the source, but whoever writes a pickle
writes both: a pickle made to run code passes the check. README.md and taxcompile/built.py
warn of it (as PyTorch does of ``weights_only=False``) and name the safe way to share
weights, a ``state_dict`` loaded with ``weights_only=True``, which is checked here too."""

from __future__ import annotations

import io
import pickle
import re

import pytest

from conftest import ROOT
from taxcompile import built

torch = pytest.importorskip("torch")

import taxcompile  # noqa: E402

TEXT = """paper t { cite = "T" }
model m {
    input src: tokens[S] (vocab = 20)
    feature x = embed(src, 8)
    attention a { query = x  keys = x  score = multiplicative }
    output y = classify(a, 3)
}
"""


class _Crafted:
    """What a hostile pickle holds: a module name with the hash of its own source."""

    def __reduce__(self):
        source = "import builtins\nbuiltins._taxcompile_pickle_ran = True\nclass Model:\n    pass\n"
        name = f"taxcompile.built.evil_{built.digest(source)}"
        return built._restore, (name, "Model", source)


def test_a_pickle_with_a_matching_hash_runs_its_source():
    import builtins

    assert not hasattr(builtins, "_taxcompile_pickle_ran")
    try:
        pickle.loads(pickle.dumps(_Crafted()))
        assert builtins._taxcompile_pickle_ran is True  # the hash check let it through
    finally:
        if hasattr(builtins, "_taxcompile_pickle_ran"):
            del builtins._taxcompile_pickle_ran


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_readme_and_built_warn_that_loading_runs_code():
    readme = _flat((ROOT / "README.md").read_text(encoding="utf-8"))
    assert "Loading a pickled model runs the Python source stored in it." in readme
    assert "load only files you trust" in readme
    assert "weights_only=True" in readme
    doc = _flat(built.__doc__)
    assert "Unpickling runs the source stored in the pickle." in doc
    assert "not a changed file" in doc and "load only pickles you trust" in doc
    assert "load only files you trust" in _flat(taxcompile.build.__doc__)


def test_the_safe_way_shares_weights_without_code():
    """A state_dict holds tensors only: it loads with weights_only=True into a model built
    from the spec, which then computes what the original does."""
    torch.manual_seed(0)
    m = taxcompile.build(TEXT)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(1)
    other = taxcompile.build(TEXT)
    other.load_state_dict(torch.load(buf, weights_only=True))
    src = torch.randint(0, 20, (2, 5))
    torch.testing.assert_close(other(src).output, m(src).output, rtol=0, atol=0)
