"""Who this process is among the consumers of an epoch, and which crops it takes.

Resolution order for the rank: the Streamer's arguments, else
``torch.distributed`` when it is initialised, else the ``RANK`` /
``WORLD_SIZE`` environment variables (torchrun, SLURM wrappers), else a
single rank. The DataLoader worker comes from ``torch.utils.data.get_worker_info()``.
torch is only consulted when something already imported it.

The split, from the epoch's one global order (``order.py``):

1. ``done``: positions of the global order consumed before this pass (a
   resumed, possibly elastic, checkpoint) are left out; what remains keeps
   its order.
2. Ranks: each rank takes a contiguous run of the rest. With ``even`` (the
   default) every rank gets the same number of crops, so no rank of a
   distributed job runs out before the others and leaves a collective
   waiting: the remainder (fewer than ``world_size`` crops) is dropped, or
   with ``drop_last=False`` the last runs are filled by repeating crops
   from the start. ``even=False`` gives sizes that differ by at most one.
3. Workers: past the ``consumed`` crops a rank has already handed over,
   DataLoader workers take turns by whole batches of ``batch_size``: the
   DataLoader takes one batch from each worker in turn, starting with
   worker 0, so its batches come out in the rank's own order, whatever the
   number of workers — which is why a rank's progress is one number.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Intervals",
    "Partition",
    "Split",
    "merge_intervals",
    "resolve_partition",
]

#: Sorted, disjoint ``[first, last)`` runs of positions in an epoch's global order.
Intervals = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Partition:
    """One consumer's slot: ``slot`` of ``slots`` = rank-major, then worker."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        if not (0 <= self.rank < self.world_size and 0 <= self.worker < self.num_workers):
            raise ValueError(f"bad partition {self}: need 0 <= rank < world_size, same for workers")

    @property
    def slot(self) -> int:
        return self.rank * self.num_workers + self.worker

    @property
    def slots(self) -> int:
        return self.world_size * self.num_workers


@dataclass(frozen=True)
class Split:
    """How an epoch is divided: evenness, batch turns, and where a resume starts.

    ``done`` are global positions consumed before this pass; ``consumed``
    counts the crops of this rank's share already handed over in it.
    """

    even: bool = True
    drop_last: bool = True
    batch_size: int = 1
    done: Intervals = ()
    consumed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.consumed < 0:
            raise ValueError(f"bad split {self}: need batch_size >= 1 and consumed >= 0")

    def rank_share(self, total: int, rank: int, world_size: int) -> np.ndarray:
        """Global positions of ``rank``'s share of this pass, in order (before
        ``consumed`` is taken off)."""
        rest = _remaining(total, self.done)
        if not self.even:
            first, last = len(rest) * rank // world_size, len(rest) * (rank + 1) // world_size
            return rest[first:last]
        size = len(rest) // world_size
        if not self.drop_last and len(rest) % world_size:
            size += 1
            rest = np.resize(rest, size * world_size)  # repeats from the start
        return rest[rank * size : (rank + 1) * size]

    def dropped(self, total: int, world_size: int) -> int:
        """Crops of this pass in no rank's share: the remainder (fewer than
        ``world_size``) that ``even`` with ``drop_last`` leaves out."""
        if not (self.even and self.drop_last):
            return 0
        return len(_remaining(total, self.done)) % world_size

    def repeated(self, total: int, world_size: int) -> int:
        """Crops of this pass served twice: those ``even`` without ``drop_last``
        repeats from the start to fill the last runs (fewer than ``world_size``)."""
        if not self.even or self.drop_last:
            return 0
        return -len(_remaining(total, self.done)) % world_size

    def worker_turns(self, count: int, worker: int, num_workers: int) -> np.ndarray:
        """Indices into a rank's share (of ``count`` crops) that ``worker`` takes:
        after ``consumed``, every ``num_workers``-th batch of ``batch_size``."""
        index = np.arange(self.consumed, max(count, self.consumed), dtype=np.int64)
        turn = (index - self.consumed) // self.batch_size % num_workers
        return index[turn == worker]

    def positions(self, total: int, partition: Partition) -> tuple[np.ndarray, np.ndarray]:
        """This consumer's crops as (global positions, indices in its rank's
        share), in the order it yields them."""
        share = self.rank_share(total, partition.rank, partition.world_size)
        mine = self.worker_turns(len(share), partition.worker, partition.num_workers)
        return share[mine], mine


def merge_intervals(runs: Iterable[tuple[int, int]], positions: Sequence[int] = ()) -> Intervals:
    """``runs`` and single ``positions`` as sorted, disjoint intervals."""
    marks = [(int(a), int(b)) for a, b in runs if b > a]
    points = np.unique(np.asarray(positions, dtype=np.int64))
    if len(points):
        breaks = np.flatnonzero(np.diff(points) != 1) + 1
        marks += [(int(p[0]), int(p[-1]) + 1) for p in np.split(points, breaks)]
    merged: list[tuple[int, int]] = []
    for first, last in sorted(marks):
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return tuple(merged)


def _remaining(total: int, done: Intervals) -> np.ndarray:
    keep = np.ones(total, dtype=bool)
    for first, last in done:
        keep[first:last] = False
    return np.flatnonzero(keep)


def resolve_partition(
    rank: int | None = None,
    world_size: int | None = None,
    worker: int | None = None,
    num_workers: int | None = None,
) -> Partition:
    """The partition from the arguments, else torch.distributed / env, else DataLoader info."""
    if rank is None or world_size is None:
        found_rank, found_world = _distributed()
        rank = found_rank if rank is None else rank
        world_size = found_world if world_size is None else world_size
    if worker is None or num_workers is None:
        found_worker, found_workers = _dataloader_worker()
        worker = found_worker if worker is None else worker
        num_workers = found_workers if num_workers is None else num_workers
    return Partition(rank, world_size, worker, num_workers)


def _distributed() -> tuple[int, int]:
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return 0, 1


def _dataloader_worker() -> tuple[int, int]:
    if "torch" not in sys.modules:
        return 0, 1
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)
