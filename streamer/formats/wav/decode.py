"""PCM (wav): samples by arithmetic and numpy, no FFmpeg at all.

Sample ``s`` of a PCM stream is at byte ``data_start + s * block_align``, so
the plan is the exact byte range and decoding is a dtype view. The float
scaling matches FFmpeg's decode converted by ``frame_to_float32``: integers
scale by their full scale (24-bit samples as FFmpeg's s32 with 8 zero bits).
"""

from __future__ import annotations

import numpy as np

from ...index.table import SeekIndex
from ..job import CropPlan, DecodeContext, Fetched

__all__ = ["CODECS", "decode"]

#: codec -> (numpy dtype of one sample, full scale or 0 for float)
CODECS = {
    "pcm_u8": ("u1", 128.0),
    "pcm_s16le": ("<i2", 32768.0),
    "pcm_s16be": (">i2", 32768.0),
    "pcm_s24le": (None, 8388608.0),
    "pcm_s32le": ("<i4", 2147483648.0),
    "pcm_f32le": ("<f4", 0.0),
    "pcm_f64le": ("<f8", 0.0),
}


def decode(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """The planned samples as float32 ``(channels, n)``, and the first one's index."""
    return _samples(index, fetched.data), plan.first


def _samples(index: SeekIndex, data: memoryview) -> np.ndarray:
    """The samples in ``data`` (whole sample frames) as float32 ``(channels, n)``."""
    dtype, scale = CODECS[index.codec]
    channels = index.channels
    frames = len(data) // index.block_align
    raw = np.frombuffer(data, dtype=np.uint8, count=frames * index.block_align)
    if dtype is None:  # 24-bit little-endian: widen to int32 first
        triplets = raw.reshape(-1, 3)
        wide = (
            triplets[:, 0].astype(np.int32)
            | (triplets[:, 1].astype(np.int32) << 8)
            | (triplets[:, 2].astype(np.int8).astype(np.int32) << 16)
        )
        values = wide.reshape(frames, channels).T
    else:
        values = raw.view(dtype).reshape(frames, channels).T
    out = values.astype(np.float32)
    if dtype == "u1":
        out -= 128.0
    if scale:
        out *= np.float32(1.0 / scale)  # a power of two: exact, as float64 division
    return out
