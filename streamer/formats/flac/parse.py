"""FLAC: ``fLaC`` + metadata blocks, then frame headers found by sync and CRC-8.

Native timeline: the decoded samples from the first frame on (FLAC has no
encoder delay). Every frame header states its position: a frame number for
fixed-blocksize streams (position = number x the stream's block size) or a
sample number for variable-blocksize ones; ``sample_pos`` is that position,
which is also FFmpeg's packet timestamp. ``num_samples`` runs to the end of
the last frame found, or to its start when FFmpeg's decoder rejects it (a
file cut short inside its last frame: the full decode ends before it).

The header range is everything before the first frame (``fLaC`` and all
metadata blocks, cover art included), which is a valid FLAC header as it
stands. A decoder wanting less can send ``fLaC`` plus the STREAMINFO block
(offset 4, 38 bytes) with bit 7 of its first byte set (last metadata block).
FLAC frames are independent: no pre-roll is needed.

Frames carry no length, so every header is found by scanning for the sync
code and validated by its CRC-8 and by agreeing with the stream (blocking
strategy, channels, sample size, rate) and continuing its numbering. A header
that breaks the numbering is believed only when the next frame confirms it,
and then means no index: frames were lost, and FFmpeg's decode closes the
gap they leave, which frame numbers do not describe; or a frame came again
(numbered back), and FFmpeg's decode plays it twice. In a fixed-blocksize
stream every frame before the last must hold STREAMINFO's block size, which
positions count in. Seek points always come from frame headers; a
SEEKTABLE is never trusted (encoders write placeholders, editors leave stale
tables). A stream cut at the front (its first frame numbered past 0) starts
its gapless decode at that frame, as FFmpeg's does; a frame whose header
states a sample rate other than STREAMINFO's means no index (the decoder
and the index would disagree on every duration).
"""

from __future__ import annotations

import re
from typing import BinaryIO, NamedTuple

import av

from ...index.table import ENDS_EARLY, OK, SeekIndex
from ..ffmpeg import new_decoder
from ..packets import padded_packet
from ..reader import NoIndex, Points, Reader, interval

__all__ = [
    "CHECK_CRC",
    "STREAMINFO_SIZE",
    "StreamInfo",
    "crc8",
    "frame_header",
    "matches",
    "metadata",
    "parse",
    "streaminfo",
]

_SYNC = re.compile(rb"\xff[\xf8\xf9]")
#: Decoder options that make FFmpeg check each frame's CRC-16 and reject a
#: frame that fails (it does not by default).
CHECK_CRC = {"err_detect": "crccheck+explode"}
_MAX_HEADER = 16
#: Bytes of a STREAMINFO block's body.
STREAMINFO_SIZE = 34
#: How far past a header that breaks the numbering its successor is looked for.
_CONFIRM_WINDOW = 1 << 20


def _crc8_table() -> bytes:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        table.append(crc)
    return bytes(table)


_CRC8 = _crc8_table()


def crc8(data: bytes) -> int:
    """FLAC's header CRC-8 (polynomial 0x07, init 0)."""
    crc = 0
    for byte in data:
        crc = _CRC8[crc ^ byte]
    return crc


def matches(head: bytes) -> bool:
    return head.startswith(b"fLaC")


class StreamInfo(NamedTuple):
    min_block: int
    max_block: int
    max_frame: int
    sample_rate: int
    channels: int
    bits: int
    total: int
    #: The block's body as stored: a decoder's extradata.
    body: bytes = b""


class FrameHeader(NamedTuple):
    variable: bool
    number: int  # frame number (fixed blocksize) or first sample (variable)
    block: int
    shape: tuple[int, int, int]  # (rate code, channel count, sample size code)
    rate: int  # the sample rate the header states; 0: STREAMINFO's


#: Sample rates of the frame header's rate codes 1..11 (0: STREAMINFO's).
_RATES = (0, 88200, 176400, 192000, 8000, 16000, 22050, 24000, 32000, 44100, 48000, 96000)


def frame_header(buf: bytes, i: int) -> FrameHeader | None:
    """The frame header at ``buf[i]`` if it is well formed and its CRC-8 holds."""
    if len(buf) - i < 6:
        return None
    b2, b3 = buf[i + 2], buf[i + 3]
    block_code, rate_code = b2 >> 4, b2 & 15
    assignment, size_code = b3 >> 4, (b3 >> 1) & 7
    if block_code == 0 or rate_code == 15 or assignment > 10 or size_code == 3 or b3 & 1:
        return None
    variable = bool(buf[i + 1] & 1)
    number, j = _utf8(buf, i + 4, 7 if variable else 6)
    if number < 0:
        return None
    if block_code == 1:
        block = 192
    elif block_code <= 5:
        block = 576 << (block_code - 2)
    elif block_code <= 7:
        width = block_code - 5
        block = int.from_bytes(buf[j : j + width], "big") + 1
        j += width
    else:
        block = 256 << (block_code - 8)
    if rate_code < 12:
        rate = _RATES[rate_code]
    else:  # 12: kHz in a byte; 13: Hz in two; 14: tens of Hz in two
        width = 1 if rate_code == 12 else 2
        rate = int.from_bytes(buf[j : j + width], "big") * (1000, 1, 10)[rate_code - 12]
        j += width
    if j >= len(buf) or crc8(buf[i:j]) != buf[j]:
        return None
    channels = assignment + 1 if assignment < 8 else 2
    return FrameHeader(variable, number, block, (rate_code, channels, size_code), rate)


def _utf8(buf: bytes, i: int, longest: int) -> tuple[int, int]:
    """FLAC's UTF-8-style coded number at ``buf[i]``: (value, end) or (-1, i)."""
    if i >= len(buf):
        return -1, i
    first = buf[i]
    if first < 0x80:
        return first, i + 1
    length = 8 - (first ^ 0xFF).bit_length()  # leading ones
    if length < 2 or length > longest or i + length > len(buf):
        return -1, i
    value = first & (0x7F >> length)
    for byte in buf[i + 1 : i + length]:
        if byte & 0xC0 != 0x80:
            return -1, i
        value = (value << 6) | (byte & 0x3F)
    return value, i + length


def metadata(reader: Reader) -> tuple[StreamInfo, int]:
    """STREAMINFO and the offset of the first frame (the end of the metadata),
    read from the file's first byte; ``NoIndex`` when they cannot be."""
    reader.read_exact(4, "flac marker")
    info = None
    while True:
        head = reader.read_exact(4, "flac metadata")
        kind, length = head[0] & 0x7F, int.from_bytes(head[1:4], "big")
        if reader.size is not None and reader.pos + length > reader.size:
            raise NoIndex("truncated flac metadata")
        if kind == 0:
            info = streaminfo(reader.read_exact(length, "flac streaminfo"))
        elif kind == 127:
            raise NoIndex("invalid flac metadata block")
        else:
            reader.seek(reader.pos + length)
        if head[0] & 0x80:
            break
    if info is None:
        raise NoIndex("flac without streaminfo")
    return info, reader.pos


def streaminfo(body: bytes) -> StreamInfo:
    """A STREAMINFO block's body, parsed; ``NoIndex`` if it cannot be one."""
    if len(body) < STREAMINFO_SIZE:
        raise NoIndex("invalid flac streaminfo")
    packed = int.from_bytes(body[10:18], "big")
    info = StreamInfo(
        min_block=int.from_bytes(body[0:2], "big"),
        max_block=int.from_bytes(body[2:4], "big"),
        max_frame=int.from_bytes(body[7:10], "big"),
        sample_rate=packed >> 44,
        channels=((packed >> 41) & 7) + 1,
        bits=((packed >> 36) & 31) + 1,
        total=packed & ((1 << 36) - 1),
        body=bytes(body[:STREAMINFO_SIZE]),
    )
    if not info.sample_rate:
        raise NoIndex("invalid flac streaminfo")
    return info


def parse(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index a native FLAC stream; raises ``NoIndex`` when it has no frames."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    info, audio_start = metadata(reader)
    points = Points(interval(info.sample_rate, density))
    end_sample, rejected = _scan(reader, audio_start, info, points)
    sample_pos, byte_pos = points.arrays()
    note = ""
    if rejected is not None:  # no seek point at a frame that does not decode
        sample_pos, byte_pos = sample_pos[byte_pos < rejected], byte_pos[byte_pos < rejected]
        note = f"{ENDS_EARLY}: its decoder rejects the last flac frame, at byte {rejected}"
    first_sample = int(sample_pos[0])
    return SeekIndex(
        status=OK,
        reason=note,
        codec="flac",
        container="flac",
        sample_rate=info.sample_rate,
        channels=info.channels,
        timescale=info.sample_rate,
        first_sample=first_sample,
        num_samples=end_sample - first_sample,
        header=((0, audio_start),),
        data_start=audio_start,
        data_end=reader.size if reader.size is not None else reader.pos,
        sample_pos=sample_pos,
        byte_pos=byte_pos,
    )


class _Stream:
    """What every frame must agree with, and where the next one must start."""

    def __init__(self, first: FrameHeader, info: StreamInfo) -> None:
        self.variable = first.variable
        self.shape = first.shape
        # A fixed-blocksize stream's block size: STREAMINFO's, as the crop's
        # decoder counts frame numbers (``decode.frames``).
        self.block = info.max_block
        self.last_block = first.block
        self.expected = first.number
        if first.shape[1] != info.channels:
            raise NoIndex("flac frame disagrees with streaminfo")
        if first.rate and first.rate != info.sample_rate:
            raise NoIndex("flac frame sample rate disagrees with streaminfo")

    def fits(self, header: FrameHeader) -> bool:
        return header.variable == self.variable and header.shape == self.shape

    def position(self, header: FrameHeader) -> int:
        return header.number if self.variable else header.number * self.block

    def advance(self, header: FrameHeader) -> None:
        self.expected = header.number + (header.block if self.variable else 1)
        self.last_block = header.block

    def check_block(self, at: int) -> None:
        """Before the frame at byte ``at`` of a fixed-blocksize stream: the one
        before it held STREAMINFO's block size, as frame number x block size
        says. Else FFmpeg's decode, which strings the frames' own samples
        together, runs apart from the positions (a STREAMINFO of 65535, or
        of 0, over frames of 4608 had every crop fail, or a short frame in
        the middle had every crop after it misplaced), so "no index"."""
        if not self.variable and self.last_block != self.block:
            raise NoIndex(
                f"flac frame of {self.last_block} samples before byte {at}, where "
                f"streaminfo's block size is {self.block}"
            )


def _scan(reader: Reader, start: int, info: StreamInfo, points: Points) -> tuple[int, int | None]:
    """Walk the frames; returns the sample just past the last one FFmpeg
    decodes, and where the last frame starts when FFmpeg's decoder rejects
    it (a frame cut short: the data still runs to the end of the blob, as
    every FLAC index's does, but no crop's samples are in that frame)."""
    reader.seek(start)
    buf, i = reader.window(_MAX_HEADER)
    first = frame_header(buf, i) if buf.startswith((b"\xff\xf8", b"\xff\xf9"), i) else None
    if first is None:
        raise NoIndex("no flac frame after the metadata")
    stream = _Stream(first, info)
    points.add(stream.position(first), start)
    stream.advance(first)
    end_sample = stream.position(first) + first.block
    last = (start, stream.position(first))  # the last frame's byte and first sample
    position = start + 2
    while True:
        reader.seek(position)
        buf, i = reader.window(_CONFIRM_WINDOW + _MAX_HEADER)
        base, end = reader.pos - i, len(buf)
        eof = reader.ends_at(base + end)
        limit = end if eof else end - _CONFIRM_WINDOW
        for match in _SYNC.finditer(buf, i, min(end, limit + 1)):
            j = match.start()
            header = frame_header(buf, j)
            if header is None or not stream.fits(header):
                continue
            if header.number < stream.expected:
                if _confirmed(buf, j, header, stream) or _whole_frame(buf, j, eof, stream, info):
                    # A frame again (a recorder's repeat, a restarted
                    # stream): FFmpeg's decode plays it again, and every
                    # sample after it comes later than its number says.
                    raise NoIndex(
                        f"flac frame at byte {base + j} repeats an earlier position: "
                        "FFmpeg's decode plays it again"
                    )
                continue  # a sync code and CRC-8 by chance inside a frame
            if header.number > stream.expected:
                if not _confirmed(buf, j, header, stream):
                    continue
                # Frames went missing, and FFmpeg's decode closes the gap
                # they leave: no frame number after it is a position in it.
                raise NoIndex(
                    f"flac frames lost before byte {base + j}: FFmpeg's decode closes the gap"
                )
            stream.check_block(base + j)
            points.add(stream.position(header), base + j)
            last = (base + j, stream.position(header))
            stream.advance(header)
            end_sample = stream.position(header) + header.block
        if eof:
            if last[0] >= base and not _decodes(info, buf[last[0] - base :]):
                if last[0] == start:
                    raise NoIndex("the only flac frame does not decode (cut short?)")
                return last[1], last[0]
            return end_sample, None
        position = base + limit


def _decodes(info: StreamInfo, frame: bytes, *, check_crc: bool = False) -> bool:
    """Whether FFmpeg's decoder decodes ``frame`` (with ``check_crc``, and
    its CRC-16 matches: ``CHECK_CRC``).

    Asked of the last frame (its bytes to the end of the file): one cut
    short by the file's end (a download that stopped) the decoder rejects,
    and FFmpeg's decode, the full decode, ends before it: so does the index,
    or a crop over it would be that frame's length of silence counted as
    damage, and the index unverified."""
    decoder = new_decoder("flac")
    decoder.extradata = info.body
    if check_crc:
        decoder.options = CHECK_CRC
    try:
        return bool(decoder.decode(padded_packet(frame)))
    except (av.FFmpegError, ValueError):
        return False


def _whole_frame(buf: bytes, j: int, eof: bool, stream: _Stream, info: StreamInfo) -> bool:
    """Whether the header at ``j`` starts a whole frame: its bytes up to the
    next header of the stream's shape (or to the end of the file) decode,
    CRC-16 checked. Asked of a header numbered before the stream's position
    whose successor does not confirm it (``_confirmed``): frames a writer
    numbered all alike (a test tool's frames all numbered 0), which FFmpeg
    decodes one after another. Taken for sync codes inside a frame, they
    were skipped: the index ended after the first, its check failed as
    damaged audio, and crops past it were lost as past the end."""
    found = _next_header(buf, j, stream)
    if found is not None:
        return _decodes(info, buf[j : found[0]], check_crc=True)
    return eof and _decodes(info, buf[j:], check_crc=True)


def _confirmed(buf: bytes, j: int, header: FrameHeader, stream: _Stream) -> bool:
    """Whether a header that skips frames is followed by its own successor:
    the next header of the stream's shape must be it. (Looking further would
    let a run of false headers, each searching far ahead, cost quadratic time.)"""
    found = _next_header(buf, j, stream)
    # The last frame of the stream has no successor to confirm it.
    return found is not None and found[1].number == header.number + (
        header.block if stream.variable else 1
    )


def _next_header(buf: bytes, j: int, stream: _Stream) -> tuple[int, FrameHeader] | None:
    """The first header of the stream's shape after the one at ``j``, and
    where it starts, within ``_CONFIRM_WINDOW``; None when there is none."""
    for match in _SYNC.finditer(buf, j + 2, min(len(buf), j + _CONFIRM_WINDOW)):
        successor = frame_header(buf, match.start())
        if successor is not None and stream.fits(successor):
            return match.start(), successor
    return None
