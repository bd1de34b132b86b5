"""Ogg Vorbis and Opus: packets cut out of the planned pages, decoded bare.

The data range starts on a page whose first packet starts there; packets are
cut by the pages' lacing values (``pages.py``) and fed to a bare decoder
whose extradata comes from the header pages. Decoders drop what they cannot
output yet (Vorbis primes with the first packet, Opus skips its pre-skip), so
the output is placed by a page's granule instead of by counting: after the
packets that end on a page with granule ``G`` have been decoded, the output
so far ends at native position ``G``. The last page is never the anchor,
because its granule may cut the stream short of what was decoded.

Every page's CRC is checked. A page that fails it is dropped with the
packets on it (and the pieces of packets it shares with its neighbours), is
counted as a bad packet, and splits the decode in two runs: the decoder
starts afresh after it, and each run is placed by a granule of its own, with
silence over what was lost, so the samples after a bad page stay in place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import av
import numpy as np

from ...index.table import SeekIndex
from ..frames import concat
from ..job import CropPlan, DecodeContext, Fetched, to_gapless, to_native
from ..packets import decode_packets
from .pages import CONTINUED, EOS, Damage, Page, checked_pages

__all__ = ["PREROLL_SECONDS", "decode"]

#: Seconds decoded before a crop and thrown away. Vorbis needs one block's
#: overlap; Opus's decoder converges slowly after a cold start (measured
#: here: max error 2e-8 against the full decode after 0.5 s).
PREROLL_SECONDS = {"vorbis": 0.05, "opus": 0.5}


def packets_by_page(data: memoryview | bytes) -> Iterator[tuple[Page | Damage, list[bytes]]]:
    """Each page of ``data`` with the packets completed on it, and each run
    of damaged bytes (with none). A packet continued past the end of
    ``data``, or into or out of damaged bytes, is dropped."""
    partial: bytes | None = b""  # None: dropping the rest of a packet whose start was lost
    for page in checked_pages(data):
        if isinstance(page, Damage):
            partial = None
            yield page, []
            continue
        if partial is None and not page.flags & CONTINUED:
            partial = b""
        done = []
        for piece, complete in page.packets():
            if partial is not None:
                partial += piece
                if complete:
                    done.append(partial)
            if complete:
                partial = b""
        yield page, done


@dataclass
class _Run:
    """Packets between damaged bytes, the decoded samples and where they go."""

    #: Each packet and the page it closes, if it is the last one completed there.
    packets: list[tuple[av.Packet, Page | None]] = field(default_factory=list)
    #: Whether damaged bytes came right before it.
    after_damage: bool = False
    pieces: list[np.ndarray] = field(default_factory=list)
    #: Native position of the first decoded sample, from a granule (None: no page tells).
    start: int | None = None


def _xiph_extradata(headers: list[bytes]) -> bytes:
    """Vorbis's three header packets in FFmpeg's Xiph-laced extradata form."""
    lacing = b"".join(b"\xff" * (len(h) // 255) + bytes([len(h) % 255]) for h in headers[:2])
    return b"\x02" + lacing + b"".join(headers)


def decode(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    headers: list[bytes] = []
    for page, done in packets_by_page(fetched.header):
        if isinstance(page, Damage):
            raise context.error("an Ogg header page fails its CRC")
        headers += done
    decoder = av.CodecContext.create(index.codec, "r")
    if index.codec == "vorbis":
        decoder.extradata = _xiph_extradata(headers[:3])
    else:
        decoder.extradata = headers[0]
    runs = _runs(fetched.data, plan, context)
    for number, run in enumerate(runs):
        if number:
            decoder.flush_buffers()  # a cold start after the damage, not its neighbours' state
        _decode_run(decoder, run, index.channels, context)
    # Damaged bytes at the very end hid the samples up to the crop's end.
    lost_end = bool(runs) and runs[-1].after_damage and not runs[-1].packets
    until = to_native(index, plan.last) if lost_end else None
    start, samples = _place(runs, plan.start_native, until, index.channels)
    if start is None:
        raise context.error("no Ogg page to place the decoded samples by")
    return samples, to_gapless(index, start)


def _runs(data: memoryview, plan: CropPlan, context: DecodeContext) -> list[_Run]:
    """The packets of ``data`` in runs split by damaged bytes (each counted)."""
    runs = [_Run()]
    for page, done in packets_by_page(data):
        if isinstance(page, Damage):
            context.bad_packet(
                "bytes that are not an Ogg page with a valid CRC", plan.data[0] + page.offset
            )
            runs.append(_Run(after_damage=True))
        elif done:
            closes: list[Page | None] = [None] * (len(done) - 1) + [page]
            runs[-1].packets += [(av.Packet(p), c) for p, c in zip(done, closes, strict=True)]
    return [run for run in runs if run.packets or run.after_damage]


def _decode_run(decoder: av.CodecContext, run: _Run, channels: int, context: DecodeContext) -> None:
    """Decode a run's packets; its start comes from the first page that
    closes a packet with a granule, other than an end-of-stream page."""
    produced = 0
    packets = [packet for packet, _ in run.packets]
    for number, samples in decode_packets(decoder, packets, context, channels=channels):
        run.pieces.append(samples)
        produced += samples.shape[1]
        page = run.packets[number][1]
        if run.start is None and page is not None and not page.flags & EOS and page.granule >= 0:
            run.start = page.granule - produced


def _place(
    runs: list[_Run], origin: int, until: int | None, channels: int
) -> tuple[int | None, np.ndarray]:
    """The runs' samples on one native timeline, silence where bytes were
    lost: (native position of the first sample, samples). A run no granule
    places follows the run before it; before any run is placed it is lost.
    Damage before the first placed run is silence from ``origin`` (where the
    planned bytes start); ``until``: silence after the last run up to there."""
    start = end = None
    out: list[np.ndarray] = []
    damaged = False
    for run in runs:
        damaged = damaged or run.after_damage
        at = run.start if run.start is not None else end
        if at is None:
            continue
        if end is None:
            start = end = origin if damaged and at > origin else at
        pieces = run.pieces
        if at < end:  # the run's first packet overlaps what is placed: keep the earlier
            pieces = _drop_front(pieces, end - at)
        elif at > end:
            out.append(np.zeros((channels, at - end), dtype=np.float32))
        out += pieces
        end = max(at, end) + sum(piece.shape[1] for piece in pieces)
    if end is not None and until is not None and until > end:
        out.append(np.zeros((channels, until - end), dtype=np.float32))
    return start, concat(out, channels)


def _drop_front(pieces: list[np.ndarray], count: int) -> list[np.ndarray]:
    """``pieces`` without their first ``count`` samples."""
    kept = []
    for piece in pieces:
        if count < piece.shape[1]:
            kept.append(piece[:, count:])
        count = max(count - piece.shape[1], 0)
    return kept
