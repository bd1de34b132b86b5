"""Machinery every format's index parser shares: buffered sequential reads, the
"no index" signal, and thinning frame positions down to seek points.

The parsers read an episode front to back exactly once, a chunk at a time, so
they work the same over a local memory map and a remote blob handle and never
hold a whole episode in memory.
"""

from __future__ import annotations

import io
import math
from array import array
from typing import BinaryIO

import numpy as np

__all__ = ["CHUNK_SIZE", "NoIndex", "Points", "Reader", "interval", "thin"]

#: Bytes asked of the stream per refill: big enough that per-call overhead of
#: a remote reader vanishes, small enough to stay a rounding error in memory.
CHUNK_SIZE = 1 << 20


class NoIndex(Exception):
    """The episode cannot be indexed; ``str()`` is the reason, short and stable
    enough to be counted (``streamer index`` reports counts per reason)."""


class Reader:
    """Buffered forward reads over a binary file-like object, in absolute positions.

    ``window(n)`` exposes the internal buffer so that the hot loops (frame
    scans) index into one ``bytes`` object instead of calling a method per
    frame. Moving forward past the buffer seeks the stream when it can (the
    skipped bytes are never fetched: an mp4 ``mdat`` costs nothing to jump) and
    reads and drops them when it cannot.
    """

    def __init__(self, stream: BinaryIO, *, chunk_size: int = CHUNK_SIZE) -> None:
        self._stream = stream
        self._chunk_size = chunk_size
        self._seekable = _seekable(stream)
        self.size: int | None = None
        if self._seekable:
            start = stream.tell()
            self.size = stream.seek(0, io.SEEK_END) - start
            stream.seek(start)
            self._origin = start
        else:
            self._origin = 0
        self._buf = b""
        self._base = 0  # absolute position of _buf[0]
        self._cursor = 0  # index into _buf
        self._eof = False

    @property
    def pos(self) -> int:
        """Absolute position of the cursor (0 is where the stream was handed over)."""
        return self._base + self._cursor

    def window(self, need: int) -> tuple[bytes, int]:
        """``(buffer, index)``: the buffer holds at least ``need`` bytes from
        ``index`` on (the cursor), unless the stream ends first."""
        if len(self._buf) - self._cursor < need and not self._eof:
            self._fill(need)
        return self._buf, self._cursor

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes from the cursor (fewer only at the end of the stream)."""
        buf, i = self.window(n)
        data = buf[i : i + n]
        self._cursor += len(data)
        return data

    def read_exact(self, n: int, what: str) -> bytes:
        """Exactly ``n`` bytes, or ``NoIndex("truncated <what>")``."""
        data = self.read(n)
        if len(data) != n:
            raise NoIndex(f"truncated {what}")
        return data

    def seek(self, position: int) -> None:
        """Move the cursor to an absolute position at or after the buffer's start."""
        if position < self._base:
            raise ValueError(f"cannot seek back to {position} (buffer starts at {self._base})")
        if position <= self._base + len(self._buf):
            self._cursor = position - self._base
            return
        if self.size is not None and position > self.size:
            position = self.size
        if self._seekable:
            self._stream.seek(self._origin + position)
        else:
            # Past the end of a stream of unknown size, the cursor stops at its end.
            end = self._base + len(self._buf)
            position = end + self._discard(position - end)
        self._buf, self._base, self._cursor = b"", position, 0
        if self._seekable:
            self._eof = self.size is not None and position >= self.size

    def raw_stream(self) -> BinaryIO | None:
        """The stream itself, for a parser that hands it to another reader
        (FFmpeg): only when it can seek and the cursor's 0 is its byte 0."""
        return self._stream if self._seekable and self._origin == 0 else None

    def length(self) -> int:
        """The stream's length in bytes: known for a seekable stream; a
        forward-only one is read (and dropped) to its end to learn it."""
        if self.size is None:
            self.seek(max(self.pos, self._base + len(self._buf)) + (1 << 62))
            self.size = self.pos
        return self.size

    def ends_at(self, position: int) -> bool:
        """True when the stream is known to end at or before ``position``."""
        if self.size is not None:
            return position >= self.size
        return self._eof and position >= self._base + len(self._buf)

    def _fill(self, need: int) -> None:
        """Keep the unread tail, append chunks until ``need`` bytes are buffered."""
        parts = [self._buf[self._cursor :]]
        have = len(parts[0])
        while have < need:
            # A stream of unknown length may allocate all it is asked for
            # before it finds out how much it holds: ask it a chunk at a time.
            ask = max(self._chunk_size, need - have) if self.size is not None else self._chunk_size
            chunk = self._stream.read(ask)
            if not chunk:
                self._eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self._base += self._cursor
        self._buf = b"".join(parts)
        self._cursor = 0

    def _discard(self, count: int) -> int:
        """Read and drop up to ``count`` bytes; returns how many there were."""
        left = count
        while left > 0:
            chunk = self._stream.read(min(left, self._chunk_size))
            if not chunk:
                self._eof = True
                break
            left -= len(chunk)
        return count - left


def _seekable(stream: BinaryIO) -> bool:
    try:
        return bool(stream.seekable())
    except (AttributeError, OSError):
        return False


#: The widest spacing of seek points (native ticks): 46 years at 192 kHz,
#: a point at the start only, and far from overflowing the int64 positions
#: it is added to. A tiny density (``1e-300``) gave an interval of 10**304
#: ticks, and its OverflowError marked good mp4 files "malformed mp4 data".
MAX_INTERVAL = 1 << 48


def interval(timescale: int, density: float) -> int:
    """Native-timeline distance between seek points for ``density`` points per
    second (``math.inf``: every frame or page; a tiny density: a point at
    the start only)."""
    if not density > 0:  # nan too
        raise ValueError(f"density must be positive, not {density}")
    if math.isinf(density):
        return 1
    spacing = timescale / density  # inf for a subnormal density
    return MAX_INTERVAL if spacing >= MAX_INTERVAL else max(1, round(spacing))


class Points:
    """Seek points collected one frame at a time, thinned as they come.

    A frame becomes a seek point when it is the first one whose sample
    position falls into a new ``interval``-wide bin, so the points are about
    one interval apart and the very first frame is always one. Storage is two
    ``array('q')`` buffers, handed to numpy without copying per element.
    """

    def __init__(self, step: int) -> None:
        self.step = step
        self._next = -(1 << 62)
        self.samples = array("q")
        self.offsets = array("q")

    def add(self, sample: int, offset: int) -> None:
        if sample >= self._next:
            self.samples.append(sample)
            self.offsets.append(offset)
            self._next = (sample // self.step + 1) * self.step

    def restart(self, sample: int, offset: int) -> None:
        """Make the frame a seek point whatever its bin, dropping earlier
        points at or after its position (an Ogg chain's link must start at
        a point, and its first sample may precede the previous link's last
        point)."""
        while self.samples and self.samples[-1] >= sample:
            self.samples.pop()
            self.offsets.pop()
        self._next = -(1 << 62)
        self.add(sample, offset)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.frombuffer(self.samples, dtype=np.int64).copy(),
            np.frombuffer(self.offsets, dtype=np.int64).copy(),
        )


def thin(samples: np.ndarray, step: int) -> np.ndarray:
    """Indices of the frames ``Points`` would keep, for frames known all at once."""
    if samples.size == 0:
        return np.zeros(0, dtype=np.int64)
    bins = np.floor_divide(samples, step)
    keep = np.empty(samples.size, dtype=bool)
    keep[0] = True
    # Positions ascend, so a new bin starts exactly where the bin number rises.
    np.greater(bins[1:], bins[:-1], out=keep[1:])
    return np.flatnonzero(keep)
