"""The MP4 box walk: the top-level boxes as a reader meets them (``ftyp``,
``moov``, every ``moof`` read whole; ``mdat`` skipped but for its first
packet), the boxes inside ``moov`` (each ``trak``'s leaf boxes, the movie
timescale, the ``iTunSMPB`` tags with where they sit, the fragment
defaults of ``mvex``), and the header ranges a demuxer needs.

The header is ``ftyp`` and ``moov`` whole (``moov`` holds every table a
demuxer needs, whether it sits before or after ``mdat``) plus the 8- or
16-byte header of every other top-level box (small ones whole), with the
short gaps FFmpeg reads through filled in. A sparse view of the blob holding
only the header ranges and the bytes of the crop opens in FFmpeg.

What is read is bounded before it is read: ``moov`` and the ``moof`` boxes
together by ``MAX_MOOV``, the nesting inside ``moov`` by ``MAX_DEPTH``, and
every box by its parent (or the file: only an ``mdat`` after ``moov`` may
run past its end, in a file cut short).
"""

from __future__ import annotations

import contextlib
import struct
from typing import NamedTuple

from ..reader import NoIndex, Reader
from .fragments import Defaults

__all__ = [
    "MAX_DEPTH",
    "MAX_MOOV",
    "MDAT_HEAD",
    "READ_THROUGH",
    "TOP_LEVEL",
    "Moov",
    "TopLevel",
    "Track",
    "audio_track",
    "header_ranges",
    "is_sound",
    "timescale_of",
    "top_level",
    "walk_moov",
]


#: Largest ``moov`` read into memory. A 40-hour AAC track's tables are about
#: 60 MB; a header claiming more than this is corrupt, not big.
MAX_MOOV = 1 << 30
#: FFmpeg reads forward instead of seeking over gaps up to its buffer size
#: plus its short-seek threshold (32 KiB each).
READ_THROUGH = 65536
#: Bytes read from the start of the first ``mdat``: its first packet.
MDAT_HEAD = 4096
#: Deepest box nesting walked inside ``moov`` (real files: 6).
MAX_DEPTH = 16
_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts"}
#: Boxes of tags, walked for ``iTunSMPB``; FFmpeg skips what it cannot read there.
_TAGS = {b"udta", b"meta", b"ilst"}
#: The boxes an MP4 file may start with (``matches`` sniffs by them).
TOP_LEVEL = {b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"uuid", b"pnot", b"meta"}
#: (offset, length) of bytes in the file.
_Range = tuple[int, int]


class _Box(NamedTuple):
    kind: bytes
    start: int  # offset of the box header
    body: int  # offset of the payload
    end: int


def _box_header(data: bytes, at: int, limit: int) -> _Box:
    """The box at ``data[at:]``, checked to fit inside ``limit``."""
    if limit - at < 8:
        raise NoIndex("truncated mp4 box header")
    size, kind = struct.unpack_from(">I4s", data, at)
    body = at + 8
    if size == 1:
        if limit - at < 16:
            raise NoIndex("truncated mp4 box header")
        size = struct.unpack_from(">Q", data, at + 8)[0]
        body = at + 16
    elif size == 0:
        size = limit - at
    if size < body - at or at + size > limit:
        raise NoIndex("mp4 box does not fit in its parent")
    return _Box(kind, at, body, at + size)


class TopLevel(NamedTuple):
    header: list[_Range]  # every box's header, ``ftyp`` and ``moov`` whole
    moov: bytes
    moov_at: int
    #: (offset, bytes) of the first bytes of the first ``mdat``'s payload.
    mdat_head: tuple[int, bytes]
    #: (offset, bytes) of every ``moof`` (a fragmented file's sample tables).
    moofs: list[tuple[int, bytes]]


def top_level(reader: Reader) -> TopLevel:
    """Walk the top-level boxes. ``mdat`` is skipped, but for its first
    ``MDAT_HEAD`` bytes (the first packet, which may decode to nothing)."""
    header: list[_Range] = []
    moov, moov_at = b"", 0
    mdat_head: tuple[int, bytes] = (0, b"")
    moofs: list[tuple[int, bytes]] = []
    tables = 0  # bytes of moov and moof read
    while True:
        start = reader.pos
        buf, i = reader.window(16)
        if len(buf) - i == 0:
            break
        if len(buf) - i < 8:
            raise NoIndex("truncated mp4 box header")
        size, kind = struct.unpack_from(">I4s", buf, i)
        header_size = 8
        if size == 1:
            if len(buf) - i < 16:
                raise NoIndex("truncated mp4 box header")
            size, header_size = struct.unpack_from(">Q", buf, i + 8)[0], 16
        elif size == 0:
            if reader.size is None:
                raise NoIndex("mp4 box of unknown size")
            size = reader.size - start
        if size < header_size:
            raise NoIndex("invalid mp4 box size")
        if reader.size is not None and start + size > reader.size:
            if kind == b"mdat" and moov:
                size = reader.size - start  # a truncated file: its samples are cut short
            else:
                raise NoIndex("truncated mp4: a box runs past the end of the file")
        # FFmpeg reads small boxes through (a trailing free box, say).
        small = kind != b"mdat" and size <= READ_THROUGH
        whole = (kind in (b"ftyp", b"moov", b"moof") or small) and not (kind == b"moov" and moov)
        header.append((start, size if whole else header_size))
        if (kind == b"moov" and not moov) or kind == b"moof":
            tables += size
            if tables > MAX_MOOV:
                raise NoIndex("mp4 moov box too large")
            data = reader.read_exact(size, f"mp4 {kind.decode()} box")
            if kind == b"moof":
                moofs.append((start, data))
            else:
                moov, moov_at = data, start
            continue
        if kind == b"mdat" and not mdat_head[1]:
            reader.seek(start + header_size)
            mdat_head = (start + header_size, reader.read(min(size - header_size, MDAT_HEAD)))
        reader.seek(start + size)
    if not moov:
        raise NoIndex("no moov box in mp4")
    return TopLevel(header, moov, moov_at, mdat_head, moofs)


def header_ranges(boxes: list[_Range], moov_at: int) -> tuple[_Range, ...]:
    """The header ranges: the top-level boxes' (``ftyp`` and ``moov`` whole),
    with the gaps between them FFmpeg reads through rather than seeks over
    (up to ``READ_THROUGH`` bytes: a small ``mdat`` before ``moov``, say)
    filled in. ``moov`` starts a range of its own, so that a decoder finds it."""
    ranges = []
    for offset, size in _merged(boxes, READ_THROUGH):
        if offset < moov_at < offset + size:
            ranges += [(offset, moov_at - offset), (moov_at, offset + size - moov_at)]
        else:
            ranges.append((offset, size))
    return tuple(ranges)


def _merged(ranges: list[_Range], gap: int = 0) -> list[_Range]:
    """(offset, length) ranges sorted, with ones less than ``gap`` bytes apart joined."""
    out: list[_Range] = []
    for offset, size in sorted(ranges):
        if out and offset <= out[-1][0] + out[-1][1] + gap:
            last = out[-1]
            out[-1] = (last[0], max(last[1], offset + size - last[0]))
        else:
            out.append((offset, size))
    return out


class Track(NamedTuple):
    leaves: dict[bytes, bytes]  # payload of the first box of each kind inside the trak
    start: int  # offsets of the trak box in moov
    end: int


class Moov(NamedTuple):
    timescale: int  # the movie timescale (mvhd)
    tracks: list[Track]
    #: (offset in moov, value) of every ``iTunSMPB`` tag, in file order.
    gapless_tags: list[tuple[int, bytes]]
    #: Fragment defaults (``mvex/trex``) by track ID.
    trex: dict[int, Defaults]


def walk_moov(moov: bytes) -> Moov:
    """The movie timescale, every ``trak``'s leaf boxes and the ``iTunSMPB``
    tags, with where they sit (FFmpeg gives a tag to the track before it)."""
    result = Moov(0, [], [], {})
    timescale = 0

    def walk(start: int, end: int, into: dict[bytes, bytes] | None, depth: int) -> None:
        nonlocal timescale
        if depth > MAX_DEPTH:
            raise NoIndex("mp4 boxes nested too deep")
        at = start
        while at < end:
            box = _box_header(moov, at, end)
            if box.kind == b"trak":
                leaves: dict[bytes, bytes] = {}
                result.tracks.append(Track(leaves, box.start, box.end))
                walk(box.body, box.end, leaves, depth + 1)
            elif box.kind in _CONTAINERS:
                walk(box.body, box.end, into, depth + 1)
            elif box.kind in _TAGS:
                start = _meta_children(moov, box) if box.kind == b"meta" else box.body
                # Broken tags (or QuickTime's zero terminator): the audio is fine.
                with contextlib.suppress(NoIndex):
                    walk(start, box.end, None, depth + 1)
            elif box.kind == b"----":
                value = _custom_tag(moov, box, b"iTunSMPB")
                if value is not None:
                    result.gapless_tags.append((box.start, value))
            elif box.kind == b"mvhd":
                timescale = timescale_of(moov[box.body : box.end])
            elif box.kind == b"mvex":
                walk(box.body, box.end, None, depth + 1)
            elif box.kind == b"trex" and box.end - box.body >= 24:
                track_id, _, duration, size = struct.unpack_from(">4I", moov, box.body + 4)
                result.trex[track_id] = Defaults(duration, size)
            elif into is not None:
                into.setdefault(box.kind, moov[box.body : box.end])
            at = box.end

    top = _box_header(moov, 0, len(moov))
    walk(top.body, top.end, None, 1)
    return result._replace(timescale=timescale)


def _meta_children(moov: bytes, box: _Box) -> int:
    """Where a ``meta`` box's children start: after a full-box header (ISO)
    or right away (QuickTime); like FFmpeg, found by looking for ``hdlr``."""
    for at in range(box.body, box.end - 7, 4):
        if moov[at + 4 : at + 8] == b"hdlr":
            return at
    return box.end


def _custom_tag(moov: bytes, box: _Box, name: bytes) -> bytes | None:
    """The value of a ``----`` (mean/name/data) tag called ``name``, else None."""
    fields: dict[bytes, bytes] = {}
    at = box.body
    while at < box.end:
        child = _box_header(moov, at, box.end)
        skip = 8 if child.kind == b"data" else 4  # data: type and locale; else version/flags
        fields[child.kind] = moov[child.body + skip : child.end]
        at = child.end
    if fields.get(b"name") != name or not fields.get(b"mean"):
        return None
    return fields.get(b"data")


def timescale_of(full_box: bytes) -> int:
    """Timescale of an ``mvhd`` or ``mdhd`` payload (version 0 or 1)."""
    offset = 20 if full_box[:1] == b"\x01" else 12
    if len(full_box) < offset + 4:
        raise NoIndex("truncated mp4 header box")
    return struct.unpack_from(">I", full_box, offset)[0]


def audio_track(tracks: list[Track]) -> Track:
    """The first sound track, FFmpeg's first audio stream (wherever it sits)."""
    for track in tracks:
        if is_sound(track):
            return track
    raise NoIndex("no audio track in mp4")


def is_sound(track: Track) -> bool:
    return track.leaves.get(b"hdlr", b"")[8:12] == b"soun"
