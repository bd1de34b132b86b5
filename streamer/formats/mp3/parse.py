"""MPEG audio (mp3, and layers I/II): frame scan, Xing/Info/VBRI, LAME tag.

Native timeline: the decoder's raw output, frame after frame, counting only
audio frames (the Xing/Info/VBRI frame is metadata and decodes to nothing in
FFmpeg). Audio frame ``k`` starts at native sample ``k * samples_per_frame``.
The gapless decode FFmpeg produces skips ``encoder_delay + 529`` samples (the
LAME tag's delay plus the decoder's own 528 + 1) and stops
``padding - 529`` samples before the end, exactly as FFmpeg's mp3 demuxer
does; without a LAME tag nothing is trimmed.

mp3 needs no header: every frame carries its own. A decoder must *not* be
fed the Xing frame (FFmpeg would apply the whole-file gapless trim to a
crop). Frames use the bit reservoir (up to 511 bytes of earlier frames), so
decoding from a seek point needs at least one earlier frame of pre-roll.

After garbage the positions count only real frames (a sync is believed only
when the next header confirms it); FFmpeg's parser may decode spurious frames
out of such garbage, so its timestamps past damage are not the reference.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import BinaryIO, NamedTuple

from ...index.table import OK, SeekIndex
from ..reader import NoIndex, Points, Reader, interval

__all__ = ["DECODER_DELAY", "matches", "parse", "samples_per_frame"]

#: FFmpeg's decoder delay for layer III, on top of the encoder's own delay.
DECODER_DELAY = 529
#: Bits two frames of one stream share (sync, version, layer, sample rate):
#: FFmpeg's SAME_HEADER_MASK.
_SAME_HEADER = 0xFFE00000 | (3 << 19) | (3 << 17) | (3 << 10)
_LENGTH_BITS = 0xFFFFFE00  # everything that decides a frame's length
_MAX_FRAME = 2881  # the longest frame a header can announce: MPEG-2.5 layer II, 160 kb/s, 8 kHz
_TRAILERS = (b"TAG", b"APETAGEX", b"LYRICSBEGIN", b"ID3")

_BITRATES = {
    (1, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (1, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (1, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (2, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (2, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_BITRATES[(2, 3)] = _BITRATES[(2, 2)]
_SAMPLE_RATES = (44100, 48000, 32000)
_VERSIONS = {3: 1, 2: 2, 0: 25}  # header bits -> MPEG-1, MPEG-2, MPEG-2.5


class Frame(NamedTuple):
    length: int
    samples: int
    sample_rate: int
    layer: int
    lsf: bool  # MPEG-2/2.5 ("low sampling frequency")


def samples_per_frame(layer: int, lsf: bool) -> int:
    """Layer I: 384; Layer II: 1152; Layer III: 1152 (MPEG-1) or 576 (MPEG-2/2.5)."""
    if layer == 1:
        return 384
    return 576 if layer == 3 and lsf else 1152


@lru_cache(maxsize=4096)
def frame_info(header: int) -> Frame | None:
    """Length and shape of the frame a 32-bit header announces, or None when
    the header is invalid or free-format (the length of which is unknowable
    from the header)."""
    if header & 0xFFE00000 != 0xFFE00000:
        return None
    version = _VERSIONS.get((header >> 19) & 3)
    layer = 4 - ((header >> 17) & 3)
    bitrate_index = (header >> 12) & 15
    rate_index = (header >> 10) & 3
    if version is None or layer == 4 or bitrate_index in (0, 15) or rate_index == 3:
        return None
    if header & 3 == 2:  # reserved emphasis
        return None
    lsf = version != 1
    bitrate = _BITRATES[(2 if lsf else 1, layer)][bitrate_index] * 1000
    sample_rate = _SAMPLE_RATES[rate_index] >> (0 if version == 1 else 1 if version == 2 else 2)
    padding = (header >> 9) & 1
    samples = samples_per_frame(layer, lsf)
    if layer == 1:
        return Frame((12 * bitrate // sample_rate + padding) * 4, samples, sample_rate, 1, lsf)
    # Bytes per frame: samples / 8 bits x bitrate / rate (144 or 72 x bitrate / rate).
    return Frame(samples // 8 * bitrate // sample_rate + padding, samples, sample_rate, layer, lsf)


def matches(head: bytes) -> bool:
    """ID3v2 tag or a valid MPEG audio frame header at the start."""
    if head.startswith(b"ID3"):
        return True
    return (
        len(head) >= 4 and frame_info(struct.unpack_from(">I", head)[0] & _LENGTH_BITS) is not None
    )


def parse(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index an MPEG audio stream; raises ``NoIndex`` when there is no audio."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    _skip_id3v2(reader)
    start = _sync(reader, reader.pos, None)
    if start is None:
        raise NoIndex("no mpeg audio frames")
    first_header = _header_at(reader, start)
    first = frame_info(first_header & _LENGTH_BITS)
    assert first is not None
    tag = _vbr_tag(reader, start, first_header, first)
    audio_start = start + first.length if tag.present else start
    points = Points(interval(first.sample_rate, density))
    frames, data_end = _scan(reader, audio_start, first_header & _SAME_HEADER, first, points)
    if frames == 0:
        raise NoIndex("no mpeg audio frames")
    sample_pos, byte_pos = points.arrays()
    total = frames * first.samples
    first_sample, end = 0, total
    if tag.lame:
        first_sample = tag.delay + DECODER_DELAY
        if tag.frames:
            end = min(total, tag.frames * first.samples - tag.padding + DECODER_DELAY)
    return SeekIndex(
        status=OK,
        codec=f"mp{first.layer}",
        container="mp3",
        sample_rate=first.sample_rate,
        channels=1 if (first_header >> 6) & 3 == 3 else 2,
        timescale=first.sample_rate,
        first_sample=first_sample,
        num_samples=max(0, end - first_sample),
        encoder_delay=tag.delay,
        padding=tag.padding,
        data_start=audio_start,
        data_end=data_end,
        sample_pos=sample_pos,
        byte_pos=byte_pos,
    )


def _skip_id3v2(reader: Reader) -> None:
    """Skip every ID3v2 tag at the start (the size is sync-safe whether or not
    the tag is unsynchronised; the footer flag adds 10 bytes)."""
    while True:
        buf, i = reader.window(10)
        head = buf[i : i + 10]
        if len(head) < 10 or not head.startswith(b"ID3") or head[3] == 0xFF:
            return
        if any(b & 0x80 for b in head[6:10]):
            raise NoIndex("corrupt id3v2 tag size")
        size = (head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9]
        footer = 10 if head[5] & 0x10 else 0
        reader.seek(reader.pos + 10 + size + footer)


def _header_at(reader: Reader, position: int) -> int:
    reader.seek(position)
    buf, i = reader.window(4)
    return struct.unpack_from(">I", buf, i)[0]


def _sync(reader: Reader, position: int, same: int | None) -> int | None:
    """The first position at or after ``position`` holding a frame header whose
    successor is a frame header too (or the end of the data), so that sync-like
    bytes inside audio are not taken for a frame. ``same`` (the stream's shared
    header bits), once known, must match as well."""
    reader.seek(position)
    while True:
        buf, i = reader.window(4 * _MAX_FRAME)
        base, end = reader.pos - i, len(buf)
        eof = reader.ends_at(base + end)
        # Only candidates whose successor lies inside the buffer are judged
        # here (and a whole header: a negative stop would count from the end).
        stop = max(i, end - 3 if eof else end - 2 * _MAX_FRAME)
        j = buf.find(b"\xff", i, stop)
        while j >= 0:
            if _confirmed(buf, j, same, eof):
                return base + j
            j = buf.find(b"\xff", j + 1, stop)
        if eof:
            return None
        reader.seek(base + stop)


def _confirmed(buf: bytes, j: int, same: int | None, eof: bool) -> bool:
    header = struct.unpack_from(">I", buf, j)[0]
    frame = frame_info(header & _LENGTH_BITS)
    if frame is None or (same is not None and header & _SAME_HEADER != same):
        return False
    following = j + frame.length
    if following + 4 <= len(buf):
        successor = struct.unpack_from(">I", buf, following)[0]
        if successor & _SAME_HEADER == header & _SAME_HEADER:
            return frame_info(successor & _LENGTH_BITS) is not None
    # A last frame: the stream (in the buffer up to its end) stops right after
    # it, or only a trailing tag follows.
    return (eof and following == len(buf)) or buf.startswith(_TRAILERS, following)


def _scan(
    reader: Reader, position: int, same: int, first: Frame, points: Points
) -> tuple[int, int]:
    """Walk the frames from ``position``; returns (audio frames, end of the last).

    In lock, a frame is accepted when its header is valid and shares the
    stream's fixed bits, as FFmpeg's parser does; anything else drops the lock
    and resyncs past the garbage. A frame cut short by the end of the data is
    not counted.
    """
    samples_per_frame = first.samples
    frames = 0
    data_end = position
    unpack = struct.unpack_from
    while True:
        reader.seek(position)
        buf, i = reader.window(2 * _MAX_FRAME)
        base, end = reader.pos - i, len(buf)
        eof = reader.ends_at(base + end)
        limit = end if eof else end - _MAX_FRAME  # no frame is cut by the buffer's end
        lost = False
        while i < limit:
            header = unpack(">I", buf, i)[0] if i + 4 <= end else 0
            frame = frame_info(header & _LENGTH_BITS) if header & _SAME_HEADER == same else None
            if frame is None or i + frame.length > end:
                lost = True
                break
            points.add(frames * samples_per_frame, base + i)
            frames += 1
            i += frame.length
            data_end = base + i
        if not lost:
            if eof:
                return frames, data_end
            position = base + i
            continue
        resynced = _sync(reader, base + i + 1, same)
        if resynced is None:
            return frames, data_end
        position = resynced


class _VbrTag(NamedTuple):
    present: bool = False  # a Xing/Info/VBRI frame: metadata, not audio
    lame: bool = False  # a LAME/Lavc/Lavf extension with delay and padding
    frames: int = 0  # audio frames the tag announces (0: not stated)
    delay: int = 0
    padding: int = 0


def _vbr_tag(reader: Reader, start: int, header: int, frame: Frame) -> _VbrTag:
    """Read a Xing/Info (with its LAME extension) or VBRI tag from the first frame."""
    reader.seek(start)
    buf, i = reader.window(frame.length)
    data = buf[i : i + frame.length]
    mono = (header >> 6) & 3 == 3
    side_info = (9 if mono else 17) if frame.lsf else (17 if mono else 32)
    xing = 4 + side_info
    if data[36:40] == b"VBRI":
        return _VbrTag(present=True, frames=int.from_bytes(data[50:54], "big"))
    if data[xing : xing + 4] not in (b"Xing", b"Info"):
        return _VbrTag()
    flags = int.from_bytes(data[xing + 4 : xing + 8], "big")
    cursor = xing + 8
    frames = 0
    if flags & 1:
        frames = int.from_bytes(data[cursor : cursor + 4], "big")
    cursor += (
        4 * bool(flags & 1) + 4 * bool(flags & 2) + 100 * bool(flags & 4) + 4 * bool(flags & 8)
    )
    if data[cursor : cursor + 4] not in (b"LAME", b"Lavf", b"Lavc") or len(data) < cursor + 24:
        return _VbrTag(present=True, frames=frames)
    packed = int.from_bytes(data[cursor + 21 : cursor + 24], "big")
    return _VbrTag(True, True, frames, packed >> 12, packed & 0xFFF)
