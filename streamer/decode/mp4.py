"""MP4/M4A (AAC, ALAC): FFmpeg's demuxer over the planned ranges only.

The demuxer reads ``moov`` (the header ranges) and seeks natively on its own
sample table, then demuxes the samples in the data range; everything comes
from memory through a ``SparseFile``. Frames are placed by their
timestamps: FFmpeg's pts is the decode time less the edit list's media time,
which is exactly the gapless sample index when the timescale is the sample
rate. AAC's decoder needs the frames before the crop to converge (and the
first frame after a cold start is garbage), hence its pre-roll.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import av
import numpy as np

from ..index.table import SeekIndex
from .frames import concat, frame_to_float32
from .plan import CropPlan, Fetched, to_gapless
from .sparse import SparseFile
from .stats import DecodeStats

__all__ = ["decode", "extra_ranges", "preroll"]


#: Seconds decoded before a crop and thrown away: AAC's decoder needs a few
#: frames to converge after a cold start; ALAC frames are independent.
PREROLL_SECONDS = {"aac": 0.1, "alac": 0.0}
#: Bytes of the first packet(s) FFmpeg's stream probe reads on open: an AAC
#: frame is well under 4 KiB; an ALAC frame (4096 samples) can reach 32 KiB.
PROBE_BYTES = {"aac": 4096, "alac": 32768}
#: FFmpeg reads forward instead of seeking over gaps up to its buffer size
#: plus its short-seek threshold (32 KiB each).
READ_THROUGH = 65536


#: ``moov`` already says everything about the stream; without these limits
#: FFmpeg's stream probing reads the first 64 KiB of sample data, outside the plan.
_NO_PROBING = {"probesize": "32", "analyzeduration": "1"}


def preroll(index: SeekIndex) -> int:
    return round(PREROLL_SECONDS[index.codec] * index.timescale)


def extra_ranges(index: SeekIndex, plan: CropPlan) -> tuple[tuple[int, int], ...]:
    """The first bytes of sample data: opening the demuxer probes the first
    packet there, wherever the crop is. And when the crop's data starts
    less than ``READ_THROUGH`` bytes after the probe, everything in between:
    FFmpeg reads a short forward gap instead of seeking over it."""
    start, data = index.data_start, plan.data[0]
    probe_end = min(start + PROBE_BYTES[index.codec], index.data_end)
    end = data if data - probe_end <= READ_THROUGH else probe_end
    return ((start, end - start),) if end > start else ()


class _Demuxers:
    """Open demuxers by episode, so ``moov`` (megabytes of sample tables for
    a long audiobook) is parsed once per process rather than once per crop.

    A demuxer is checked out while a crop uses it, so two threads never
    share one. Episodes are immutable, so bytes FFmpeg still buffers from an
    earlier crop are still right.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._idle: OrderedDict[tuple[object, ...], tuple[Any, SparseFile]] = OrderedDict()
        self._lock = threading.Lock()

    def checkout(self, key: tuple[object, ...]) -> tuple[Any, SparseFile] | None:
        with self._lock:
            return self._idle.pop(key, None)

    def checkin(self, key: tuple[object, ...], entry: tuple[Any, SparseFile]) -> None:
        with self._lock:
            self._idle[key] = entry
            while len(self._idle) > self.size:
                _, (container, _) = self._idle.popitem(last=False)
                container.close()


_DEMUXERS = _Demuxers()


def _open(fetched: Fetched, stats: DecodeStats, where: dict[str, object]) -> tuple[Any, SparseFile]:
    source = SparseFile(
        fetched.blob_length, list(fetched.pieces), fetched.read_unplanned, stats, where
    )
    return av.open(source, "r", format="mp4", options=_NO_PROBING), source


def decode(
    index: SeekIndex,
    plan: CropPlan,
    fetched: Fetched,
    stats: DecodeStats,
    where: dict[str, object],
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    seek_to = plan.start_native - index.first_sample
    episode = (where.get("shard"), where.get("key"), fetched.blob_length)
    # From the very start, a fresh demuxer: seeking back to 0 loses priming.
    entry = _DEMUXERS.checkout(episode) if seek_to > 0 else None
    if entry is None:
        entry = _open(fetched, stats, where)
    else:
        entry[1].refill(list(fetched.pieces), fetched.read_unplanned, stats, where)
    container, _ = entry
    try:
        samples, first = _demux_decode(container, index, plan, seek_to, stats)
    except BaseException:
        container.close()
        raise
    _DEMUXERS.checkin(episode, entry)
    return samples, first


def _demux_decode(
    container: Any, index: SeekIndex, plan: CropPlan, seek_to: int, stats: DecodeStats
) -> tuple[np.ndarray, int]:
    stream = container.streams.audio[0]
    if seek_to > 0:
        container.seek(seek_to, stream=stream, backward=True, any_frame=True)
    out: list[np.ndarray] = []
    first = None
    end_native = index.first_sample + plan.last * index.timescale // index.sample_rate
    for packet in container.demux(stream):
        if packet.pts is None:
            continue
        try:
            frames = packet.decode()
        except (av.FFmpegError, ValueError):
            stats.bad_packets += 1
            continue
        for frame in frames:
            if first is None:
                first = expected = frame.pts
            if frame.pts != expected:  # a gap: a packet failed, keep timing
                missing = to_gapless(index, frame.pts) - to_gapless(index, expected)
                out.append(np.zeros((index.channels, max(missing, 0)), np.float32))
            samples = frame_to_float32(frame)
            out.append(samples)
            expected = frame.pts + round(samples.shape[1] * index.timescale / index.sample_rate)
        if packet.pts + (packet.duration or 0) + index.first_sample >= end_native:
            break  # the next packet would start past the plan
    start = to_gapless(index, (first or 0) + index.first_sample)
    return concat(out, index.channels), start
