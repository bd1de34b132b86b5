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
from ..timing import record
from .frames import concat, frame_to_float32
from .plan import CropPlan, Episode, Fetched, to_gapless
from .sparse import SparseFile
from .stats import DecodeStats

__all__ = ["can_skip_header", "decode", "preroll", "refine_plan"]


#: Seconds decoded before a crop and thrown away: AAC's decoder needs a few
#: frames to converge after a cold start; ALAC frames are independent.
PREROLL_SECONDS = {"aac": 0.1, "alac": 0.0}
#: Bytes of the first packet(s) FFmpeg's stream probe reads on open: an AAC
#: frame is well under 4 KiB; an ALAC frame (4096 samples) can reach 32 KiB.
PROBE_BYTES = {"aac": 4096, "alac": 32768}
#: FFmpeg reads forward instead of seeking over gaps up to its buffer size
#: plus its short-seek threshold (32 KiB each).
READ_THROUGH = 65536
#: How far before the planned seek point FFmpeg's own seek may land (it
#: searches its sample index, which can pick a few packets earlier).
SEEK_SLACK = 16384


#: ``moov`` already says everything about the stream; without these limits
#: FFmpeg's stream probing reads the first 64 KiB of sample data, outside the plan.
_NO_PROBING = {"probesize": "32", "analyzeduration": "1"}


def preroll(index: SeekIndex) -> int:
    return round(PREROLL_SECONDS[index.codec] * index.timescale)


def refine_plan(index: SeekIndex, plan: CropPlan, episode: Episode | None) -> CropPlan:
    """Add the first bytes of sample data: opening a demuxer probes the first
    packet there, wherever the crop is; and, when the crop's data starts less
    than ``READ_THROUGH`` bytes after it, everything in between (FFmpeg reads
    a short forward gap instead of seeking over it).

    When this process already holds an open demuxer for the episode (and
    will decode the crop: ``episode`` is None otherwise), the header
    (``moov``: megabytes for a long audiobook) is left out: the demuxer
    parsed it once and will not read it again; the short gap it may read
    through starts where it stopped reading last time. Otherwise the plan
    also holds the ``READ_THROUGH`` bytes before the data, so that a decoder
    that does hold an open demuxer can reuse it (``_can_reuse``).
    """
    data = plan.data[0]
    position = None if episode is None else _DEMUXERS.position(episode)
    fresh = plan.start_native <= index.first_sample  # from the start: a fresh demuxer
    if position is not None and not fresh:
        # What the open demuxer reads before the data, without the header.
        lead = _reuse_lead(position, index, plan)
        return plan.without_header().with_header(((lead, data - lead),) if data > lead else ())
    start = index.data_start
    probe_end = min(start + PROBE_BYTES[index.codec], index.data_end)
    if data - probe_end <= READ_THROUGH:
        return plan.with_header(((start, data - start),) if data > start else ())
    # The lead lets a process that does hold an open demuxer for the episode
    # (a decode worker, which this planner cannot see into) reuse it: it
    # covers the slack of its seek and any gap it reads through.
    lead = max(probe_end, data - READ_THROUGH)
    return plan.with_header(((start, probe_end - start), (lead, data - lead)))


class _Demuxers:
    """Open demuxers by episode, so ``moov`` (megabytes of sample tables for
    a long audiobook) is parsed once per process rather than once per crop.

    A demuxer is checked out while a crop uses it, so two threads never
    share one. Episodes are immutable, so bytes FFmpeg still buffers from an
    earlier crop are still right.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._idle: OrderedDict[Episode, tuple[Any, SparseFile]] = OrderedDict()
        self._in_use: dict[Episode, int] = {}
        self._changed = threading.Condition()

    def position(self, key: Episode) -> int | None:
        """Where the idle demuxer of ``key`` last read, or None if there is none."""
        with self._changed:
            entry = self._idle.get(key)
            return None if entry is None else entry[1].tell()

    def checkout(self, key: Episode, *, take: bool, wait: bool) -> tuple[Any, SparseFile] | None:
        """Start using a demuxer of ``key``: the idle one if ``take`` (None if
        there is none); give it back with ``checkin``, or ``release`` once
        closed. With ``wait``, while another thread uses one and none is idle,
        wait for it rather than return None."""
        with self._changed:
            while wait and key not in self._idle and self._in_use.get(key, 0):
                self._changed.wait()
            self._in_use[key] = self._in_use.get(key, 0) + 1
            return self._idle.pop(key, None) if take else None

    def checkin(self, key: Episode, entry: tuple[Any, SparseFile]) -> None:
        with self._changed:
            self._done(key)
            replaced = self._idle.pop(key, None)
            if replaced is not None:  # two threads opened one each: keep the newer
                replaced[0].close()
            self._idle[key] = entry
            while len(self._idle) > self.size:
                _, (container, _) = self._idle.popitem(last=False)
                container.close()

    def release(self, key: Episode) -> None:
        """The caller's demuxer of ``key`` is closed (or never opened)."""
        with self._changed:
            self._done(key)

    def _done(self, key: Episode) -> None:
        left = self._in_use.pop(key) - 1
        if left:
            self._in_use[key] = left
        self._changed.notify_all()


_DEMUXERS = _Demuxers()


def _open(fetched: Fetched, stats: DecodeStats, where: dict[str, object]) -> tuple[Any, SparseFile]:
    source = SparseFile(
        fetched.blob_length, list(fetched.pieces), fetched.read_unplanned, stats, where
    )
    with record("decoder_open"):
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
    episode = _episode(where, fetched)
    # From the very start, a fresh demuxer: seeking back to 0 loses priming.
    # A plan without ``moov`` counts on an open demuxer: wait for the one
    # another thread is using rather than open one that reads outside the plan.
    has_moov = _holds_header(index, fetched)
    entry = _DEMUXERS.checkout(episode, take=seek_to > 0, wait=seek_to > 0 and not has_moov)
    if entry is not None and not _can_reuse(entry[1].tell(), index, plan, fetched, has_moov):
        entry[0].close()  # this crop's bytes suit a fresh demuxer, not this one
        entry = None
    try:
        if entry is None:
            entry = _open(fetched, stats, where)
        else:
            entry[1].refill(list(fetched.pieces), fetched.read_unplanned, stats, where)
        samples, first = _demux_decode(entry[0], index, plan, seek_to, stats)
    except BaseException:
        if entry is not None:
            entry[0].close()
        _DEMUXERS.release(episode)
        raise
    _DEMUXERS.checkin(episode, entry)
    return samples, first


def can_skip_header(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, where: dict[str, object]
) -> bool:
    """Whether this process can decode the crop from ``fetched`` without
    ``moov``: it holds an idle demuxer for the episode that the bytes suit.
    A decode worker asks before the parent sends it a ``moov`` it held back."""
    position = _DEMUXERS.position(_episode(where, fetched))
    seek_to = plan.start_native - index.first_sample
    if position is None or seek_to <= 0:
        return False
    return _holds(fetched.pieces, _reuse_lead(position, index, plan), plan.data[0])


def _episode(where: dict[str, object], fetched: Fetched) -> Episode:
    return (where.get("shard"), where.get("key"), fetched.blob_length)


def _holds_header(index: SeekIndex, fetched: Fetched) -> bool:
    return all(_holds(fetched.pieces, offset, offset + length) for offset, length in index.header)


def _can_reuse(
    position: int, index: SeekIndex, plan: CropPlan, fetched: Fetched, has_moov: bool
) -> bool:
    """Whether to decode this crop with the open demuxer that last read at
    ``position``. Only if the fetched bytes hold what it reads before the
    data (``_reuse_lead``): a plan made without knowing that demuxer (in
    another process, or before another thread moved it) may not, and if it
    carries ``moov``, a fresh demuxer needs nothing more. Without ``moov``
    the open demuxer is the only way, whatever it then reads."""
    return not has_moov or _holds(fetched.pieces, _reuse_lead(position, index, plan), plan.data[0])


def _reuse_lead(position: int, index: SeekIndex, plan: CropPlan) -> int:
    """Where an open demuxer that last read at ``position`` starts reading
    for this crop: up to ``SEEK_SLACK`` before the data (its seek may land a
    few packets early), or at ``position`` when it stopped shortly before
    the data (it reads the gap through)."""
    data = plan.data[0]
    lead = max(index.data_start, data - SEEK_SLACK)
    if 0 <= data - position <= READ_THROUGH:
        lead = min(lead, position)
    return lead


def _holds(pieces: tuple[tuple[int, memoryview], ...], start: int, end: int) -> bool:
    """Whether ``pieces`` together hold every byte of ``[start, end)``."""
    for offset, view in sorted(pieces, key=lambda piece: piece[0]):
        if start >= end:
            break
        if offset <= start < offset + len(view):
            start = offset + len(view)
    return start >= end


def _demux_decode(
    container: Any, index: SeekIndex, plan: CropPlan, seek_to: int, stats: DecodeStats
) -> tuple[np.ndarray, int]:
    stream = container.streams.audio[0]
    if seek_to > 0:
        container.seek(seek_to, stream=stream, backward=True, any_frame=True)
    # A reused demuxer's decoder still holds the previous crop's state (its
    # overlap buffer, frames not yet returned): start clean, like a fresh one.
    stream.codec_context.flush_buffers()
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
