"""MP4/M4A/3GP/MOV (AAC, AC-3, ALAC, AMR, E-AC-3, FLAC, mp3, Opus, Vorbis,
PCM): FFmpeg's demuxer over the planned ranges only.

The demuxer reads ``moov`` (the header ranges; its copy shows the audio
track only) and seeks natively on its own sample table, to the packet where
the pre-roll starts (``CropPlan.decode_from``; the index's seek point before
it only bounds the bytes), then demuxes the samples in the data range up to
the crop's end; everything comes from memory through a
``SparseFile``. The decoder exports what FFmpeg would trim (edit list,
iTunSMPB), so every frame comes out, placed by its timestamp: FFmpeg's pts
is the decode time less the edit's media time plus the empty edits before
it (``parse.audio_only``), which is the native position, and so the gapless
sample index when the timescale is the sample rate. AAC's decoder needs the
frames before the crop to converge (and the first frame after a cold start
is garbage), hence its pre-roll.

Open demuxers are kept per episode by the process that decodes (a decode
worker, or the caller's process), so ``moov`` (megabytes of sample tables
for a long audiobook) is parsed once per process, not once per crop. The
plan therefore leaves ``moov`` deferrable: a decoder that holds a suitable
open demuxer never asks for it; one that must open a demuxer asks through
``DecodeContext.held_back``. The decoder, unlike the demuxer, is new for
every crop: AAC's noise substitution draws from a generator that
``flush_buffers`` does not reset, so a reused decoder would make a crop
depend on the crops read before it.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import av
import numpy as np

from ...index.table import SeekIndex
from ...interrupts import interrupts_held
from ...timing import record
from ..ffmpeg import OPUS_HELD_BACK, TRIMS_MP4_END, new_decoder, open_input
from ..frames import SampleBuffer
from ..job import CropPlan, DecodeContext, Fetched, StaleIndex, decode_span, to_gapless
from ..sparse import SparseFile
from . import pcm
from .boxes import READ_THROUGH
from .parse import audio_only, mismatch

__all__ = ["PREROLL_SECONDS", "decode", "refine_plan"]

#: What identifies an episode's bytes in this process (``Episode.id``).
_Key = tuple[object, ...]


#: Seconds decoded before a crop and thrown away: AAC's decoder needs a few
#: frames to converge after a cold start; ALAC frames are independent; Vorbis
#: needs the packet before (the index's ``preroll``: its longest packet);
#: AMR converges in a time no pre-roll bounds
#: (``generic.decode.FROM_THE_START``): from the first packet; AC-3 and
#: E-AC-3 (their dither seeded per frame, ``ffmpeg.DECODER_OPTIONS``), mp3
#: and Opus as through the generic index (``generic.decode.PREROLL_SECONDS``).
PREROLL_SECONDS = {
    "aac": 0.1,
    "alac": 0.0,
    "amr_nb": math.inf,
    "amr_wb": math.inf,
    "mp3": 0.1,
    "opus": 0.5,
    "vorbis": 0.0,
    "flac": 0.0,  # its frames stand alone
    "ac3": 0.1,
    "eac3": 0.1,
    # PCM (MOV's twos, sowt, in24, ...): every frame stands alone.
    **dict.fromkeys(pcm.BYTES, 0.0),
}
#: Samples decoded before a crop at the least: an AAC packet's output is
#: overlapped with the packet before it, so decoding must start a whole
#: packet (1024 samples) before the crop's first sample. 0.1 s is less below
#: 10240 Hz (735 samples at 7350 Hz, 800 at 8 kHz): a crop starting late in
#: a packet decoded that packet first, and its samples were off by up to 0.08.
MIN_PREROLL_SAMPLES = {"aac": 1024}
#: Bytes of the first packet(s) FFmpeg's stream probe reads on open: an AAC
#: frame is well under 4 KiB; an ALAC frame (4096 samples) can reach 32 KiB;
#: a Vorbis packet of a long block, 16 KiB; a FLAC frame, up to 110 KiB
#: (4608 samples of 8 channels of 24 bits); an AC-3 frame, 3840 bytes; an
#: E-AC-3 packet, six blocks in up to six frames of up to 4096 bytes.
PROBE_BYTES = {
    "aac": 4096,
    "alac": 32768,
    "amr_nb": 4096,
    "amr_wb": 4096,
    "mp3": 4096,
    "opus": 4096,
    "vorbis": 16384,
    "flac": 131072,
    "ac3": 4096,
    "eac3": 32768,
}
#: How far before the planned seek point FFmpeg's own seek may land (it
#: searches its sample index, which can pick a few packets earlier).
SEEK_SLACK = 16384


#: ``moov`` already says everything about the stream; without these limits
#: FFmpeg's stream probing reads the first 64 KiB of sample data, outside the plan.
_NO_PROBING = {"probesize": "32", "analyzeduration": "1"}


def refine_plan(index: SeekIndex, plan: CropPlan) -> CropPlan:
    """Add the first bytes of sample data: opening a demuxer probes the first
    packet there, wherever the crop is; and, when the crop's data starts less
    than ``READ_THROUGH`` bytes after it, everything in between (FFmpeg reads
    a short forward gap instead of seeking over it). Otherwise the plan also
    holds the ``READ_THROUGH`` bytes before the data, so that a decoder that
    holds an open demuxer for the episode can reuse it: they cover the slack
    of its seek and any gap it reads through (``_reuse_lead``). A crop that
    reaches the last packet also holds what follows it when that is short
    (``_tail``). An Opus crop that ends just before a seek point reads on to
    the next (``OPUS_HELD_BACK``)."""
    if index.codec == "opus":
        plan = plan.reaching_past(index, OPUS_HELD_BACK)
    data = plan.data[0]
    start = index.data_start
    probe_end = min(start + _probe_bytes(index), index.data_end)
    tail = _tail(index) if sum(plan.data) >= index.data_end else ()
    if data - probe_end <= READ_THROUGH:
        return plan.with_header((((start, data - start),) if data > start else ()) + tail)
    lead = max(probe_end, data - READ_THROUGH)
    return plan.with_header(((start, probe_end - start), (lead, data - lead), *tail))


def _probe_bytes(index: SeekIndex) -> int:
    """``PROBE_BYTES``; PCM: a whole packet (``pcm.PACKET_FRAMES`` frames)."""
    if index.codec in pcm.BYTES:
        return pcm.PACKET_FRAMES * pcm.BYTES[index.codec] * index.channels
    return PROBE_BYTES[index.codec]


def _tail(index: SeekIndex) -> tuple[tuple[int, int], ...]:
    """The header bytes after the last packet, when they are short: past
    the last packet of a fragmented file the demuxer reads the next box
    (``mfra``) looking for another fragment."""
    end = index.data_end
    tail = tuple(
        (max(offset, end), offset + length - max(offset, end))
        for offset, length in index.header
        if offset + length > end
    )
    return tail if sum(length for _, length in tail) <= READ_THROUGH else ()


class _Demuxer(NamedTuple):
    container: Any
    source: SparseFile
    #: The native position of the demuxer's timestamp 0 (``parse.audio_only``).
    origin: int


class _Demuxers:
    """Idle open demuxers by episode, most recently used last. A demuxer is
    taken out while a crop uses it, so two threads never share one.
    Episodes are immutable, so bytes FFmpeg still buffers from an earlier
    crop are still right."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._idle: OrderedDict[_Key, _Demuxer] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: _Key) -> _Demuxer | None:
        with self._lock:
            return self._idle.pop(key, None)

    def give_back(self, key: _Key, entry: _Demuxer) -> None:
        with self._lock:
            replaced = self._idle.pop(key, None)
            if replaced is not None:  # two threads opened one each: keep the newer
                replaced[0].close()
            self._idle[key] = entry
            while len(self._idle) > self.size:
                _, oldest = self._idle.popitem(last=False)
                oldest.container.close()


_DEMUXERS = _Demuxers()
#: Free in a forked child (a DataLoader worker): a thread of the parent's
#: decoding an mp4 crop there (one a pass broken off left running) held it
#: for good.
os.register_at_fork(after_in_child=_DEMUXERS._lock._at_fork_reinit)


def _open(index: SeekIndex, fetched: Fetched, context: DecodeContext) -> _Demuxer:
    """A demuxer over the fetched bytes that sees the audio track only
    (``parse.audio_only``), and where its timestamps count from. Raises
    ``StaleIndex`` when the ``moov`` there is not the one the index was
    built from (``parse.mismatch``): its demuxer would read other packets,
    placed by another sample table, and serve other samples."""
    length = context.episode.blob.length
    source = SparseFile(length, fetched.pieces, context)
    offset, moov = _moov(source, index)
    stale = mismatch(moov, index, length)
    if stale is not None:
        raise StaleIndex(stale)
    view = audio_only(moov)
    # The edited moov comes first among pieces that start where it does.
    source.refill(((offset, memoryview(view.moov)), *fetched.pieces), context)
    with record("decoder_open"):
        container = open_input(source, format="mp4", options=_NO_PROBING)
    return _Demuxer(container, source, view.origin)


@interrupts_held()  # FFmpeg's demuxer reads through Python here
def decode(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    key = context.episode.id
    # From the first packet, a fresh demuxer: FFmpeg cannot seek before it.
    entry = _DEMUXERS.take(key) if plan.point > 0 else None
    if entry is not None and not fetched.holds(
        _reuse_lead(entry.source.tell(), index, plan), plan.data[0]
    ):
        entry.container.close()  # it would read bytes this crop did not fetch
        entry = None
    try:
        if entry is None:
            if not all(fetched.holds(offset, offset + n) for offset, n in index.header):
                fetched = fetched.adding(context.held_back())
            entry = _open(index, fetched, context)
        else:
            entry.source.refill(fetched.pieces, context)
        samples, first = _demux_decode(entry, index, plan, context)
    except BaseException:
        if entry is not None:
            entry.container.close()
        raise
    _DEMUXERS.give_back(key, entry)
    return samples, first


def _moov(source: SparseFile, index: SeekIndex) -> tuple[int, bytes]:
    """The offset and bytes of the ``moov`` box: the header range that
    starts with it (``parse`` gives it one of its own). A size of 0 is a
    last box's that runs to the end of the file, all of its range (read as
    0 bytes, every crop of such a file decoded from the start)."""
    for offset, length in index.header:
        source.seek(offset)
        head = source.read(min(length, 16))
        if head[4:8] == b"moov":
            size = int.from_bytes(head[:4]) if head[:4] != b"\0\0\0\1" else int.from_bytes(head[8:])
            size = size or length
            source.seek(offset)
            parts, left = [], min(size, length)
            while left > 0 and (part := source.read(left)):  # reads stop at a piece's end
                parts.append(part)
                left -= len(part)
            return offset, b"".join(parts)
    raise StaleIndex("no moov box where it has one")


def _reuse_lead(position: int, index: SeekIndex, plan: CropPlan) -> int:
    """Where an open demuxer that last read at ``position`` starts reading
    for this crop: up to ``SEEK_SLACK`` before the data (its seek may land a
    few packets early), or at ``position`` when it stopped shortly before
    the data (it reads the gap through)."""
    data = plan.data[0]
    lead = max(index.data_start, data - SEEK_SLACK)
    if 0 <= data - position <= READ_THROUGH:
        lead = min(lead, position)
    return lead


def _drain(decoder: av.CodecContext, index: SeekIndex, out: SampleBuffer) -> None:
    """After the track's last packet, what the decoder held back (Opus,
    ``OPUS_HELD_BACK``), where FFmpeg's full decode has it: after the last
    frame, less what FFmpeg 9 cuts from that frame (``TRIMS_MP4_END``)."""
    held = decoder.decode(None)
    if held and TRIMS_MP4_END and index.padding:
        out.truncate(out.length - round(index.padding * index.sample_rate / index.timescale))
    for frame in held:
        out.add_frame(frame)


def _fresh_decoder(template: Any) -> av.CodecContext:
    """A new decoder for the stream ``template`` decodes (the demuxer's own).

    Not the stream's decoder, flushed: ``flush_buffers`` clears AAC's overlap
    buffers but not its noise-substitution generator or SBR state, which
    would carry one crop's history into the next (the same crop read after
    different crops differed by up to 0.1). Costs about 0.45 ms for AAC,
    0.02 ms for ALAC (docs/decoding.md).
    """
    with record("decoder_open"):
        decoder = new_decoder(template.name)
        decoder.extradata = template.extradata
        decoder.sample_rate = template.sample_rate
        decoder.layout = template.layout
        # Every sample out, placed by its packet's timestamp: the trimming
        # FFmpeg does (edit list, iTunSMPB priming) is the index's first_sample.
        decoder.flags2 = av.codec.context.Flags2.skip_manual
        decoder.open()
    return decoder


def _placed_at(frame: av.AudioFrame) -> int:
    """Where a frame's samples go, in the track's timescale: its packet's
    decode time, as the index counts (``stts``). Its presentation time is
    the same but where ``ctts`` moves the first packet, as FAAC 1.28 writes
    it (no edit list, the first packet one frame later): that packet's
    output, which FFmpeg's decoder skips itself and only ``skip_manual``
    lets out, then came at the second packet's place, and every crop
    decoded from the first packet was a frame late."""
    return frame.dts if frame.dts is not None else frame.pts


def _demux_decode(
    demuxer: _Demuxer, index: SeekIndex, plan: CropPlan, context: DecodeContext
) -> tuple[np.ndarray, int]:
    container, origin = demuxer.container, demuxer.origin
    stream = container.streams.audio[0]
    if plan.point > 0:  # to the packet at or before the pre-roll: the sample table has them all
        container.seek(plan.decode_from - origin, stream=stream, backward=True, any_frame=True)
    decoder = _fresh_decoder(stream.codec_context)
    out = context.buffer(index.channels, decode_span(index, plan))
    first = None
    for packet in container.demux(stream):
        if packet.pts is None:
            continue
        try:
            frames = decoder.decode(packet)
        except (av.FFmpegError, ValueError) as exc:
            context.bad_packet(f"decoder rejected it ({exc})", packet.pos)
            continue
        for frame in frames:
            at = _placed_at(frame)
            if first is None:
                first = expected = at
            if at != expected:  # a gap: a packet failed, keep timing
                missing = to_gapless(index, at) - to_gapless(index, expected)
                out.add_silence(max(missing, 0))
            out.add_frame(frame)
            # What its packet stands for: an Opus decoder started on
            # narrowband SILK holds samples back (``OPUS_HELD_BACK``), and
            # the frame is that much shorter, not followed by a gap.
            expected = at + (
                frame.duration or round(frame.samples * index.timescale / index.sample_rate)
            )
        if first is not None and to_gapless(index, first + origin) + out.length >= plan.last:
            break  # the crop is out: later packets add samples after it
    else:
        if plan.end_native < 0:
            _drain(decoder, index, out)
    start = to_gapless(index, (first or 0) + origin)
    return out.samples(), start
