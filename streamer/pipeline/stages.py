"""The two stages the Streamer and warmup share: plan a crop, prefetch its bytes.

Planning (``plan``) reads the episode's seek index and turns the crop into
a ``CropJob`` (``decode.crop.prepare``); it is blocking (index reads may go
to the store) and runs in a thread. Prefetching (``prefetch``) fetches the
job's bytes through the store's block cache, on the store loop, for shards
that are not mapped locally: a mapped shard is read by the decode worker
from its own mapping, so nothing is copied in the parent.
"""

from __future__ import annotations

from ..dataset import Dataset
from ..decode.crop import CropJob, CropRequest, afetch, prepare
from .tasks import Failure, Task, failure_of

__all__ = ["is_mapped", "plan", "prefetch", "warm"]


def plan(dataset: Dataset, request: CropRequest) -> CropJob | Failure:
    """The crop's job, or why there is none (past the end, bad index, ...).

    Any exception is this crop's failure, not the pipeline's: a seek-index
    row that breaks the planner (an ``IndexError`` from an index without
    seek points) must cost the crops of that episode, not end the epoch.
    A ``StorageError`` stays one (``Failure.storage``)."""
    try:
        return prepare(dataset.episode(request.key), request)
    except Exception as exc:
        return failure_of(exc, request.key, _shard_name(dataset, request.key))


def _shard_name(dataset: Dataset, key: str) -> str | None:
    """The name of the shard holding ``key``, for messages (None: no such key)."""
    try:
        return dataset.locate(key)[0]
    except KeyError:
        return None


def is_mapped(job: CropJob) -> bool:
    """Whether the job's bytes are a local mapping any process reads for free."""
    return job.episode.blob.reader.mapped


async def prefetch(job: CropJob) -> Task:
    """The decode task, with the planned bytes fetched when the shard is not
    mapped locally. Without an index (no plan) the worker reads the blob
    itself, through its own store for a remote shard (``decode_fallback``
    seeks over the bytes). Deferred ranges (MP4's ``moov``) are fetched into
    the block cache but not shipped: the decoder asks for them only if it
    needs them, and is then answered from the cache."""
    if is_mapped(job) or job.plan is None:
        return Task(job)
    return Task(job, await afetch(job, with_deferred=True))


async def warm(job: CropJob, chunk: int = 16 << 20) -> int:
    """Fetch what decoding the crop will read into the block cache (no decode);
    returns the bytes. Without an index that is the whole blob."""
    blob = job.episode.blob
    if job.plan is not None:
        await blob.aread_ranges(job.read_ranges)
        return job.nbytes
    for start in range(0, blob.length, chunk):
        await blob.aread_ranges([(start, min(chunk, blob.length - start))])
    return blob.length
