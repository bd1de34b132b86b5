"""MP4 / M4A / M4B / 3GP / MOV (AAC, AC-3, ALAC, AMR, E-AC-3, mp3, Opus, Vorbis, PCM, and
any other audio track): box walk and sample tables.

Native timeline: the audio track's decode timestamps from ``stts``, in the
track's media timescale (``mdhd``; ``timescale`` in the index), starting at 0
with the first sample, before the edit list is applied. Sample ``k`` starts
at byte ``chunk offset + sizes of the samples before it in its chunk``; the
seek points are those per-sample (position, byte) pairs, thinned to the
requested density (every sample with ``density=inf``).

Gapless, as FFmpeg's full decode has it (docs/seek-index.md lists the cases):
the edit with media gives ``first_sample`` (its media time, also
``encoder_delay``: FFmpeg's timestamps are ``dts - media_time + empty
edits``) and the end (the last packet that starts before the edit ends, a
whole frame for AAC and AMR); an ``iTunSMPB`` tag that FFmpeg gives the AAC
track moves ``first_sample`` to its priming (and FFmpeg 9 cuts its end
padding: ``_smpb_end``, in ``padding``); so does a first packet that
decodes to nothing (FAAC's, every Vorbis stream's). Without an edit list
nothing else is trimmed. PCM (``pcm``): the packets FFmpeg's demuxer cuts
from the chunks stand for the samples. AAC, AMR and AC-3 packets each decode to a whole frame,
so stts must give every packet but the last that frame, or there is no
index (FFmpeg's decode does not follow other durations). In a fragmented
file FFmpeg applies the edit's media time but cuts at its end only the
samples ``moov`` lists (``_check_fragmented_edit``); a Vorbis edit must
start at a packet (``_check_vorbis_edit``), and the last Vorbis packet
gives a whole block.

The header is ``ftyp`` and ``moov`` whole (``moov`` holds every table a
demuxer needs, whether it sits before or after ``mdat``) plus the 8- or
16-byte header of every other top-level box (small ones whole), with the
short gaps FFmpeg reads through filled in. A sparse view of the blob holding
only the header ranges and the bytes of the crop opens in FFmpeg. AAC frames
overlap: decoding from a seek point needs at least one earlier packet (1024
samples) of pre-roll.

Every count is bounded by the bytes that could hold it before anything is
allocated: a table's entry count by its box, the number of samples by
``stsz`` (4 bytes each) or, for a constant sample size, by the file's length,
and the sample counts that ``stts`` and ``stsc`` expand are clipped to that
number, so a lying count in a small file costs nothing.
"""

from __future__ import annotations

import contextlib
import re
import struct
from typing import BinaryIO, NamedTuple

import av
import numpy as np

from ...index.table import OK, SeekIndex
from ..ffmpeg import LENGTH_POLICY, new_decoder
from ..ogg.parse import packet_durations
from ..opus import DECODED_RATE, NO_PACKET, mode_preroll, toc_config
from ..packets import padded_packet
from ..reader import NoIndex, Reader, interval, thin
from . import pcm
from .entry import CHILDREN_AT, audio_format, children, version
from .fragments import Defaults, fragment_samples

__all__ = ["READ_THROUGH", "AudioOnly", "audio_only", "matches", "mismatch", "parse"]

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
_TOP_LEVEL = {b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"uuid", b"pnot", b"meta"}
_CODECS = {
    b"alac": "alac",
    b"Opus": "opus",
    b"fLaC": "flac",
    b"ac-3": "ac3",
    b"ec-3": "eac3",
    b"samr": "amr_nb",
    b"sawb": "amr_wb",
    b".mp3": "mp3",  # QuickTime's (FFmpeg's MOV muxer writes it)
}
#: Codecs whose every packet decodes to one frame of a fixed length (Opus's
#: may vary: a track whose ``stts`` varies has no index), and the
#: longest such frame (HE-AAC's 2048 at the output rate, with room to spare).
_FIXED_FRAMES = frozenset({"aac", "ac3", "amr_nb", "amr_wb", "eac3", "mp3", "opus"})
#: Codecs whose every packet but the last decodes to the frame length their
#: sample entry states (``_Entry.frame``: ALAC's cookie, FLAC's STREAMINFO);
#: the last may be shorter, and decodes to what its own header says.
_STATED_FRAMES = frozenset({"alac", "flac"})
#: Why a track whose ``stts`` does not time its packets as they decode has no index.
_STTS_DIFFERS = "mp4 sample durations that are not the codec's frame (stts)"
_LONGEST_FRAME = 8192
#: Codecs whose frame length FFmpeg 9's MP4 demuxer knows (the stream's
#: ``frame_size``, 0 for the others), by experiment under PyAV 19: it cuts
#: their last frame from its whole output to where the track ends. For every
#: other codec (ALAC, FLAC, Opus, AMR, Vorbis, AC-3, E-AC-3) it
#: reckons the last packet by its stts duration and cuts only what that
#: runs past the edit list's end: nothing without an edit list, or with one
#: that ends with the sample table (docs/decoding.md). PCM it never cuts (an
#: edit that would trim PCM gives no index).
_FRAME_KNOWN = frozenset({"aac", "mp3"})
#: Codecs whose packets need no decoder config: ``_first_output`` asks
#: their decoder what the first packet gives, and the frame ``stts`` states
#: must be it (AC-3: 1536 samples; E-AC-3: 256 per audio block, which
#: FFmpeg's muxer gathers into packets of six blocks).
_SELF_DESCRIBED = frozenset({"ac3", "eac3"})
#: FFmpeg takes an ``iTunSMPB`` priming between these bounds (exclusive).
_PRIMING_RANGE = (0, 16384)
#: MPEG-4 object type indications (esds) of ``mp4a`` entries.
_OBJECT_TYPES = {
    0x40: "aac",
    0x66: "aac",
    0x67: "aac",
    0x68: "aac",
    0x69: "mp3",
    0x6B: "mp3",
    0xDD: "vorbis",  # its decoder-specific info: the three headers, Xiph-laced
}


#: (offset, length) of bytes in the file.
_Range = tuple[int, int]


def matches(head: bytes) -> bool:
    return len(head) >= 8 and head[4:8] in _TOP_LEVEL


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


class _TopLevel(NamedTuple):
    header: list[_Range]  # every box's header, ``ftyp`` and ``moov`` whole
    moov: bytes
    moov_at: int
    #: (offset, bytes) of the first bytes of the first ``mdat``'s payload.
    mdat_head: tuple[int, bytes]
    #: (offset, bytes) of every ``moof`` (a fragmented file's sample tables).
    moofs: list[tuple[int, bytes]]


def _top_level(reader: Reader) -> _TopLevel:
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
    return _TopLevel(header, moov, moov_at, mdat_head, moofs)


class _Track(NamedTuple):
    leaves: dict[bytes, bytes]  # payload of the first box of each kind inside the trak
    start: int  # offsets of the trak box in moov
    end: int


class _Moov(NamedTuple):
    timescale: int  # the movie timescale (mvhd)
    tracks: list[_Track]
    #: (offset in moov, value) of every ``iTunSMPB`` tag, in file order.
    gapless_tags: list[tuple[int, bytes]]
    #: Fragment defaults (``mvex/trex``) by track ID.
    trex: dict[int, Defaults]


def _walk_moov(moov: bytes) -> _Moov:
    """The movie timescale, every ``trak``'s leaf boxes and the ``iTunSMPB``
    tags, with where they sit (FFmpeg gives a tag to the track before it)."""
    result = _Moov(0, [], [], {})
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
                result.tracks.append(_Track(leaves, box.start, box.end))
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
                timescale = _timescale(moov[box.body : box.end])
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


def _timescale(full_box: bytes) -> int:
    """Timescale of an ``mvhd`` or ``mdhd`` payload (version 0 or 1)."""
    offset = 20 if full_box[:1] == b"\x01" else 12
    if len(full_box) < offset + 4:
        raise NoIndex("truncated mp4 header box")
    return struct.unpack_from(">I", full_box, offset)[0]


def _audio_track(tracks: list[_Track]) -> _Track:
    """The first sound track, FFmpeg's first audio stream (wherever it sits)."""
    for track in tracks:
        if _is_sound(track):
            return track
    raise NoIndex("no audio track in mp4")


def _is_sound(track: _Track) -> bool:
    return track.leaves.get(b"hdlr", b"")[8:12] == b"soun"


#: Why an MP4 whose first sound track is empty and a later one is not has
#: no index: FFmpeg's first audio stream, which streamer serves
#: (docs/decoding.md), decodes to nothing.
_EMPTY_FIRST_TRACK = (
    "the mp4's first audio track is empty and a later one holds the audio: "
    "streamer serves the first audio stream, as FFmpeg picks it"
)


def _listed(track: _Track, length: int) -> int:
    """How many samples ``track``'s ``moov`` tables list (-1: they do not say)."""
    try:
        return len(_sizes(track.leaves, length))
    except NoIndex:
        return -1


def _later_audio(tracks: list[_Track], first: _Track, length: int) -> bool:
    """Whether a sound track after ``first`` lists samples."""
    later = tracks[tracks.index(first) + 1 :]
    return any(_is_sound(t) and _listed(t, length) > 0 for t in later)


class _Entry(NamedTuple):
    codec: str
    channels: int
    sample_rate: int
    config: bytes = b""  # the decoder's extradata (AAC: AudioSpecificConfig)
    #: Samples the decoder drops at the start unless an edit says otherwise
    #: (Opus: the pre-skip of ``dOps``).
    delay: int = 0
    #: Samples each packet but the last decodes to, as the entry states
    #: them (``_STATED_FRAMES``; 0: not stated).
    frame: int = 0


def _sample_entry(stsd: bytes) -> _Entry:
    if len(stsd) < 8 + 36 or struct.unpack_from(">I", stsd, 4)[0] < 1:
        raise NoIndex("mp4 track without a sample description")
    size, fourcc = struct.unpack_from(">I4s", stsd, 8)
    entry = stsd[8 : 8 + size]
    if len(entry) < 36:
        raise NoIndex("truncated mp4 sample description")
    channels, _, sample_rate = audio_format(entry)
    if fourcc == b"mp4a":
        object_type, config = _esds(entry)
        if object_type not in _OBJECT_TYPES:
            raise NoIndex(f"unsupported codec in mp4: mp4a object type 0x{object_type:02x}")
        codec = _OBJECT_TYPES[object_type]
        stated = _vorbis_channels(config) if codec == "vorbis" else _aac_channels(config)
        return _Entry(codec, stated or channels, sample_rate, config)
    if fourcc == b"alac":
        frame, stated = _alac_cookie(entry)
        return _Entry("alac", stated or channels, sample_rate, frame=frame)
    if fourcc == b"fLaC":
        return _Entry("flac", channels, sample_rate, frame=_flac_frame(entry))
    if fourcc == b"Opus":
        return _Entry("opus", channels, sample_rate, delay=_pre_skip(entry))
    if fourcc in _CODECS:
        return _Entry(_CODECS[fourcc], channels, sample_rate)
    if pcm.is_pcm(fourcc):
        return _Entry(*pcm.codec(fourcc, entry))
    raise NoIndex(f"unsupported codec in mp4: {fourcc.decode('latin-1')!r}")


def _pre_skip(entry: bytes) -> int:
    """The pre-skip of an ``Opus`` entry's ``dOps`` box (version, channels,
    then the pre-skip, 16 bits big-endian; 0 without one)."""
    at = entry.find(b"dOps", 36)
    return struct.unpack_from(">H", entry, at + 6)[0] if at > 0 and len(entry) >= at + 8 else 0


def _aac_channels(config: bytes) -> int:
    """The channel count an AudioSpecificConfig states (0: left to a program
    config element), which FFmpeg's decoder follows over the sample entry's;
    parametric stereo (object type 29) outputs two."""
    value, total = int.from_bytes(config[:8], "big"), 8 * len(config[:8])
    at = 0

    def bits(n: int) -> int:
        nonlocal at
        at += n
        return (value >> (total - at)) & ((1 << n) - 1) if at <= total else -1

    object_type = bits(5)
    if object_type == 31:
        object_type = 32 + bits(6)
    if bits(4) == 15:
        bits(24)
    layout = bits(4)
    if object_type == 29 and layout == 1:
        return 2
    return (0, 1, 2, 3, 4, 5, 6, 8)[layout] if 0 <= layout < 8 else 0


def _vorbis_channels(config: bytes) -> int:
    """The channel count of the Vorbis identification header (0 if none),
    which FFmpeg's decoder follows: the header packet is ``\x01vorbis``,
    a 4-byte version, then the count."""
    at = config.find(b"\x01vorbis")
    return config[at + 11] if at >= 0 and len(config) > at + 11 else 0


def _alac_cookie(entry: bytes) -> tuple[int, int]:
    """(frame length, channels) of an ``alac`` entry's magic cookie, the
    first ``alac`` child box (in ``wave`` in a ``mov`` file), which FFmpeg's
    decoder takes for its configuration: every packet that states no length
    of its own (all but the last, as encoders write them) decodes to the
    frame length, and the channels are the cookie's (the entry may say 2
    for mono; 0: not stated). Without a whole cookie FFmpeg's decoder does
    not open: no index."""
    start = CHILDREN_AT.get(version(entry), CHILDREN_AT[0])
    for kind, payload in children(entry, start):
        # Version and flags, then ALACSpecificConfig: frame length (32 bits),
        # compatible version, bit depth, pb, mb, kb, channels, ... (24 bytes).
        if kind == b"alac" and len(payload) >= _ALAC_COOKIE:
            return int.from_bytes(payload[4:8], "big"), payload[13]
    raise NoIndex("alac in mp4 without its magic cookie")


#: Bytes of an ``alac`` cookie box's payload FFmpeg's decoder needs (its
#: extradata, the box with its header, is at least 36 bytes).
_ALAC_COOKIE = 28


def _flac_frame(entry: bytes) -> int:
    """The block size of a ``fLaC`` entry's STREAMINFO (in ``dfLa``, after
    its full-box header and the block's 4-byte header; 0 if none): every
    frame but the last has it when the minimum and maximum agree. A stream
    of variable block sizes has no index: its packets' durations are in
    frame headers the index does not read (FFmpeg's and libFLAC's encoders
    never write one)."""
    at = entry.find(b"dfLa", 36)
    if at < 0 or len(entry) < at + 16:
        return 0
    least, most = struct.unpack_from(">HH", entry, at + 12)
    if least != most:
        raise NoIndex("flac in mp4 with variable block sizes")
    return least


def _esds(entry: bytes) -> tuple[int, bytes]:
    """The object type and decoder-specific info (AudioSpecificConfig) of an
    ``mp4a`` entry's ``esds``."""
    at = entry.find(b"esds")
    if at < 4:
        raise NoIndex("mp4a without esds")
    data, i = entry[at + 8 :], 0  # past the box type and full-box header
    object_type = None
    while i < len(data):
        tag = data[i]
        i += 1
        length = 0
        for _ in range(4):
            if i >= len(data):
                break
            length = (length << 7) | (data[i] & 0x7F)
            i += 1
            if not data[i - 1] & 0x80:
                break
        if tag == 0x03:  # ES_Descriptor: id (2), flags (1), optional fields
            flags = data[i + 2] if i + 2 < len(data) else 0
            i += 3 + (2 if flags & 0x80 else 0) + (2 if flags & 0x20 else 0)
            if flags & 0x40:
                i += 1 + (data[i] if i < len(data) else 0)
        elif tag == 0x04 and object_type is None:  # DecoderConfigDescriptor
            object_type = data[i] if i < len(data) else -1
            i += 13  # object type, stream type, buffer size, bit rates: then its descriptors
        elif tag == 0x05 and object_type is not None:  # DecoderSpecificInfo
            return object_type, data[i : i + length]
        else:
            i += length
    if object_type is None:
        raise NoIndex("mp4a esds without a decoder config")
    return object_type, b""


class Overclaimed(NoIndex):
    """A sample table whose entry count its box cannot hold: a damaged or
    hostile header (a file cut short fails earlier, its box running past the
    end). ``str()`` is the countable reason; ``probe`` names the numbers (FFmpeg
    refuses 2^28 stts entries as "Cannot allocate memory", which reads like the
    machine's fault)."""

    def __init__(self, name: str, count: int, room: int) -> None:
        super().__init__(f"mp4 {name} claims more entries than its box holds")
        self.name, self.count, self.room = name, count, room


def _table(payload: bytes, entry: str, name: str) -> np.ndarray:
    """A full box's ``count`` entries of big-endian ``entry`` structs, zero-copy,
    after checking the count fits in the box (no allocation from a lying count)."""
    if len(payload) < 8:
        raise NoIndex(f"truncated mp4 {name}")
    count = struct.unpack_from(">I", payload, 4)[0]
    return np.frombuffer(
        payload, dtype=entry, count=_held(payload, 8, count, entry, name), offset=8
    )


def _held(payload: bytes, at: int, count: int, entry: str, name: str) -> int:
    """``count``, once checked that the ``entry`` structs from ``at`` fit in ``payload``."""
    room = (len(payload) - at) // np.dtype(entry).itemsize
    if count > room:
        raise Overclaimed(name, count, room)
    return count


def _sizes(track: dict[bytes, bytes], length: int) -> np.ndarray:
    """Every sample's size; a constant size lists no more samples than a
    file of ``length`` bytes holds (the rest of a truncated file's are gone)."""
    if b"stsz" in track:
        payload = track[b"stsz"]
        if len(payload) < 12:
            raise NoIndex("truncated mp4 stsz")
        size, count = struct.unpack_from(">II", payload, 4)
        if size:
            return np.full(min(count, length // size), size, dtype=np.int64)
        return np.frombuffer(payload, ">u4", _held(payload, 12, count, ">u4", "stsz"), 12).astype(
            np.int64
        )
    if b"stz2" in track:
        payload = track[b"stz2"]
        if len(payload) < 12:
            raise NoIndex("invalid mp4 stz2")
        field, count = payload[7], struct.unpack_from(">I", payload, 8)[0]
        if field not in (4, 8, 16) or 12 + (count * field + 7) // 8 > len(payload):
            raise NoIndex("invalid mp4 stz2")
        if field == 4:
            packed = np.frombuffer(payload, np.uint8, (count + 1) // 2, 12)
            return np.stack([packed >> 4, packed & 15], axis=1).ravel()[:count].astype(np.int64)
        return np.frombuffer(payload, f">u{field // 8}", count, 12).astype(np.int64)
    raise NoIndex("mp4 track without sample sizes")


def _chunk_offsets(track: dict[bytes, bytes]) -> np.ndarray:
    if b"stco" in track:
        return _table(track[b"stco"], ">u4", "stco").astype(np.int64)
    if b"co64" in track:
        return _table(track[b"co64"], ">u8", "co64").astype(np.int64)
    raise NoIndex("mp4 track without chunk offsets")


def sample_offsets(track: dict[bytes, bytes], length: int) -> tuple[np.ndarray, np.ndarray]:
    """(byte offset, size) of every sample, from stsc/stsz/stco, all in numpy,
    for a file of ``length`` bytes."""
    sizes = _sizes(track, length)
    chunks = _chunk_offsets(track)
    stsc = _table(track.get(b"stsc", b""), ">u4,>u4,>u4", "stsc")
    if not len(stsc) or not len(chunks) or not len(sizes):
        raise NoIndex("empty mp4 sample tables")
    first_chunk = stsc["f0"].astype(np.int64)
    per_chunk_entry = stsc["f1"].astype(np.int64)
    entry_of_chunk = np.searchsorted(first_chunk, np.arange(1, len(chunks) + 1), side="right") - 1
    if entry_of_chunk[0] < 0:
        raise NoIndex("invalid mp4 stsc")
    per_chunk = per_chunk_entry[entry_of_chunk]
    chunk_first = np.concatenate([[0], np.cumsum(per_chunk)])[:-1]
    # Only the samples stsz lists are placed: a lying per-chunk count expands to no more.
    used = np.clip(len(sizes) - chunk_first, 0, per_chunk)
    if used.sum() < len(sizes):
        raise NoIndex("mp4 chunks hold fewer samples than stsz lists")
    chunk_of_sample = np.repeat(np.arange(len(chunks)), used)
    before = np.concatenate([[0], np.cumsum(sizes)])[:-1]  # bytes of all earlier samples
    within = before - before[np.minimum(chunk_first, len(sizes) - 1)][chunk_of_sample]
    return chunks[chunk_of_sample] + within, sizes


def decode_times(track: dict[bytes, bytes], count: int) -> np.ndarray:
    """Decode timestamp of every sample and the end of the last, from stts
    (whose runs are clipped to ``count`` samples before they are expanded)."""
    stts = _table(track.get(b"stts", b""), ">u4,>u4", "stts")
    runs = stts["f0"].astype(np.int64)
    ends = np.cumsum(runs)
    last = int(np.searchsorted(ends, count, side="left"))
    if last == len(runs):
        raise NoIndex("mp4 stts covers fewer samples than stsz lists")
    runs = runs[: last + 1]
    runs[last] -= ends[last] - count
    deltas = np.repeat(stts["f1"][: last + 1].astype(np.int64), runs)
    times = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(deltas, out=times[1:])
    return times


def _rate_agrees(rate: int, timescale: int) -> bool:
    """Whether a sample entry's rate can be the media timescale's: positions
    count in the timescale and crops in the rate, so they must be one. The
    entry's 16-bit field holds a rate modulo 65536, or a fraction of it (96
    kHz written as 48000; a version 2 QuickTime entry's is a double), and
    HE-AAC's may be the core's or the output's."""
    if not rate or rate in (timescale, timescale & 0xFFFF):
        return True
    low, high = sorted((rate, timescale))
    return high % low == 0 and high // low in (2, 4)


class _Edit(NamedTuple):
    duration: int  # in the movie timescale
    media_time: int  # in the media timescale
    #: The empty edits before it, in the media timescale: FFmpeg's timestamps
    #: start there (``pts = decode time - media_time + empty``).
    empty: int


def _edit(track: dict[bytes, bytes], movie_timescale: int, timescale: int) -> _Edit | None:
    """The edit that shows media, or None without an edit list.

    Empty edits (media time -1) before it only shift FFmpeg's timestamps,
    and after it show nothing: the decode is the same. Several edits with
    media splice the track, which a single first/last sample cannot say."""
    payload = track.get(b"elst")
    if payload is None or not movie_timescale:
        return None
    entry = ">u8,>i8,>i4" if payload[:1] == b"\x01" else ">u4,>i4,>i4"
    shown: list[_Edit] = []
    empty = 0
    for duration, media_time, _ in _table(payload, entry, "elst").tolist():
        if media_time == -1:
            # FFmpeg rescales each edit on its own, rounding half away from zero.
            empty += (2 * duration * timescale + movie_timescale) // (2 * movie_timescale)
        else:
            shown.append(_Edit(duration, media_time, empty))
    if len(shown) > 1:
        raise NoIndex("mp4 edit list with several segments")
    if shown and shown[0].media_time < 0:
        raise NoIndex("mp4 edit with a negative media time")
    return shown[0] if shown else None


class AudioOnly(NamedTuple):
    """What a demuxer for the first audio track is given (``audio_only``)."""

    moov: bytes
    #: Native position of the demuxer's timestamp 0.
    origin: int


def audio_only(moov: bytes) -> AudioOnly:
    """The ``moov`` with every other ``trak`` renamed ``free``: FFmpeg then
    neither reads their packets while it probes the streams on open (a
    video track's, megabytes) nor the chapter track's samples (titles).
    Timestamps count from the edit's media time less the empty edits
    before it (0 without an edit list), in native units."""
    movie = _walk_moov(moov)
    audio = _audio_track(movie.tracks)
    edited = bytearray(moov)
    for track in movie.tracks:
        if track is not audio:
            edited[track.start + 4 : track.start + 8] = b"free"
    track = audio.leaves
    edit = _edit(track, movie.timescale, _timescale(track.get(b"mdhd", b"")))
    origin = edit.media_time - edit.empty if edit else 0
    return AudioOnly(bytes(edited), origin)


def mismatch(moov: bytes, index: SeekIndex, length: int) -> str | None:
    """What says that ``index`` was not built from this ``moov`` (read where
    the index has it, in a blob of ``length`` bytes), or None: no ``moov``
    that parses, or an audio track of another codec, rate or channels,
    another edit (``encoder_delay``), or, unfragmented, samples in another
    byte range than ``data_start`` to ``data_end``. Costs a walk of the
    boxes and one pass over the sample sizes (numpy)."""
    try:
        movie = _walk_moov(moov)
        audio = _audio_track(movie.tracks)
        track = audio.leaves
        timescale = _timescale(track.get(b"mdhd", b""))
        entry = _sample_entry(track.get(b"stsd", b""))
        edit = _edit(track, movie.timescale, timescale)
        if movie.trex:  # fragmented: the fragments' samples are not in moov
            span = (index.data_start, index.data_end)
        else:
            offsets, sizes = _whole(*_offsets_and_sizes(track, entry, length), length)
            span = (int(offsets.min()), int((offsets + sizes).max())) if len(sizes) else (0, 0)
    except (NoIndex, struct.error, ValueError, IndexError) as exc:
        return f"its moov does not parse: {exc}"
    found = (entry.codec, timescale, entry.channels, edit.media_time if edit else 0, span)
    said = (index.codec, index.timescale, index.channels, index.encoder_delay)
    if found != (*said, (index.data_start, index.data_end)):
        return "its moov describes other samples"
    return None


def _whole(offsets: np.ndarray, sizes: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The samples up to the first that is not all in a file of ``length``
    bytes (a truncated file)."""
    whole = (offsets >= 0) & (offsets + sizes <= length)
    count = int(np.argmin(whole)) if not whole.all() else len(sizes)
    return offsets[:count], sizes[:count]


#: ``iTunSMPB``'s value as FFmpeg scans it (``"%*X %X %X %X"``): each
#: field as long as it goes (scanf does not give digits back to the next).
_HEX = rb"[-+]?(?:0[xX])?[0-9A-Fa-f]+(?![0-9A-Fa-f])"
_SMPB = re.compile(rb"\s*" + _HEX + (rb"\s*(" + _HEX + rb")") * 3)


def _priming(moov: _Moov, track: _Track, has_edit: bool) -> int:
    """FFmpeg's AAC priming from ``iTunSMPB`` tags (0: none).

    FFmpeg gives a tag to the track read last before it: a tag in the
    movie's ``udta`` goes to the last track, one in a track's own ``udta``
    to that track, where the track's edit list, applied when the track
    ends, resets it. The last tag with a priming in range wins."""
    priming = 0
    for offset, fields in _track_tags(moov, track):
        if has_edit and offset < track.end:
            continue
        number = _scanned(fields.group(1))
        if _PRIMING_RANGE[0] < number < _PRIMING_RANGE[1]:
            priming = number
    return priming


def _scanned(field: bytes) -> int:
    """A hex field of ``iTunSMPB`` as FFmpeg's ``sscanf("%X")`` stores it in
    an ``int``: strtoul's value (a minus sign negates it; past 64 bits it is
    the largest), its low 32 bits, signed."""
    number = int(field, 16)
    value = (1 << 64) - 1 if abs(number) >= 1 << 64 else number % (1 << 64)
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _smpb_end(
    moov: _Moov, track: _Track, duration: int, stated_end: int
) -> tuple[int | None, bool]:
    """Where FFmpeg 9 ends an AAC track by its ``iTunSMPB`` tag's end
    padding (None: it does not cut by the tag), and whether that is known.

    Measured under PyAV 19 (docs/decoding.md): with the tag after the track
    (the movie's ``udta``), FFmpeg 9 cuts the padding (the third field)
    from where the sample table or the edit list ends the track
    (``stated_end``) when ``0 < padding < duration`` and the stated length
    (the fourth) ``< duration``, both read as ints (``_scanned``), whatever
    the priming; the
    track's ``duration`` is the table's or the edit's. FFmpeg 8 cuts none of
    it. Not known: a tag inside the track (FFmpeg 9 reads it before the
    track's time base is set, in the 90 kHz one every new stream has), or
    several tags."""
    tags = _track_tags(moov, track)
    if not tags:
        return None, True
    if len(tags) > 1 or tags[0][0] < track.end:
        return None, False
    fields = tags[0][1]
    padding, length = _scanned(fields.group(2)), _scanned(fields.group(3))
    if not (0 < padding < duration and length < duration):
        return None, True
    return stated_end - padding, True


def _track_tags(moov: _Moov, track: _Track) -> list[tuple[int, re.Match[bytes]]]:
    """The ``iTunSMPB`` tags FFmpeg gives ``track`` and scans (offset in
    ``moov``, the scanned fields), in file order."""
    tags = []
    for offset, value in moov.gapless_tags:
        owner = [t for t in moov.tracks if t.start < offset][-1:]
        scanned = _SMPB.match(value.split(b"\0")[0])
        if owner == [track] and scanned is not None:
            tags.append((offset, scanned))
    return tags


def _offsets_and_sizes(
    track: dict[bytes, bytes], entry: _Entry, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """(byte offset, size) of every packet FFmpeg's demuxer reads from
    ``moov``'s tables: its samples, or a PCM track's cut chunks (``pcm``)."""
    if entry.codec in pcm.BYTES:
        return _pcm_packets(track, entry, length)[:2]
    return sample_offsets(track, length)


def _pcm_packets(
    track: dict[bytes, bytes], entry: _Entry, length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``pcm.packets`` of a PCM track: offsets, sizes, decode times."""
    stsz = track.get(b"stsz", b"")
    constant = struct.unpack_from(">I", stsz, 4)[0] if len(stsz) >= 12 else 0
    return pcm.packets(
        _table(track.get(b"stts", b""), ">u4,>u4", "stts"),
        _table(track.get(b"stsc", b""), ">u4,>u4,>u4", "stsc"),
        _chunk_offsets(track),
        constant or None,
        pcm.BYTES[entry.codec] * entry.channels,
        length,
    )


def _samples(
    audio: _Track, entry: _Entry, movie: _Moov, moofs: list[tuple[int, bytes]], length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Every sample's offset and size, decode times (one more: the end), and
    how many of the samples ``moov``'s tables list (the fragments' follow).
    PCM: the packets FFmpeg cuts from its chunks; in fragments, FFmpeg's
    packets are the ``trun`` samples as they are (``_check_fragment_pcm``)."""
    track = audio.leaves
    is_pcm = entry.codec in pcm.BYTES
    if is_pcm and not moofs:
        offsets, sizes, times = _pcm_packets(track, entry, length)
        return offsets, sizes, times, len(sizes)
    if is_pcm and _sizes(track, length).size:
        raise NoIndex("fragmented mp4 with PCM in moov's tables too")
    if not moofs:
        offsets, sizes = sample_offsets(track, length)
        return offsets, sizes, decode_times(track, len(sizes)), len(sizes)
    if _sizes(track, length).size:
        offsets, sizes = sample_offsets(track, length)
        times = decode_times(track, len(sizes))
    else:
        offsets = sizes = np.zeros(0, np.int64)
        times = np.zeros(1, np.int64)
    track_id = _track_id(audio)
    defaults = movie.trex.get(track_id, Defaults(0, 0))
    fragments = fragment_samples(moofs, track_id, defaults, int(times[-1]), length)
    if is_pcm:
        _check_fragment_pcm(fragments.sizes, fragments.times, entry)
    return (
        np.concatenate([offsets, fragments.offsets]),
        np.concatenate([sizes, fragments.sizes]),
        np.concatenate([times[:-1], fragments.times]),
        len(sizes),
    )


def _check_fragment_pcm(sizes: np.ndarray, times: np.ndarray, entry: _Entry) -> None:
    """Refuse fragment PCM samples FFmpeg's decode does not place where
    their decode times do: FFmpeg's demuxer hands each ``trun`` sample over
    as one packet (it cuts only ``moov``'s chunks into 1024 frames), whose
    frames its decoder counts from the bytes, one packet after another, so
    each sample must hold the frames of its duration, and each fragment
    start (``tfdt``) where the one before ended."""
    frame = pcm.BYTES[entry.codec] * entry.channels
    if (sizes % frame).any() or (np.diff(times) != sizes // frame).any():
        raise NoIndex("fragmented mp4 with PCM samples whose sizes are not their durations")


def _check_fragmented_edit(edit: _Edit, edit_end: int, moov_times: np.ndarray) -> None:
    """Refuse the edits of a fragmented file FFmpeg does not apply as it
    applies them to a whole one. FFmpeg trims the edit's media time from the
    start (its timestamps are ``decode time - media time`` in the fragments
    too) but cuts only the samples ``moov`` lists at the edit's end, and
    appends every fragment's after them. Accepted: an edit that ends past
    the last sample ``moov`` lists (none cut, whatever the fragments hold),
    or of any duration when ``moov`` lists none (the ``empty_moov`` and
    ``delay_moov`` layouts, whose edit FFmpeg writes with duration 0).
    With samples in ``moov``, a zero duration makes FFmpeg keep only the
    first of them, and an edit ending among them cuts the rest."""
    if edit.empty:
        raise NoIndex("fragmented mp4 with an empty edit")
    if len(moov_times) and (edit.duration == 0 or edit_end <= int(moov_times[-1])):
        raise NoIndex("fragmented mp4 with an edit that ends before its fragments")


def _track_id(track: _Track) -> int:
    tkhd = track.leaves.get(b"tkhd", b"")
    at = 20 if tkhd[:1] == b"\x01" else 12
    return struct.unpack_from(">I", tkhd, at)[0] if len(tkhd) >= at + 4 else -1


def _check_composition_offsets(track: dict[bytes, bytes]) -> None:
    """Refuse composition offsets (``ctts``) but on the first sample (as FAAC
    writes them): FFmpeg's timestamps would then not be decode times."""
    if b"ctts" not in track:
        return
    runs = _table(track[b"ctts"], ">u4,>i4", "ctts")
    moved = np.flatnonzero(runs["f1"])
    if len(moved) > 1 or (len(moved) == 1 and (moved[0] != 0 or runs["f0"][0] != 1)):
        raise NoIndex("mp4 audio with composition offsets")


def _first_output(
    entry: _Entry, head: tuple[int, bytes], offset: int, size: int
) -> tuple[int, int] | None:
    """(samples, sample rate) FFmpeg's decoder outputs for the packet at
    ``offset`` (when ``head`` holds it) fed first to a fresh decoder, as in
    a full decode; None when that cannot be asked. FAAC's first packet only
    names the encoder and gives no samples; HE-AAC's gives the SBR rate;
    an AC-3 packet gives the frame its ``stts`` duration must be."""
    start = offset - head[0]
    askable = bool(entry.config) or entry.codec in _SELF_DESCRIBED
    if not askable or not 0 <= start <= start + size <= len(head[1]):
        return None
    decoder = new_decoder(entry.codec)
    decoder.extradata = entry.config or None
    try:
        decoder.open()
        frames = decoder.decode(padded_packet(head[1][start : start + size]))
    except (av.FFmpegError, ValueError):
        return None  # a broken first packet: the decode reports it
    return sum(f.samples for f in frames), frames[0].sample_rate if frames else 0


def _header(boxes: list[_Range], moov_at: int) -> tuple[_Range, ...]:
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


def parse(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index the first audio track of an MP4/M4A file; raises ``NoIndex`` otherwise."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    header, moov, moov_at, mdat_head, moofs = _top_level(reader)
    length = reader.pos  # the walk stops at the end of the file
    movie = _walk_moov(moov)
    audio = _audio_track(movie.tracks)
    # Later tracks first: a file with one sound track reads no table twice.
    if not moofs and _later_audio(movie.tracks, audio, length) and _listed(audio, length) == 0:
        raise NoIndex(_EMPTY_FIRST_TRACK)
    track = audio.leaves
    if b"mdhd" not in track or b"stsd" not in track:
        raise NoIndex("mp4 audio track without mdhd/stsd")
    timescale = _timescale(track[b"mdhd"])
    if not timescale:
        raise NoIndex("mp4 audio track with a zero timescale")
    entry = _sample_entry(track[b"stsd"])
    is_pcm = entry.codec in pcm.BYTES
    if not _rate_agrees(entry.sample_rate, timescale) or (
        is_pcm and entry.sample_rate not in (0, timescale)
    ):
        raise NoIndex("mp4 media timescale is not the sample rate")
    if entry.codec == "opus" and timescale != DECODED_RATE:
        # FFmpeg's muxer times Opus at the rate it was encoded from (24 kHz: half
        # the positions); the 2x a 16-bit rate field may be off by let it through.
        raise NoIndex("mp4 Opus timed at another rate than the 48 kHz it decodes at")
    offsets, sizes, times, in_moov = _samples(audio, entry, movie, moofs, length)
    listed = len(sizes)
    offsets, sizes = _whole(offsets, sizes, length)  # a truncated file: the samples all there
    times = times[: len(sizes) + 1]
    if not len(sizes):
        raise NoIndex("mp4 audio track without samples")
    first_sample, shown = 0, len(sizes)
    edit = _edit(track, movie.timescale, timescale)
    stated_end = int(times[-1])  # where the sample table (and the edit list) ends the track
    duration = stated_end  # FFmpeg's stream duration: the table's, or the edit's
    if edit is not None:
        first_sample = edit.media_time
        # FFmpeg drops the packets that start after the edit ends; up to
        # FFmpeg 8 it does not cut into the last one it keeps (``padding``).
        edit_end = edit.media_time + round(edit.duration * timescale / movie.timescale)
        if is_pcm and (edit.media_time or edit_end < int(times[-1])):
            raise NoIndex("mp4 PCM with an edit that trims it")
        if moofs:
            _check_fragmented_edit(edit, edit_end, times[:in_moov])
        else:
            shown = max(1, int(np.searchsorted(times[:-1], min(edit_end, int(times[-1])))))
            stated_end = min(stated_end, edit_end)
        duration = edit_end - edit.media_time
    _check_composition_offsets(track)
    first = _first_output(entry, mdat_head, int(offsets[0]), int(sizes[0]))
    if first is not None and first[1] and first[1] != timescale:
        # Positions count in the timescale: an index would misplace every
        # crop (an LC track timed at twice its rate, HE-AAC timed at the core's).
        raise NoIndex("mp4 media timescale is not the sample rate")
    # FAAC's first packet only names the encoder: it decodes to nothing.
    silent = int(times[1]) if first is not None and not first[0] else 0
    # Without an edit that starts later, FFmpeg's Opus decoder drops the
    # pre-skip itself (an edit's skip replaces it).
    first_sample = max(first_sample or entry.delay, silent)
    priming = _priming(movie, audio, edit is not None) if entry.codec == "aac" else 0
    if priming:
        # FFmpeg skips the priming from the samples the first packet it keeps
        # decodes to, which is the first unless the edit starts more than a
        # second in.
        if first_sample > timescale:
            raise NoIndex("mp4 iTunSMPB priming with an edit more than a second in")
        first_sample = max(first_sample, silent + priming)
    last = int(times[shown - 1])
    end = reach = int(times[shown])  # the last packet's end: its output, and by stts
    if entry.codec == "vorbis":
        _check_vorbis_edit(edit, times)
        _check_vorbis_times(entry, reader, offsets, times[: shown + 1])
        end = last + _last_output(entry, reader, offsets, sizes, shown - 1)
    if entry.codec in _FIXED_FRAMES:
        # Such a decoder outputs a whole frame for the last packet, whatever
        # duration stts gives it.
        frame = int(times[1] - times[0])
        if (np.diff(times[:shown]) != frame).any():
            # Nor for the packets before: their positions in FFmpeg's decode
            # are whole frames, not what stts says (a capture clock's
            # jitter, a gap left for dropped audio, samples of no time).
            raise NoIndex(_STTS_DIFFERS)
        if entry.codec in _SELF_DESCRIBED and first is not None and first[0] != frame:
            raise NoIndex(_STTS_DIFFERS)
        end = last + frame
        if entry.codec in _FRAME_KNOWN or frame > _LONGEST_FRAME:
            reach = end  # (a longer frame is a lie: num_samples says so, nothing is cut)
    if entry.codec in _STATED_FRAMES and (np.diff(times[:shown]) != entry.frame).any():
        # FFmpeg's decode places them one after another as they decode,
        # whatever stts says: an index by stts misplaced every crop after
        # a packet timed otherwise (a gap, a clock's jitter).
        raise NoIndex(_STTS_DIFFERS)
    # FFmpeg 9 cuts the last frame's output where the sample table or the
    # edit list ends the track, by what the packet reaches past it (FFmpeg
    # 8: nothing; ``formats.ffmpeg.full_decode_length``); not in a
    # fragmented file, and never into the samples before the packet.
    padding = max(0, min(reach - stated_end, end - max(last, first_sample)))
    if moofs or end - last > _LONGEST_FRAME:
        padding = 0
    # FFmpeg 9 also cuts an iTunSMPB tag's end padding (FFmpeg 8 none of
    # it). Not measured with fragments, empty edits or a truncated table:
    # such an index holds under the FFmpeg that checked it only.
    cut, known = None, True
    if entry.codec == "aac":
        cut, known = _smpb_end(movie, audio, duration, stated_end)
        if moofs or (edit is not None and edit.empty) or len(sizes) < listed:
            cut, known = None, not _track_tags(movie, audio)
    if cut is not None:
        if cut <= first_sample:
            # FFmpeg 9 then decodes nothing, or a frame or so: no rule to follow.
            raise NoIndex("mp4 iTunSMPB padding that leaves no samples (FFmpeg 9)")
        padding = end - cut
    num_samples = max(0, end - first_sample)
    keep = thin(times[:-1], interval(timescale, density))
    return SeekIndex(
        status=OK,
        codec=entry.codec,
        container="mp4",
        # The sample entry's 16.16 rate cannot say 96 kHz; audio timescales are the rate.
        sample_rate=timescale,
        channels=entry.channels,
        timescale=timescale,
        first_sample=first_sample,
        num_samples=num_samples,
        encoder_delay=edit.media_time if edit else 0,
        padding=padding,
        length_policy="" if known else LENGTH_POLICY,
        header=_header(header, moov_at),
        data_start=int(offsets.min()),
        data_end=int((offsets + sizes).max()),
        sample_pos=times[keep],
        byte_pos=offsets[keep],
        preroll=_preroll(entry.codec, reader, offsets, times),
    )


def _preroll(codec: str, reader: Reader, offsets: np.ndarray, times: np.ndarray) -> int:
    """What a decode needs before a crop beyond the format's own pre-roll.
    Vorbis: one packet (the first after a seek decodes to nothing, the
    second needs it: block overlap). Opus: what its packets' modes need
    (``opus.mode_preroll``), from the first byte of up to
    ``OPUS_MODE_PACKETS`` packets spread evenly over the track."""
    if codec == "vorbis":
        return int(np.diff(times).max())
    if codec != "opus":
        return 0
    stream = reader.raw_stream()
    if stream is None:  # packets out of reach: as if narrowband SILK, the longest
        return mode_preroll(0)
    picks = np.linspace(0, len(offsets) - 1, min(len(offsets), OPUS_MODE_PACKETS)).astype(int)
    lowest, here = NO_PACKET, stream.tell()
    for offset in np.unique(offsets[picks]).tolist():
        stream.seek(offset)
        head = stream.read(1)
        lowest = min(lowest, toc_config(head[0])) if head else lowest
    stream.seek(here)
    return mode_preroll(lowest)


#: Opus packets whose first byte (TOC) the index reads for their modes: every
#: packet of a track up to 82 s (20 ms packets), else one in so many.
OPUS_MODE_PACKETS = 4096


def _check_vorbis_edit(edit: _Edit | None, times: np.ndarray) -> None:
    """Refuse a Vorbis edit that starts inside a packet: FFmpeg then moves
    its timestamps' origin to the next packet and drops whole frames, which
    an edit's media time does not say. At a packet's start (FFmpeg's muxer
    writes the first packet's duration) it trims whole frames from there,
    on top of the first packet, which the decoder never outputs."""
    if edit is not None and (edit.empty or edit.media_time not in times):
        raise NoIndex("vorbis in mp4 with an edit inside a packet")


def _check_vorbis_times(
    entry: _Entry, reader: Reader, offsets: np.ndarray, times: np.ndarray
) -> None:
    """Refuse Vorbis packets that ``stts`` times otherwise than they decode
    (a gap left for dropped audio, a clock's jitter): FFmpeg's decode puts
    each packet's output after the one before, whatever ``stts`` says, so
    an index by ``stts`` misplaces every crop after such a packet. A
    packet's output is set by its block size and the one before (the first
    byte of each packet: its mode), counted as for Ogg Vorbis."""
    stream = reader.raw_stream()
    if stream is None:
        raise NoIndex("vorbis in mp4 from a stream that cannot seek")
    counter = packet_durations(_xiph_headers(entry.config))
    # Where each packet's output ends, by stts and as decoded, but the last's
    # (stts trims its padding; ``_last_output`` decodes it). FFmpeg's muxer
    # gives a long block after a short one the duration the Ogg demuxer
    # does, which the next packet's makes up: the two disagree for one
    # packet at a time, by less than a long block, never for two in a row.
    here, decoded = stream.tell(), []
    for offset in offsets[: len(times) - 2].tolist():
        stream.seek(offset)
        decoded.append(counter.next(stream.read(2)))
    stream.seek(here)
    drift = np.cumsum(np.diff(times)[:-1]) - np.cumsum(decoded)
    off = np.flatnonzero(drift)
    too_far = len(off) and np.abs(drift[off]).max() >= counter.blocksizes[1]
    if too_far or (np.diff(off) == 1).any():
        raise NoIndex(_STTS_DIFFERS)


def _xiph_headers(config: bytes) -> list[bytes]:
    """Vorbis's three header packets from its decoder-specific info, laced
    as Xiph does: the count less one, the lengths of all but the last (each
    as 255s and a remainder), then the packets."""
    if not config or config[0] != 2:
        raise NoIndex("vorbis in mp4 without its three headers")
    lengths, at = [], 1
    for _ in range(2):
        length = 0
        while at < len(config) and config[at] == 255:
            length, at = length + 255, at + 1
        if at >= len(config):
            raise NoIndex("vorbis in mp4 without its three headers")
        lengths.append(length + config[at])
        at += 1
    first, second = at + lengths[0], at + lengths[0] + lengths[1]
    if second > len(config):
        raise NoIndex("vorbis in mp4 without its three headers")
    return [config[at:first], config[first:second], config[second:]]


def _last_output(
    entry: _Entry, reader: Reader, offsets: np.ndarray, sizes: np.ndarray, last: int
) -> int:
    """Samples FFmpeg's decoder outputs for packet ``last``, fed after the
    one before it: a Vorbis packet's output follows its and the previous
    block's sizes, whatever duration ``stts`` gives the file's last packet
    (FFmpeg's muxer writes the encoder's padding there)."""
    stream = reader.raw_stream()
    if stream is None:
        raise NoIndex("vorbis in mp4 from a stream that cannot seek")
    decoder = new_decoder(entry.codec)
    decoder.extradata = entry.config
    decoder.open()
    frames = []
    for k in range(max(0, last - 1), last + 1):
        stream.seek(int(offsets[k]))
        try:
            frames = decoder.decode(padded_packet(stream.read(int(sizes[k]))))
        except (av.FFmpegError, ValueError) as exc:
            raise NoIndex("vorbis in mp4 whose last packets do not decode") from exc
    return sum(f.samples for f in frames)
