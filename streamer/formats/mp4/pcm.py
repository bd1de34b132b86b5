"""PCM in QuickTime MOV and MP4: which codec FFmpeg reads from a sample
entry, and the packets its demuxer cuts from the chunks.

Sample entries (``stsd``), as FFmpeg's MOV demuxer reads them: the fourcc
names a codec (``twos`` 16-bit big-endian, ``sowt`` little-endian, ``raw ``
unsigned 8-bit, ``in24``, ``in32``, ``fl32``, ``fl64`` big-endian, ``ulaw``,
``alaw``); a version 0 or 1 entry's sample size then turns ``twos``/``sowt``
into 8, 24 or 32 bits and ``raw `` into 16; a version 2 entry (``lpcm``,
rates over 65535 Hz) states its bits and its flags (float, big-endian,
signed); an ``enda`` box (alone or in ``wave``) makes 24/32-bit and float
little-endian; ISO 23003-5's ``ipcm``/``fpcm`` give size and byte order in
``pcmC``. A version 1 entry's samples per packet must be 1 (the others'
layouts are not PCM's).

Packets: when ``stts`` is one run of duration 1 (a sample is one PCM frame,
as every PCM writer has it), FFmpeg ignores ``stsz`` and cuts each chunk
(``stsc`` frames at ``stco``) into packets of 1024 frames, the last one
shorter, of ``frames * bytes per frame`` bytes, the frame's size being the
codec's sample size times the channels (whatever ``stsz`` or the entry's
bytes per frame say). Those packets are the index's samples: a seek point
per FFmpeg packet, so a crop decodes at most 1023 frames before its start.
"""

from __future__ import annotations

import struct

import numpy as np

from ..reader import NoIndex
from ..wav.decode import CODECS, sample_bytes
from .description import CHILDREN_AT, audio_format, children, version

__all__ = ["BYTES", "PACKET_FRAMES", "codec", "is_pcm", "packets"]

#: Frames per packet FFmpeg's MOV demuxer cuts from a PCM chunk.
PACKET_FRAMES = 1024
#: Bytes per sample of each PCM codec FFmpeg reads from MOV/MP4: the same
#: codecs as in WAV and AIFF (``wav.decode``).
BYTES = {codec: sample_bytes(codec) for codec in CODECS}
#: The codec FFmpeg's tag table gives each fourcc ("": set by the entry).
_FOURCCS = {
    b"twos": "pcm_s16be",
    b"sowt": "pcm_s16le",
    b"raw ": "pcm_u8",
    b"in24": "pcm_s24be",
    b"in32": "pcm_s32be",
    b"fl32": "pcm_f32be",
    b"fl64": "pcm_f64be",
    b"ulaw": "pcm_mulaw",
    b"alaw": "pcm_alaw",
    b"lpcm": "",
    b"ipcm": "",
    b"fpcm": "",
}
#: Version 0/1 entries: the sample size moves a 16-bit (8-bit) codec.
_BY_BITS = {
    ("pcm_s16be", 8): "pcm_s8",
    ("pcm_s16le", 8): "pcm_s8",
    ("pcm_s16be", 24): "pcm_s24be",
    ("pcm_s16le", 24): "pcm_s24le",
    ("pcm_s16be", 32): "pcm_s32be",
    ("pcm_s16le", 32): "pcm_s32le",
    ("pcm_s8", 16): "pcm_s16be",
    ("pcm_u8", 16): "pcm_s16be",
}
_LITTLE = {
    "pcm_s16be": "pcm_s16le",
    "pcm_s24be": "pcm_s24le",
    "pcm_s32be": "pcm_s32le",
    "pcm_f32be": "pcm_f32le",
    "pcm_f64be": "pcm_f64le",
}


def is_pcm(fourcc: bytes) -> bool:
    return fourcc in _FOURCCS


def codec(fourcc: bytes, entry: bytes) -> tuple[str, int, int]:
    """(codec, channels, sample rate) FFmpeg reads from a PCM sample entry
    (``entry``: the whole entry, from its size field)."""
    stated = version(entry)
    if stated not in CHILDREN_AT or len(entry) < CHILDREN_AT[stated]:
        raise NoIndex("unsupported mp4 PCM sample description")
    name = _FOURCCS[fourcc]
    channels, bits, rate = audio_format(entry)
    if stated == 1 and struct.unpack_from(">I", entry, 36)[0] > 1:
        raise NoIndex("mp4 PCM with several frames per packet")
    if stated == 2 and fourcc == b"lpcm":  # as FFmpeg: the flags name the codec of "lpcm" alone
        name = _lpcm(bits, struct.unpack_from(">I", entry, 60)[0])
    name = _BY_BITS.get((name, bits), name)
    for kind, payload in children(entry, CHILDREN_AT[stated]):
        if kind == b"enda" and len(payload) >= 2 and payload[1]:
            name = _LITTLE.get(name, name)
        elif kind == b"pcmC" and len(payload) >= 6:
            size = payload[5]
            name = {
                b"ipcm": {16: "pcm_s16be", 24: "pcm_s24be", 32: "pcm_s32be"},
                b"fpcm": {32: "pcm_f32be", 64: "pcm_f64be"},
            }.get(fourcc, {}).get(size, "")
            if payload[4] & 1:
                name = _LITTLE.get(name, name)
    if name not in BYTES:
        raise NoIndex(f"unsupported codec in mp4: {fourcc.decode('latin-1')!r} of {bits} bits")
    if not 1 <= channels <= 64:
        raise NoIndex("mp4 PCM with an invalid channel count")
    return name, channels, rate


def _lpcm(bits: int, flags: int) -> str:
    """FFmpeg's codec for a version 2 entry's bits and flags (1: float,
    2: big-endian, 4: signed)."""
    big = "be" if flags & 2 else "le"
    if flags & 1:
        return f"pcm_f{bits}{big}" if bits in (32, 64) else ""
    if bits == 8:
        return "pcm_s8" if flags & 4 else "pcm_u8"
    return f"pcm_s{bits}{big}" if bits in (16, 24, 32) else ""


def packets(
    stts: np.ndarray,
    stsc: np.ndarray,
    chunks: np.ndarray,
    constant_size: int | None,
    frame_bytes: int,
    length: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(byte offset, size, decode time; one more time: the end) of every
    packet FFmpeg cuts from the chunks of a PCM track in a file of
    ``length`` bytes. ``constant_size``: ``stsz``'s sample size (None: a
    table of sizes). Refused, with the reason: what FFmpeg would not read
    this way, chunks past the end of the file (a truncated file: FFmpeg
    decodes part of a chunk), and chunks that overlap (a lying table)."""
    if len(stts) != 1 or int(stts["f1"][0]) != 1:
        raise NoIndex("mp4 PCM timed otherwise than one frame per sample")
    if constant_size is None:
        raise NoIndex("mp4 PCM with a table of sample sizes")
    if not len(stsc) or not len(chunks):
        raise NoIndex("empty mp4 sample tables")
    first_chunk = stsc["f0"].astype(np.int64)
    entry_of_chunk = np.searchsorted(first_chunk, np.arange(1, len(chunks) + 1), side="right") - 1
    if entry_of_chunk[0] < 0:
        raise NoIndex("invalid mp4 stsc")
    frames = stsc["f1"].astype(np.int64)[entry_of_chunk]
    if not frames.all():
        raise NoIndex("mp4 PCM chunk of no samples")
    sizes = frames * frame_bytes
    if (chunks + sizes > length).any():
        raise NoIndex("truncated mp4: PCM chunks run past the end of the file")
    order = np.argsort(chunks, kind="stable")
    if (chunks[order][1:] < (chunks + sizes)[order][:-1]).any():
        raise NoIndex("mp4 PCM chunks that overlap")
    # The chunks fit in the file without overlapping: at most one packet
    # per byte, and far fewer (1024 frames each).
    per_chunk = -(-frames // PACKET_FRAMES)
    chunk_of = np.repeat(np.arange(len(chunks)), per_chunk)
    starts = np.concatenate([[0], np.cumsum(per_chunk)])[:-1]
    k = np.arange(len(chunk_of)) - starts[chunk_of]  # packet's place in its chunk
    counts = np.minimum(frames[chunk_of] - k * PACKET_FRAMES, PACKET_FRAMES)
    offsets = chunks[chunk_of] + k * PACKET_FRAMES * frame_bytes
    times = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=times[1:])
    return offsets, counts * frame_bytes, times
