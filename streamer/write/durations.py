"""``audio_info``'s durations from the seek index, which counts them exactly.

A header's duration is FFmpeg's estimate (from the bit rate when nothing
states the length: a VBR mp3 without a Xing tag whose first seconds are
silence said 136 s for 20 s of audio), and even a header that states the
length is rarely the full decode's: an M4A's leaves out the last AAC frame
(3.0 s for 3.0186 s), an Opus file's counts the pre-skip (3.0065 s for 3.0).
The samplers plan crops over ``audio_info``'s durations, so a header's
never lets a crop reach the last frame, or plans one past the end. A
verified index counts what the installed FFmpeg decodes
(``formats.ffmpeg.decode_length``), so ``audio_info`` keeps the index's
wherever there is one: when ``pack`` writes a shard, and when ``streamer
index`` indexes one ``pack --no-index`` wrote. Where the two disagree by
over 1 % and 0.1 s (more than a header's estimate is off), it says so.

An ``audio_info`` another tool wrote (wsds: title, language, ...) may hold
its durations as float32, integers or decimals: they are read as seconds,
and a rewritten column is float64 seconds (an integer column cannot hold
the index's 3.0186 s), every other column as it was. A column of another
type (text) is no duration this module rewrites (``is_numeric``).
"""

from __future__ import annotations

import logging
import math

import pyarrow as pa

from ..formats.ffmpeg import decode_length
from ..index.table import OK
from ..shard.ipc import KEY_COLUMN

__all__ = [
    "DURATION",
    "corrected",
    "header_durations",
    "index_durations",
    "is_numeric",
    "same_durations",
    "write_durations",
]

log = logging.getLogger(__name__)

#: The ``audio_info`` column.
DURATION = "duration"


def index_durations(index: pa.StructArray) -> list[float | None]:
    """Each row's full decode's duration under the installed FFmpeg, from its
    seek index (None: no index, or its length is unknown)."""
    fields = ("status", "container", "num_samples", "padding", "timescale")
    columns = [index.field(name).to_pylist() for name in fields]
    return [
        decode_length(container, n, padding) / t if s == OK and n >= 0 and t > 0 else None
        for s, container, n, padding, t in zip(*columns, strict=True)
    ]


def is_numeric(column_type: pa.DataType) -> bool:
    """Whether ``audio_info``'s duration column is one of numbers (seconds):
    floating point, integer or decimal."""
    return (
        pa.types.is_floating(column_type)
        or pa.types.is_integer(column_type)
        or pa.types.is_decimal(column_type)
    )


def header_durations(info: pa.Table) -> list[float | None]:
    """``info``'s durations as Python floats (None: a null cell), whatever
    numeric type its column has (``is_numeric``; float16, int64, decimal)."""
    return info.column(DURATION).cast(pa.float64()).to_pylist()


def same_durations(a: list[float | None], b: list[float | None]) -> bool:
    """Whether two lists of durations are the same, NaN equal to NaN."""
    return len(a) == len(b) and all(
        x == y or (x is not None and y is not None and math.isnan(x) and math.isnan(y))
        for x, y in zip(a, b, strict=True)
    )


def corrected(
    info: pa.Table, found: list[float | None]
) -> tuple[list[float], list[tuple[str, float, float]]]:
    """``info``'s durations with the index's (``found``, row for row) wherever
    there is one, and the rows where they disagree by more than a header's
    estimate is off as (key, header's, index's), logged. The column must be
    numeric (``is_numeric``)."""
    durations = header_durations(info)
    keys = info.column(KEY_COLUMN).to_pylist()
    # A column of whole seconds (int64: 3 for 3.9 s) is that far off by
    # its type alone, which is no disagreement to warn of.
    close = max(0.1, _resolution(info.schema.field(DURATION).type))
    changed = []
    for row, seconds in enumerate(found):
        header = durations[row]
        if seconds is None:
            continue
        durations[row] = seconds
        if header is not None and math.isclose(header, seconds, rel_tol=0.01, abs_tol=close):
            continue
        log.warning(
            "%s: the header says %.1f s, the seek index %.1f s; audio_info keeps the index's",
            keys[row],
            math.nan if header is None else header,
            seconds,
        )
        changed.append((keys[row], header, seconds))
    return durations, changed


def _resolution(column_type: pa.DataType) -> float:
    """The seconds between two durations a numeric column can hold, where
    that is a constant (integers: 1 s; decimals: their last digit); 0 for
    floating point, whose precision is relative (float16's 0.05 % is well
    within ``corrected``'s 1 %)."""
    if pa.types.is_integer(column_type):
        return 1.0
    if pa.types.is_decimal(column_type):
        return 10.0**-column_type.scale
    return 0.0


def write_durations(path: str, info: pa.Table, durations: list[float | None]) -> None:
    """Write ``info`` to the local file ``path`` with new durations, batch for
    batch (same sizes, same schema and metadata, except that the duration
    column is float64 seconds whatever numeric type it had: a float32 or
    integer column cannot hold the index's durations)."""
    column = info.schema.get_field_index(DURATION)
    field = info.schema.field(column).with_type(pa.float64())
    schema = info.schema.set(column, field)
    options = pa.ipc.IpcWriteOptions(compression=None)
    start = 0
    with pa.ipc.new_file(path, schema, options=options) as writer:
        for batch in info.to_batches():
            values = pa.array(durations[start : start + batch.num_rows], pa.float64())
            writer.write_batch(batch.set_column(column, field, values))
            start += batch.num_rows
