"""One crop, end to end: index -> byte plan -> fetch -> decode -> trim -> mix -> resample.

The contract (docs/decoding.md): for an episode whose full FFmpeg decode
(gapless) is ``x``, the crop ``[start, end)`` at the native rate is
``x[:, round(start*sr) : round(end*sr)]``. With ``sample_rate``, it is the
full decode (downmixed first, with ``mono``) resampled in one pass and
sliced at ``round(start*target)`` for ``round((end-start)*target)`` samples.
A crop that runs past the end is clipped, or zero-padded with ``pad=True``.

The work splits in three so a pipeline can put each where it belongs:
``prepare`` (plan from the index; cheap), ``fetch`` / ``afetch`` (I/O) and
``decode_job`` (CPU only, no I/O: it can run in a worker process on shipped
bytes). ``read_crop`` does all three in a row.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from types import ModuleType

import av
import numpy as np

from ..errors import CropError, LayoutError
from ..index.table import SeekIndex
from ..shard.blob import BlobHandle
from ..timing import record
from . import flac, mp3, mp4, ogg, pcm
from .fallback import decode_range
from .plan import CropPlan, Fetched, plan_crop
from .resample import downmix, resample, window
from .stats import DecodeStats

__all__ = [
    "Crop",
    "CropJob",
    "CropRequest",
    "CropSource",
    "afetch",
    "decode_job",
    "fetch",
    "prepare",
    "read_crop",
    "source_for",
]

log = logging.getLogger(__name__)

_CODEC_MODULES: dict[str, ModuleType] = {
    **dict.fromkeys(mp3.DECODERS, mp3),
    "flac": flac,
    "vorbis": ogg,
    "opus": ogg,
    "aac": mp4,
    "alac": mp4,
}
_NO_POINTS = np.zeros(0, dtype=np.int64)


@dataclass
class Crop:
    """A decoded crop: float32 ``audio`` of shape ``(channels, samples)``."""

    audio: np.ndarray
    key: str
    start: float
    end: float
    sample_rate: int
    shard: str | None = None


@dataclass(frozen=True)
class CropRequest:
    """What the caller asked for. ``preroll`` (seconds) overrides the codec's."""

    key: str
    start: float
    end: float
    sample_rate: int | None = None
    mono: bool = False
    pad: bool = False
    preroll: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"crop range [{self.start}, {self.end}) needs 0 <= start < end")


@dataclass
class CropSource:
    """What ``prepare`` needs of an episode: its blob and its seek index."""

    key: str
    blob: BlobHandle
    index: SeekIndex | None  # None: no seek_index/ for this episode


@dataclass(frozen=True)
class CropJob:
    """One planned crop: small and picklable (the index travels without its
    seek points). ``plan`` is None when the episode has no usable index and
    must go through the FFmpeg fallback, for ``fallback_reason``."""

    request: CropRequest
    shard: str | None
    index: SeekIndex | None
    plan: CropPlan | None
    fallback_reason: str = ""
    #: Resampled outputs to drop from the front: the decoded range is the
    #: resampler's window (0 on the fallback path, which decodes the crop exactly).
    resample_skip: int = 0

    @property
    def where(self) -> dict[str, object]:
        return {"shard": self.shard, "key": self.request.key}


def source_for(dataset: object, key: str) -> CropSource:
    """The blob and seek index of ``key`` in a dataset (no index: ``None``)."""
    blob = dataset.blob(key)  # type: ignore[attr-defined]
    try:
        index = dataset.seek_index(key)  # type: ignore[attr-defined]
    except LayoutError:
        index = None
    return CropSource(key=key, blob=blob, index=index)


def prepare(source: CropSource, request: CropRequest, *, decoded_here: bool = True) -> CropJob:
    """Plan the crop from the episode's index (raises ``CropError`` past the end).

    ``decoded_here=False`` when another process will decode the job: the
    plan must not count on decoders this process holds open (MP4 demuxers
    that skip ``moov``)."""
    index, shard = source.index, source.blob.shard
    if index is None or not index.ok:
        reason = "no seek index" if index is None else index.reason
        return CropJob(request, shard, None, None, fallback_reason=reason)
    where = {"shard": shard, "key": request.key}
    first, last, skip = _native_span(index, request)
    if first >= last:
        raise CropError(
            f"range [{request.start}, {request.end}) s is past the end of the episode", **where
        )
    module = codec_module(index, where)
    if request.preroll is None:
        preroll = module.preroll(index)
    else:
        preroll = round(request.preroll * index.timescale)
    with record("plan"):
        plan = plan_crop(index, first, last, preroll)
        episode = (shard, request.key, source.blob.length) if decoded_here else None
        refine = getattr(module, "refine_plan", None)
        if refine is not None:
            plan = refine(index, plan, episode)
    light = dataclasses.replace(index, sample_pos=_NO_POINTS, byte_pos=_NO_POINTS)
    return CropJob(request, shard, light, plan, resample_skip=skip)


def fetch(job: CropJob, blob: BlobHandle) -> Fetched:
    """The planned bytes (zero-copy views for local shards)."""
    assert job.plan is not None
    with record("fetch"):
        views = blob.read_ranges(job.plan.ranges)
    return _fetched(job.plan, views, blob)


async def afetch(job: CropJob, blob: BlobHandle) -> Fetched:
    """``fetch`` for event loops: every range in one batch through the store."""
    assert job.plan is not None
    with record("fetch"):
        views = await blob.aread_ranges(job.plan.ranges)
    return _fetched(job.plan, views, blob)


def _fetched(plan: CropPlan, views: list[memoryview], blob: BlobHandle) -> Fetched:
    return Fetched(
        pieces=tuple(zip((offset for offset, _ in plan.ranges), views, strict=True)),
        blob_length=blob.length,
        read_unplanned=lambda offset, length: bytes(blob.read_range(offset, length)),
    )


def decode_job(job: CropJob, fetched: Fetched, stats: DecodeStats) -> Crop:
    """Decode a planned crop from its fetched bytes: CPU only, no storage I/O
    (unless the decoder strays outside the plan, which ``stats`` counts)."""
    assert job.index is not None and job.plan is not None
    index, plan = job.index, job.plan
    stats.crops += 1
    stats.planned_bytes += plan.nbytes
    module = codec_module(index, job.where)
    with record("decode"):
        samples, at = _decode(module, index, plan, fetched, stats, job.where)
    audio = samples[:, plan.first - at : plan.last - at]
    reached_end = sum(plan.data) >= index.data_end
    if at > plan.first or (audio.shape[1] < plan.last - plan.first and not reached_end):
        raise CropError(
            f"decoder covered samples [{at}, {at + samples.shape[1]}) "
            f"but the crop needs [{plan.first}, {plan.last})",
            **job.where,
        )
    return _finish(job, audio, index.sample_rate)


def decode_fallback(job: CropJob, blob: BlobHandle, stats: DecodeStats) -> Crop:
    """The episode has no usable index: FFmpeg seeks over the blob itself."""
    stats.crops += 1
    stats.count_fallback(job.fallback_reason)
    if stats.fallback == 1:
        log.warning(
            "%s: decoding without a seek index (%s): FFmpeg seeks over the blob, "
            "reading more bytes and not sample-exact for lossy codecs; run "
            "`streamer index` on the dataset",
            job.shard,
            job.fallback_reason,
        )
    with record("decode_fallback"):
        audio, rate = decode_range(blob, job.request.start, job.request.end)
    return _finish(job, audio, rate)


def read_crop(source: CropSource, request: CropRequest, stats: DecodeStats | None = None) -> Crop:
    """Decode one crop: ``prepare``, ``fetch`` and ``decode_job`` in a row."""
    stats = stats if stats is not None else DecodeStats()
    job = prepare(source, request)
    if job.plan is None:
        return decode_fallback(job, source.blob, stats)
    return decode_job(job, fetch(job, source.blob), stats)


def deferrable_header(job: CropJob) -> tuple[tuple[int, int], ...]:
    """The plan's ranges another process may turn out not to need: the
    container header of a codec whose decoders stay open across crops
    (MP4's ``moov``: megabytes for a long audiobook), or ``()``."""
    if job.plan is None or job.index is None:
        return ()
    if not hasattr(codec_module(job.index, job.where), "can_skip_header"):
        return ()
    header = tuple(job.index.header)
    return header if header and job.plan.header[: len(header)] == header else ()


def can_skip_header(job: CropJob, fetched: Fetched) -> bool:
    """Whether this process decodes the job from ``fetched`` without its
    ``deferrable_header`` (an open decoder for the episode suits the bytes)."""
    assert job.index is not None and job.plan is not None
    module = codec_module(job.index, job.where)
    return module.can_skip_header(job.index, job.plan, fetched, job.where)


def codec_module(index: SeekIndex, where: dict[str, object]) -> ModuleType:
    """The module that decodes this index's codec: one per codec family, each
    with ``preroll(index)`` and ``decode(...)``. Two hooks are optional:
    ``refine_plan(index, plan, episode)``, for codecs that need more than the
    index's plan (Ogg, MP4), and ``can_skip_header(...)``, for those whose
    decoders stay open across crops (MP4)."""
    if index.block_align:
        return pcm
    module = _CODEC_MODULES.get(index.codec)
    if module is None:
        raise CropError(f"no decoder for codec {index.codec!r}", **where)
    return module


def _native_span(index: SeekIndex, request: CropRequest) -> tuple[int, int, int]:
    """Gapless samples to decode — the crop itself, or the resampler's window —
    and how many resampled outputs to drop from the front."""
    rate, target = index.sample_rate, request.sample_rate
    skip = 0
    if target and target != rate:
        length = round((request.end - request.start) * target)
        span = window(round(request.start * target), length, rate, target)
        first, last, skip = span.input_first, span.input_last, span.skip
    else:
        first, last = round(request.start * rate), round(request.end * rate)
    if index.num_samples >= 0:
        last = min(last, index.num_samples)
    return first, last, skip


def _decode(
    module: ModuleType,
    index: SeekIndex,
    plan: CropPlan,
    fetched: Fetched,
    stats: DecodeStats,
    where: dict[str, object],
) -> tuple[np.ndarray, int]:
    """Decode the fetched bytes; returns samples and the gapless index of the first."""
    try:
        return module.decode(index, plan, fetched, stats, where)
    except CropError:
        raise
    except (ValueError, IndexError, av.FFmpegError) as exc:
        raise CropError(f"cannot decode {index.codec}: {exc}", **where) from exc


def _finish(job: CropJob, audio: np.ndarray, rate: int) -> Crop:
    """Downmix, resample and pad a native-rate crop into the caller's form."""
    request = job.request
    if request.mono:
        with record("downmix"):
            audio = downmix(audio)
    out_rate = rate
    target = request.sample_rate
    if target and target != rate:
        out_rate = target
        expected = round((request.end - request.start) * target)
        with record("resample"):
            skip = job.resample_skip
            audio = resample(audio, rate, target)[:, skip : skip + expected]
    else:
        expected = round(request.end * rate) - round(request.start * rate)
    if audio.shape[1] == 0:
        raise CropError(f"range [{request.start}, {request.end}) s decodes to nothing", **job.where)
    if request.pad and audio.shape[1] < expected:
        audio = np.pad(audio, ((0, 0), (0, expected - audio.shape[1])))
    return Crop(
        audio=np.ascontiguousarray(audio, dtype=np.float32),
        key=request.key,
        start=request.start,
        end=request.end,
        sample_rate=out_rate,
        shard=job.shard,
    )
