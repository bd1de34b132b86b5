"""MP4 / M4A / M4B / 3GP / MOV (AAC, AC-3, ALAC, AMR, E-AC-3, mp3, Opus, Vorbis, PCM, and
any other audio track): the seek index of the first audio track, and the
checks that refuse an index FFmpeg's decode would not follow.

``parse`` walks the boxes (``boxes``), reads the track's sample entry
(``entry``), its sample tables (``tables``: the native timeline, fragments
included) and its gapless edges (``gapless``: edit list, ``iTunSMPB``, the
first and last packets). The seek points are the tables' per-sample
(position, byte) pairs, thinned to the requested density (every sample with
``density=inf``).

AAC, AMR, AC-3, E-AC-3, mp3 and Opus packets each decode to a whole frame
(``_FIXED_FRAMES``), so stts must give every packet but the last that
frame, or there is no index (FFmpeg's decode does not follow other
durations); ALAC and FLAC packets the frame their sample entry states,
Vorbis packets what their block sizes give. AAC frames
overlap: decoding from a seek point needs at least one earlier packet (1024
samples) of pre-roll.

``audio_only`` and ``mismatch`` are what ``decode`` reads from a ``moov``
when it opens a demuxer: the audio track shown alone, and whether the
``moov`` is the one the index was built from.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, NamedTuple

import numpy as np

from ...index.table import ENDS_EARLY, OK, SeekIndex
from ..ffmpeg import LENGTH_POLICY
from ..ogg.parse import packet_durations
from ..opus import DECODED_RATE, NO_PACKET, mode_preroll, toc_config
from ..reader import NoIndex, Reader, interval, thin
from . import pcm
from .boxes import (
    TOP_LEVEL,
    Track,
    audio_track,
    header_ranges,
    is_sound,
    timescale_of,
    top_level,
    walk_moov,
)
from .entry import Entry, sample_entry, xiph_headers
from .gapless import (
    SELF_DESCRIBED,
    check_fragmented_edit,
    check_vorbis_edit,
    first_output,
    last_output,
    media_edit,
    smpb_end,
    smpb_priming,
    track_tags,
)
from .tables import offsets_and_sizes, sample_sizes, table, track_samples, whole_samples

__all__ = ["AudioOnly", "audio_only", "matches", "mismatch", "parse"]


#: Codecs whose every packet decodes to one frame of a fixed length (Opus's
#: may vary: a track whose ``stts`` varies has no index), and the
#: longest such frame (HE-AAC's 2048 at the output rate, with room to spare).
_FIXED_FRAMES = frozenset({"aac", "ac3", "amr_nb", "amr_wb", "eac3", "mp3", "opus"})
_LONGEST_FRAME = 8192
#: Codecs whose every packet but the last decodes to the frame length their
#: sample entry states (``Entry.frame``: ALAC's cookie, FLAC's STREAMINFO);
#: the last may be shorter, and decodes to what its own header says.
_STATED_FRAMES = frozenset({"alac", "flac"})
#: Why a track whose ``stts`` does not time its packets as they decode has no index.
_STTS_DIFFERS = "mp4 sample durations that are not the codec's frame (stts)"
#: Codecs whose frame length FFmpeg 9's MP4 demuxer knows (the stream's
#: ``frame_size``, 0 for the others), by experiment under PyAV 19: it cuts
#: their last frame from its whole output to where the track ends. For every
#: other codec (ALAC, FLAC, Opus, AMR, Vorbis, AC-3, E-AC-3) it
#: reckons the last packet by its stts duration and cuts only what that
#: runs past the edit list's end: nothing without an edit list, or with one
#: that ends with the sample table (docs/decoding.md). PCM it never cuts (an
#: edit that would trim PCM gives no index).
_FRAME_KNOWN = frozenset({"aac", "mp3"})


def matches(head: bytes) -> bool:
    return len(head) >= 8 and head[4:8] in TOP_LEVEL


def parse(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index the first audio track of an MP4/M4A file; raises ``NoIndex`` otherwise."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    header, moov, moov_at, mdat_head, moofs = top_level(reader)
    length = reader.pos  # the walk stops at the end of the file
    movie = walk_moov(moov)
    audio = audio_track(movie.tracks)
    # Later tracks first: a file with one sound track reads no table twice.
    if not moofs and _later_audio(movie.tracks, audio, length) and _listed(audio, length) == 0:
        raise NoIndex(_EMPTY_FIRST_TRACK)
    track = audio.leaves
    if b"mdhd" not in track or b"stsd" not in track:
        raise NoIndex("mp4 audio track without mdhd/stsd")
    timescale = timescale_of(track[b"mdhd"])
    if not timescale:
        raise NoIndex("mp4 audio track with a zero timescale")
    entry = sample_entry(track[b"stsd"])
    is_pcm = entry.codec in pcm.BYTES
    if not _rate_agrees(entry.sample_rate, timescale) or (
        is_pcm and entry.sample_rate not in (0, timescale)
    ):
        raise NoIndex("mp4 media timescale is not the sample rate")
    if entry.codec == "opus" and timescale != DECODED_RATE:
        # FFmpeg's muxer times Opus at the rate it was encoded from (24 kHz: half
        # the positions); the 2x a 16-bit rate field may be off by let it through.
        raise NoIndex("mp4 Opus timed at another rate than the 48 kHz it decodes at")
    offsets, sizes, times, in_moov = track_samples(audio, entry, movie, moofs, length)
    listed = len(sizes)
    # A truncated file: the samples all there.
    offsets, sizes = whole_samples(offsets, sizes, length)
    times = times[: len(sizes) + 1]
    if not len(sizes):
        raise NoIndex("mp4 audio track without samples")
    first_sample, shown = 0, len(sizes)
    edit = media_edit(track, movie.timescale, timescale)
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
            check_fragmented_edit(edit, edit_end, times[:in_moov])
        else:
            shown = max(1, int(np.searchsorted(times[:-1], min(edit_end, int(times[-1])))))
            stated_end = min(stated_end, edit_end)
        duration = edit_end - edit.media_time
    _check_composition_offsets(track)
    first = first_output(entry, mdat_head, int(offsets[0]), int(sizes[0]))
    if first is not None and first[1] and first[1] != timescale:
        # Positions count in the timescale: an index would misplace every
        # crop (an LC track timed at twice its rate, HE-AAC timed at the core's).
        raise NoIndex("mp4 media timescale is not the sample rate")
    # FAAC's first packet only names the encoder: it decodes to nothing.
    silent = int(times[1]) if first is not None and not first[0] else 0
    # Without an edit that starts later, FFmpeg's Opus decoder drops the
    # pre-skip itself (an edit's skip replaces it).
    first_sample = max(first_sample or entry.delay, silent)
    priming = smpb_priming(movie, audio, edit is not None) if entry.codec == "aac" else 0
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
        check_vorbis_edit(edit, times)
        _check_vorbis_times(entry, reader, offsets, times[: shown + 1])
        end = last + last_output(entry, reader, offsets, sizes, shown - 1)
    if entry.codec in _FIXED_FRAMES:
        # Such a decoder outputs a whole frame for the last packet, whatever
        # duration stts gives it.
        frame = int(times[1] - times[0])
        if (np.diff(times[:shown]) != frame).any():
            # Nor for the packets before: their positions in FFmpeg's decode
            # are whole frames, not what stts says (a capture clock's
            # jitter, a gap left for dropped audio, samples of no time).
            raise NoIndex(_STTS_DIFFERS)
        if entry.codec in SELF_DESCRIBED and first is not None and first[0] != frame:
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
        cut, known = smpb_end(movie, audio, duration, stated_end)
        if moofs or (edit is not None and edit.empty) or len(sizes) < listed:
            cut, known = None, not track_tags(movie, audio)
    if cut is not None:
        if cut <= first_sample:
            # FFmpeg 9 then decodes nothing, or a frame or so: no rule to follow.
            raise NoIndex("mp4 iTunSMPB padding that leaves no samples (FFmpeg 9)")
        padding = end - cut
    num_samples = max(0, end - first_sample)
    keep = thin(times[:-1], interval(timescale, density))
    note = ""
    if len(sizes) < listed:  # the file ends inside the packets its tables list
        note = f"{ENDS_EARLY}: the file holds {len(sizes)} of its track's {listed} packets"
    return SeekIndex(
        status=OK,
        reason=note,
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
        header=header_ranges(header, moov_at),
        data_start=int(offsets.min()),
        data_end=int((offsets + sizes).max()),
        sample_pos=times[keep],
        byte_pos=offsets[keep],
        preroll=_preroll(entry.codec, reader, offsets, times),
    )


#: Why an MP4 whose first sound track is empty and a later one is not has
#: no index: FFmpeg's first audio stream, which streamer serves
#: (docs/decoding.md), decodes to nothing.
_EMPTY_FIRST_TRACK = (
    "the mp4's first audio track is empty and a later one holds the audio: "
    "streamer serves the first audio stream, as FFmpeg picks it"
)


def _listed(track: Track, length: int) -> int:
    """How many samples ``track``'s ``moov`` tables list (-1: they do not say)."""
    try:
        return len(sample_sizes(track.leaves, length))
    except NoIndex:
        return -1


def _later_audio(tracks: list[Track], first: Track, length: int) -> bool:
    """Whether a sound track after ``first`` lists samples."""
    later = tracks[tracks.index(first) + 1 :]
    return any(is_sound(t) and _listed(t, length) > 0 for t in later)


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


def _check_composition_offsets(track: dict[bytes, bytes]) -> None:
    """Refuse composition offsets (``ctts``) but on the first sample (as FAAC
    writes them): FFmpeg's timestamps would then not be decode times."""
    if b"ctts" not in track:
        return
    runs = table(track[b"ctts"], ">u4,>i4", "ctts")
    moved = np.flatnonzero(runs["f1"])
    if len(moved) > 1 or (len(moved) == 1 and (moved[0] != 0 or runs["f0"][0] != 1)):
        raise NoIndex("mp4 audio with composition offsets")


def _check_vorbis_times(
    entry: Entry, reader: Reader, offsets: np.ndarray, times: np.ndarray
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
    counter = packet_durations(xiph_headers(entry.config))
    # Where each packet's output ends, by stts and as decoded, but the last's
    # (stts trims its padding; ``last_output`` decodes it). FFmpeg's muxer
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
    movie = walk_moov(moov)
    audio = audio_track(movie.tracks)
    edited = bytearray(moov)
    for track in movie.tracks:
        if track is not audio:
            edited[track.start + 4 : track.start + 8] = b"free"
    track = audio.leaves
    edit = media_edit(track, movie.timescale, timescale_of(track.get(b"mdhd", b"")))
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
        movie = walk_moov(moov)
        audio = audio_track(movie.tracks)
        track = audio.leaves
        timescale = timescale_of(track.get(b"mdhd", b""))
        entry = sample_entry(track.get(b"stsd", b""))
        edit = media_edit(track, movie.timescale, timescale)
        if movie.trex:  # fragmented: the fragments' samples are not in moov
            span = (index.data_start, index.data_end)
        else:
            offsets, sizes = whole_samples(*offsets_and_sizes(track, entry, length), length)
            span = (int(offsets.min()), int((offsets + sizes).max())) if len(sizes) else (0, 0)
    except (NoIndex, struct.error, ValueError, IndexError) as exc:
        return f"its moov does not parse: {exc}"
    found = (entry.codec, timescale, entry.channels, edit.media_time if edit else 0, span)
    said = (index.codec, index.timescale, index.channels, index.encoder_delay)
    if found != (*said, (index.data_start, index.data_end)):
        return "its moov describes other samples"
    return None
