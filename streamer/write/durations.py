"""``audio_info``'s durations from the seek index where the header's are off.

A header's duration is FFmpeg's estimate (from the bit rate when nothing
states the length: a VBR mp3 without a Xing tag whose first seconds are
silence said 136 s for 20 s of audio); the samplers draw crops over it and
the open-time check (``index.checks``) refuses an index it contradicts by
over 1 s and 5 %. A verified index counts what FFmpeg decodes, so where the
two disagree by over 1 % and 0.1 s (a header's estimate is not exact),
``audio_info`` keeps the index's, with a warning: when ``pack`` writes a
shard, and when ``streamer index`` indexes one ``pack --no-index`` wrote.
"""

from __future__ import annotations

import logging
import math

import pyarrow as pa

from ..index.table import OK
from ..shard.ipc import KEY_COLUMN

__all__ = ["DURATION", "corrected", "index_durations", "write_durations"]

log = logging.getLogger(__name__)

#: The ``audio_info`` column.
DURATION = "duration"


def index_durations(index: pa.StructArray) -> list[float | None]:
    """Each row's gapless duration from its seek index (None: no index or unknown)."""
    status = index.field("status").to_pylist()
    samples = index.field("num_samples").to_pylist()
    scale = index.field("timescale").to_pylist()
    return [
        n / t if s == OK and n >= 0 and t > 0 else None
        for s, n, t in zip(status, samples, scale, strict=True)
    ]


def corrected(
    info: pa.Table, found: list[float | None]
) -> tuple[list[float], list[tuple[str, float, float]]]:
    """``info``'s durations with the index's (``found``, row for row) where
    they disagree, and those rows as (key, header's, index's), logged."""
    durations = info.column(DURATION).to_pylist()
    keys = info.column(KEY_COLUMN).to_pylist()
    changed = []
    for row, seconds in enumerate(found):
        header = durations[row]
        if seconds is None or (
            header is not None and math.isclose(header, seconds, rel_tol=0.01, abs_tol=0.1)
        ):
            continue
        log.warning(
            "%s: the header says %.1f s, the seek index %.1f s; audio_info keeps the index's",
            keys[row],
            math.nan if header is None else header,
            seconds,
        )
        changed.append((keys[row], header, seconds))
        durations[row] = seconds
    return durations, changed


def write_durations(path: str, info: pa.Table, durations: list[float]) -> None:
    """Write ``info`` to the local file ``path`` with new durations, batch for
    batch (same sizes, same schema and metadata)."""
    schema = info.schema
    column = schema.get_field_index(DURATION)
    options = pa.ipc.IpcWriteOptions(compression=None)
    start = 0
    with pa.ipc.new_file(path, schema, options=options) as writer:
        for batch in info.to_batches():
            values = pa.array(durations[start : start + batch.num_rows], pa.float64())
            writer.write_batch(batch.set_column(column, schema.field(column), values))
            start += batch.num_rows
