"""MPEG audio (mp3, and layers I/II): frame scan, Xing/Info/VBRI, LAME tag.

Native timeline: the decoder's raw output, frame after frame, counting the
frames FFmpeg's mp3 demuxer hands over: a Xing/Info/VBRI frame that states a
frame count or a stream size is metadata, skipped; audio starts at the first
frame the next one confirms; a last frame cut short counts. Audio frame
``k`` starts at native sample ``k * samples_per_frame``. With a LAME tag the
gapless decode skips ``encoder_delay + 529`` samples (the decoder's own
528 + 1) and drops ``padding - 529`` before the stated count's end, exactly
as FFmpeg's demuxer marks the packets and its decoder trims them
(``_gapless``); without one nothing is trimmed.

mp3 needs no header: every frame carries its own, and the tag frame is never
fed to a crop decoder. The bit reservoir lets a frame's main data start up to
511 bytes back, in earlier frames: the scan keeps each frame's first 8 bytes
and works out how many frames a decoder must start before any frame to be
exact (``_reservoir_need``), stored as ``SeekIndex.preroll`` when above
``PREROLL_FRAMES``.

Bytes inside the stream that are not frames (a tag between joined files,
junk, a frame cut short) end it: FFmpeg's parser makes packets of them that
its decoder rejects, and the full decode ends there. Zero bytes between
frames are passed over, as FFmpeg's parser does.
"""

from __future__ import annotations

import re
import struct
from array import array
from functools import lru_cache
from typing import BinaryIO, NamedTuple

import numpy as np

from ...index.table import ENDS_EARLY, OK, SeekIndex
from ..base import TailSplice
from ..reader import NoIndex, Points, Reader, interval

#: Frames decoded before a crop unless the bit reservoir reaches further.
PREROLL_FRAMES = 5

__all__ = [
    "DECODER_DELAY",
    "PREROLL_FRAMES",
    "matches",
    "parse",
    "samples_per_frame",
    "tail_splice",
]

#: FFmpeg's decoder delay for layer III, on top of the encoder's own delay.
DECODER_DELAY = 529
#: Bits two frames of one stream share (sync, version, layer, sample rate):
#: FFmpeg's SAME_HEADER_MASK.
_SAME_HEADER = 0xFFE00000 | (3 << 19) | (3 << 17) | (3 << 10)
_LENGTH_BITS = 0xFFFFFE00  # everything that decides a frame's length
_MAX_FRAME = 2881  # the longest frame a header can announce: MPEG-2.5 layer II, 160 kb/s, 8 kHz
_TRAILERS = (b"TAG", b"APETAGEX", b"LYRICSBEGIN", b"ID3")
_NONZERO = re.compile(rb"[^\0]")

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
    """An ID3v2 tag, or a valid MPEG audio frame header after any zero bytes
    (FFmpeg's probe skips them; zeros up to the end of ``head`` are left to
    the parser to look past)."""
    if head.startswith(b"ID3"):
        return True
    body = head.lstrip(b"\0")
    if len(body) < 4:
        return len(body) < len(head)
    return frame_info(struct.unpack_from(">I", body)[0] & _LENGTH_BITS) is not None


def parse(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index an MPEG audio stream; raises ``NoIndex`` when there is no audio."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    _skip_id3v2(reader)
    tags_end = reader.pos
    tag = _tag_at(reader, tags_end)
    # After a tag frame FFmpeg's demuxer starts at the first frame that the
    # next one confirms, as it does without one.
    start = _sync(reader, tags_end + tag.length if tag.skipped else tags_end, None, paired=True)
    if start is None:
        raise NoIndex("no mpeg audio frames")
    first_header = _header_at(reader, start)
    first = frame_info(first_header & _LENGTH_BITS)
    assert first is not None
    points = Points(interval(first.sample_rate, density))
    scan = _scan(reader, start, first_header & _SAME_HEADER, first, points)
    sample_pos, byte_pos = points.arrays()
    first_sample, end = _gapless(tag, reader.length() - tags_end - 4, scan.frames, first.samples)
    note = ""
    if scan.resumes is not None:  # audio the decode loses (files joined with their tags, damage)
        note = (
            f"{ENDS_EARLY}: bytes at {scan.data_end} are no mpeg audio frame, "
            f"and frames follow from byte {scan.resumes}"
        )
    return SeekIndex(
        status=OK,
        reason=note,
        codec=f"mp{first.layer}",
        container="mp3",
        sample_rate=first.sample_rate,
        channels=1 if (first_header >> 6) & 3 == 3 else 2,
        timescale=first.sample_rate,
        first_sample=first_sample,
        num_samples=max(0, end - first_sample),
        encoder_delay=tag.delay,
        padding=tag.padding,
        preroll=scan.preroll * first.samples if scan.preroll > PREROLL_FRAMES else 0,
        data_start=start,
        data_end=scan.data_end,
        sample_pos=sample_pos,
        byte_pos=byte_pos,
    )


def _gapless(tag: _VbrTag, size: int, frames: int, per_frame: int) -> tuple[int, int]:
    """The native span ``[first, end)`` of FFmpeg's decode, as its demuxer
    marks the packets and its decoder trims them (``_kept``).

    Only with a LAME tag: its delay + 529 is skipped from the start and,
    with a frame count, ``[count x frame - padding + 529, count x frame)`` is
    dropped, by timestamp. A count whose stream size is more than 1/16 below
    the file's (``size``: the bytes after the tag frame's header) is ignored
    ("invalid concatenated file"). A count below the frames present makes a
    hole inside the stream, which one offset and length cannot describe.
    """
    if not tag.lame:
        return 0, frames * per_frame
    count = _count(tag, size)
    spans = _kept(tag.delay + DECODER_DELAY, count, tag.padding, frames, per_frame)
    if len(spans) > 1:
        raise NoIndex(
            f"the LAME tag counts {count} frames of {frames}: FFmpeg drops samples"
            " inside the stream"
        )
    return spans[0] if spans else (0, 0)


def _count(tag: _VbrTag, size: int) -> int:
    """The tag's frame count as FFmpeg takes it: void (0) when its stream
    size is more than 1/16 below ``size``, the bytes after the tag frame's
    header ("invalid concatenated file")."""
    return 0 if tag.bytes and size - tag.bytes > tag.bytes >> 4 else tag.frames


def _kept(
    skip: int, count: int, padding: int, frames: int, per_frame: int
) -> list[tuple[int, int]]:
    """The native spans FFmpeg outputs, merged, replaying its rules packet by
    packet where they apply (the frames under the start skip and those the
    count's padding touches; the others are output whole).

    The demuxer gives the first packet the skip and every packet ending past
    ``drop_from`` (and starting before ``drop_to``) what it should lose at
    its end; the decoder skips over whole frames and then trims, but each
    packet that carries such marks resets the skip to its own (0 after the
    first), and an end trim larger than what is left of a frame is ignored.
    """
    drop_from, drop_to = count * per_frame - padding + DECODER_DELAY, count * per_frame
    special = set(range(min(frames, skip // per_frame + 1)))
    if count:
        special.update(range(max(drop_from // per_frame - 1, 0), min(frames, count)))
    spans: list[tuple[int, int]] = []
    pending, done = 0, 0
    for k in sorted(special):
        _add(spans, done * per_frame, k * per_frame)
        done = k + 1
        start, end = k * per_frame, (k + 1) * per_frame
        trim = (
            min(end - drop_from, per_frame) if count and end >= drop_from and start < drop_to else 0
        )
        if k == 0 or trim > 0:
            pending = skip if k == 0 else 0
        if pending >= per_frame:
            pending -= per_frame
            continue
        start, pending = start + pending, 0
        if 0 < trim <= end - start:
            end -= trim
        _add(spans, start, end)
    _add(spans, done * per_frame, frames * per_frame)
    return spans


def _add(spans: list[tuple[int, int]], start: int, end: int) -> None:
    """Append ``[start, end)`` to merged spans (nothing when empty)."""
    if start >= end:
        return
    if spans and spans[-1][1] == start:
        spans[-1] = (spans[-1][0], end)
    else:
        spans.append((start, end))


def _skip_id3v2(reader: Reader) -> None:
    """Skip every ID3v2 tag at the start, any version (the size is sync-safe
    whether or not the tag is unsynchronised; the footer flag adds 10 bytes).
    What is not a well-formed tag header is left for the frame sync, as
    FFmpeg does (``ff_id3v2_match``)."""
    while True:
        buf, i = reader.window(10)
        head = buf[i : i + 10]
        tag = len(head) == 10 and head.startswith(b"ID3") and 0xFF not in head[3:5]
        if not tag or any(b & 0x80 for b in head[6:10]):
            return
        size = (head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9]
        footer = 10 if head[5] & 0x10 else 0
        reader.seek(reader.pos + 10 + size + footer)


def _header_at(reader: Reader, position: int) -> int:
    reader.seek(position)
    buf, i = reader.window(4)
    return struct.unpack_from(">I", buf, i)[0]


def _sync(reader: Reader, position: int, same: int | None, *, paired: bool = False) -> int | None:
    """The first position at or after ``position`` holding a frame header whose
    successor is a frame header too (or, unless ``paired``, the end of the
    data), so that sync-like bytes inside audio are not taken for a frame.
    ``same`` (the stream's shared header bits), once known, must match as
    well. FFmpeg's demuxer starts only at a pair of frames (``paired``)."""
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
            if _confirmed(buf, j, same, eof, paired):
                return base + j
            j = buf.find(b"\xff", j + 1, stop)
        if eof:
            return None
        reader.seek(base + stop)


def _confirmed(buf: bytes, j: int, same: int | None, eof: bool, paired: bool) -> bool:
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
    last = (eof and following == len(buf)) or buf.startswith(_TRAILERS, following)
    return last and not paired


class _Scan(NamedTuple):
    frames: int  # audio frames
    data_end: int  # end of the last one
    preroll: int  # frames to decode before any frame for its output to be exact
    #: Where frames begin again after the bytes that ended the walk (None:
    #: none do): audio the full decode does not reach (``ENDS_EARLY``).
    resumes: int | None = None


def _scan(reader: Reader, position: int, same: int, first: Frame, points: Points) -> _Scan:
    """Walk the frames from ``position``.

    In lock, a frame is accepted when its header is valid and shares the
    stream's fixed bits, as FFmpeg's parser does; after zero bytes the walk
    goes on at the next frame, anything else ends the stream. A last frame
    cut short by the end of the data counts, as it does for FFmpeg. Of
    layer III frames the first 8 bytes are kept (compactly) for the bit
    reservoir's books.
    """
    samples_per_frame = first.samples
    heads = array("Q")
    keep = first.layer == 3
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
            if frame is None:
                lost = True
                break
            # The stream's last frame may be cut short: FFmpeg's parser hands
            # over what there is (to the end of the data, tags and all) and
            # the decoder makes a whole frame of it.
            cut = i + frame.length > end
            if cut and not eof:
                lost = True
                break
            points.add(frames * samples_per_frame, base + i)
            if keep:
                heads.append(_first_8(buf, i) if cut else unpack(">Q", buf, i)[0])
            frames += 1
            i = end if cut else i + frame.length
            data_end = base + i
        if lost:
            # Zero bytes FFmpeg's parser passes over; anything else with
            # frames after it ends the full decode: its parser makes packets
            # of those bytes and its decoder rejects them (docs/decoding.md).
            after = _past_zeros(reader, base + i)
            found = _sync(reader, after, same)
            if found == after:
                position = after
                continue
            # Frames after those bytes (a pair, searched on from the first
            # candidate: the reader does not go back) are audio the decode loses.
            resumes = None if found is None else _sync(reader, found, same, paired=True)
            return _Scan(frames, data_end, _reservoir_need(heads) if keep else 1, resumes)
        if not eof:
            position = base + i
            continue
        return _Scan(frames, data_end, _reservoir_need(heads) if keep else 1)


def _past_zeros(reader: Reader, position: int) -> int:
    """The first position at or after ``position`` holding a byte other than
    zero (the end of the data when there is none)."""
    reader.seek(position)
    while True:
        buf, i = reader.window(4 * _MAX_FRAME)
        base = reader.pos - i
        found = _NONZERO.search(buf, i)
        if found is not None:
            return base + found.start()
        if reader.ends_at(base + len(buf)):
            return base + len(buf)
        reader.seek(base + len(buf))


def _first_8(buf: bytes, at: int) -> int:
    """The first 8 bytes of a frame cut short (zeros past the end, as FFmpeg pads)."""
    return int.from_bytes(buf[at : at + 8].ljust(8, b"\0"), "big")


def _reservoir_need(heads: array) -> int:
    """Frames a decoder must start before any layer III frame for its output
    to be exact (at least 1)."""
    return max(1, int(_frame_needs(heads).max()))


def _frame_needs(heads: array) -> np.ndarray:
    """Per layer III frame, how many frames before it a decoder must start
    for its output to be exact, from each frame's first 8 bytes.

    A frame's main data starts ``main_data_begin`` bytes (9 bits of the side
    info, 8 for MPEG-2/2.5) before its own main data area, in the areas of
    the frames before it (what follows their header, CRC and side info): its
    reach is how many frames back that is. A granule's output depends on its
    coefficients and on the two granules before it (the MDCT overlap feeds
    the synthesis filter, whose window spans most of a granule): on the frame
    before for MPEG-1 (two granules a frame), the two before for MPEG-2/2.5.
    """
    words = np.frombuffer(heads, dtype=np.uint64)
    header = (words >> np.uint64(32)).astype(np.int64)
    tail = (words & np.uint64(0xFFFFFFFF)).astype(np.int64)  # bytes 4..7
    crc = (header >> 16) & 1 == 0
    lsf = bool((header[0] >> 19) & 3 != 3)
    mono = (header >> 6) & 3 == 3
    b4, b5, b6, b7 = ((tail >> shift) & 0xFF for shift in (24, 16, 8, 0))
    first, second = np.where(crc, b6, b4), np.where(crc, b7, b5)  # after the CRC, if any
    back = first if lsf else (first << 1) | (second >> 7)
    side_info = np.where(mono, 9, 17) if lsf else np.where(mono, 17, 32)
    kinds, kind = np.unique(header & _LENGTH_BITS, return_inverse=True)
    lengths = np.array([_length(int(k)) for k in kinds], dtype=np.int64)[kind]
    areas = lengths - np.where(crc, 6, 4) - side_info
    ends = np.cumsum(areas)
    begins = ends - areas - back
    reach = np.arange(len(areas)) - np.searchsorted(ends, begins, side="right")
    need = reach.copy()
    need[1:] = np.maximum(need[1:], reach[:-1] + 1)
    if lsf:
        need[2:] = np.maximum(need[2:], reach[:-2] + 2)
    return need


def _length(header: int) -> int:
    frame = frame_info(header)
    assert frame is not None  # the scan took only valid frames
    return frame.length


class _VbrTag(NamedTuple):
    length: int = 0  # of the tag frame
    skipped: bool = False  # FFmpeg skips the tag frame (else it decodes it as audio)
    lame: bool = False  # a LAME/Lavf/Lavc extension with delay and padding
    frames: int = 0  # audio frames the tag announces (0: not stated)
    bytes: int = 0  # a Xing stream size to check the count against (0: none)
    delay: int = 0
    padding: int = 0


def _tag_at(reader: Reader, position: int) -> _VbrTag:
    """The Xing/Info/VBRI tag of a layer III frame right at ``position`` (the
    end of the ID3v2 tags): the only place FFmpeg looks, with no sync check."""
    reader.seek(position)
    buf, i = reader.window(4)
    if len(buf) - i < 4:
        return _VbrTag()
    header = struct.unpack_from(">I", buf, i)[0]
    frame = frame_info(header & _LENGTH_BITS)
    if frame is None or frame.layer != 3:
        return _VbrTag()
    return _vbr_tag(reader, position, header, frame)._replace(length=frame.length)


def _vbr_tag(reader: Reader, start: int, header: int, frame: Frame) -> _VbrTag:
    """Read a Xing/Info (with its LAME extension) and a VBRI tag from the
    first frame, as FFmpeg's mp3 demuxer does: the frame is metadata only
    when the tag states a frame count or a stream size; a VBRI tag (version
    1) overrides both; the LAME delay counts even when the frame is audio."""
    reader.seek(start)
    buf, i = reader.window(frame.length + 64)
    data = buf[i : i + frame.length + 64]
    mono = (header >> 6) & 3 == 3
    side_info = (9 if mono else 17) if frame.lsf else (17 if mono else 32)
    xing = _xing(data, 4 + side_info)
    if data[36:42] == b"VBRI\0\1" and len(data) >= 54:
        size, frames = struct.unpack_from(">II", data, 46)
        return xing._replace(skipped=bool(size or frames), frames=frames, bytes=0)
    return xing


def _xing(data: bytes, at: int) -> _VbrTag:
    """The Xing/Info tag at ``at`` (FFmpeg reads its LAME fields past the
    frame's end too, so ``data`` runs on)."""
    if data[at : at + 4] not in (b"Xing", b"Info"):
        return _VbrTag()
    flags = int.from_bytes(data[at + 4 : at + 8], "big")
    cursor = at + 8
    frames = size = 0
    if flags & 1:
        frames = int.from_bytes(data[cursor : cursor + 4], "big")
        cursor += 4
    if flags & 2:
        size = int.from_bytes(data[cursor : cursor + 4], "big")
        cursor += 4
    cursor += 100 * bool(flags & 4) + 4 * bool(flags & 8)
    skipped = bool(frames or size)
    if data[cursor : cursor + 4] not in (b"LAME", b"Lavf", b"Lavc") or len(data) < cursor + 24:
        return _VbrTag(0, skipped, False, frames, size)
    packed = int.from_bytes(data[cursor + 21 : cursor + 24], "big")
    return _VbrTag(0, skipped, True, frames, size, packed >> 12, packed & 0xFFF)


def tail_splice(stream: BinaryIO, index: SeekIndex, before: int) -> TailSplice | None:
    """The bytes FFmpeg decodes to the last samples of its full decode
    without reading the frames before a seek point ``before`` native units
    (or more) ahead of the end: the file's bytes before its first audio
    frame (ID3v2 tags, the Xing/LAME tag frame) followed by those from the
    point on, with the tag's frame count set to the frames that follow.

    FFmpeg's demuxer trims a LAME stream's end by timestamp, counting from
    the tag's frame count; in the splice its timestamps start at the point,
    so the count must shrink by the frames before it. That number is proven,
    not assumed: the tag's count (the encoder's) must equal the frames this
    index counts, and the caller must find FFmpeg demuxing exactly
    ``packets`` frames from the splice. Without an end trim (no LAME tag, or
    one without a count) the count does not matter. None where nothing
    proves it (a VBRI tag, a count FFmpeg voids or that differs from the
    frames, damage after the last seek point): the check then seeks in the
    whole file.
    """
    per_frame = samples_per_frame(int(index.codec[2]), lsf=index.sample_rate < 32000)
    if index.sample_pos[-1] % per_frame:
        return None
    frames = _frames_in(_read(stream, int(index.byte_pos[-1]), index.data_end))
    if frames is None:
        return None
    total = int(index.sample_pos[-1]) // per_frame + frames
    stream.seek(0)
    reader = Reader(stream, chunk_size=1 << 14)  # the tags and the tag frame only
    _skip_id3v2(reader)
    tags_end = reader.pos
    tag = _tag_at(reader, tags_end)
    prefix = bytearray(_read(stream, 0, index.data_start))
    point = int(np.searchsorted(index.sample_pos, total * per_frame - before, "right")) - 1
    if point < 0:
        return None
    after = total - int(index.sample_pos[point]) // per_frame
    if tag.lame and tag.frames and tag.skipped:
        if _count(tag, reader.length() - tags_end - 4) != total:
            return None
        at = _count_at(bytes(prefix), tags_end)
        if at is None:
            return None
        struct.pack_into(">I", prefix, at, after)
    tail = _read(stream, int(index.byte_pos[point]), reader.length())
    return TailSplice(bytes(prefix) + tail, after)


def _read(stream: BinaryIO, start: int, end: int) -> bytes:
    stream.seek(start)
    return stream.read(end - start)


def _frames_in(data: bytes) -> int | None:
    """Frames from the start of ``data`` to its end (the last may be cut
    short, as FFmpeg counts it); None at anything that is not a frame."""
    count = at = 0
    while at < len(data):
        frame = frame_info(int.from_bytes(data[at : at + 4].ljust(4, b"\0"), "big") & _LENGTH_BITS)
        if frame is None:
            return None
        at += frame.length
        count += 1
    return count


def _count_at(prefix: bytes, tags_end: int) -> int | None:
    """Where the Xing/Info tag's frame count sits in the tag frame at
    ``tags_end`` (None: no such field, or a VBRI tag, whose count rules)."""
    header = struct.unpack_from(">I", prefix, tags_end)[0]
    frame = frame_info(header & _LENGTH_BITS)
    if frame is None or prefix[tags_end + 36 : tags_end + 40] == b"VBRI":
        return None
    mono = (header >> 6) & 3 == 3
    at = tags_end + 4 + ((9 if mono else 17) if frame.lsf else (17 if mono else 32))
    flags = int.from_bytes(prefix[at + 4 : at + 8], "big")
    return at + 8 if prefix[at : at + 4] in (b"Xing", b"Info") and flags & 1 else None
