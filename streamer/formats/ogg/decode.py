"""Ogg Vorbis, Opus and FLAC: packets cut out of the planned pages, decoded bare.

The data range starts on a page whose first packet starts there; packets are
cut by the pages' lacing values (``pages.py``) and fed to a bare decoder
whose extradata comes from the header pages (Opus's without its pre-skip).
Header packets among them are skipped, and a multiplexed file's other
streams' pages. Decoders drop what they cannot output yet (Vorbis primes
with the first packet), so the output is placed by a page's granule instead
of by counting: after the packets that end on a page with granule ``G`` have
been decoded, the output so far ends at native position ``G``. Opus's
decoder holds samples back instead: started on narrowband SILK packets, its
resampler keeps 24 samples (at 48 kHz) until the stream switches mode or
ends, so its output is placed by the packets' durations (TOC), which its
first sample starts before ``G``, and it is drained at the end of the audio
as FFmpeg drains it. The last page is never the anchor, because its granule
may cut the stream short of what was decoded.

A chain's links are decoded as FFmpeg decodes them, by one decoder that
carries on: each link's output is cut at its last granule and the next
link's follows it (less an Opus link's pre-skip); a link's granules count
from a base that the pages the plan brings before the data tell.

Every page's CRC is checked. A page that fails it is dropped with the
packets on it (and the pieces of packets it shares with its neighbours), is
counted as a bad packet, and splits the decode in two runs: the decoder
starts afresh after it, and each run is placed by a granule of its own, with
silence over what was lost, so the samples after a bad page stay in place.

A page whose CRC holds is also held to its granule position, as the index
held it when it was built (``parse.misplaced``): from the page that places a
run, each page's granule must be where the durations of the packets since
end. One that is not was rewritten after indexing (its CRC redone): the
index is for other bytes (``StaleIndex``), and a crop that needs the
packets from that page on is decoded by the exact path, counted, never
placed by granules its packets do not reach (``_placed``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import av
import numpy as np

from ...index.table import SeekIndex
from ..ffmpeg import new_decoder
from ..flac.parse import STREAMINFO_SIZE
from ..frames import SampleBuffer, concat
from ..job import (
    CropPlan,
    DecodeContext,
    Fetched,
    StaleIndex,
    decode_span,
    to_gapless,
    to_native,
)
from ..opus import PREROLL_SECONDS as OPUS_PREROLL
from ..packets import decode_packets, padded_packet
from ..reader import NoIndex
from .pages import BOS, CONTINUED, EOS, Damage, Page, checked_pages
from .parse import (
    AUDIO_HEADERS,
    FLAC_STREAMINFO,
    MISPLACED,
    VORBIS_PREROLL_SECONDS,
    misplaced,
    packet_durations,
)

__all__ = ["PREROLL_SECONDS", "decode"]

#: Seconds decoded before a crop and thrown away. Vorbis needs one block's
#: overlap; Opus's decoder converges slowly after a cold start (more for a
#: stream with SILK packets: the index's ``preroll``, ``opus.mode_preroll``).
PREROLL_SECONDS = {"vorbis": VORBIS_PREROLL_SECONDS, "opus": OPUS_PREROLL, "flac": 0.0}


def packets_by_page(data: memoryview | bytes) -> Iterator[tuple[Page | Damage, list[bytes]]]:
    """Each page of ``data`` with the packets completed on it, and each run
    of damaged bytes (with none). A packet continued past the end of
    ``data``, from before its start (the piece of a header that may open
    the first audio page), or into or out of damaged bytes, is dropped.

    Only the audio stream's pages come out: the stream whose first page
    opens ``data``, or whose beginning-of-stream page starts with an audio
    header (a multiplexed file's other streams, Skeleton or Theora, are
    skipped; a chain's next link takes over once its stream has begun)."""
    partial: bytes | None = None  # None: dropping the rest of a packet whose start was lost
    serial = None
    started = (
        False  # whether a page of the stream followed its first (a chain's next link may come)
    )
    for page in checked_pages(data):
        if isinstance(page, Damage):
            partial = None
            yield page, []
            continue
        opens_audio = page.flags & BOS and page.body.startswith(AUDIO_HEADERS)
        if (opens_audio and (serial is None or started)) or (
            serial is None and not page.flags & BOS
        ):
            serial, started = page.serial, False
        elif page.serial == serial:
            started = True
        if page.serial != serial:
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
    """Packets between damaged bytes or link starts, the decoded samples and
    where they go."""

    #: Each packet and the page it closes, if it is the last one completed there.
    packets: list[tuple[av.Packet, Page | None]] = field(default_factory=list)
    #: The durations of its packets as the index counts them (``packet_durations``),
    #: page by page up to the first page with a packet whose duration cannot be told.
    lengths: list[int] = field(default_factory=list)
    #: Whether damaged bytes came right before it.
    after_damage: bool = False
    #: Whether it opens a chained link met in the data: its output follows
    #: the run before's, from a decoder that carries on as FFmpeg's does.
    opens_link: bool = False
    #: Samples the full decode drops from its start (a later Opus link's pre-skip).
    skip: int = 0
    #: The link's last granule position, when the run reaches the link's end
    #: (FFmpeg trims the link's output there).
    link_end: int | None = None
    #: Whether its last page is its link's last: a link cut without its
    #: end-of-stream page ends where that page's packets decode to, whatever
    #: its granule says (``_placed`` lets it be, as the index does).
    ends_link: bool = False
    pieces: list[np.ndarray] = field(default_factory=list)
    #: Samples the decoder still held back after the run's last packet
    #: (Opus narrowband SILK): FFmpeg cuts a link's end from what came out.
    held: int = 0
    #: Granule position of the first decoded sample (None: no page tells).
    raw_start: int | None = None


def _xiph_extradata(headers: list[bytes]) -> bytes:
    """Vorbis's three header packets in FFmpeg's Xiph-laced extradata form."""
    lacing = b"".join(b"\xff" * (len(h) // 255) + bytes([len(h) % 255]) for h in headers[:2])
    return b"\x02" + lacing + b"".join(headers)


def decode(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    (link_at, link_header), *before = fetched.pieces[:-1]
    headers: list[bytes] = []
    for page, done in packets_by_page(link_header):
        if isinstance(page, Damage):
            raise context.error("an Ogg header page fails its CRC")
        headers += done
    decoder = new_decoder(index.codec)
    if index.codec == "vorbis":
        decoder.extradata = _xiph_extradata(headers[:3])
    elif index.codec == "flac":
        decoder.extradata = headers[0][FLAC_STREAMINFO : FLAC_STREAMINFO + STREAMINFO_SIZE]
    else:
        # Without its pre-skip: a decoder that starts mid-stream would drop
        # that many samples (up to 1.4 s) from wherever it starts. Output is
        # placed by granules, so samples before the full decode's are cut.
        decoder.extradata = headers[0][:10] + b"\0\0" + headers[0][12:]
    runs = _runs(index, plan, fetched.data, headers, context)
    base, counted = _anchors(index, plan, link_at, before, headers, runs, context)
    last = to_native(index, plan.last)
    # Placed by a page, the first run starts where the pre-roll does.
    placed = base is not None and counted is None and runs and not runs[0].after_damage
    if placed and not runs[0].opens_link and index.codec in ("opus", "vorbis"):
        _start_at(runs[0], plan.decode_from - base)
    # One run, the usual case, is placed as soon as a page tells where: its
    # decode stops once the crop's end is out.
    alone = len(runs) == 1 and not runs[0].after_damage and not runs[0].opens_link
    span, until = (decode_span(index, plan), (base, counted, last)) if alone else (0, None)
    to_the_end = plan.end_native < 0
    for number, run in enumerate(runs):
        if run.after_damage:
            decoder.flush_buffers()  # a cold start after the damage, not its neighbours' state
        lengths = run.lengths if index.codec == "opus" else None
        # A run of no packets (damage that ends the audio) follows a cold
        # start: its decoder holds nothing back.
        drain = lengths is not None and to_the_end and number == len(runs) - 1 and bool(run.packets)
        _decode_run(decoder, run, index.channels, context, span, until, lengths, drain)
    # Damaged bytes at the very end hid the samples up to the crop's end.
    lost_end = bool(runs) and runs[-1].after_damage and not runs[-1].packets
    start, samples = _place(
        runs,
        base,
        counted,
        plan.start_native,
        last if lost_end else None,
        context.width(index.channels),
    )
    if start is None:
        raise context.error("no Ogg page to place the decoded samples by", plan.data[0])
    return samples, to_gapless(index, start)


def _anchors(
    index: SeekIndex,
    plan: CropPlan,
    link_at: int,
    before: list[tuple[int, memoryview]],
    headers: list[bytes],
    runs: list[_Run],
    context: DecodeContext,
) -> tuple[int | None, int | None]:
    """Where the decode starts on the native timeline, as far as the plan
    tells: (native minus granule position in the first link, or None when
    unknown; native position of the first decoded sample when the data
    starts at the link's first packet, else None).

    The first link's granule positions are native ones. For a later link
    of a chain the plan brings the pages between the previous seek point and
    its own (``before``): their last granule position is where the planned
    data starts (``plan.start_native``). Without them the data starts at the
    link's first packet, whose output begins there (Opus, decoded without
    pre-skip) or after it (Vorbis, whose first packet only primes).
    """
    first_link = link_at == index.header[0][0]
    base = None
    if first_link:
        base = 0
    elif before:
        granules = [
            page.granule
            for page in checked_pages(before[0][1])
            if isinstance(page, Page) and page.granule >= 0
        ]
        if not granules:
            raise context.error("no Ogg granule position before the planned data")
        base = plan.start_native - granules[-1]
    counted = None
    if (plan.point == 0 or (not first_link and not before)) and runs and runs[0].lengths:
        # Opus: its decoder, without pre-skip, outputs from the first packet on
        offset = runs[0].lengths[0] if index.codec == "vorbis" else 0
        counted = plan.start_native + offset
    return base, counted


def _runs(
    index: SeekIndex, plan: CropPlan, data: memoryview, headers: list[bytes], context: DecodeContext
) -> list[_Run]:
    """The packets of ``data`` in runs split by damaged bytes (each counted)
    and by the links of a chain, with their durations."""
    runs = [_Run()]
    counter = packet_durations(headers)
    granule = None  # the current link's last granule position
    ended = False  # whether the last page ended its link
    for number, (page, done) in enumerate(packets_by_page(data)):
        if isinstance(page, Damage):
            context.bad_packet(
                "bytes that are not an Ogg page with a valid CRC", plan.data[0] + page.offset
            )
            runs.append(_Run(after_damage=True))
            continue
        if page.flags & BOS and number:
            # FFmpeg trims a link's output at its end-of-stream page only.
            runs[-1].link_end = granule if ended else None
            runs[-1].ends_link = True
            head = done[0] if done else b""
            skip = int.from_bytes(head[10:12], "little") if head.startswith(b"OpusHead") else 0
            runs.append(_Run(opens_link=True, skip=skip))
            granule = None
        if page.granule >= 0:
            granule = page.granule
        ended = bool(page.flags & EOS)
        if b"" in done:  # FFmpeg's demuxer refuses it; to a decoder it means "drain"
            context.bad_packet("an empty packet", plan.data[0] + page.offset)
        # Headers come before a link's audio: after it, a packet that looks
        # like one was rewritten, and is kept for ``_placed`` to find.
        opening = not runs[-1].packets
        if done := [p for p in done if p and not (opening and _is_header(index.codec, p))]:
            closes: list[Page | None] = [None] * (len(done) - 1) + [page]
            runs[-1].packets += [(padded_packet(p), c) for p, c in zip(done, closes, strict=True)]
            _count(runs[-1], done, counter.next)
    runs[-1].ends_link = sum(plan.data) >= index.data_end
    return [run for run in runs if run.packets or run.after_damage]


def _count(run: _Run, done: list[bytes], duration: Callable[[bytes], int]) -> None:
    """Add the durations of a page's packets ``done`` to the run's
    ``lengths``, unless one of theirs or of an earlier page's cannot be told."""
    if len(run.lengths) + len(done) != len(run.packets):
        return
    with contextlib.suppress(NoIndex):
        run.lengths += [duration(packet) for packet in done]


def _start_at(run: _Run, granule: int) -> None:
    """Drop the packets before the last one that starts at or before
    ``granule`` (on the link's granule timeline), up to the first page that
    places the run: a seek point is a page, about a second of packets, of
    which the pre-roll needs only those from ``granule`` on.

    A packet starts where its page's granule position less the durations of
    it and the packets after it on that page says (durations from their first
    bytes, as FFmpeg counts them). Vorbis's first packet then only primes
    the decoder, as the first packet of a page does when decoding starts at
    a seek point; the run is still placed by that page's granule."""
    placing = ((n, page) for n, (_, page) in enumerate(run.packets) if page and page.granule >= 0)
    anchor, page = next(placing, (0, None))
    if page is None or page.flags & EOS or anchor >= len(run.lengths):
        return  # (a packet whose duration cannot be told: start at the page)
    start = page.granule
    for number in range(anchor, 0, -1):
        start -= run.lengths[number]
        if start <= granule:
            del run.packets[:number]
            del run.lengths[:number]
            return


def _is_header(codec: str, packet: bytes) -> bool:
    """Whether a packet is a header, not audio: headers may share the first
    audio page, and a chain's later links bring theirs. Vorbis headers start
    with an odd byte and "vorbis" (audio packets with an even byte); an Opus
    packet cannot start with "Opus" (a TOC asking for 48 frames of 20 ms); a
    FLAC frame starts with its sync byte 0xFF, a metadata block never."""
    if codec == "flac":
        return not packet.startswith(b"\xff")
    if codec == "vorbis":
        return packet[:1] in (b"\x01", b"\x03", b"\x05") and packet[1:7] == b"vorbis"
    return packet.startswith(b"Opus")


def _decode_run(
    decoder: av.CodecContext,
    run: _Run,
    channels: int,
    context: DecodeContext,
    span: int,
    until: tuple[int | None, int | None, int] | None,
    lengths: list[int] | None = None,
    drain: bool = False,
) -> None:
    """Decode a run's packets (``span``: the samples expected); its start
    comes from the first page that closes a packet with a granule, other
    than an end-of-stream page, less what the packets up to it decode to:
    their ``lengths`` when given (Opus), else the samples output so far. A
    run that opens a link is placed after the run before it, by what came
    out (its first packets flush what the last link held back), and keeps
    the latter.

    ``until``: for a run decoded alone, ``(base, counted, last)`` as
    ``_place`` takes them and the native position the crop ends at: the
    decode stops once the run's output reaches it (later packets only add
    samples after it). ``drain``: the run ends the audio; what the decoder
    holds back is output after its last packet, as in FFmpeg's full decode.

    Only the packets the granules place (``_placed``) are decoded: a crop
    that needs more raises ``StaleIndex``."""
    out = context.buffer(channels, span)
    packets = [packet for packet, _ in run.packets]
    placed = _placed(run)
    decoded = 0  # native samples the packets decoded so far stand for (with ``lengths``)
    first = None  # the granule position the run's first packet starts at (with ``lengths``)
    last = not packets  # whether the last packet is in
    for number, _ in decode_packets(decoder, packets[:placed], context, out):
        decoded += lengths[number] if lengths is not None else 0
        last = number == len(packets) - 1
        page = run.packets[number][1]
        if page is not None and not page.flags & EOS and page.granule >= 0:
            if first is None and lengths is not None:
                first = page.granule - decoded
            if run.raw_start is None:
                by_lengths = first is not None and not run.opens_link
                run.raw_start = first if by_lengths else page.granule - out.length
        if until is not None and _reached(run, *until, out.length):
            break
    else:
        if placed < len(packets):
            raise StaleIndex(MISPLACED)
    if last and lengths is not None and not run.opens_link:
        run.held = decoded - out.length
    if drain and last:
        _drain(decoder, run, out, first, decoded)
    run.pieces.append(out.samples())


def _placed(run: _Run) -> int:
    """How many of a run's packets the granule positions place: those before
    the packets of the first page whose granule position is not where they
    end (``parse.misplaced``, counted from the page that places the run in
    ``_decode_run``) or whose durations cannot be told.

    The index holds every page but a link's last to the same rule, so in the
    bytes it was built from all are placed. A page rewritten since, its CRC
    redone (its packets zeroed, two laced as one), decodes to other lengths
    than its granule says: FFmpeg's full decode has every sample after it
    that much earlier or later than the index does, which only decoding from
    the start tells (crops through it ran short of their end, a whole Opus
    episode came out 648 samples longer than FFmpeg's decode of it)."""
    start = None  # the granule position the run's first packet starts at
    decoded = 0
    counted = 0  # packets up to the last page counted
    for number, ((_, page), length) in enumerate(zip(run.packets, run.lengths, strict=False)):
        decoded += length
        if page is None:
            continue
        ends_link = run.ends_link and number == len(run.packets) - 1
        if start is None and page.granule >= 0 and not page.flags & EOS:
            start = page.granule - decoded
        elif start is not None and not ends_link and misplaced(page, start, decoded):
            return counted
        counted = number + 1
    return counted  # ``lengths`` hold whole pages


def _drain(
    decoder: av.CodecContext, run: _Run, out: SampleBuffer, first: int | None, decoded: int
) -> None:
    """Add what the decoder held back at the end of the audio, where
    FFmpeg's full decode has it: the end-of-stream page's granule trims the
    packets' output by what they decode to past it (``first``: the granule
    their first starts at, ``decoded``: what they stand for), and the
    held-back samples follow."""
    held = decoder.decode(None)
    page = run.packets[-1][1]
    if held and first is not None and page is not None and page.flags & EOS:
        out.truncate(out.length - (decoded - (page.granule - first)))
    for frame in held:
        out.add_frame(frame)


def _reached(run: _Run, base: int | None, counted: int | None, last: int, produced: int) -> bool:
    """Whether a run decoded alone has output up to native position
    ``last``, placed as ``_place`` will place it."""
    at = counted if base is None else None
    if base is not None and run.raw_start is not None:
        at = base + run.raw_start
    return at is not None and at + produced >= last


def _place(
    runs: list[_Run],
    base: int | None,
    counted: int | None,
    origin: int,
    until: int | None,
    channels: int,
) -> tuple[int | None, np.ndarray]:
    """The runs' samples on one native timeline, silence where bytes were
    lost: (native position of the first sample, samples).

    A run is placed by its granule position plus its link's ``base``; the
    first one, when nothing else tells, at ``counted``; one that opens a
    link right after the one before it; any other follows the run before
    it (before any run is placed it is lost). A run that reaches its link's
    end is cut there. Damage before the first placed run is silence from
    ``origin`` (where the planned bytes start); ``until``: silence after the
    last run up to there."""
    start = end = None
    out: list[np.ndarray] = []
    damaged = False
    for number, run in enumerate(runs):
        damaged = damaged or run.after_damage
        if run.opens_link:
            at = end
            known = at is not None and run.raw_start is not None
            base = at - run.skip - run.raw_start if known else None  # type: ignore[operator]
        elif base is not None and run.raw_start is not None:
            at = base + run.raw_start
        elif number == 0 and counted is not None:
            at = counted
            base = None if run.raw_start is None else at - run.raw_start
        else:
            at = end
        if at is None:
            continue
        pieces = _link_output(run, at, base)
        if end is None:
            start = end = origin if damaged and at > origin else at
        if at < end:  # the run's first packet overlaps what is placed: keep the earlier
            pieces = _drop_front(pieces, end - at)
        elif at > end:
            out.append(np.zeros((channels, at - end), dtype=np.float32))
        out += pieces
        end = max(at, end) + sum(piece.shape[1] for piece in pieces)
    if end is not None and until is not None and until > end:
        out.append(np.zeros((channels, until - end), dtype=np.float32))
    return start, concat(out, channels)


def _link_output(run: _Run, at: int, base: int | None) -> list[np.ndarray]:
    """A run's samples as the full decode has them, placed at ``at``: cut
    at its link's end, without the samples FFmpeg drops at a link's start."""
    pieces = run.pieces
    if run.link_end is not None and base is not None:
        pieces = _keep_front(
            pieces, base + run.link_end - (at - (run.skip if run.opens_link else 0)) - run.held
        )
    return _drop_front(pieces, run.skip) if run.opens_link else pieces


def _drop_front(pieces: list[np.ndarray], count: int) -> list[np.ndarray]:
    """``pieces`` without their first ``count`` samples."""
    kept = []
    for piece in pieces:
        if count < piece.shape[1]:
            kept.append(piece[:, count:])
        count = max(count - piece.shape[1], 0)
    return kept


def _keep_front(pieces: list[np.ndarray], count: int) -> list[np.ndarray]:
    """The first ``count`` samples of ``pieces``."""
    kept = []
    for piece in pieces:
        if count > 0:
            kept.append(piece[:, :count])
        count -= piece.shape[1]
    return kept
