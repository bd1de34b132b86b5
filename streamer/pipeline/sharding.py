"""Who this process is among the consumers of an epoch: rank, world size, DataLoader worker.

Resolution order for the rank: the Streamer's arguments, else
``torch.distributed`` when it is initialised, else the ``RANK`` /
``WORLD_SIZE`` environment variables (torchrun, SLURM wrappers), else a
single rank. The DataLoader worker comes from ``torch.utils.data.get_worker_info()``.
torch is only consulted when something already imported it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

__all__ = ["Partition", "resolve_partition"]


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

    def bounds(self, total: int) -> tuple[int, int]:
        """This slot's contiguous share ``[first, last)`` of ``total`` ordered crops.

        Contiguous shares keep each consumer on its own run of shards (the
        order is locality-grouped); sizes differ by at most one crop.
        """
        return total * self.slot // self.slots, total * (self.slot + 1) // self.slots


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
