"""One crop, end to end: index -> byte plan -> fetch -> decode -> trim -> mix -> resample.

The contract (docs/decoding.md): for an episode whose full FFmpeg decode
(gapless) is ``x``, the crop ``[start, end)`` at the native rate is
``x[:, round(start*sr) : round(end*sr)]``. With ``sample_rate``, it is the
full decode (downmixed first, with ``mono``) resampled in one pass and
sliced the same way on the target's grid, ``[round(start*target),
round(end*target))``: adjacent crops tile, whatever the rate.
A crop that runs past the end is clipped, or zero-padded with ``pad=True``.

One value carries a crop from plan to result: ``prepare`` turns an
``Episode`` and a ``CropRequest`` into a ``CropJob`` (cheap, picklable: the
episode travels without its seek points); ``fetch`` / ``afetch`` read its
planned bytes (I/O); ``decode_job`` decodes them (CPU only: it can run in a
worker process on shipped bytes) into a ``Crop``. ``read_crop`` does all
three in a row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import numbers
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import av
import numpy as np

from ..errors import CropError
from ..formats.base import Format
from ..formats.ffmpeg import full_decode_length
from ..formats.job import (
    CropPlan,
    DecodeContext,
    DecodeStats,
    Episode,
    Fetched,
    Pieces,
    Ranges,
    StaleIndex,
)
from ..formats.registry import format_for
from ..index.checks import MAX_DURATION
from ..index.content import (
    DAMAGED,
    SMALL_HEADER,
    STALE,
    STALE_SPANS,
    Check,
    crop_checks,
    mismatch,
    span_checks,
    stale,
)
from ..index.table import SeekIndex
from ..shard.blob import BlobHandle
from ..timing import record
from .fallback import FFMPEG_FAILURES, DecodeEnds, PastTheEnd, decode_range
from .plan import plan_crop
from .resample import (
    DEFAULT_QUALITY,
    check_quality,
    check_sample_rate,
    crop_span,
    downmix,
    past_the_end,
    resample,
    resampled_length,
)

__all__ = [
    "NOT_AS_PACKED",
    "PATH_FROM_THE_START",
    "PATH_GENERIC_INDEX",
    "PATH_INDEX",
    "Crop",
    "CropJob",
    "CropRequest",
    "afetch",
    "as_packed",
    "blob_sha256",
    "decode_fallback",
    "decode_job",
    "fetch",
    "hashes_to",
    "prepare",
    "read_crop",
    "read_deferred",
]

log = logging.getLogger(__name__)

_NO_POINTS = np.zeros(0, dtype=np.int64)
_NO_CRCS = np.zeros(0, dtype=np.uint32)
#: ``DecodeStats.paths`` names: which path served a crop.
PATH_INDEX, PATH_GENERIC_INDEX, PATH_FROM_THE_START = (
    "index",
    "generic index",
    "fallback from the start",
)
#: (shard, reason) pairs this process has warned about decoding without an
#: index: once each, not once per crop (a pipeline counts per crop).
_WARNED: set[tuple[str | None, str]] = set()
#: Why a crop whose index found other bytes is a ``CropError``, not a
#: fallback: the blob's bytes do not hash to ``audio_info``'s ``sha256``.
NOT_AS_PACKED = "not the bytes audio_info records"
#: Bytes of the blob hashed per read (``blob_sha256``): memory stays bounded.
HASH_CHUNK = 4 << 20
#: Blobs hashed against their recorded digest in this process, (``Episode.id``,
#: digest) -> whether they matched, the least recently used dropped first.
_CONFIRMED: OrderedDict[tuple[tuple[object, ...], bytes], bool] = OrderedDict()
_CONFIRMED_MAX = 4096
_CONFIRMING = threading.Lock()
#: Free in a forked child (a DataLoader worker), where a thread of the
#: parent's could have held it for good.
os.register_at_fork(after_in_child=_CONFIRMING._at_fork_reinit)


@dataclass
class Crop:
    """A decoded crop: float32 ``audio`` of shape ``(channels, samples)``.

    A pipeline fills in the rest: ``position``, the crop's place in its
    rank's share of the epoch (what a training loop's checkpoint records)
    and ``epoch``, that epoch;
    ``fields``, its episode's columns and its segment's fields;
    ``supervisions``, the segments that overlap it (times relative to
    ``start``); ``source``, the name of the dataset it came from."""

    audio: np.ndarray
    key: str
    start: float
    end: float
    sample_rate: int
    shard: str | None = None
    position: int | None = None
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    supervisions: list[dict[str, Any]] | None = None
    source: str | None = None
    epoch: int | None = None
    #: Zeros ``pad=True`` appended past the episode's end (samples, at the
    #: end of ``audio``): not the episode's audio (``collate``'s ``lengths``).
    padded: int = 0


@dataclass(frozen=True)
class CropRequest:
    """What the caller asked for. ``preroll`` (seconds) overrides the format's;
    ``resample_quality`` is a libsoxr preset (``resample.QUALITIES``)."""

    key: str
    start: float
    end: float
    sample_rate: int | None = None
    mono: bool = False
    pad: bool = False
    preroll: float | None = None
    resample_quality: str = DEFAULT_QUALITY

    def __post_init__(self) -> None:
        # Python floats: NumPy float32 times made every sample index of the
        # crop in float32 (up to 2 samples off an hour in), float16 overflowed.
        for name in ("start", "end"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"crop {name} must be a number of seconds, not {value!r}")
            object.__setattr__(self, name, float(value))
        if not (0 <= self.start < self.end and math.isfinite(self.end)):
            raise ValueError(
                f"crop range [{self.start}, {self.end}) needs 0 <= start < end, both finite"
            )
        if self.end > MAX_DURATION:  # 1e308 s: no audio is that long, and samples overflow
            raise ValueError(
                f"crop range [{self.start}, {self.end:g}) ends past any audio "
                f"(at most {MAX_DURATION:g} s)"
            )
        check_sample_rate(self.sample_rate)
        check_quality(self.resample_quality)


@dataclass(frozen=True)
class CropJob:
    """One planned crop: small and picklable (the episode's index travels
    without its seek points). ``plan`` is None when the episode has no usable
    index and goes through the FFmpeg fallback, for ``fallback_reason``."""

    request: CropRequest
    episode: Episode
    plan: CropPlan | None
    fallback_reason: str = ""
    #: Planned ranges sent only when the decoder asks (``Format.deferrable``).
    deferred: Ranges = ()
    #: Resampled outputs to drop from the front: the decoded range is the
    #: resampler's window (the fallback finds its own once it knows the rate).
    resample_skip: int = 0
    #: CRCs of planned bytes, as the index's blob had them
    #: (``index.content.crop_checks``): other bytes, and the crop falls back.
    checks: tuple[Check, ...] = ()
    #: CRCs of the whole spans of audio data the crop reads
    #: (``index.content.span_checks``): other bytes there are damaged data.
    span_checks: tuple[Check, ...] = ()
    #: The data range as read: the plan's, out to the ends of the spans it
    #: touches (PCM blocks, grouped seek-point intervals), so that every
    #: byte decoded is checked; empty: the plan's.
    data_read: tuple[int, int] | tuple[()] = ()

    @property
    def nbytes(self) -> int:
        """Bytes the crop reads: its plan, or the whole blob without an index."""
        if self.plan is None:
            return self.episode.blob.length
        return sum(length for _, length in self.read_ranges)

    @property
    def read_ranges(self) -> Ranges:
        """The ranges the crop reads: its plan's, the data range as read (``data_read``)."""
        assert self.plan is not None
        if not self.data_read:
            return self.plan.ranges
        return (*self.plan.header, self.data_read)

    @property
    def upfront(self) -> Ranges:
        """The ranges fetched before decoding: all but the deferred ones."""
        return tuple(r for r in self.read_ranges if r not in self.deferred)


def prepare(episode: Episode, request: CropRequest) -> CropJob:
    """Plan the crop from the episode's index (raises ``CropError`` past the
    end, or for a range that holds no sample at the rate asked for)."""
    rate = request.sample_rate
    if rate is not None and round(request.end * rate) <= round(request.start * rate):
        raise episode.error(
            f"range [{request.start}, {request.end}) s holds no sample at {rate} Hz "
            "(it is shorter than one there)"
        )
    index = episode.index
    if index is None or not index.ok:
        reason = "no seek index" if index is None else index.reason
        return CropJob(request, episode, None, fallback_reason=reason)
    form = _format(episode, index)
    first, last, skip = _native_span(index, request)
    past = _past_the_end(index, request)
    if past or first >= last:
        said = "is past the end of the episode" if past else "decodes to nothing"
        raise episode.error(f"range [{request.start}, {request.end}) s {said}")
    if request.preroll is None:
        preroll = max(form.preroll(index), index.preroll)
    else:
        preroll = round(request.preroll * index.timescale)
    with record("plan"):
        plan = form.refine_plan(index, plan_crop(index, first, last, preroll))
        if plan.point < 0 and len(index.content_crc) and _small(index.header):
            plan = plan.with_header(tuple(index.header))  # PCM: its header says it all
        checks = crop_checks(index, plan.header, plan.point)
        spans = span_checks(index, plan.data)
    light = dataclasses.replace(
        index, sample_pos=_NO_POINTS, byte_pos=_NO_POINTS, content_crc=_NO_CRCS, span_crc=_NO_CRCS
    )
    return CropJob(
        request,
        dataclasses.replace(episode, index=light),
        plan,
        deferred=form.deferrable(index, plan),
        resample_skip=skip,
        checks=checks,
        span_checks=spans.checks,
        data_read=spans.read if spans.read != plan.data else (),
    )


def _small(header: tuple[tuple[int, int], ...]) -> bool:
    return 0 < sum(length for _, length in header) <= SMALL_HEADER


def fetch(job: CropJob, *, copy: bool = False) -> Fetched:
    """The planned bytes but the deferred ones: for local shards zero-copy
    views of the memory map, or, with ``copy``, copies of them.

    A process decoding for itself (``workers=0``, ``Dataset.crop``) copies:
    the reader has just checked that the file still holds the bytes, and
    the decode then never touches the mapping, where a file truncated in
    place meanwhile would kill it with SIGBUS, no exception. A decode
    worker reads the views: such a fault kills the worker, which the pool
    replaces, and the crop's retry meets the reader's check."""
    with record("fetch"):
        return Fetched(_at(job.upfront, _read(job, job.upfront, copy)))


async def afetch(job: CropJob, *, with_deferred: bool = False) -> Fetched:
    """``fetch`` for event loops: every range in one batch through the store.

    ``with_deferred`` reads the deferred ranges in the same batch without
    handing them over: a remote store's block cache keeps them, so a decode
    worker that asks for them later (``read_deferred``) is answered without
    another round trip."""
    assert job.plan is not None
    ranges = job.read_ranges if with_deferred else job.upfront
    with record("fetch"):
        pieces = _at(ranges, await job.episode.blob.aread_ranges(ranges))
    return Fetched(tuple(p for p in pieces if (p[0], len(p[1])) not in job.deferred))


def read_deferred(job: CropJob, *, copy: bool = False) -> Pieces:
    """The job's deferred ranges, read from its blob (``copy``: as ``fetch``)."""
    return _at(job.deferred, _read(job, job.deferred, copy))


def _read(job: CropJob, ranges: Ranges, copy: bool) -> list[memoryview]:
    views = job.episode.blob.read_ranges(ranges)
    if copy and job.episode.blob.reader.mapped:
        return [memoryview(bytes(view)) for view in views]
    return views


def _at(ranges: Ranges, views: list[memoryview]) -> Pieces:
    return tuple(zip((offset for offset, _ in ranges), views, strict=True))


def decode_job(
    job: CropJob,
    fetched: Fetched,
    stats: DecodeStats,
    *,
    held_back: Callable[[], Pieces] | None = None,
    contiguous: bool = True,
) -> Crop:
    """Decode a planned crop from its fetched bytes: CPU only, no storage I/O
    unless the format asks for the deferred ranges (``held_back``; default:
    read them from the blob) or strays outside the plan (counted in ``stats``).

    Without ``contiguous`` the crop's audio may be a view into the decoded
    samples (a native-rate multichannel crop is a strided slice of them),
    for a caller that copies it anyway (a worker writing it into shared
    memory): it saves copying the whole crop once more.

    A decoder that finds the index built from other bytes than the blob's
    (``StaleIndex``), or planned bytes whose CRCs are not the ones the index
    recorded (``job.checks``; deferred ranges when they are delivered:
    ``index.content.STALE``), hands the crop to ``decode_fallback``, counted
    with that reason: never a crop from the index, and never the fallback
    either when the blob does not hash to ``audio_info``'s ``sha256``
    (``_stale``: a ``CropError``, counted as a bad packet). Bytes whose seek-point
    checks pass but whose spans (``job.span_checks``) do not are damaged:
    a ``CropError`` naming the byte range, counted as a bad packet (the
    fallback would decode the same bytes); unless the blob hashes to
    ``audio_info``'s ``sha256`` (``as_packed``): the audio is intact, the
    index another blob's (``index.content.STALE_SPANS``), and the crop goes
    to ``decode_fallback``, counted with that reason."""
    assert job.plan is not None and job.episode.index is not None
    episode, plan = job.episode, job.plan
    index = episode.index
    form = _format(episode, index)
    stats.planned_bytes += fetched.nbytes
    if stale(job.checks, fetched.pieces):
        return _stale(job, stats, STALE)
    deliver = held_back or (lambda: read_deferred(job))
    damaged = mismatch(job.span_checks, fetched.pieces)
    if damaged is not None:
        # a deferred header range (MP4's moov) may still say "stale index"
        if job.deferred and stale(job.checks, deliver()):
            return _stale(job, stats, STALE)
        if as_packed(episode):  # intact audio: the span CRCs are another blob's
            return decode_fallback(
                dataclasses.replace(job, plan=None, fallback_reason=STALE_SPANS), stats
            )
        raise _damaged(job, stats, damaged)
    fetched = _as_planned(job, fetched)

    def delivered() -> Pieces:
        pieces = deliver()
        stats.planned_bytes += sum(len(view) for _, view in pieces)
        if stale(job.checks, pieces):
            raise _ChangedContent
        return pieces

    context = DecodeContext(episode, stats, delivered, mono=job.request.mono)
    try:
        with record("decode"):
            samples, at = _decode(form, job, fetched, context)
    except StaleIndex as stale_index:
        return _stale(job, stats, stale_index.reason)
    audio = samples[:, plan.first - at : plan.last - at]
    reached_end = sum(plan.data) >= index.data_end
    if at > plan.first or (audio.shape[1] < plan.last - plan.first and not reached_end):
        raise episode.error(
            f"decoder covered samples [{at}, {at + samples.shape[1]}) "
            f"but the crop needs [{plan.first}, {plan.last})",
            plan.data[0],
        )
    return _finish(job, stats, audio, index.sample_rate, job.resample_skip, contiguous)


def _decode(
    form: Format, job: CropJob, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """``form.decode``, counted as a crop served from the index unless it
    finds the index stale; what it raises on the bytes is a ``CropError``."""
    assert job.plan is not None and job.episode.index is not None
    index = job.episode.index
    try:
        decoded = form.decode(index, job.plan, fetched, context)
    except StaleIndex:
        raise
    except CropError:
        _count_index_path(context.stats, index)
        raise
    except (ValueError, IndexError, av.FFmpegError) as exc:
        _count_index_path(context.stats, index)
        raise job.episode.error(f"cannot decode {index.codec}: {exc}", job.plan.data[0]) from exc
    _count_index_path(context.stats, index)
    return decoded


def _damaged(job: CropJob, stats: DecodeStats, damaged: Check) -> CropError:
    """The error of a crop that read a span whose bytes are not the ones
    its CRC was recorded from, counted as a bad packet and a crop through
    the index."""
    offset, length, _ = damaged
    why = f"{DAMAGED}: bytes [{offset}, {offset + length}) do not have their recorded CRC-32"
    return _bad_packet_error(job, stats, why, offset)


def _bad_packet_error(
    job: CropJob, stats: DecodeStats, why: str, offset: int | None = None
) -> CropError:
    """The ``CropError`` of a crop whose bytes are not the ones recorded for
    them, counted as a bad packet and a crop through the index."""
    assert job.episode.index is not None
    DecodeContext(job.episode, stats, lambda: ()).bad_packet(why, offset)
    _count_index_path(stats, job.episode.index)
    return job.episode.error(why, offset)


def _as_planned(job: CropJob, fetched: Fetched) -> Fetched:
    """``fetched`` with the data range as planned (``job.data_read`` may hold more)."""
    assert job.plan is not None
    if not job.data_read:
        return fetched
    start, length = job.plan.data
    at, view = fetched.pieces[-1]
    return Fetched((*fetched.pieces[:-1], (start, view[start - at : start - at + length])))


def _count_index_path(stats: DecodeStats, index: SeekIndex) -> None:
    stats.crops += 1
    stats.count_path(PATH_GENERIC_INDEX if index.container.startswith("ffmpeg:") else PATH_INDEX)


class _ChangedContent(StaleIndex):
    """Delivered bytes whose CRCs are not the ones the index recorded."""

    def __init__(self) -> None:
        Exception.__init__(self, STALE)


def _stale(job: CropJob, stats: DecodeStats, reason: str) -> Crop:
    """The crop through the exact path: its index is for other bytes.

    Other bytes than the index's are a blob rewritten after indexing (the
    audio shard packed again, its ``seek_index/`` left), or bytes that are
    not the blob's at all: damaged on disk, or a store or proxy answering
    with other bytes than asked. The fallback decodes what the store
    returns, so where ``audio_info`` records the blob's ``sha256``
    (``Episode.sha256``) the whole blob is hashed first (``as_packed``):
    the packed bytes, and the index alone is stale (the fallback, counted
    with ``reason`` as ever); other bytes, and the crop is a ``CropError``
    counted as a bad packet, as damaged data is. Every reason comes here:
    the seek-point and header CRCs (``STALE``) and the decoders'
    ``StaleIndex`` (a ``moov`` or an Ogg granule other than the index's)
    all say the bytes read differ from the ones indexed."""
    if as_packed(job.episode) is False:
        raise _not_as_packed(job, stats, reason)
    return decode_fallback(dataclasses.replace(job, plan=None, fallback_reason=reason), stats)


def blob_sha256(blob: BlobHandle) -> bytes:
    """The sha256 of a blob, read through its handle ``HASH_CHUNK`` bytes
    at a time (zero-copy views of a local shard's map)."""
    digest = hashlib.sha256()
    with record("blob_sha256"):
        for start in range(0, blob.length, HASH_CHUNK):
            digest.update(blob.read_range(start, min(HASH_CHUNK, blob.length - start)))
    return digest.digest()


def as_packed(episode: Episode) -> bool | None:
    """Whether the episode's blob reads as the bytes ``audio_info`` recorded
    the ``sha256`` of (None: none recorded; ``hashes_to``)."""
    if episode.sha256 is None:
        return None
    return hashes_to(episode.blob, episode.sha256, episode.id)


def hashes_to(blob: BlobHandle, sha256: bytes, blob_id: tuple[object, ...]) -> bool:
    """Whether ``blob`` (``Episode.id``: ``blob_id``) has the digest
    ``sha256``. Hashed once per blob and process: the verdict is kept
    (``_CONFIRMED_MAX`` blobs at most), so the crops of a stale episode
    after the first one read nothing more for it, and neither does a
    ``streamer index --verify`` row that hashed it to check ``audio_info``.
    Two threads that ask at once may both hash it."""
    key = (blob_id, sha256)
    with _CONFIRMING:
        verdict = _CONFIRMED.get(key)
        if verdict is not None:
            _CONFIRMED.move_to_end(key)
            return verdict
    verdict = blob_sha256(blob) == sha256
    with _CONFIRMING:
        _CONFIRMED[key] = verdict
        while len(_CONFIRMED) > _CONFIRMED_MAX:
            _CONFIRMED.popitem(last=False)
    return verdict


def _not_as_packed(job: CropJob, stats: DecodeStats, reason: str) -> CropError:
    """The error of a crop whose index found other bytes (``reason``) in a
    blob that does not hash to its recorded ``sha256`` either, counted as
    a bad packet and a crop through the index, as damaged data is."""
    why = (
        f"{NOT_AS_PACKED}: the blob as read does not hash to the sha256 recorded for it "
        f"(its seek index found: {reason}): damaged data, or a store returning "
        "other bytes than asked"
    )
    return _bad_packet_error(job, stats, why)


def decode_fallback(job: CropJob, stats: DecodeStats) -> Crop:
    """The episode has no usable index: FFmpeg decodes the blob from its
    first frame and the crop is cut by counting samples (exact, slower the
    later the crop: see docs/decoding.md).

    Whatever FFmpeg raises on the bytes is a ``CropError`` naming the
    episode; a store's failure stays a ``StorageError``."""
    stats.crops += 1
    stats.count_fallback(job.fallback_reason)
    stats.count_path(PATH_FROM_THE_START)
    if (job.episode.shard, job.fallback_reason) not in _WARNED:
        _WARNED.add((job.episode.shard, job.fallback_reason))
        log.warning(
            "shard %s, key %s: decoding without a seek index (%s), and not warned of again "
            "for the shard's other episodes without one for that reason: FFmpeg decodes "
            "each from its start up to the crop, reading the blob up to there; run "
            "`streamer index` on the dataset",
            job.episode.shard,
            job.episode.key,
            job.fallback_reason,
        )
    request, episode = job.request, job.episode
    with record("decode_fallback"):
        try:
            audio, rate, skip = decode_range(
                episode.blob, request.start, request.end, request.sample_rate
            )
        except DecodeEnds as ends:
            raise episode.error(
                f"range [{request.start}, {request.end}) s needs samples past the end of "
                f"FFmpeg's decode, {ends}"
            ) from ends.error
        except PastTheEnd as end:
            raise episode.error(
                f"range [{request.start}, {request.end}) s is past the end of the episode ({end})"
            ) from None
        except FFMPEG_FAILURES as exc:
            raise episode.error(
                f"FFmpeg cannot decode it without a seek index: {type(exc).__name__}: {exc}"
            ) from exc
    return _finish(job, stats, audio, rate, skip)


def read_crop(episode: Episode, request: CropRequest, stats: DecodeStats | None = None) -> Crop:
    """Decode one crop in this process: ``prepare``, ``fetch`` (copying mapped
    bytes) and ``decode_job`` in a row."""
    stats = stats if stats is not None else DecodeStats()
    job = prepare(episode, request)
    if job.plan is None:
        return decode_fallback(job, stats)
    deferred = partial(read_deferred, job, copy=True)
    return decode_job(job, fetch(job, copy=True), stats, held_back=deferred)


def _format(episode: Episode, index: SeekIndex) -> Format:
    """The format that decodes ``index``; a ``CropError`` when none does (an
    index built by a version that knew more formats)."""
    form = format_for(index)
    if form is None:
        raise episode.error(f"no decoder for {index.codec} in {index.container}")
    return form


def _native_span(index: SeekIndex, request: CropRequest) -> tuple[int, int, int]:
    """Gapless samples to decode — the crop itself, or the resampler's window —
    and how many resampled outputs to drop from the front."""
    first, last, skip = crop_span(
        request.start, request.end, index.sample_rate, request.sample_rate
    )
    if index.num_samples >= 0:
        last = min(last, full_decode_length(index))
    return first, last, skip


def _past_the_end(index: SeekIndex, request: CropRequest) -> bool:
    """Whether the episode ends at or before the crop's start (as the
    fallback says it): a crop of under half a sample before the end is
    empty, not past the end, and a resampled crop starting past the end is
    past the end although its resampler's window reaches back into the
    episode. The end is the resampled episode's for a resampled crop: its
    last samples may start past the last native one's rounding."""
    if index.num_samples < 0:
        return False
    return past_the_end(
        request.start, full_decode_length(index), index.sample_rate, request.sample_rate
    )


def _zeros_after(audio: np.ndarray, length: int) -> np.ndarray:
    """A resampler window the episode's end cut short, run out to ``length``
    with zeros: the whole pass's last outputs are those of zeros after the
    end (libsoxr flushes with them), and the window alone rounds its own
    length, one output short of the whole pass's where that length is an
    exact half (25 280 samples at 48 -> 11.025 kHz: 5 806.5)."""
    return np.pad(audio, ((0, 0), (0, length - audio.shape[1])))


def _finish(
    job: CropJob,
    stats: DecodeStats,
    audio: np.ndarray,
    rate: int,
    skip: int,
    contiguous: bool = True,
) -> Crop:
    """Downmix, resample and pad a native-rate crop into the caller's form;
    ``skip``: resampled outputs to drop from the front (``crop_span``);
    ``contiguous``: see ``decode_job``. A crop the episode's end cuts short
    is counted (``DecodeStats.past_end``): a sampler plans none from an
    exact duration, so each one is a duration that was not."""
    request = job.request
    if request.mono:
        with record("downmix"):
            audio = downmix(audio)
    out_rate = request.sample_rate or rate
    expected = round(request.end * out_rate) - round(request.start * out_rate)
    if out_rate != rate:
        first, last, _ = crop_span(request.start, request.end, rate, out_rate)
        keep = expected
        if audio.shape[1] < last - first:  # the episode ends in the window
            ends = resampled_length(first + audio.shape[1], rate, out_rate)
            keep = min(expected, ends - round(request.start * out_rate))
            audio = _zeros_after(audio, last - first)
        with record("resample"):
            audio = resample(audio, rate, out_rate, quality=request.resample_quality)
            audio = audio[:, skip : skip + max(keep, 0)]
    if audio.shape[1] == 0:
        raise job.episode.error(f"range [{request.start}, {request.end}) s decodes to nothing")
    if audio.shape[1] < expected:
        stats.past_end += 1
    padded = 0
    if request.pad and audio.shape[1] < expected:
        padded = expected - audio.shape[1]
        audio = np.pad(audio, ((0, 0), (0, padded)))
    if contiguous or audio.dtype != np.float32:
        audio = np.ascontiguousarray(audio, dtype=np.float32)
    return Crop(
        audio=audio,
        key=request.key,
        start=request.start,
        end=request.end,
        sample_rate=out_rate,
        shard=job.episode.shard,
        padded=padded,
    )
