"""Keyword arguments checked by name, with a suggestion for a near miss.

``Streamer``, ``Mix`` and ``CropDataset`` used to take store options as
extra keyword arguments; they now go in ``storage_options=``, and any other
unknown keyword is a ``TypeError`` that says what was probably meant.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import ParamSpec, TypeVar

__all__ = ["check_keywords", "checked_keywords", "keyword_names"]

P = ParamSpec("P")
R = TypeVar("R")

#: How alike a name must be to an accepted one to be suggested (``difflib``
#: ratio): lower, and store options look like typos (``block_size`` for
#: ``world_size``, ``secret`` for ``seed``).
SIMILARITY = 0.65


def keyword_names(function: Callable[..., object]) -> list[str]:
    """The names ``function`` accepts as keyword arguments (``self`` aside)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [
        name
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind in kinds and name != "self"
    ]


def check_keywords(owner: str, given: Iterable[str], accepted: list[str]) -> None:
    """Raise ``TypeError`` for the first of ``given`` not in ``accepted``, naming
    the closest accepted name, or else pointing at ``storage_options``."""
    for name in given:
        if name in accepted:
            continue
        message = f"{owner}() got an unexpected keyword argument {name!r}"
        close = difflib.get_close_matches(name, accepted, n=1, cutoff=SIMILARITY)
        if close:
            message += f"; did you mean {close[0]!r}?"
        elif "storage_options" in accepted:
            message += f"; store options go in storage_options={{{name!r}: ...}}"
        raise TypeError(message)


def checked_keywords(init: Callable[P, R]) -> Callable[P, R]:
    """``init`` (an ``__init__``) with its keyword arguments checked by
    ``check_keywords`` first; its signature stays what it is."""
    owner = init.__qualname__.rsplit(".", 1)[0]
    accepted = keyword_names(init)

    @functools.wraps(init)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        check_keywords(owner, kwargs, accepted)
        return init(*args, **kwargs)

    return checked
