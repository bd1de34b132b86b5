"""Mutated files for the fuzz tests: real encoded bytes, damaged the way
hostile or broken files are (byte flips, truncations, cut or doubled spans,
and counts, sizes and offsets rewritten to boundary values next to the
markers a parser reads them after).

Two modes: the default suite runs ``CI`` (a few dozen examples per seed,
derandomized so a CI run is reproducible); ``-m slow`` runs ``LONG``
(``STREAMER_FUZZ_EXAMPLES`` examples per seed, 2000 by default, random, with
hypothesis's example database so a failure found once is replayed first).
"""

from __future__ import annotations

import io
import os
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CI: dict[str, Any] = {
    "max_examples": 40,
    "derandomize": True,
    "database": None,
}
LONG: dict[str, Any] = {
    "max_examples": int(os.environ.get("STREAMER_FUZZ_EXAMPLES", "2000")),
}
_COMMON: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}

#: Values a lying count, size or offset takes: zero, one, the edges of the
#: signed and unsigned widths, and the sizes that used to make parsers
#: allocate gigabytes (2^28..2^32 entries).
BOUNDARY = (
    0,
    1,
    2,
    0x7F,
    0xFF,
    0x7FFF,
    0xFFFF,
    0xFFFFFF,
    1 << 28,
    1 << 30,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    1 << 40,
    1 << 60,
    0x7FFFFFFFFFFFFFFF,
    0xFFFFFFFFFFFFFFFF,
)


#: Mutation kinds, weighted towards rewrites that keep a file's structure
#: (so that a parser gets past its first check and reaches the tables).
_KINDS = ("flip", "flip", "count", "count", "count", "count", "truncate", "cut", "double")


def fuzz(
    mode: dict[str, Any], strategy: st.SearchStrategy[bytes], check: Callable[[bytes], None]
) -> None:
    """Run ``check`` on examples of ``strategy`` under ``mode`` (``CI`` or ``LONG``)."""

    @settings(**_COMMON, **mode)
    @given(strategy)
    def run(data: bytes) -> None:
        check(data)

    run()


def marked_positions(data: bytes, markers: Sequence[bytes], span: range) -> list[int]:
    """Offsets ``span`` around every occurrence of each marker: where the
    counts and sizes a parser believes sit (a box's fields after its type,
    a page's after ``OggS``, ...)."""
    found = set()
    for marker in markers:
        at = data.find(marker)
        while at >= 0:
            found.update(at + k for k in span if 0 <= at + k < len(data))
            at = data.find(marker, at + 1)
    return sorted(found)


def mutated(seed: bytes, interesting: Sequence[int], max_ops: int = 4) -> st.SearchStrategy[bytes]:
    """``seed`` after 1..``max_ops`` mutations; counts are rewritten mostly at
    ``interesting`` offsets."""
    anywhere = st.integers(0, max(0, len(seed) - 1))
    where = st.sampled_from(list(interesting)) | anywhere if interesting else anywhere

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        data = bytearray(seed)
        for _ in range(draw(st.integers(1, max_ops))):
            if not data:
                break
            kind = draw(st.sampled_from(_KINDS))
            at = min(draw(where), len(data) - 1)
            if kind == "flip":
                data[at] ^= draw(st.integers(1, 255))
            elif kind == "count":
                width = draw(st.sampled_from((1, 2, 3, 4, 8)))
                value = draw(st.sampled_from(BOUNDARY) | st.integers(0, (1 << (8 * width)) - 1))
                order = draw(st.sampled_from(("big", "little")))
                raw = (value & ((1 << (8 * width)) - 1)).to_bytes(width, order)  # type: ignore[arg-type]
                data[at : at + width] = raw[: len(data) - at]
            elif kind == "truncate":
                del data[at:]
            else:
                length = draw(st.integers(1, 4096))
                span = bytes(data[at : at + length])
                if kind == "cut":
                    del data[at : at + length]
                else:
                    data[at:at] = span
        return bytes(data)

    return build()


class Unseekable(io.RawIOBase):
    """A forward-only stream (a pipe, a socket): parsers must not need ``seek``."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


@contextmanager
def peak_memory() -> Iterator[Callable[[], int]]:
    """Python and numpy allocations while the block runs: ``peak()`` in bytes."""
    tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
