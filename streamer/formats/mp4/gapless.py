"""Where FFmpeg's full decode of an MP4 audio track starts and ends: its
edit list, its ``iTunSMPB`` tags, and what its first and last packets
decode to (docs/seek-index.md lists the cases). ``parse`` puts them
together into the index's ``first_sample``, ``num_samples`` and
``padding``.

Gapless, as FFmpeg's full decode has it: the edit with media gives
``first_sample`` (its media time, also ``encoder_delay``: FFmpeg's
timestamps are ``dts - media_time + empty edits``) and the end (the last
packet that starts before the edit ends, a whole frame for AAC and AMR); an
``iTunSMPB`` tag that FFmpeg gives the AAC track moves ``first_sample`` to
its priming (and FFmpeg 9 cuts its end padding: ``smpb_end``, in
``padding``); so does a first packet that decodes to nothing (FAAC's, every
Vorbis stream's: ``first_output``). Without an edit list nothing else is
trimmed. In a fragmented file FFmpeg applies the edit's media time but cuts
at its end only the samples ``moov`` lists (``check_fragmented_edit``); a
Vorbis edit must start at a packet (``check_vorbis_edit``), and the last
Vorbis packet gives a whole block (``last_output``).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import av
import numpy as np

from ..ffmpeg import new_decoder
from ..packets import padded_packet
from ..reader import NoIndex, Reader
from .boxes import Moov, Track
from .entry import Entry
from .tables import table

__all__ = [
    "SELF_DESCRIBED",
    "Edit",
    "check_fragmented_edit",
    "check_vorbis_edit",
    "first_output",
    "last_output",
    "media_edit",
    "smpb_end",
    "smpb_priming",
    "track_tags",
]


class Edit(NamedTuple):
    duration: int  # in the movie timescale
    media_time: int  # in the media timescale
    #: The empty edits before it, in the media timescale: FFmpeg's timestamps
    #: start there (``pts = decode time - media_time + empty``).
    empty: int


def media_edit(track: dict[bytes, bytes], movie_timescale: int, timescale: int) -> Edit | None:
    """The edit that shows media, or None without an edit list.

    Empty edits (media time -1) before it only shift FFmpeg's timestamps,
    and after it show nothing: the decode is the same. Several edits with
    media splice the track, which a single first/last sample cannot say."""
    payload = track.get(b"elst")
    if payload is None or not movie_timescale:
        return None
    entry = ">u8,>i8,>i4" if payload[:1] == b"\x01" else ">u4,>i4,>i4"
    shown: list[Edit] = []
    empty = 0
    for duration, media_time, _ in table(payload, entry, "elst").tolist():
        if media_time == -1:
            # FFmpeg rescales each edit on its own, rounding half away from zero.
            empty += (2 * duration * timescale + movie_timescale) // (2 * movie_timescale)
        else:
            shown.append(Edit(duration, media_time, empty))
    if len(shown) > 1:
        raise NoIndex("mp4 edit list with several segments")
    if shown and shown[0].media_time < 0:
        raise NoIndex("mp4 edit with a negative media time")
    return shown[0] if shown else None


def check_fragmented_edit(edit: Edit, edit_end: int, moov_times: np.ndarray) -> None:
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


def check_vorbis_edit(edit: Edit | None, times: np.ndarray) -> None:
    """Refuse a Vorbis edit that starts inside a packet: FFmpeg then moves
    its timestamps' origin to the next packet and drops whole frames, which
    an edit's media time does not say. At a packet's start (FFmpeg's muxer
    writes the first packet's duration) it trims whole frames from there,
    on top of the first packet, which the decoder never outputs."""
    if edit is not None and (edit.empty or edit.media_time not in times):
        raise NoIndex("vorbis in mp4 with an edit inside a packet")


#: FFmpeg takes an ``iTunSMPB`` priming between these bounds (exclusive).
_PRIMING_RANGE = (0, 16384)
#: ``iTunSMPB``'s value as FFmpeg scans it (``"%*X %X %X %X"``): each
#: field as long as it goes (scanf does not give digits back to the next).
_HEX = rb"[-+]?(?:0[xX])?[0-9A-Fa-f]+(?![0-9A-Fa-f])"
_SMPB = re.compile(rb"\s*" + _HEX + (rb"\s*(" + _HEX + rb")") * 3)


def smpb_priming(moov: Moov, track: Track, has_edit: bool) -> int:
    """FFmpeg's AAC priming from ``iTunSMPB`` tags (0: none).

    FFmpeg gives a tag to the track read last before it: a tag in the
    movie's ``udta`` goes to the last track, one in a track's own ``udta``
    to that track, where the track's edit list, applied when the track
    ends, resets it. The last tag with a priming in range wins."""
    priming = 0
    for offset, fields in track_tags(moov, track):
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


def smpb_end(moov: Moov, track: Track, duration: int, stated_end: int) -> tuple[int | None, bool]:
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
    tags = track_tags(moov, track)
    if not tags:
        return None, True
    if len(tags) > 1 or tags[0][0] < track.end:
        return None, False
    fields = tags[0][1]
    padding, length = _scanned(fields.group(2)), _scanned(fields.group(3))
    if not (0 < padding < duration and length < duration):
        return None, True
    return stated_end - padding, True


def track_tags(moov: Moov, track: Track) -> list[tuple[int, re.Match[bytes]]]:
    """The ``iTunSMPB`` tags FFmpeg gives ``track`` and scans (offset in
    ``moov``, the scanned fields), in file order."""
    tags = []
    for offset, value in moov.gapless_tags:
        owner = [t for t in moov.tracks if t.start < offset][-1:]
        scanned = _SMPB.match(value.split(b"\0")[0])
        if owner == [track] and scanned is not None:
            tags.append((offset, scanned))
    return tags


#: Codecs whose packets need no decoder config: ``first_output`` asks
#: their decoder what the first packet gives, and the frame ``stts`` states
#: must be it (AC-3: 1536 samples; E-AC-3: 256 per audio block, which
#: FFmpeg's muxer gathers into packets of six blocks).
SELF_DESCRIBED = frozenset({"ac3", "eac3"})


def first_output(
    entry: Entry, head: tuple[int, bytes], offset: int, size: int
) -> tuple[int, int] | None:
    """(samples, sample rate) FFmpeg's decoder outputs for the packet at
    ``offset`` (when ``head`` holds it) fed first to a fresh decoder, as in
    a full decode; None when that cannot be asked. FAAC's first packet only
    names the encoder and gives no samples; HE-AAC's gives the SBR rate;
    an AC-3 packet gives the frame its ``stts`` duration must be."""
    start = offset - head[0]
    askable = bool(entry.config) or entry.codec in SELF_DESCRIBED
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


def last_output(
    entry: Entry, reader: Reader, offsets: np.ndarray, sizes: np.ndarray, last: int
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
