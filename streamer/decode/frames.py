"""Turning decoded PyAV frames into float32 ``(channels, samples)`` arrays."""

from __future__ import annotations

import av
import numpy as np

__all__ = ["frame_to_float32"]

# Full-scale value of each integer sample format, so ints map into [-1, 1).
_SCALE = {"u8": 128.0, "s16": 32768.0, "s32": 2147483648.0, "s64": 9223372036854775808.0}


def frame_to_float32(frame: av.AudioFrame) -> np.ndarray:
    """The frame's samples as float32 ``(channels, samples)``, without resampling.

    Planar formats come out of PyAV as ``(channels, samples)`` and packed ones
    as ``(1, samples * channels)``; both end up channel-major here.
    """
    data = frame.to_ndarray()
    fmt = frame.format
    channels = frame.layout.nb_channels
    if not fmt.is_planar:
        data = data.reshape(-1, channels).T
    name = fmt.name.removesuffix("p")
    if name == "u8":
        return ((data.astype(np.float32) - 128.0) / 128.0).astype(np.float32)
    if name in _SCALE:
        return (data.astype(np.float64) / _SCALE[name]).astype(np.float32)
    return np.ascontiguousarray(data, dtype=np.float32)
