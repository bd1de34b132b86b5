"""Decode a planned crop of a generic index: FFmpeg's demuxer over the planned bytes.

The demuxer is opened as the indexer opened it (the header ranges are what
that reads), repositioned by *byte* at the plan's seek point (raw streams
have no timestamps to seek by, ASF's are in milliseconds; demuxers that read
by their own seek table, ``TABLE_SEEK``, by the point's timestamp: their
seek reads from the entry's byte position, the plan's start) and run up to
the seek point that ends the plan. Reads past the start of the data that the
plan does not hold are the end of the file to it (``_PlannedFile``): it
flushes what it holds and stops, so nothing past the plan is ever fetched.
Matroska and Ogg demuxers do not resume at a byte seek: they read the
header followed directly by the planned clusters or pages (``SPLICED``).

Placement counts back from the end: the samples packets ``[A, B)`` decode
to end where the full decode's samples before packet ``B`` end, the seek
point's recorded position (``CropPlan.end_native``; the episode's length
when the plan runs to the end). Counting forward from ``A`` would be wrong
for decoders whose first packet after a cold start gives nothing (Vorbis)
or a different length; the crop's pre-roll absorbs the start either way.
"""

from __future__ import annotations

import math
from typing import Any

import av
import numpy as np

from ...index.table import SeekIndex
from ...interrupts import interrupts_held
from ...timing import record
from ..frames import SampleBuffer
from ..job import CropPlan, DecodeContext, Fetched, Pieces, decode_span, to_gapless
from ..opus import PREROLL_SECONDS as OPUS_PREROLL
from ..sparse import SparseFile
from .parse import (
    BUFFER_SIZE,
    CONTAINER_PREFIX,
    OVERREAD,
    SPLICED,
    STAMPED,
    open_demuxer,
    open_spliced,
    place,
    reposition,
)

__all__ = [
    "DEFAULT_PREROLL_SECONDS",
    "FROM_THE_START",
    "PREROLL_SECONDS",
    "READ_THROUGH",
    "decode",
    "preroll_seconds",
    "refine_plan",
]

#: Seconds decoded before a crop and thrown away, per FFmpeg codec name:
#: what the decoder needs after a cold start to give the full decode's
#: samples (MDCT overlap, bit reservoir, filterbank delay, Opus's and
#: Vorbis's convergence), with a wide margin. Lossless codecs and PCM need none.
#: AC-3 and E-AC-3, their dither seeded per frame (``ffmpeg.DECODER_OPTIONS``),
#: need the frame before for its MDCT overlap: one frame (1536 samples; 256
#: per block) was exact at every point measured, and 0.1 s is at least one
#: at every rate they have (16-48 kHz), three at 48 kHz.
PREROLL_SECONDS: dict[str, float] = {
    "aac": 0.2,
    "mp2": 0.1,
    "mp3": 0.1,
    "ac3": 0.1,
    "eac3": 0.1,
    "vorbis": 0.2,
    "opus": OPUS_PREROLL,  # more with SILK packets: the index's preroll (parse)
    "wmav1": 0.2,
    "wmav2": 0.2,
    "speex": 0.2,
    "flac": 0.0,
    "alac": 0.0,
    "wavpack": 0.0,
    "tta": 0.0,
}
#: Codecs not named above: generous, and no pre-roll at all for PCM.
DEFAULT_PREROLL_SECONDS = 0.5
#: Codecs whose decoder draws noise from a generator seeded once, at the
#: stream's start (Nellymoser's noise fill; AC-3's dither is seeded per
#: frame, ``ffmpeg.DECODER_OPTIONS``), or converges after a cold start in a
#: time no pre-roll bounds (the LPC speech codecs' predictors: AMR up to
#: 4.6 s over 1e-4 on a steady tone, 1.4 s on speech; RealAudio 14.4 up to
#: 3 s; GSM 06.10 2.5 s on music; G.723.1 1 s), or never (the
#: backward-adaptive ADPCMs: Yamaha's predictor never resyncs; QuickTime IMA4 keeps
#: the decoder's full-precision predictor over a block header whose
#: truncated one matches; G.722's and G.726's adapt back, after 0.45 s and
#: more): no decoder started anywhere else reproduces the full decode, so
#: their crops decode from the first packet (exact; the cost grows with the
#: crop's position). Their kin without an encoder here to measure (G.729,
#: QCELP, EVRC, SIPR, RealAudio 28.8, iLBC, TrueSpeech, DSS) predict the
#: same way.
FROM_THE_START = frozenset(
    {"nellymoser"}
    | {"amr_nb", "amr_wb", "ra_144", "gsm", "gsm_ms", "g723_1"}
    | {"g729", "qcelp", "evrc", "sipr", "ra_288", "ilbc", "truespeech", "dss_sp"}
    | {"adpcm_yamaha", "adpcm_ima_qt", "adpcm_g722", "adpcm_g726", "adpcm_g726le"}
)
#: FFmpeg reads forward instead of seeking over a gap up to its buffer
#: (``BUFFER_SIZE``) plus its short-seek threshold (32 KiB), counted from
#: the start of what it buffered last; with a margin of one more buffer.
READ_THROUGH = 2 * BUFFER_SIZE + 32768


def refine_plan(index: SeekIndex, plan: CropPlan) -> CropPlan:
    """Add the bytes FFmpeg reads through on its way from the header to the
    data: from the end of the first header range that ends less than
    ``READ_THROUGH`` before the data, up to the data; and the bytes the last
    packet reads past the seek point ending the plan (``OVERREAD``). A
    spliced demuxer reads the header and the data as they come: nothing to add."""
    name, data = _name(index), plan.data[0]
    if name in SPLICED:
        return plan
    ends = [offset + n for offset, n in index.header if 0 < data - (offset + n) <= READ_THROUGH]
    plan = plan.with_header(((min(ends), data - min(ends)),) if ends else ())
    if name in OVERREAD and plan.end_native >= 0:
        plan = plan.with_header(((sum(plan.data), OVERREAD[name]),))
    return plan


def preroll_seconds(codec: str) -> float:
    """The pre-roll for ``codec`` (infinite: from the first packet)."""
    if codec in FROM_THE_START:
        return math.inf
    if codec.startswith("pcm_"):
        return 0.0
    return PREROLL_SECONDS.get(codec, DEFAULT_PREROLL_SECONDS)


class _PlannedFile(SparseFile):
    """The planned ranges; a read at or past ``horizon`` (the data's start)
    outside them is the end of the file, one before it an unplanned read."""

    def __init__(self, length: int, pieces: Pieces, context: DecodeContext, horizon: int) -> None:
        super().__init__(length, pieces, context)
        self._horizon = horizon

    def _unplanned(self, position: int, size: int) -> bytes:
        if position >= self._horizon:
            return b""
        return super()._unplanned(position, size)


@interrupts_held()  # FFmpeg's demuxer reads through Python here
def decode(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    name = _name(index)
    start, stop = plan.data[0], sum(plan.data)
    to_the_end = plan.end_native < 0
    with record("decoder_open"):
        if name in SPLICED:
            container = open_spliced(fetched.header, bytes(fetched.data), name)
        else:
            # The file as indexed: it ends at ``data_end`` where FFmpeg's decode ends early (parse).
            length = min(index.data_end, context.episode.blob.length)
            source = _PlannedFile(length, fetched.pieces, context, start)
            container = open_demuxer(source, name)
    with container:
        if name not in SPLICED and start > index.data_start:
            reposition(container, name, start, plan.start_native)
        limit = None if name in SPLICED or to_the_end else stop
        if name in STAMPED and not to_the_end:
            limit = plan.end_native
        out = context.buffer(index.channels, decode_span(index, plan))
        _demux_decode(container, name, out, limit, to_the_end, context)
        samples = out.samples()
    if not to_the_end:
        end = to_gapless(index, plan.end_native)
    else:  # what a decoder started at a seek point misses of the end trimming
        end = index.num_samples + (index.padding if start > index.data_start else 0)
    return samples, end - samples.shape[1]


def _name(index: SeekIndex) -> str:
    """FFmpeg's demuxer name for ``index``."""
    return index.container.removeprefix(CONTAINER_PREFIX)


def _demux_decode(
    container: Any,
    name: str,
    out: SampleBuffer,
    stop: int | None,
    flush: bool,
    context: DecodeContext,
) -> None:
    """Decode into ``out`` the packets from where the demuxer is to
    ``stop``, a packet's ``place`` (None: to the end), with what the decoder
    holds if ``flush``.

    A packet the decoder rejects is counted and everything decoded before it
    dropped: counting back from the end, those samples have no known place."""
    stream = container.streams.audio[0]
    decoder = stream.codec_context
    for packet in container.demux(stream):
        if packet.size == 0:  # the end of the file (or of the plan)
            if flush:
                for frame in decoder.decode(None):
                    out.add_frame(frame)
            continue
        at = place(packet, name)
        if stop is not None and at is not None and at >= stop:
            break
        try:
            frames = decoder.decode(packet)
        except (av.FFmpegError, ValueError) as exc:
            context.bad_packet(f"decoder rejected it ({exc})", packet.pos)
            out.truncate(0)
            continue
        for frame in frames:
            out.add_frame(frame)
