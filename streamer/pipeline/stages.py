"""The two stages the Streamer and warmup share: plan a crop, prefetch its bytes.

Planning (``plan``) reads the episode's seek index and turns the crop into
a byte plan (``decode.crop.prepare``); it is blocking (index reads may go to
the store) and runs in a thread. Prefetching (``prefetch``) fetches the
plan's bytes through the store's block cache, on the store loop, for remote
shards only: a local shard is read by the decode worker from its own
mapping, so nothing is copied in the parent.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dataset.dataset import Dataset
from ..decode.crop import CropJob, CropRequest, afetch, deferrable_header, prepare, source_for
from ..errors import StreamerError
from ..shard.blob import BlobHandle
from .tasks import BlobRef, Failure, Pieces, Task

__all__ = ["Planned", "plan", "prefetch", "warm"]


@dataclass(frozen=True)
class Planned:
    """A planned crop: the job and the episode's blob handle."""

    job: CropJob
    blob: BlobHandle

    @property
    def nbytes(self) -> int:
        """Bytes the crop reads: its plan, or the whole blob without an index."""
        return self.job.plan.nbytes if self.job.plan is not None else self.blob.length

    @property
    def is_local(self) -> bool:
        return BlobRef.of(self.blob).is_local


def plan(dataset: Dataset, request: CropRequest, *, decoded_here: bool) -> Planned | Failure:
    """The crop's byte plan, or why there is none (past the end, bad index, ...);
    ``decoded_here``: whether this process decodes it (no worker processes)."""
    try:
        source = source_for(dataset, request.key)
        return Planned(prepare(source, request, decoded_here=decoded_here), source.blob)
    except (StreamerError, KeyError) as exc:
        return Failure.of(exc, request.key)


async def prefetch(planned: Planned, *, ship: bool) -> tuple[Task, Pieces]:
    """The decode task, with the planned bytes fetched when the shard is
    remote, and the pieces it holds back.

    Without an index (no plan) the worker reads the blob itself, through its
    own store for a remote shard (``decode_fallback`` seeks over the bytes).
    When the task is shipped to a worker process (``ship``), a header the
    worker may already hold parsed (MP4's ``moov``) stays here until the
    worker asks for it (``tasks.Task.held_back``).
    """
    ref = BlobRef.of(planned.blob)
    if ref.is_local or planned.job.plan is None:
        return Task(planned.job, ref), ()
    fetched = await afetch(planned.job, planned.blob)
    header = deferrable_header(planned.job) if ship else ()
    if not header:
        return Task(planned.job, ref, fetched), ()
    shipped, held = fetched.holding_back(header)
    return Task(planned.job, ref, shipped, held_back=header), held


async def warm(planned: Planned, chunk: int = 16 << 20) -> int:
    """Fetch what decoding the crop will read into the block cache (no decode);
    returns the bytes. Without an index that is the whole blob."""
    if planned.job.plan is not None:
        await afetch(planned.job, planned.blob)
        return planned.job.plan.nbytes
    length = planned.blob.length
    for start in range(0, length, chunk):
        await planned.blob.aread_ranges([(start, min(chunk, length - start))])
    return length
