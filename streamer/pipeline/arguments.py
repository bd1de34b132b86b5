"""Arguments checked where they are given, once, for every pipeline object.

A bad argument is a one-line ``ValueError`` naming it when the object is
made (or the epoch set, or a state loaded), not an error in numpy's or
anyio's words at the first crop: ``queue_size=None`` failed there as
``max_buffer_size must be either an integer or math.inf``, a NaN duration
planned an empty epoch without a word. What passes comes back as a plain
Python ``int`` or ``float``: a numpy ``int32`` seed overflowed the
generator's 32-bit arithmetic in every pass.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

__all__ = ["finite_number", "whole_number"]


def whole_number(name: str, value: object, least: int | None = None) -> int:
    """``value`` as a Python ``int`` if it is a whole number (a numpy integer
    too, not a bool, a float or a string) of at least ``least``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, Integral)
        or (least is not None and value < least)
    ):
        bound = "" if least is None else f" >= {least}"
        raise ValueError(f"{name} must be a whole number{bound}, not {value!r}")
    return int(value)


def finite_number(name: str, value: object, *, positive: bool = False) -> float:
    """``value`` as a Python ``float`` if it is a finite number (and above 0
    with ``positive``): NaN passes ``value <= 0`` checks, and infinity
    passes them too."""
    if (
        isinstance(value, bool)
        or not isinstance(value, Real)
        or not math.isfinite(value)
        or (positive and value <= 0)
    ):
        kind = "a finite number > 0" if positive else "a finite number"
        raise ValueError(f"{name} must be {kind}, not {value!r}")
    return float(value)
