"""Whether a seek index can be trusted, from its own fields and what is known
of its blob, without reading the blob.

An index is trusted to place crops sample-exactly; one that is absurd (a
sample rate of 0, an Ogg granule of 2^60, seek points outside the audio) or
that belongs to another episode (index rows swapped or corrupted after the
build) would yield wrong audio without a word. Two checks, both cheap (a few
comparisons and one pass over the seek points):

- ``check_index(index, blob_length)``: the index alone against the length of
  its blob. ``formats.extract`` runs it on every index it builds, so an
  implausible one is stored as "no index" with the reason.
- ``check_against_blob(index, blob_length, info, built_for, revision)``: the same,
  plus the length of the blob the index was built from when its shard
  records it (``table.BLOB_BYTES_COLUMN``: an index of a blob since
  rewritten, whose every field may still look right, has its frames at the
  old offsets) and the episode's ``audio_info`` row when there is one
  (codec, container, sample rate, channels, duration), for an index read
  back from ``seek_index/``. (A blob rewritten to the same length is seen
  by its bytes, when a crop reads them: ``content``.) And the revision of
  the builder that wrote its shard: a row an older builder stored for a
  codec it has since learned to index right (``table.EXACT_FROM``) is not
  served (``stale_build``).

Both return the reason an index cannot be trusted (short and stable enough to
be counted), or None. A "no index" record is always fine: it is trusted to
say nothing.
"""

from __future__ import annotations

import decimal
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from .content import expected_count, expected_spans
from .table import EXACT_FROM, INDEX_REVISION, NO_INDEX, SeekIndex

__all__ = [
    "ANOTHER_BLOB",
    "DEFAULT_UNITS_PER_BYTE",
    "DISAGREES_WITH_INFO",
    "MAX_CHANNELS",
    "MAX_DURATION",
    "MAX_SAMPLE_RATE",
    "OLDER_BUILDER",
    "UNITS_PER_BYTE",
    "check_against_blob",
    "check_index",
    "codec_family",
    "stale_build",
]

#: How ``stale_build``'s reason begins.
OLDER_BUILDER = "index built by an older streamer"
MAX_CHANNELS = 255
#: The longest duration (s) an ``audio_info`` row is believed about (115
#: days): a longer one is a corrupt cell (``inf``, 1e12), not audio.
MAX_DURATION = 1e7
#: FLAC's STREAMINFO field tops out just below this; nothing real is faster.
MAX_SAMPLE_RATE = 1 << 20
#: The most native-timeline units one byte of compressed audio data can stand
#: for, per codec, with a wide margin: mp3 frames are >= 24 bytes for 1152
#: samples; an AAC packet is >= 1 byte for 1024 (2048 with SBR); a Vorbis or
#: Opus packet >= 1 byte for at most 4096 (long block) or 5760 (120 ms).
UNITS_PER_BYTE: dict[str, int] = {
    "mp1": 64,
    "mp2": 64,
    "mp3": 64,
    "aac": 4096,
    "vorbis": 8192,
    "opus": 8192,
}
#: Everything else (FLAC and ALAC can code silence in a few bytes per frame
#: of up to 65535 samples).
DEFAULT_UNITS_PER_BYTE = 1 << 16
#: Index fields stored as int32 in ``seek_index/``.
_INT32_MAX = (1 << 31) - 1
#: Positions must stay far from int64 overflow when offsets are added.
_POSITION_LIMIT = 1 << 62
#: Why an index built from a blob of another length is not used.
ANOTHER_BLOB = "index built for another blob (its byte length differs)"
#: How the reason of an index refused for contradicting its ``audio_info``
#: row begins: one of the two is wrong, and only a check of the index
#: against the audio (``streamer index --verify``) tells which.
DISAGREES_WITH_INFO = "index disagrees with audio_info"
#: ``audio_info`` duration against the index's: probes estimate (an mp3
#: without a Xing tag) and round (AAC's last frame), so only a gross
#: disagreement (another episode's index) counts.
_DURATION_TOLERANCE = (1.0, 0.05)  # seconds, fraction


def check_index(index: SeekIndex, blob_length: int | None = None) -> str | None:
    """Why ``index`` cannot be trusted for a blob of ``blob_length`` bytes
    (None: unknown, the range checks are skipped), or None when it can."""
    if not index.ok:
        return None if index.status == NO_INDEX else f"unknown index status {index.status!r}"
    reason = (
        _check_stream(index)
        or _check_ranges(index, blob_length)
        or _check_points(index)
        or _check_lengths(index)
    )
    return None if reason is None else f"implausible index: {reason}"


def check_against_blob(
    index: SeekIndex,
    blob_length: int,
    info: Mapping[str, Any] | None = None,
    built_for: int | None = None,
    revision: int = INDEX_REVISION,
) -> str | None:
    """Why an index read back for an episode cannot be used with its blob
    (``blob_length`` bytes) and its ``audio_info`` row ``info`` (optional),
    or None when it can. ``built_for``: the length of the blob the index was
    built from, when its shard says (None: unknown); ``revision``: the
    builder's, as its shard says (``stale_build``).

    ``info`` is compared only when it describes this blob: an ``audio_info``
    row whose ``num_bytes`` is not the blob's length says nothing about it
    (one that is not an integer, a string another tool wrote, records no
    length: as one without it).
    """
    if built_for is not None and built_for != blob_length:
        return ANOTHER_BLOB
    stale = stale_build(index, revision)
    if stale is not None:
        return stale
    reason = check_index(index, blob_length)
    crcs = len(index.content_crc)
    if reason is None and index.ok and crcs and crcs != expected_count(index):
        reason = "implausible index: content CRCs do not match its seek points"
    spans = len(index.span_crc)
    if reason is None and index.ok and spans and spans != expected_spans(index):
        reason = "implausible index: span CRCs do not match its audio data"
    if reason is not None or not index.ok or not info:
        return reason
    recorded = info.get("num_bytes")
    if isinstance(recorded, int) and recorded != blob_length:
        return None
    reason = _disagreement(index, info)
    return None if reason is None else f"{DISAGREES_WITH_INFO}: {reason}"


def stale_build(index: SeekIndex, revision: int) -> str | None:
    """Why a row stored by builder ``revision`` is not served (None: it is):
    a builder since fixed for its codec (``table.EXACT_FROM``) would store
    another index, and this one places or pre-rolls some crops wrongly."""
    wanted = EXACT_FROM.get(index.codec, 0)
    if not index.ok or revision >= wanted:
        return None
    return (
        f"{OLDER_BUILDER} (revision {revision}, {index.codec} needs {wanted}): run `streamer index`"
    )


def _check_stream(index: SeekIndex) -> str | None:
    if not index.codec or not index.container:
        return "no codec or container"
    if not 1 <= index.sample_rate <= MAX_SAMPLE_RATE:
        return "sample rate out of range"
    if not 1 <= index.timescale <= MAX_SAMPLE_RATE:
        return "timescale out of range"
    if not 1 <= index.channels <= MAX_CHANNELS:
        return "channel count out of range"
    for name in ("encoder_delay", "padding", "block_align"):
        if not 0 <= getattr(index, name) <= _INT32_MAX:
            return f"{name.replace('_', ' ')} out of range"
    return None


def _check_ranges(index: SeekIndex, blob_length: int | None) -> str | None:
    end = _POSITION_LIMIT if blob_length is None else blob_length
    if not 0 <= index.data_start < index.data_end <= end:
        return "audio data range outside the blob"
    if blob_length is not None and index.data_end != blob_length and _runs_to_the_end(index):
        return "audio data does not end where the blob does"
    if any(offset < 0 or length < 0 or offset + length > end for offset, length in index.header):
        return "header range outside the blob"
    return None


def _runs_to_the_end(index: SeekIndex) -> bool:
    """Whether the audio ends exactly where the blob does: FLAC (its parser
    takes the data to the end) and Ogg up to its end-of-stream page (known
    ``num_samples``); anything after that page is no audio of this stream."""
    return index.container == "flac" or (index.container == "ogg" and index.num_samples >= 0)


def _check_points(index: SeekIndex) -> str | None:
    samples, offsets = np.asarray(index.sample_pos), np.asarray(index.byte_pos)
    if len(samples) == 0:
        return "no seek points"
    if len(offsets) != len(samples):
        return "seek point arrays differ in length"
    if not (_ascending(samples) and _ascending(offsets)):
        return "seek points not ascending"
    if offsets[0] < index.data_start or offsets[-1] >= index.data_end:
        return "seek point outside the audio data"
    if max(-int(samples[0]), int(samples[-1]), abs(int(index.first_sample))) >= _POSITION_LIMIT:
        return "positions out of range"
    if index.first_sample < samples[0]:
        return "first sample before the first seek point"
    return None


def _ascending(values: np.ndarray) -> bool:
    return len(values) < 2 or np.count_nonzero(values[1:] <= values[:-1]) == 0


def _check_lengths(index: SeekIndex) -> str | None:
    """Sample counts and positions no longer than the audio bytes can hold."""
    data = index.data_end - index.data_start
    if index.block_align:
        if index.block_align < index.channels:
            return "block align smaller than a sample frame"
        most = data // index.block_align
    else:
        most = data * UNITS_PER_BYTE.get(index.codec, DEFAULT_UNITS_PER_BYTE)
    if index.num_samples < -1:
        return "negative sample count"
    if index.num_samples > most:
        return "more samples than the audio bytes can hold"
    first = int(index.sample_pos[0])
    if int(index.sample_pos[-1]) - first > most or int(index.first_sample) - first > most:
        return "positions past what the audio bytes can hold"
    return None


def _disagreement(index: SeekIndex, info: Mapping[str, Any]) -> str | None:
    """The first ``audio_info`` field the index contradicts, or None."""
    codec, container = info.get("codec"), info.get("container")
    if codec and codec_family(codec) != codec_family(index.codec):
        return "codec"
    # FFmpeg names demuxers by their aliases: "mov,mp4,m4a,3gp,3g2,mj2"; a
    # generic index names the demuxer after "ffmpeg:".
    if container and index.container.removeprefix("ffmpeg:") not in str(container).split(","):
        return "container"
    # HE-AAC: FFmpeg reports the SBR output (twice the rate) and parametric
    # stereo's two channels where the track states the core's.
    # A value no audio has (a rate of 0 or below, 10^12 seconds) is a corrupt
    # cell of audio_info, which says nothing of the index: not compared.
    sbr = index.codec == "aac"
    rate, channels = info.get("sample_rate"), info.get("channels")
    if (
        _plausible(rate, MAX_SAMPLE_RATE)
        and rate != index.sample_rate
        and not (sbr and rate == 2 * index.sample_rate)
    ):
        return "sample rate"
    if (
        _plausible(channels, MAX_CHANNELS)
        and channels != index.channels
        and not (sbr and (index.channels, channels) == (1, 2))
    ):
        return "channels"
    return _duration_disagreement(index, info.get("duration"))


def _plausible(value: Any, most: float) -> bool:
    """Whether a cell of ``audio_info`` is a number in ``(0, most]``: of any
    numeric type (a decimal column too), but not a boolean (``True`` is no
    1 s or 1 Hz) nor text."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | decimal.Decimal):
        return False
    return 0 < float(value) <= most


#: Codecs FFmpeg names by how far it probed: an MPEG-TS (or PS) stream of
#: MPEG audio is "mp3" until its parser has read a frame of it, which a long
#: probe does (a file with a video track: "mp2") and a short one does not (the
#: generic index opens with little probing). Every MPEG audio decoder of
#: FFmpeg decodes every layer, so they are one codec to an index.
_CODEC_FAMILIES = {"mp1": "mp3", "mp2": "mp3"}


def codec_family(codec: str) -> str:
    """``codec`` as an index compares it (MPEG audio layers are one codec)."""
    return _CODEC_FAMILIES.get(codec, codec)


def _duration_disagreement(index: SeekIndex, duration: Any) -> str | None:
    if not _plausible(duration, MAX_DURATION) or index.num_samples < 0:
        return None
    duration = float(duration)
    if index.container == "ogg" and len(index.header) > 1:
        return None  # a chain: FFmpeg's duration is its first link's
    lengths = [index.num_samples]
    if index.container == "ogg":
        # FFmpeg's Ogg Opus and FLAC duration is the last granule position:
        # it counts from 0 however late the stream starts (one cut from a
        # live recording), and takes in the pre-skip (65535 in some files).
        lengths.append(index.first_sample + index.num_samples)
    absolute, relative = _DURATION_TOLERANCE
    if all(
        abs(n / index.timescale - duration) > max(absolute, relative * duration) for n in lengths
    ):
        return "duration"
    return None
