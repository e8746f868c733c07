"""A spec's text checked, or the checker's first message: what the study's planners
(``plan``, ``lit_models``) ask of a model they write."""

from __future__ import annotations


def check(text: str, source: str):
    """The checked spec of ``text``, or None and the checker's first message."""
    from .. import pipeline
    from ..diagnostics import SpecError

    try:
        return pipeline.load_text(text, source), None
    except SpecError as e:
        return None, str(e).splitlines()[0].split(": error: ", 1)[-1]
