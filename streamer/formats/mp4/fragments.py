"""Samples of a fragmented MP4 (``moof``/``traf``/``trun``), for one track.

Each ``traf`` of the track adds ``trun`` runs of samples: sizes and
durations per sample or from the defaults (``tfhd``, else the movie's
``trex``), at ``base + data offset`` (the base is the ``moof``'s start
unless ``tfhd`` names one; a run without a data offset follows the previous
run). A fragment starts at its ``tfdt`` decode time when it has one (as
FFmpeg takes it), else where the previous one ended.

Counts are bounded before anything is allocated: a run lists no more
samples than its box has bytes for, or, with default sizes, than the file
could hold.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from ..reader import NoIndex

__all__ = ["Defaults", "Samples", "fragment_samples"]

_BASE_OFFSET, _DESCRIPTION, _DURATION, _SIZE, _FLAGS = 0x1, 0x2, 0x8, 0x10, 0x20
_RUN_OFFSET, _FIRST_FLAGS = 0x1, 0x4
_PER_SAMPLE = ((0x100, "duration"), (0x200, "size"), (0x400, "flags"), (0x800, "offset"))


class Defaults(NamedTuple):
    duration: int
    size: int


class Samples(NamedTuple):
    offsets: np.ndarray
    sizes: np.ndarray
    #: Decode time of every sample and the end of the last.
    times: np.ndarray


def _children(data: bytes, start: int, end: int) -> list[tuple[bytes, int, int]]:
    """(kind, payload start, end) of the boxes in ``data[start:end]``."""
    found = []
    while start + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, start)
        if size < 8 or start + size > end:
            raise NoIndex("mp4 fragment box does not fit in its parent")
        found.append((kind, start + 8, start + size))
        start += size
    return found


def fragment_samples(
    moofs: list[tuple[int, bytes]], track_id: int, defaults: Defaults, start: int, length: int
) -> Samples:
    """The track's samples in the ``(offset, moof bytes)`` fragments of a
    file of ``length`` bytes, their decode times from ``start`` on."""
    offsets: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    durations: list[np.ndarray] = []
    starts: list[int] = []  # decode time of each run's first sample
    now = start
    for moof_at, moof in moofs:
        for kind, body, end in _children(moof, 8, len(moof)):
            if kind != b"traf":
                continue
            boxes = _children(moof, body, end)
            tfhd = next((moof[b:e] for k, b, e in boxes if k == b"tfhd"), b"")
            if len(tfhd) < 8 or struct.unpack_from(">I", tfhd, 4)[0] != track_id:
                continue
            base, own = _track_defaults(tfhd, moof_at, defaults)
            tfdt = next((moof[b:e] for k, b, e in boxes if k == b"tfdt"), b"")
            if tfdt:
                now = _decode_time(tfdt)
            position = base
            for kind, b, e in boxes:
                if kind != b"trun":
                    continue
                run_offsets, run_sizes, run_durations = _run(moof[b:e], base, position, own, length)
                offsets.append(run_offsets)
                sizes.append(run_sizes)
                durations.append(run_durations)
                starts.append(now)
                now += int(run_durations.sum())
                position = int(run_offsets[-1] + run_sizes[-1]) if len(run_sizes) else position
    if not offsets:
        raise NoIndex("fragmented mp4 without samples of its audio track")
    times = np.concatenate(
        [
            s + np.concatenate([[0], np.cumsum(d)])[:-1]
            for s, d in zip(starts, durations, strict=True)
        ]
        + [[now]]
    )
    return Samples(np.concatenate(offsets), np.concatenate(sizes), times.astype(np.int64))


def _track_defaults(tfhd: bytes, moof_at: int, defaults: Defaults) -> tuple[int, Defaults]:
    """The base data offset and the sample defaults a ``tfhd`` sets."""
    flags = int.from_bytes(tfhd[1:4], "big")
    at, base = 8, moof_at
    fields = {}
    for flag, name, width in (
        (_BASE_OFFSET, "base", 8),
        (_DESCRIPTION, "description", 4),
        (_DURATION, "duration", 4),
        (_SIZE, "size", 4),
        (_FLAGS, "flags", 4),
    ):
        if flags & flag:
            if at + width > len(tfhd):
                raise NoIndex("truncated mp4 tfhd")
            fields[name] = int.from_bytes(tfhd[at : at + width], "big")
            at += width
    base = fields.get("base", base)
    return base, Defaults(
        fields.get("duration", defaults.duration), fields.get("size", defaults.size)
    )


def _decode_time(tfdt: bytes) -> int:
    if tfdt[:1] == b"\x01":
        return struct.unpack_from(">Q", tfdt, 4)[0] if len(tfdt) >= 12 else 0
    return struct.unpack_from(">I", tfdt, 4)[0] if len(tfdt) >= 8 else 0


def _run(
    trun: bytes, base: int, position: int, defaults: Defaults, length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, sizes, durations) of a ``trun``'s samples."""
    if len(trun) < 8:
        raise NoIndex("truncated mp4 trun")
    flags = int.from_bytes(trun[1:4], "big")
    count = struct.unpack_from(">I", trun, 4)[0]
    at = 8
    if flags & _RUN_OFFSET:
        position = base + struct.unpack_from(">i", trun, at)[0] if len(trun) >= at + 4 else -1
        at += 4
    at += 4 if flags & _FIRST_FLAGS else 0
    present = [name for flag, name in _PER_SAMPLE if flags & flag]
    per_sample = 4 * len(present)
    if per_sample:
        if at + count * per_sample > len(trun):
            raise NoIndex("truncated mp4 trun")
        table = np.frombuffer(trun, ">u4", count * len(present), at).reshape(count, len(present))
        column = {name: table[:, i].astype(np.int64) for i, name in enumerate(present)}
    else:
        column = {}
    if "size" not in column and (defaults.size <= 0 or count > length // defaults.size):
        raise NoIndex("mp4 trun without sample sizes")
    sizes = column.get("size", np.full(count, defaults.size, np.int64))
    durations = column.get("duration", np.full(count, defaults.duration, np.int64))
    offsets = position + np.concatenate([[0], np.cumsum(sizes)])[:-1]
    return offsets.astype(np.int64), sizes, durations
