"""PCM (wav, w64, aiff): samples by arithmetic and numpy, no FFmpeg at all.

Sample ``s`` of a PCM stream is at byte ``data_start + s * block_align``, so
the plan is the exact byte range and decoding is a dtype view. The float
scaling matches FFmpeg's decode converted by ``frame_to_float32``: integers
scale by their full scale (24-bit samples as FFmpeg's s32 with 8 zero bits;
signed 8-bit as FFmpeg's u8 less 128), G.711 bytes go through the tables
FFmpeg's ``pcm_alaw``/``pcm_mulaw`` decoders build (16-bit, so scaled as s16).
"""

from __future__ import annotations

import numpy as np

from ...index.table import SeekIndex
from ..job import CropPlan, DecodeContext, Fetched

__all__ = ["CODECS", "G711", "decode", "sample_bytes"]


def _alaw() -> np.ndarray:
    """ITU-T G.711 A-law to 16-bit linear, as FFmpeg's ``alaw2linear``."""
    a = np.arange(256, dtype=np.int32) ^ 0x55
    t, seg = a & 0x0F, (a & 0x70) >> 4
    t = np.where(seg > 0, (2 * t + 33) << (seg + 2), (2 * t + 1) << 3)
    return np.where(a & 0x80, t, -t).astype(np.int16)


def _mulaw() -> np.ndarray:
    """ITU-T G.711 µ-law to 16-bit linear, as FFmpeg's ``ulaw2linear``."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, 0x84 - t, t - 0x84).astype(np.int16)


#: codec -> the 256 samples its bytes decode to.
G711 = {"pcm_alaw": _alaw(), "pcm_mulaw": _mulaw()}

#: codec -> (numpy dtype of one sample, full scale or 0 for float); 24-bit
#: codecs have no numpy dtype (None with the byte order).
CODECS = {
    "pcm_u8": ("u1", 128.0),
    "pcm_s8": ("i1", 128.0),
    "pcm_alaw": ("u1", 32768.0),
    "pcm_mulaw": ("u1", 32768.0),
    "pcm_s16le": ("<i2", 32768.0),
    "pcm_s16be": (">i2", 32768.0),
    "pcm_s24le": ("<", 8388608.0),
    "pcm_s24be": (">", 8388608.0),
    "pcm_s32le": ("<i4", 2147483648.0),
    "pcm_s32be": (">i4", 2147483648.0),
    "pcm_f32le": ("<f4", 0.0),
    "pcm_f32be": (">f4", 0.0),
    "pcm_f64le": ("<f8", 0.0),
    "pcm_f64be": (">f8", 0.0),
}


def sample_bytes(codec: str) -> int:
    """Bytes of one sample of one channel of ``codec`` (one of ``CODECS``)."""
    dtype = CODECS[codec][0]
    return 3 if len(dtype) == 1 and dtype in "<>" else np.dtype(dtype).itemsize


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
    if dtype in ("<", ">"):  # 24-bit: widen to int32 first, the top byte signed
        low, mid, top = (0, 1, 2) if dtype == "<" else (2, 1, 0)
        triplets = raw.reshape(-1, 3)
        wide = (
            triplets[:, low].astype(np.int32)
            | (triplets[:, mid].astype(np.int32) << 8)
            | (triplets[:, top].astype(np.int8).astype(np.int32) << 16)
        )
        values = wide.reshape(frames, channels).T
    elif index.codec in G711:
        values = G711[index.codec][raw].reshape(frames, channels).T
    else:
        values = raw.view(dtype).reshape(frames, channels).T
    out = values.astype(np.float32)
    if index.codec == "pcm_u8":
        out -= 128.0
    if scale:
        out *= np.float32(1.0 / scale)  # a power of two: exact, as float64 division
    return out
