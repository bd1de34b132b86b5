"""AIFF and AIFF-C: the ``COMM`` and ``SSND`` chunks, read as FFmpeg's
``aiff`` demuxer reads them; seeking is arithmetic (``wav.parse.pcm_index``).

- Chunks are walked while the ``FORM`` size lasts (a size of 2^31 or more
  counts as 2^31 - 1), each padded to an even size; the walk stops at a
  ``COMM`` after the ``SSND``, and at the end of the file or a zero chunk id
  once both were seen. A later ``SSND`` replaces an earlier one; ``FVER``
  sets the version a later ``COMM`` is read with.
- ``COMM``: channels, frames (unused: FFmpeg decodes every whole frame of
  the sound data), bits, an 80-bit extended sample rate rounded to an
  integer as FFmpeg does (out of range, 0 or below: no index), and for
  AIFF-C (version ``A2805140``) with 4 more bytes, the compression type,
  matched case-insensitively: ``NONE``/``twos`` are signed big-endian of
  the sample size (up to 8, 16, 24, 32 bits), as plain AIFF; ``sowt``
  16-bit little-endian; ``raw `` unsigned 8-bit; ``in24``, ``in32``,
  ``fl32``, ``fl64`` big-endian; ``alaw``, ``ulaw``. Anything else (ADPCM,
  MACE, GSM, ...) has no native index.
- ``SSND``: audio from its offset field (after the offset and block size
  fields) to its end, or to the end of the file.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

from ...index.table import SeekIndex
from ..reader import NoIndex, Reader
from ..wav.decode import sample_bytes
from ..wav.parse import pcm_index

__all__ = ["matches", "parse"]

_AIFC_V1 = 0xA2805140
_AIFF = 0
_TYPES = {
    b"NONE": "",
    b"TWOS": "",
    b"SOWT": "pcm_s16le",
    b"RAW ": "pcm_u8",
    b"IN24": "pcm_s24be",
    b"IN32": "pcm_s32be",
    b"FL32": "pcm_f32be",
    b"FL64": "pcm_f64be",
    b"ALAW": "pcm_alaw",
    b"ULAW": "pcm_mulaw",
}


def matches(head: bytes) -> bool:
    return len(head) >= 12 and head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC")


def _rate(exponent: int, mantissa: int) -> int:
    """The sample rate FFmpeg makes of an 80-bit extended float: the
    mantissa shifted by the exponent (the sign bit counted in it), rounded,
    in a 32-bit int."""
    shift = exponent - 16383 - 63
    if not -63 <= shift <= 63:
        raise NoIndex("aiff sample rate out of range")
    if shift >= 0:
        value = (mantissa << shift) & (2**64 - 1)
    else:
        value = ((mantissa + (1 << (-shift - 1))) & (2**64 - 1)) >> -shift
    value &= 0xFFFFFFFF
    rate = value - (1 << 32) if value >= 1 << 31 else value
    if rate <= 0:
        raise NoIndex("aiff sample rate of 0 or below")
    return rate


def _comm(body: bytes, version: int) -> tuple[str, int, int]:
    """(codec, channels, sample rate) of a ``COMM`` chunk's body."""
    if len(body) < 18:
        raise NoIndex("aiff COMM chunk too small")
    channels, _, bits, exponent, mantissa = struct.unpack_from(">HIHHQ", body)
    rate = _rate(exponent, mantissa)
    codec = ""
    if version == _AIFC_V1 and len(body) >= 22:
        kind = body[18:22]
        if kind.upper() not in _TYPES:
            raise NoIndex(f"unsupported aiff compression {kind.decode('latin-1')!r}")
        codec = _TYPES[kind.upper()]
    if not codec:
        sizes = ((8, "pcm_s8"), (16, "pcm_s16be"), (24, "pcm_s24be"), (32, "pcm_s32be"))
        codec = next((name for most, name in sizes if bits <= most), "")
        if not codec:
            raise NoIndex(f"unsupported aiff sample size of {bits} bits")
    if not channels:
        raise NoIndex("aiff with no channels")
    return codec, channels, rate


def parse(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index a PCM AIFF or AIFF-C file (``density`` is unused: one point is
    exact everywhere)."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    form = reader.read_exact(12, "aiff header")
    left = min(struct.unpack_from(">I", form, 4)[0], 0x7FFFFFFF) - 4
    version = _AIFF if form[8:12] == b"AIFF" else _AIFC_V1
    comm: tuple[str, int, int] | None = None
    sound: tuple[int, int] | None = None  # (audio start, chunk end)
    while left > 0:
        chunk = reader.read(8)
        if len(chunk) < 8 or chunk[:4] == b"\0\0\0\0":
            break
        kind, size = chunk[:4], min(struct.unpack_from(">I", chunk, 4)[0], 0x7FFFFFFF)
        left -= size + 8 + (size & 1)
        at = reader.pos
        if kind == b"COMM":
            if size & 1 or size > 1 << 16:
                raise NoIndex("aiff COMM chunk of an odd or absurd size")
            comm = _comm(reader.read_exact(size, "aiff COMM chunk"), version)
            if sound is not None:
                break
        elif kind == b"FVER":
            version = struct.unpack(">I", reader.read_exact(4, "aiff FVER chunk"))[0]
        elif kind == b"SSND":
            if size < 8:
                raise NoIndex("aiff SSND chunk too small")
            offset = struct.unpack(">I", reader.read_exact(8, "aiff SSND chunk")[:4])[0]
            sound = (at + 8 + offset, at + size)
        end = at + size + (size & 1)
        if reader.ends_at(end):
            break
        reader.seek(end)
    if comm is None or sound is None:
        raise NoIndex("aiff without a COMM and an SSND chunk")
    codec, channels, rate = comm
    start, end = sound
    if end < start:
        raise NoIndex("aiff sound data offset past the end of its chunk")
    block_align = channels * sample_bytes(codec)
    return pcm_index(reader, "aiff", codec, rate, channels, block_align, start, end - start)
