"""Turning decoded PyAV frames into float32 ``(channels, samples)`` arrays."""

from __future__ import annotations

import av
import numpy as np

__all__ = ["concat", "frame_to_float32"]

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


def frame_to_float32(frame: av.AudioFrame) -> np.ndarray:
    """The frame's samples as float32 ``(channels, samples)``, without resampling.

    Reads the planes straight into one array (PyAV's ``to_ndarray`` stacks
    planes through intermediate arrays, which costs more than decoding for
    small frames).
    """
    fmt = frame.format
    dtype, offset, scale = _FORMATS[fmt.name.removesuffix("p")]
    channels, count = frame.layout.nb_channels, frame.samples
    if fmt.is_planar:
        raw = np.empty((channels, count), dtype=dtype)
        for channel, plane in enumerate(frame.planes[:channels]):
            raw[channel] = np.frombuffer(plane, dtype=dtype, count=count)
    else:
        raw = np.frombuffer(frame.planes[0], dtype=dtype, count=count * channels)
        raw = raw.reshape(count, channels).T
    if dtype is np.float32:
        return np.ascontiguousarray(raw)
    out = raw.astype(np.float32)
    if offset:
        out -= offset
    if scale != 1.0:
        out *= scale
    return out


def concat(pieces: list[np.ndarray], channels: int) -> np.ndarray:
    """Decoded pieces joined along time; an empty ``(channels, 0)`` array for none."""
    if not pieces:
        return np.zeros((channels, 0), dtype=np.float32)
    return np.concatenate(pieces, axis=1)
