"""One crop, end to end: index -> byte plan -> fetch -> decode -> trim -> mix -> resample.

The contract (docs/decoding.md): for an episode whose full FFmpeg decode
(gapless) is ``x``, the crop ``[start, end)`` at the native rate is
``x[:, round(start*sr) : round(end*sr)]``. With ``sample_rate``, it is the
full decode (downmixed first, with ``mono``) resampled in one pass and
sliced at ``round(start*target)`` for ``round((end-start)*target)`` samples.
A crop that runs past the end is clipped, or zero-padded with ``pad=True``.
"""

from __future__ import annotations

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

__all__ = ["Crop", "CropSource", "read_crop"]

log = logging.getLogger(__name__)

_CODEC_MODULES: dict[str, ModuleType] = {
    **dict.fromkeys(mp3.DECODERS, mp3),
    "flac": flac,
    "vorbis": ogg,
    "opus": ogg,
    "aac": mp4,
    "alac": mp4,
}


@dataclass
class Crop:
    """A decoded crop: float32 ``audio`` of shape ``(channels, samples)``."""

    audio: np.ndarray
    key: str
    start: float
    end: float
    sample_rate: int
    shard: str | None = None


@dataclass
class CropSource:
    """What ``read_crop`` needs of an episode: its blob and its seek index."""

    key: str
    blob: BlobHandle
    index: SeekIndex | None  # None: no seek_index/ for this episode


def read_crop(
    source: CropSource,
    start: float,
    end: float,
    *,
    sample_rate: int | None = None,
    mono: bool = False,
    pad: bool = False,
    preroll: float | None = None,
    stats: DecodeStats | None = None,
) -> Crop:
    """Decode ``[start, end)`` seconds of one episode."""
    stats = stats if stats is not None else DecodeStats()
    where = {"shard": source.blob.shard, "key": source.key}
    if not (0 <= start < end):
        raise ValueError(f"crop range [{start}, {end}) must have 0 <= start < end")
    stats.crops += 1
    index = source.index
    if index is None or not index.ok:
        reason = "no seek index" if index is None else index.reason
        stats.count_fallback(reason)
        if stats.fallback == 1:
            log.warning(
                "%s: decoding without a seek index (%s): FFmpeg seeks over the blob, "
                "reading more bytes and not sample-exact for lossy codecs; run "
                "`streamer index` on the dataset",
                source.blob.shard,
                reason,
            )
        with record("decode_fallback"):
            audio, rate = decode_range(source.blob, start, end)
        return _finish(source, audio, rate, start, end, sample_rate, mono, pad, where, None)
    rate = index.sample_rate
    first, last = _native_span(index, start, end, sample_rate)
    if first >= last:
        raise CropError(f"range [{start}, {end}) s is past the end of the episode", **where)
    module = codec_module(index, where)
    units = module.preroll(index) if preroll is None else round(preroll * index.timescale)
    with record("plan"):
        plan = plan_crop(index, first, last, units)
    stats.planned_bytes += plan.nbytes
    fetched = fetch(plan, source.blob, stats)
    with record("decode"):
        samples, at = _decode(module, index, plan, fetched, stats, where)
    audio = samples[:, first - at : last - at]
    reached_end = sum(plan.data) >= index.data_end
    if at > first or (audio.shape[1] < last - first and not reached_end):
        raise CropError(
            f"decoder covered samples [{at}, {at + samples.shape[1]}) "
            f"but the crop needs [{first}, {last})",
            **where,
        )
    return _finish(source, audio, rate, start, end, sample_rate, mono, pad, where, first)


def _native_span(index: SeekIndex, start: float, end: float, target: int | None) -> tuple[int, int]:
    """Gapless samples to decode: the crop itself, or the resampler's window."""
    rate = index.sample_rate
    if target and target != rate:
        span = window(round(start * target), round((end - start) * target), rate, target)
        first, last = span.input_first, span.input_last
    else:
        first, last = round(start * rate), round(end * rate)
    if index.num_samples >= 0:
        last = min(last, index.num_samples)
    return first, last


def codec_module(index: SeekIndex, where: dict[str, object]) -> ModuleType:
    """The module that decodes this index's codec: one per codec family."""
    if index.block_align:
        return pcm
    module = _CODEC_MODULES.get(index.codec)
    if module is None:
        raise CropError(f"no decoder for codec {index.codec!r}", **where)
    return module


def fetch(plan: CropPlan, blob: BlobHandle, stats: DecodeStats) -> Fetched:
    """Read the plan's ranges (zero-copy views for local shards)."""
    with record("fetch"):
        pieces = tuple((offset, blob.read_range(offset, length)) for offset, length in plan.ranges)
    return Fetched(
        header=b"".join(bytes(view) for _, view in pieces[:-1]),
        data=pieces[-1][1],
        pieces=pieces,
        blob_length=blob.length,
        read_unplanned=lambda offset, length: bytes(blob.read_range(offset, length)),
    )


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


def _finish(
    source: CropSource,
    audio: np.ndarray,
    rate: int,
    start: float,
    end: float,
    target: int | None,
    mono: bool,
    pad: bool,
    where: dict[str, object],
    first: int | None,
) -> Crop:
    """Downmix, resample and pad a native-rate crop into the caller's form."""
    if mono:
        with record("downmix"):
            audio = downmix(audio)
    out_rate = rate
    if target and target != rate:
        out_rate = target
        length = round((end - start) * target)
        with record("resample"):
            if first is None:  # fallback path: decoded exactly [start, end)
                audio = resample(audio, rate, target)[:, :length]
            else:
                span = window(round(start * target), length, rate, target)
                audio = resample(audio, rate, target)[:, span.skip : span.skip + length]
        expected = length
    else:
        expected = round(end * rate) - round(start * rate)
    if audio.shape[1] == 0:
        raise CropError(f"range [{start}, {end}) s decodes to nothing", **where)
    if pad and audio.shape[1] < expected:
        audio = np.pad(audio, ((0, 0), (0, expected - audio.shape[1])))
    return Crop(
        audio=np.ascontiguousarray(audio, dtype=np.float32),
        key=source.key,
        start=start,
        end=end,
        sample_rate=out_rate,
        shard=source.blob.shard,
    )


def source_for(dataset: object, key: str) -> CropSource:
    """The blob and seek index of ``key`` in a dataset (no index: ``None``)."""
    blob = dataset.blob(key)  # type: ignore[attr-defined]
    try:
        index = dataset.seek_index(key)  # type: ignore[attr-defined]
    except LayoutError:
        index = None
    return CropSource(key=key, blob=blob, index=index)
