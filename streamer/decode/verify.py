"""Self-verifying indexes: an index serves crops only after passing its own check.

``verify_index`` decodes a few probe crops of one episode through the real
crop path (``prepare`` -> ``fetch`` -> ``decode_job``) with the candidate
index, and compares them sample for sample with FFmpeg's full decode (the
reference of docs/decoding.md). Its answer is the index to store:

- ``verdict="verified"``: every probe matched;
- ``verdict="verified"`` with ``preroll`` raised (2x, 4x, 8x the format's):
  a probe after a seek point differed and a longer pre-roll fixed it;
- "no index" with a short reason naming the probe (``failed its check: the
  tail crop differs (at 12.3 s, max error 0.4)``): the episode is served by
  the fallback. ``countable`` drops the parenthesis, for counting.

Decoding the whole episode would cost 5-50x building the index, so only
short episodes are decoded whole (``FULL_DECODE_SECONDS``). A long one is
checked against three references, each exact where it is used:

- head: FFmpeg decoding from the first frame for ``HEAD_SECONDS`` is the
  full decode's head, sample for sample;
- tail: FFmpeg seeking near the end and decoding to the last frame ends
  where the full decode ends; its last ``TAIL_SECONDS`` (after twice the
  pre-roll of convergence from the seek, ``_converged``) are the full
  decode's last samples, so a crop ending at the index's ``num_samples``
  must equal them, which checks the length and the placement at the end.
  Where the format offers a tail splice (``Format.tail_splice``: mp3, whose
  seek reads every frame from the start) FFmpeg decodes that instead of
  seeking, when it demuxes from it exactly the frames the splice is proven for;
- interior: a crop right after a seek point (``preroll`` after it, so the
  plan starts at that very point) against the same crop decoded through the
  index with twice the pre-roll (a converged decoder, started at an earlier
  seek point): checks the pre-roll and that the two points agree.

Head and tail come from one FFmpeg open; the windows are sized from the
format's pre-roll, so the check decodes about a second of audio per episode
(a few for Opus, whose pre-roll is long).

``choose_index`` runs the check on each of ``formats.registry.candidates``
in turn and keeps the first index that passes.

A check can also fail because the episode's bytes are damaged, not its
index: FFmpeg's reference decodes a FLAC frame or an Ogg page that fails its
CRC otherwise than a crop, whose decoder checks those CRCs and counts what
fails them (a bad packet). So when a check fails, ``check`` asks the
format for the first bytes failing a checksum of its own
(``Format.first_damage``); if there are any, the index is kept as it was
and the damage comes back with it, for the indexer to report: demoted,
the fallback would serve FFmpeg's decode of the damage without a count.
"""

from __future__ import annotations

import dataclasses
import io
import math
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import av
import numpy as np

from ..errors import DataError
from ..formats.ffmpeg import FLUSH_UNDOES_OPTIONS, full_decode_length, open_input
from ..formats.job import DecodeStats, Episode, to_gapless
from ..formats.registry import DEFAULT_DENSITY, candidates, format_for
from ..index.checks import codec_family
from ..index.table import VERIFIED, SeekIndex
from ..shard.blob import BlobHandle
from .crop import CropRequest, decode_job, fetch, prepare
from .fallback import FFMPEG_FAILURES, Cut, cut_windows

__all__ = [
    "FULL_DECODE_SECONDS",
    "PREROLL_FACTORS",
    "TOLERANCE",
    "Checked",
    "check",
    "choose_index",
    "countable",
    "first_damage",
    "verify_index",
]

#: Episodes up to this long are decoded whole for the reference.
FULL_DECODE_SECONDS = 20.0
#: Lengths of the head and tail probes and of an interior probe crop: each
#: spans several frames of every codec (a crop of a frame's length or more
#: crosses a frame or page boundary wherever it starts).
HEAD_SECONDS = 0.2
TAIL_SECONDS = 0.2
PROBE_SECONDS = 0.2
#: The shortest convergence a reference gets: FFmpeg does no pre-roll after a
#: seek, so what it outputs first after one is not compared (``_converged``).
MIN_LEAD_SECONDS = 0.1
#: Interior probes per episode (short episodes: against the full decode, which
#: the check has anyway: after every seek point at the default density, one a
#: second; four let an Ogg Opus chain's narrowband SILK link through, when
#: its crops were placed 24 samples late, for 11 keys of 26).
INTERIOR_PROBES = 2
SHORT_PROBES = 24
#: Pre-rolls tried, as multiples of the format's, when a probe after a seek point differs.
PREROLL_FACTORS = (2, 4, 8)
#: Lossy codecs: max abs error at zero lag.
TOLERANCE = 1e-4
#: AAC with noise substitution: lags searched, and the residual energy (of
#: the reference's) a crop in place may have.
AAC_MAX_LAG = 2048
AAC_RESIDUAL = 0.25
#: How FFmpeg opens a long episode for its head and tail: probing reads
#: 64 KiB and decodes nothing (the default probing costs up to 50 ms, for WAV).
#: What the decoder outputs does not depend on it; the full decode of a
#: short episode opens with the defaults, as the reference is defined.
QUICK_OPEN = {"probesize": "65536", "analyzeduration": "0"}
#: Codecs whose decode is bit-exact wherever it starts (PCM: ``block_align``).
LOSSLESS = frozenset({"flac", "alac", "wavpack", "tta", "ape", "mlp", "truehd"})


class CheckFailed(Exception):
    """A probe crop that differs from its reference; the message is the reason."""

    def __init__(self, reason: str, *, preroll_may_help: bool) -> None:
        super().__init__(reason)
        self.preroll_may_help = preroll_may_help


def countable(reason: str) -> str:
    """A "no index" reason without its details (probe time, error), for counting."""
    return reason.split(" (", 1)[0]


@dataclass(frozen=True)
class Checked:
    """The index to store for an episode, and ``damage``: when its check
    failed on bytes that fail a checksum of their own, the first of them
    (``(offset, length)`` in the blob), and ``index`` is then the index as
    it was (module docstring); ``raised``: the check passed only with a
    larger pre-roll than the index was built with."""

    index: SeekIndex
    damage: tuple[int, int] | None = None
    raised: bool = False


def choose_index(
    blob: BlobHandle,
    *,
    key: str = "",
    shard: str | None = None,
    density: float = DEFAULT_DENSITY,
    verify: bool = True,
) -> Checked:
    """The index to store for one episode: the first of its candidates that
    passes its check (without ``verify``: the first that could be built,
    "unverified"), or the first whose check failed on damaged bytes (kept
    "unverified", with the damage), or "no index" with the first failure's
    reason."""
    failure: SeekIndex | None = None
    for candidate in candidates(blob, density=density):
        if candidate.ok:
            if not verify:
                return Checked(candidate)
            checked = check(Episode(key, shard, blob, candidate))
            if checked.index.ok:
                return checked
            candidate = checked.index
        failure = failure or candidate
    return Checked(failure or SeekIndex.unavailable("no index candidate"))


def check(episode: Episode) -> Checked:
    """``verify_index``, and when the index fails its check, the episode's
    first bytes that fail a checksum of their own (``Format.first_damage``
    of the index's format, which decodes its crops): with some, the index
    is kept as it was (``Checked.damage``); without, the check's verdict
    stands. The scan reads the whole episode, so only a failed check pays
    for it."""
    checked = verify_index(episode)
    if checked.ok:
        assert episode.index is not None
        return Checked(checked, raised=checked.preroll > episode.index.preroll)
    damage = first_damage(episode)
    return Checked(checked) if damage is None else Checked(episode.index, damage)


def first_damage(episode: Episode) -> tuple[int, int] | None:
    """The episode's first frame or page failing its own checksum, by the
    format of its index (``Format.first_damage``; None: none found, or a
    format without checksums). Reads the whole episode."""
    assert episode.index is not None
    form = format_for(episode.index)
    if form is None:
        return None
    episode.blob.seek(0)
    return form.first_damage(episode.blob)


def verify_index(episode: Episode) -> SeekIndex:
    """The episode's index checked by probe crops (module docstring): verified,
    verified with a larger ``preroll``, or "no index" with the reason."""
    index = episode.index
    assert index is not None and index.ok
    form = format_for(index)
    if form is None:
        return SeekIndex.unavailable(f"no decoder for {index.codec} in {index.container}")
    base = form.preroll(index)
    tries = [index.preroll] + [base * f for f in PREROLL_FACTORS if base * f > index.preroll]
    try:
        return _first_passing(episode, tries)
    except FFMPEG_FAILURES as exc:
        return _demoted(index, f"FFmpeg cannot decode it ({type(exc).__name__})")
    except CheckFailed as exc:
        return _demoted(index, _explained(episode.blob, index, str(exc)))


def _first_passing(episode: Episode, tries: list[int]) -> SeekIndex:
    """The index with the first pre-roll of ``tries`` its check passes with;
    raises the first ``CheckFailed`` when none does (or a longer pre-roll
    cannot help)."""
    index = episode.index
    assert index is not None
    short = _claimed_samples(index) <= FULL_DECODE_SECONDS * index.sample_rate
    reference = None if short or _opus_chain(index) else _Reference.of(episode.blob, index)
    failure: CheckFailed | None = None
    for preroll in tries:
        trial = dataclasses.replace(index, preroll=preroll, verdict=VERIFIED)
        try:
            _check(dataclasses.replace(episode, index=trial), reference)
        except CheckFailed as exc:
            failure = failure or exc
            if not exc.preroll_may_help:
                break
            continue
        return trial
    assert failure is not None
    raise failure


def _opus_chain(index: SeekIndex) -> bool:
    """Whether the index is of a chained Ogg Opus stream (a header range per
    link), which is checked against its full decode however long: where the
    links meet, the decoder carries state from one to the next (a narrowband
    SILK link placed its crops 24 samples late once, docs/seek-index.md), and
    the interior probes of a long episode, whose reference goes through the
    same index, do not see an error that moves every crop alike."""
    return index.container == "ogg" and index.codec == "opus" and len(index.header) > 1


def _explained(blob: BlobHandle, index: SeekIndex, reason: str) -> str:
    """A failed check's reason, led by the codec FFmpeg decodes when it is not
    the index's: a WAV of 16-bit PCM holding S/PDIF bursts of AC-3 is AC-3 to
    FFmpeg's demuxer, and "the head crop differs" alone would not say why."""
    try:
        with _opened(blob, QUICK_OPEN) as (_, stream):
            decoded = stream.codec_context.codec.canonical_name
    except FFMPEG_FAILURES:
        return reason
    if codec_family(decoded) == codec_family(index.codec):
        return reason
    return f"FFmpeg decodes {decoded} from it, not {index.codec}: {reason}"


def _demoted(index: SeekIndex, reason: str) -> SeekIndex:
    return SeekIndex.unavailable(f"failed its check: {reason}", index.container)


@dataclass
class _Reference:
    """What FFmpeg decodes of a long episode: ``head`` is the full decode's
    first samples, ``tail`` its last ones."""

    head: np.ndarray
    tail: np.ndarray

    @classmethod
    def of(cls, blob: BlobHandle, index: SeekIndex) -> _Reference:
        """Head and tail from one FFmpeg open (``QUICK_OPEN``): the head
        decoded from the first frame, then the tail after a seek near the
        end (``_tail``; from an open of its own for a decoder a seek's
        flush would take its options from); from the start again only when
        no seek lands early enough."""
        seconds = _claimed_samples(index) / index.sample_rate
        with _opened(blob, QUICK_OPEN) as (container, stream):
            head = _cut(container.decode(stream), round(HEAD_SECONDS * index.sample_rate))
            rate = head.rate
            want = _tail_length(rate)
            tail = _spliced_tail(blob, index, want, rate, _converged(index))
            if tail is None:
                tail = _tail(blob, (container, stream), seconds, want, rate, _converged(index))
        if tail is None:
            with _opened(blob, QUICK_OPEN) as (container, stream):
                tail = _cut(container.decode(stream), None).windows[0][:, -want:]
        return cls(head.windows[0], tail)


def _claimed_samples(index: SeekIndex) -> int:
    """The episode's length as the index says under the installed FFmpeg
    (``formats.ffmpeg.full_decode_length``; its last seek point when it does not say)."""
    if index.num_samples >= 0:
        return round(full_decode_length(index) * index.sample_rate / index.timescale)
    return to_gapless(index, int(index.sample_pos[-1]))


@contextmanager
def _opened(
    blob: BlobHandle, options: dict[str, str]
) -> Iterator[tuple[av.container.InputContainer, av.audio.stream.AudioStream]]:
    """FFmpeg's container over the blob (``options``: how to open) and its
    first audio stream, the one the full decode is of."""
    blob.seek(0)
    with open_input(blob, options=options) as container:
        yield container, container.streams.audio[0]


def _cut(frames: Iterator[av.AudioFrame], enough: int | None) -> Cut:
    """The first ``enough`` samples of ``frames`` (``None``: all of them)."""
    cut = cut_windows(frames, lambda _: ([(0, enough if enough is not None else 1 << 62)], enough))
    if cut.decoded == 0:
        raise CheckFailed("FFmpeg decodes nothing", preroll_may_help=False)
    if cut.error is not None and enough is not None and cut.decoded < enough:
        raise cut.error  # a head cut short by a packet FFmpeg rejects: no reference
    return cut


def _windows(blob: BlobHandle, windows: list[tuple[int, int]]) -> tuple[list[np.ndarray], int]:
    """Samples ``[first, last)`` of the full decode for each window, and its
    length: the whole episode is decoded (opened as the reference is
    defined), but only the windows are kept, so memory stays small."""
    with _opened(blob, {}) as (container, stream):
        cut = cut_windows(container.decode(stream), lambda _: (windows, None))
    if cut.decoded == 0:
        raise CheckFailed("FFmpeg decodes nothing", preroll_may_help=False)
    return cut.windows, cut.decoded


def _tail_length(rate: int) -> int:
    return round(TAIL_SECONDS * rate)


def _tail(
    blob: BlobHandle,
    opened: tuple[av.container.InputContainer, av.audio.stream.AudioStream],
    seconds: float,
    want: int,
    rate: int,
    lead_seconds: float,
) -> np.ndarray | None:
    """The last ``want`` samples of the full decode (``seconds`` long): FFmpeg
    decodes from a seek to the end, and what it outputs in its first
    ``lead_seconds`` (no pre-roll after a seek) is dropped; a seek that lands
    too late is redone further back (``None`` when none lands early enough:
    decode from the start). ``opened``: the blob's container and stream,
    whose decoder has decoded the head; ``rate``: its output rate."""
    lead = round(lead_seconds * rate)
    back = want / rate + lead_seconds
    for target in (seconds - 2 * back, seconds - 8 * back):
        if target <= 0:
            break
        with _seekable(blob, opened) as (container, stream):
            origin = stream.start_time or 0
            container.seek(origin + int(target / stream.time_base), stream=stream)
            decoded = _cut(_after_seek(container, stream), None)
        if decoded.decoded >= want + lead:
            return decoded.windows[0][:, -want:]
    return None


def _after_seek(
    container: av.container.InputContainer, stream: av.audio.stream.AudioStream
) -> Iterator[av.AudioFrame]:
    """What FFmpeg decodes from where a seek left ``container``, less the
    packets its decoder rejects before its first frame: a seek can land
    inside a frame, and MPEG-PS (a DVD's VOB) hands the decoder the rest of
    the AC-3 or MP2 frame it lands in, which it rejects. That is part of
    the lead after a seek that is never compared (its frames are dropped
    anyway); raised, it made every long VOB "FFmpeg cannot decode it".
    Once a frame has come out, what FFmpeg raises ends the decode, as it
    ends the full decode."""
    started = False
    for packet in container.demux(stream):
        try:
            frames = packet.decode()
        except FFMPEG_FAILURES:
            if started:
                raise
            continue
        started = started or bool(frames)
        yield from frames


@contextmanager
def _seekable(
    blob: BlobHandle, opened: tuple[av.container.InputContainer, av.audio.stream.AudioStream]
) -> Iterator[tuple[av.container.InputContainer, av.audio.stream.AudioStream]]:
    """``opened`` (a container and stream whose decoder has decoded) to seek
    in, or the blob opened anew when the seek's flush would undo that
    decoder's options (``FLUSH_UNDOES_OPTIONS``: AC-3's dither seeded per
    frame)."""
    if opened[1].codec_context.name not in FLUSH_UNDOES_OPTIONS:
        yield opened
        return
    with _opened(blob, QUICK_OPEN) as fresh:
        yield fresh


def _spliced_tail(
    blob: BlobHandle, index: SeekIndex, want: int, rate: int, lead_seconds: float
) -> np.ndarray | None:
    """The last ``want`` samples of the full decode from the format's tail
    splice (``Format.tail_splice``: the file's head and its last frames),
    after ``lead_seconds`` of convergence; None when the format has none,
    or FFmpeg does not demux from it exactly the packets the splice is
    proven for (then the whole file is sought in)."""
    form = format_for(index)
    lead = round(lead_seconds * rate)
    # Native units: the window and its lead, and a second for the point to fall in.
    before = math.ceil((want + lead) * index.timescale / rate) + index.timescale
    splice = form.tail_splice(blob, index, before) if form is not None else None
    if splice is None:
        return None
    packets = 0

    def frames(container: av.container.InputContainer) -> Iterator[av.AudioFrame]:
        nonlocal packets
        for packet in container.demux(container.streams.audio[0]):
            packets += packet.size > 0
            yield from packet.decode()

    try:
        with open_input(io.BytesIO(splice.data), options=QUICK_OPEN) as container:
            cut = cut_windows(frames(container), lambda _: ([(0, 1 << 62)], None))
    except FFMPEG_FAILURES:
        return None
    if packets != splice.packets or cut.rate != rate or cut.decoded < want + lead:
        return None
    return cut.windows[0][:, -want:]


def _check(episode: Episode, reference: _Reference | None) -> None:
    """Raise ``CheckFailed`` at the first probe that differs from its
    reference (``None``: a short episode, checked against its full decode)."""
    index = episode.index
    assert index is not None
    claimed = _claimed_samples(index)
    if claimed <= 0:
        raise CheckFailed(f"claims {claimed} samples", preroll_may_help=False)
    if reference is None:
        _check_short(episode, claimed)
        return
    head = reference.head
    _compare(episode, 0, head.shape[1], head, "the head")
    tail = reference.tail
    _compare(episode, claimed - tail.shape[1], claimed, tail, "the tail")
    for first, last in _after_points(episode, INTERIOR_PROBES, claimed):
        lead_in = _lead_in(episode, first, last)
        _compare(episode, first, last, lead_in, "an interior")


def _check_short(episode: Episode, claimed: int) -> None:
    """The length, and probes at the start, after seek points and at the end,
    against the full decode."""
    index = episode.index
    assert index is not None
    rate = index.sample_rate
    inside = _after_points(episode, SHORT_PROBES, claimed)
    probes = [(0, min(claimed, round(PROBE_SECONDS * rate))), *inside]
    probes.append((max(claimed - round(TAIL_SECONDS * rate), 0), claimed))
    names = ["the head", *["an interior"] * len(inside), "the tail"]
    windows, length = _windows(episode.blob, probes)
    if index.num_samples >= 0 and claimed != length:
        raise CheckFailed(
            f"claims {claimed} samples, FFmpeg decodes {length}", preroll_may_help=False
        )
    for (first, last), want, name in zip(probes, windows, names, strict=True):
        _compare(episode, first, last, want, name)


def _after_points(episode: Episode, count: int, length: int) -> list[tuple[int, int]]:
    """``count`` probe crops (gapless ``[first, last)``), each starting the
    pre-roll after a seek point (plus a few samples) so that its plan starts at
    that very point; points drawn by a generator seeded with the key."""
    index = episode.index
    assert index is not None
    rate = index.sample_rate
    preroll = round(_preroll(index) * rate / index.timescale)
    span = round(PROBE_SECONDS * rate)
    points = np.asarray(index.sample_pos, dtype=np.float64) - index.first_sample
    starts = np.rint(points * rate / index.timescale).astype(np.int64) + preroll
    usable = np.flatnonzero((starts > 0) & (starts + span <= length))
    if len(usable) == 0:
        return []
    rng = np.random.default_rng(zlib.crc32(episode.key.encode()))
    chosen = rng.choice(usable, size=min(count, len(usable)), replace=False)
    jitter = rng.integers(0, 64, size=len(chosen))
    return [
        (int(starts[i] + j), int(min(starts[i] + j + span, length)))
        for i, j in zip(sorted(chosen), jitter, strict=True)
    ]


def _preroll(index: SeekIndex) -> int:
    """The pre-roll under test, native units: the format's, or the index's when larger."""
    form = format_for(index)
    assert form is not None
    return max(form.preroll(index), index.preroll)


def _converged(index: SeekIndex) -> float:
    """Seconds a decoder started at an arbitrary point runs before its output
    is taken as the full decode's: twice the pre-roll under test, and at
    least ``MIN_LEAD_SECONDS`` (sized from the format, so a codec with a short
    pre-roll is not decoded seconds longer than it needs)."""
    return max(MIN_LEAD_SECONDS, 2 * _preroll(index) / index.timescale)


def _lead_in(episode: Episode, first: int, last: int) -> np.ndarray:
    """The crop decoded through the index with a pre-roll of ``_converged``:
    a decoder started at an earlier seek point than the probe's, converged."""
    index = episode.index
    assert index is not None
    preroll = math.ceil(_converged(index) * index.timescale)
    longer = dataclasses.replace(episode, index=dataclasses.replace(index, preroll=preroll))
    return _crop(longer, first, last, "the lead-in of an interior")


def _crop(episode: Episode, first: int, last: int, probe: str) -> np.ndarray:
    """Gapless samples ``[first, last)`` through the real crop path. (A read
    outside the plan is served and counted there: a cost, not a wrong sample.
    A crop the decoder hands to the fallback, finding the index built from
    other bytes, fails: the fallback's exact samples say nothing of the index.)"""
    index = episode.index
    assert index is not None
    rate = index.sample_rate
    request = CropRequest(episode.key, first / rate, last / rate)
    stats = DecodeStats()
    try:
        job = prepare(episode, request)
        audio = decode_job(job, fetch(job), stats).audio
    except DataError as exc:  # CropError, or a plan outside the blob; not a store's failure
        raise CheckFailed(
            f"{probe} crop cannot be decoded (at {first / rate:.1f} s, {exc.reason})",
            preroll_may_help=False,
        ) from None
    if stats.fallback:
        raise CheckFailed(
            f"{probe} crop is not decoded from it ({next(iter(stats.fallback_reasons))})",
            preroll_may_help=False,
        )
    return audio


def _compare(episode: Episode, first: int, last: int, want: np.ndarray, probe: str) -> None:
    """Raise ``CheckFailed`` unless the crop ``[first, last)`` equals ``want``
    within the codec's tolerance (and has its length: a crop the index
    ends early, or one clipped by a ``num_samples`` too long, does not)."""
    index = episode.index
    assert index is not None
    got = _crop(episode, first, last, probe)
    at = f"at {first / index.sample_rate:.1f} s"
    may_help = first > 0
    if got.shape != want.shape:
        raise CheckFailed(
            f"{probe} crop has shape {got.shape}, not {want.shape} ({at})",
            preroll_may_help=False,
        )
    error = _max_error(got, want)
    if _lossless(index):
        if error > 0:
            raise CheckFailed(
                f"{probe} crop differs ({at}, max error {error:.2g})", preroll_may_help=may_help
            )
        return
    if error <= TOLERANCE or (index.codec == "aac" and _noise(episode, first, last, got, want)):
        return
    raise CheckFailed(
        f"{probe} crop differs ({at}, max error {error:.2g})", preroll_may_help=may_help
    )


def _max_error(got: np.ndarray, want: np.ndarray) -> float:
    """The largest absolute difference of two crops of one shape; a sample
    NaN in one and not in the other (or infinite in both, unequal) differs
    by infinity: ``NaN > 0`` is false, so a plain maximum passed a crop
    against a reference holding NaN, whatever the rest."""
    if not got.size:
        return 0.0
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.where(same, 0.0, np.abs(got.astype(np.float64) - want))
    return float(np.max(np.nan_to_num(error, nan=np.inf)))


def _lossless(index: SeekIndex) -> bool:
    return bool(index.block_align) or index.codec in LOSSLESS or index.codec.startswith("pcm_")


def _noise(episode: Episode, first: int, last: int, got: np.ndarray, want: np.ndarray) -> bool:
    """Whether an AAC probe that differs from ``want`` differs by noise
    substitution only: in place (``_in_place``), and no closer with a longer
    pre-roll. A pre-roll too short errs in place too (a decode started in
    the crop's own packet lacks its overlap: up to 0.08 at 8 kHz), but a
    longer one makes the crop exact; noise started at another packet still
    differs. The longer pre-roll is three times the one under test, which
    is neither this probe's nor its lead-in's (twice); when it reaches back
    to the first seek point, whose decode starts with the stream's noise,
    it cannot tell."""
    if not _in_place(got, want):
        return False
    index = episode.index
    assert index is not None
    longer = dataclasses.replace(index, preroll=3 * _preroll(index))
    trial = dataclasses.replace(episode, index=longer)
    rate = index.sample_rate
    job = prepare(trial, CropRequest(episode.key, first / rate, last / rate))
    if job.plan is None or job.plan.point == 0:
        return True
    again = decode_job(job, fetch(job), DecodeStats()).audio
    return _max_error(again, want) > TOLERANCE


def _in_place(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether an AAC crop that differs is still in place: AAC noise
    substitution fills bands from a random generator no seeking decoder can
    reproduce (docs/decoding.md), so such crops differ in those bands only.
    In place means the channel mean's cross-correlation with the reference
    peaks at zero lag within ``AAC_MAX_LAG`` samples (a misplaced crop peaks
    where it belongs), and the residual is at most ``AAC_RESIDUAL`` of the
    reference's energy (most of the signal agrees)."""
    g, w = got.mean(axis=0, dtype=np.float64), want.mean(axis=0, dtype=np.float64)
    energy = float(w @ w)
    if energy == 0 or float((g - w) @ (g - w)) > AAC_RESIDUAL * energy:
        return False
    lags = _cross_correlation(g, w, min(AAC_MAX_LAG, len(w) - 1))
    return int(np.argmax(lags)) == len(lags) // 2


def _cross_correlation(a: np.ndarray, b: np.ndarray, max_lag: int) -> np.ndarray:
    """``sum(a[n + lag] * b[n])`` for lag in ``[-max_lag, max_lag]`` (FFT)."""
    size = 1 << (len(a) + len(b)).bit_length()
    full = np.fft.irfft(np.fft.rfft(a, size) * np.conj(np.fft.rfft(b, size)), size)
    return np.concatenate([full[-max_lag:], full[: max_lag + 1]]) if max_lag else full[:1]
