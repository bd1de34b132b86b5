"""Turning decoded PyAV frames into float32 ``(channels, samples)`` arrays.

A crop's decoder writes each frame, as it comes out, straight into one
growing array (``SampleBuffer``): no array per frame to join afterwards,
which cost about three times the conversion itself for codecs with small
frames (AAC, Vorbis, Opus and mp3 decode 300-400 frames per 8 s crop).
Converting at once, rather than keeping frames to convert at the end, lets
the decoder reuse each frame's buffer: 400 frames held cost more in
allocation and cache misses than the conversion saves.
"""

from __future__ import annotations

from collections.abc import Sequence

import av
import numpy as np
from av.audio.plane import AudioPlane

__all__ = ["SampleBuffer", "concat", "frame_to_float32", "sum_channels"]

#: Sample format (without the planar ``p``) -> (numpy dtype, offset, scale).
#: Integers map into [-1, 1): every scale is a power of two, so converting
#: to float32 and scaling gives the same values as dividing in float64.
_FORMATS = {
    "u8": (np.uint8, 128.0, 1 / 128),
    "s16": (np.int16, 0.0, 1 / 32768),
    "s32": (np.int32, 0.0, 1 / 2147483648),
    "s64": (np.int64, 0.0, 1 / 9223372036854775808),
    "flt": (np.float32, 0.0, 1.0),
    "dbl": (np.float64, 0.0, 1.0),
}


class SampleBuffer:
    """Decoded samples appended to one float32 ``(channels, capacity)``
    array that doubles when full; ``samples()`` is a view of what is in it.

    ``capacity``: the samples expected (a crop's span and its pre-roll), so
    that it never grows in the usual case. With ``mean`` the buffer holds
    one channel, the mean of the frames' ``channels`` (a mono crop): each
    frame's channels are summed into it as it comes out, in channel order,
    and divided once in ``samples()``, which gives ``resample.downmix``'s
    values bit for bit without a full-width buffer to reduce afterwards."""

    def __init__(self, channels: int, capacity: int = 0, *, mean: bool = False) -> None:
        self.channels = channels
        self._mean = mean and channels > 1
        rows = 1 if self._mean else channels
        self._data = np.empty((rows, max(capacity, 1024)), dtype=np.float32)
        self.length = 0
        self._divided = 0  # with ``mean``: the samples already divided by ``channels``

    def add_frame(self, frame: av.AudioFrame) -> None:
        place = self._reserve(frame.samples)
        if self._mean:
            _write_sum(frame, place[0], self.channels)
        else:
            _write(frame, place)

    def add_silence(self, count: int) -> None:
        """``count`` samples of silence (audio lost to damaged bytes)."""
        self._reserve(count)[:] = 0.0

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` samples only."""
        self.length = min(self.length, max(length, 0))
        self._divided = min(self._divided, self.length)

    def samples(self) -> np.ndarray:
        if self._mean and self._divided < self.length:
            self._data[0, self._divided : self.length] /= self.channels
            self._divided = self.length
        return self._data[:, : self.length]

    def _reserve(self, count: int) -> np.ndarray:
        """The next ``count`` samples' place, counted as written."""
        end = self.length + count
        if end > self._data.shape[1]:
            grown = np.empty((self._data.shape[0], max(end, 2 * self._data.shape[1])), np.float32)
            grown[:, : self.length] = self._data[:, : self.length]
            self._data = grown
        place = self._data[:, self.length : end]
        self.length = end
        return place


def frame_to_float32(frame: av.AudioFrame) -> np.ndarray:
    """The frame's samples as float32 ``(channels, samples)``, without resampling."""
    out = np.empty((frame.layout.nb_channels, frame.samples), dtype=np.float32)
    _write(frame, out)
    return out


def _write(frame: av.AudioFrame, out: np.ndarray) -> None:
    """The frame's first ``out.shape[1]`` samples into ``out``, float32
    ``(channels, n)``, read from its planes directly (PyAV's ``to_ndarray``
    stacks planes through intermediate arrays, which costs more than
    decoding for small frames)."""
    fmt = frame.format
    dtype, offset, scale = _FORMATS[fmt.name.removesuffix("p")]
    channels, count = out.shape
    planes = _planes(frame, channels)
    if fmt.is_planar:
        for channel, plane in enumerate(planes):
            out[channel] = np.frombuffer(plane, dtype=dtype, count=count)
    else:
        raw = np.frombuffer(planes[0], dtype=dtype, count=count * channels)
        out[:] = raw.reshape(count, channels).T
    if offset:
        out -= offset
    if scale != 1.0:
        out *= scale


def _write_sum(frame: av.AudioFrame, out: np.ndarray, channels: int) -> None:
    """The sum of the frame's ``channels`` channels into ``out`` (its first
    ``len(out)`` samples; ``sum_channels``). Planar float frames (what
    FFmpeg's lossy decoders give) are summed straight from their planes;
    others are converted first."""
    count = out.shape[0]
    rows: list[np.ndarray] | np.ndarray
    if frame.format.name == "fltp":
        rows = [np.frombuffer(plane, np.float32, count) for plane in _planes(frame, channels)]
    else:
        rows = np.empty((channels, count), dtype=np.float32)
        _write(frame, rows)
    sum_channels(rows, out)


def sum_channels(rows: Sequence[np.ndarray], out: np.ndarray) -> np.ndarray:
    """``rows`` (float32, one per channel) added into ``out`` one after
    another, in their order, and ``out``: the one summation of a mono crop,
    whether its decoder sums each frame as it comes out (``SampleBuffer``)
    or the whole crop is reduced afterwards (``resample.downmix``), so the
    two give the same values bit for bit. Not ``np.add.reduce``, which sums
    eight or more rows pairwise for some array layouts."""
    if len(rows) == 1:
        out[:] = rows[0]
        return out
    np.add(rows[0], rows[1], out=out)
    for row in rows[2:]:
        out += row
    return out


def _planes(frame: av.AudioFrame, channels: int) -> Sequence[AudioPlane]:
    """The planes of a frame of ``channels`` channels (one when packed); a
    ``ValueError`` when the frame has another count (a stream that changes
    its channels: its samples would land in the wrong rows, and PyAV 18
    hands over whatever memory follows a frame's last plane).

    From eight channels on not ``frame.planes``: PyAV counts planes by
    walking FFmpeg's data pointers up to a null one, which for an 8-channel
    planar frame (7.1 AAC, Opus, Vorbis, E-AC-3) reads one past them; PyAV
    18 then lists a ninth plane and PyAV 19 raises."""
    have = frame.layout.nb_channels
    if have != channels:
        raise ValueError(f"a frame of {have} channels where {channels} were expected")
    if channels < 8 or not frame.format.is_planar:
        return frame.planes
    return [AudioPlane(frame, number) for number in range(channels)]


def concat(pieces: list[np.ndarray], channels: int) -> np.ndarray:
    """Decoded pieces joined along time (one piece: itself, not a copy); an
    empty ``(channels, 0)`` array for none."""
    if not pieces:
        return np.zeros((channels, 0), dtype=np.float32)
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=1)
