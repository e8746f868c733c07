"""Argument types shared by the command lines (``taxcompile train``, ``taxcompile study``):
each raises ``argparse.ArgumentTypeError`` with the one line argparse prints."""

from __future__ import annotations

import argparse


def jobs(text: str) -> int | str:
    """A whole number of at least 1, or ``auto``: the cores the machine's load leaves free
    (``threads.free``), decided when the command runs."""
    return "auto" if text.strip() == "auto" else positive_int(text)


def positive_int(text: str) -> int:
    """A whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
