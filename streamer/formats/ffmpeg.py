"""How streamer opens bytes with FFmpeg: the one place its open policy lives.

Every open of an episode's bytes (indexing, decoding, checking, the
fallback, ``pack``'s probe) goes through ``open_input``, so they all see the
same stream. Tags that are not UTF-8 (a Latin-1 ID3v1 title, a BWF ``bext``
field) are ignored: PyAV before 19 would otherwise refuse the whole file
over them, although FFmpeg decodes its audio (``metadata_errors``). PyAV 19
has no such option: it reads every tag with ``surrogateescape`` and never
refuses a file over one.

It also holds the options every decoder of a codec is opened with
(``DECODER_OPTIONS``): ``open_input`` sets them on each audio stream's
decoder, and ``new_decoder`` on one made by hand, so the full decode (the
reference), the crops, the fallback and the checks all decode alike.

It also holds what differs between the FFmpeg builds PyAV bundles where it
matters to the full decode (docs/decoding.md, "the reference"): an index
stores the file's facts, the same under every FFmpeg, and
``full_decode_length`` applies the installed one's policy to them. Where
the index cannot say the length under every FFmpeg (a generic index; an
``iTunSMPB`` tag inside an MP4 track, which FFmpeg 9 reads in another time
base), it records the FFmpeg it was built and checked under
(``LENGTH_POLICY``), and ``policy_problem`` keeps it from serving crops
under another one: they fall back, exact.
"""

from __future__ import annotations

from typing import Any

import av

from ..index.table import SeekIndex

__all__ = [
    "DECODER_OPTIONS",
    "FLUSH_UNDOES_OPTIONS",
    "LENGTH_POLICY",
    "OPUS_HELD_BACK",
    "TRIMS_MP4_END",
    "decode_length",
    "full_decode_length",
    "new_decoder",
    "open_input",
    "policy_problem",
]


#: How to tell the installed PyAV to ignore tags that are not UTF-8.
_TAGS = {"metadata_errors": "ignore"} if int(av.__version__.split(".")[0]) < 19 else {}


#: Decoder options per FFmpeg decoder name, part of the reference
#: (docs/decoding.md). AC-3's and E-AC-3's decoders fill zero-bit mantissas
#: with dither drawn from a generator seeded once, at the stream's start, so
#: by default no decode started anywhere else meets the full decode (0.002
#: to 0.03 off); ``cons_noisegen`` seeds it from each frame's own bytes
#: instead, and a decode started one frame before a crop gives the full
#: decode's samples bit for bit (measured at every 40th frame of a minute of
#: quiet tones and noise, raw, MP4 and Matroska, FFmpeg 8 and 9).
DECODER_OPTIONS: dict[str, dict[str, str]] = {
    "ac3": {"cons_noisegen": "1"},
    "eac3": {"cons_noisegen": "1"},
}


#: Decoders whose ``DECODER_OPTIONS`` a flush undoes: FFmpeg's AC-3 and
#: E-AC-3 decoders, flushed by a seek after they have decoded, dither from
#: the generator seeded at their start again (0.02-0.15 off the reference
#: after the seek; sought before their first packet they are exact). A decoder of
#: these that has decoded is not sought with: open the input anew.
FLUSH_UNDOES_OPTIONS = frozenset({"ac3", "eac3"})


def open_input(source: Any, **options: Any) -> av.container.InputContainer:
    """``av.open(source, "r", **options)`` with undecodable tags ignored, and
    each audio stream's decoder given its ``DECODER_OPTIONS`` (and, where
    PyAV 18 would free its channel layout twice, relabelled: ``_own_layout``)."""
    container: av.container.InputContainer = av.open(source, "r", **_TAGS, **options)
    for stream in container.streams.audio:
        if stream.codec_context is not None:
            _configure(stream.codec_context)
            if _SHARES_LAYOUTS:
                _own_layout(stream.codec_context)
    return container


def new_decoder(name: str) -> av.CodecContext:
    """A new decoder (not yet open) for FFmpeg's decoder ``name``, with its
    ``DECODER_OPTIONS``: every decoder streamer makes by hand is made here."""
    decoder = av.CodecContext.create(name, "r")
    _configure(decoder)
    return decoder


def _configure(context: Any) -> None:
    """``DECODER_OPTIONS`` onto a decoder, before it opens."""
    wanted = DECODER_OPTIONS.get(context.name)
    if wanted:
        context.options = {**context.options, **wanted}


#: PyAV 18's ``AudioLayout`` frees its channel map when it dies but takes
#: none of its own: the one a codec context's ``layout`` (or ``channels``)
#: or a decoded frame's gives shares theirs. A layout with a map (a custom
#: channel order: a CAF, AIFF or MP4 ``chan`` chunk listing its channels in
#: another order than FFmpeg's) is then freed twice and the process aborts
#: ("double free or corruption"). PyAV 19 copies.
_SHARES_LAYOUTS = int(av.__version__.split(".")[0]) == 18


def _own_layout(context: Any) -> None:
    """Give a decoder whose channel layout holds a map (custom order,
    ambisonic) FFmpeg's default layout of as many channels before it opens:
    PCM decoders (AIFF, CAF) label their frames with it, so none shares a
    map. Only the label changes: the channels are decoded in the file's
    order, as they were. The context's map is freed once, when the copy
    that shares it dies after the context has let go of it."""
    shared = context.layout
    count = shared.nb_channels
    if count and shared.name.startswith((f"{count} channels (", "ambisonic")):
        context.layout = f"{count}c"


#: Samples (48 kHz) FFmpeg's Opus decoder may hold back: started on
#: narrowband SILK packets (a cold start: the stream's first, after a seek,
#: after CELT), its resampler keeps 24 until the stream turns to another mode
#: or bandwidth, or the decoder is drained. Its first frame is that much
#: shorter than its packet, so output is placed by packet durations, not
#: counted, and a crop ending closer than this to where its planned data
#: ends reads on to the next seek point (``CropPlan.reaching_past``); one
#: 20 ms frame, with room for another FFmpeg's resampler (docs/decoding.md).
OPUS_HELD_BACK = 960

#: Whether FFmpeg's MP4 demuxer cuts into a track's last frame (FFmpeg 9,
#: libavformat 63, in PyAV 19) rather than leaving the decoder's every
#: sample of it (FFmpeg 8 and before). How much it cuts depends on the codec
#: (measured under both, docs/decoding.md): AAC and mp3, whose frame length
#: it knows, to where the sample table or edit list ends the track; ALAC,
#: Opus, AMR and Vorbis only by what the last packet's stts duration runs
#: past the edit list's end; and an AAC track's ``iTunSMPB`` end padding,
#: from there. The index's ``num_samples`` counts FFmpeg 8's decode and its
#: ``padding`` what FFmpeg 9 cuts off, per codec (``mp4.parse``), so the
#: stored index is the same under both; ``full_decode_length`` applies the
#: installed one.
TRIMS_MP4_END = av.library_versions["libavformat"] >= (63,)


def full_decode_length(index: SeekIndex) -> int:
    """Native units the installed FFmpeg's full decode has, so the length of
    the episode crops are served from: the index's ``num_samples``, less its
    ``padding`` (what FFmpeg 9 cuts, for the track's codec) for MP4 under an
    FFmpeg that cuts into the last frame (-1: unknown)."""
    return decode_length(index.container, index.num_samples, index.padding)


def decode_length(container: str, num_samples: int, padding: int) -> int:
    """``full_decode_length`` from an index's fields (a stored row's columns)."""
    if container == "mp4" and TRIMS_MP4_END and num_samples >= 0:
        return max(num_samples - padding, 0)
    return num_samples


#: The installed FFmpeg, as an index that holds under it only records it
#: (``SeekIndex.length_policy``): its libavformat major version, where the
#: demuxers' trimming and timestamp rules live. Generic indexes (FFmpeg's
#: demuxer placed their points) and MP4 AAC tracks with an ``iTunSMPB`` tag
#: whose end FFmpeg 9 cuts by rules not measured (a tag inside the track,
#: several tags, fragments, empty edits, a truncated table) carry it.
LENGTH_POLICY = f"libavformat {av.library_versions['libavformat'][0]}"


def policy_problem(index: SeekIndex) -> str | None:
    """Why an index cannot serve crops under the installed FFmpeg (None: it
    can): it was checked under another FFmpeg only, whose demuxer may place
    samples or end the stream otherwise (a crop near the end could run
    past this one's full decode)."""
    if not index.ok or not index.length_policy or index.length_policy == LENGTH_POLICY:
        return None
    return (
        f"index checked under another FFmpeg ({index.length_policy}, not "
        f"{LENGTH_POLICY}: rebuild with `streamer index --force`)"
    )
