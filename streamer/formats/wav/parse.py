"""WAV (RIFF and RF64) and Sony Wave64: the ``fmt `` and ``data`` chunks;
seeking is arithmetic.

Native timeline: sample frames from the start of the ``data`` chunk; sample
``s`` is at byte ``data_start + s * block_align``. The index holds one seek
point (0, ``data_start``) and the header is every byte before the audio, so a
decoder can send the header and then any whole number of sample frames
(``pcm_index``, which the AIFF parser builds its index with too).

Wave64 is RIFF with 16-byte GUIDs for chunk ids and 64-bit sizes that count
the chunk's own 24-byte header, chunks 8-byte aligned; its chunks are read
as FFmpeg's ``w64`` demuxer reads them: every chunk to the end of the file
(a later ``fmt `` or ``data`` replaces an earlier one), the ``data`` chunk
not padded to 8 bytes, a size of 24 bytes or less refused.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

import numpy as np

from ...index.table import OK, SeekIndex
from ..reader import NoIndex, Reader
from .decode import sample_bytes

__all__ = ["matches", "matches_w64", "parse", "parse_w64", "pcm_index"]

_EXTENSIBLE = 0xFFFE
_PCM = {8: "pcm_u8", 16: "pcm_s16le", 24: "pcm_s24le", 32: "pcm_s32le"}
_FLOAT = {32: "pcm_f32le", 64: "pcm_f64le"}
_FMT_MAX = 1 << 16

_W64_SUFFIX = bytes.fromhex("f3acd3118cd100c04f8edb8a")
_W64_RIFF = b"riff" + bytes.fromhex("2e91cf11a5d628db04c10000")
_W64_WAVE = b"wave" + _W64_SUFFIX
_W64_FMT = b"fmt " + _W64_SUFFIX
_W64_DATA = b"data" + _W64_SUFFIX


def matches(head: bytes) -> bool:
    return len(head) >= 12 and head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE"


def matches_w64(head: bytes) -> bool:
    return head[:16] == _W64_RIFF


def _codec(tag: int, bits: int) -> str:
    codec = {1: _PCM, 3: _FLOAT}.get(tag, {}).get(bits)
    if codec is None:
        codec = {6: "pcm_alaw", 7: "pcm_mulaw"}.get(tag) if bits == 8 else None
    if codec is None:
        raise NoIndex(f"unsupported wav format 0x{tag:04x} with {bits} bits")
    return codec


def _fmt(fmt: bytes | None) -> tuple[str, int, int, int]:
    """(codec, channels, sample rate, block align) of a ``fmt `` chunk's body."""
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
    return codec, channels, rate, block_align


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
            if size > _FMT_MAX:
                raise NoIndex("wav fmt chunk too large")
            body = reader.read_exact(size, f"wav {kind.decode('latin-1').strip()} chunk")
            if kind == b"fmt ":
                fmt = body
            elif size >= 16:
                big_data_size = struct.unpack_from("<Q", body, 8)[0]
            reader.seek(reader.pos + (size & 1))
        else:
            reader.seek(reader.pos + size + (size & 1))
    codec, channels, rate, block_align = _fmt(fmt)
    data_start = reader.pos
    if rf64 and size == 0xFFFFFFFF and big_data_size is not None:
        size = big_data_size
    if size in (0, 0xFFFFFFFF):
        size = None  # streamed: the audio is what is there
    return pcm_index(reader, "wav", codec, rate, channels, block_align, data_start, size)


def parse_w64(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index a PCM Wave64 file, as ``parse`` a WAV one."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    head = reader.read_exact(40, "w64 header")
    if struct.unpack_from("<Q", head, 16)[0] < 72 or head[24:40] != _W64_WAVE:
        raise NoIndex("invalid w64 header")
    fmt: bytes | None = None
    data: tuple[int, int] | None = None
    while True:
        guid = reader.read(16)
        if len(guid) < 16:
            break
        size = struct.unpack("<Q", reader.read_exact(8, "w64 chunk header"))[0]
        at = reader.pos
        if size <= 24 or size > (1 << 63) - 1 - at:
            raise NoIndex("invalid w64 chunk size")
        aligned = at + ((size + 7) & ~7) - 24
        if guid == _W64_FMT:
            if size - 24 > _FMT_MAX:
                raise NoIndex("wav fmt chunk too large")
            fmt = reader.read_exact(size - 24, "w64 fmt chunk")
        elif guid == _W64_DATA:
            data = (at, size - 24)
            aligned = at + size - 24  # FFmpeg skips the data without the padding
        if reader.ends_at(aligned):
            break
        reader.seek(aligned)
    if data is None:
        raise NoIndex("w64 without a data chunk")
    codec, channels, rate, block_align = _fmt(fmt)
    return pcm_index(reader, "w64", codec, rate, channels, block_align, *data)


def pcm_index(
    reader: Reader,
    container: str,
    codec: str,
    rate: int,
    channels: int,
    block_align: int,
    data_start: int,
    size: int | None,
) -> SeekIndex:
    """The index of ``size`` bytes of PCM from ``data_start`` (None: to the
    end), cut to what the file holds (a truncated file decodes what is
    there) and to whole sample frames."""
    if block_align != channels * sample_bytes(codec):
        raise NoIndex(f"invalid {container} block size")
    # From a pipe with a stated size the index check learns the length.
    piped = size is not None and reader.size is None
    available = size if piped and size is not None else reader.length() - data_start
    if size is None or size > available:
        size = available
    if size < 0:
        raise NoIndex(f"{container} audio starts past the end of the file")
    frames = size // block_align
    return SeekIndex(
        status=OK,
        codec=codec,
        container=container,
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
