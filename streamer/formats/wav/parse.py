"""WAV (RIFF and RF64): the ``fmt `` and ``data`` chunks; seeking is arithmetic.

Native timeline: sample frames from the start of the ``data`` chunk; sample
``s`` is at byte ``data_start + s * block_align``. The index holds one seek
point (0, ``data_start``) and the header is every byte before the audio, so a
decoder can send the header and then any whole number of sample frames.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

import numpy as np

from ...index.table import OK, SeekIndex
from ..reader import NoIndex, Reader

__all__ = ["matches", "parse"]

_EXTENSIBLE = 0xFFFE
_PCM = {8: "pcm_u8", 16: "pcm_s16le", 24: "pcm_s24le", 32: "pcm_s32le"}
_FLOAT = {32: "pcm_f32le", 64: "pcm_f64le"}


def matches(head: bytes) -> bool:
    return len(head) >= 12 and head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE"


def _codec(tag: int, bits: int) -> str:
    codec = {1: _PCM, 3: _FLOAT}.get(tag, {}).get(bits)
    if codec is None:
        codec = {6: "pcm_alaw", 7: "pcm_mulaw"}.get(tag) if bits == 8 else None
    if codec is None:
        raise NoIndex(f"unsupported wav format 0x{tag:04x} with {bits} bits")
    return codec


def parse(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index a PCM WAV file (``density`` is accepted for symmetry and unused:
    one point is exact everywhere)."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    riff = reader.read_exact(12, "wav header")
    rf64 = riff[:4] == b"RF64"
    fmt: bytes | None = None
    big_data_size: int | None = None
    while True:
        chunk = reader.read(8)
        if len(chunk) < 8:
            raise NoIndex("wav without a data chunk")
        kind, size = chunk[:4], struct.unpack_from("<I", chunk, 4)[0]
        if kind == b"data":
            break
        if reader.size is not None and reader.pos + size > reader.size:
            raise NoIndex("truncated wav: a chunk runs past the end of the file")
        if kind == b"fmt " or (rf64 and kind == b"ds64"):
            if size > 1 << 16:
                raise NoIndex("wav fmt chunk too large")
            body = reader.read_exact(size, f"wav {kind.decode('latin-1').strip()} chunk")
            if kind == b"fmt ":
                fmt = body
            elif size >= 16:
                big_data_size = struct.unpack_from("<Q", body, 8)[0]
            reader.seek(reader.pos + (size & 1))
        else:
            reader.seek(reader.pos + size + (size & 1))
    if fmt is None or len(fmt) < 16:
        raise NoIndex("wav data before a valid fmt chunk")
    tag, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == _EXTENSIBLE:
        if len(fmt) < 26:
            raise NoIndex("truncated wav extensible fmt chunk")
        tag = struct.unpack_from("<H", fmt, 24)[0]
    codec = _codec(tag, bits)
    if not channels or not rate or block_align != channels * ((bits + 7) // 8):
        raise NoIndex("invalid wav fmt chunk")
    data_start = reader.pos
    if rf64 and size == 0xFFFFFFFF and big_data_size is not None:
        size = big_data_size
    available = (reader.size - data_start) if reader.size is not None else size
    if size in (0, 0xFFFFFFFF) or size > available:
        size = available  # streamed or truncated: the audio is what is there
    frames = size // block_align
    return SeekIndex(
        status=OK,
        codec=codec,
        container="wav",
        sample_rate=rate,
        channels=channels,
        timescale=rate,
        num_samples=frames,
        block_align=block_align,
        header=((0, data_start),),
        data_start=data_start,
        data_end=data_start + frames * block_align,
        sample_pos=np.zeros(1, dtype=np.int64),
        byte_pos=np.full(1, data_start, dtype=np.int64),
    )
