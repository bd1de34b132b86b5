"""PyTorch adapters: ``CropDataset`` (an ``IterableDataset`` over a Streamer) and ``collate``.

Only this module imports torch (the ``torch`` extra); the rest of streamer
works with numpy alone. Inside a DataLoader worker the Streamer takes that
worker's share of the epoch (``torch.utils.data.get_worker_info()``) and
decodes in the worker itself (``workers=0``): the DataLoader's processes are
the decode processes, none are nested under them unless ``workers`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .decode.crop import Crop
from .pipeline.samplers import Sampler
from .pipeline.streamer import Streamer, check_streamer_options

__all__ = ["CropDataset", "collate", "positions_after"]


class CropDataset(IterableDataset):
    """The crops of ``Streamer(data, sampler, **options)``, one epoch per iteration.

    ``options`` are the Streamer's keyword arguments, checked here (a typo is
    a ``TypeError`` now, not in a DataLoader worker later); store options go
    in ``storage_options={...}``.

    ``set_epoch(n)`` before iterating picks the epoch (as with
    ``DistributedSampler``). ``load_state_dict({"epoch": e, "positions":
    {worker: position}})`` resumes each DataLoader worker where it stopped;
    ``positions_after`` computes those positions from the batches a training
    loop consumed.
    """

    def __init__(self, data: Any, sampler: Sampler, **options: Any) -> None:
        super().__init__()
        check_streamer_options("CropDataset", data, options)
        self.data = data
        self.sampler = sampler
        self.options = options
        self.epoch = int(options.pop("epoch", 0))
        self._positions: dict[int, int] = {}

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._positions = epoch, {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self._positions = {int(w): int(p) for w, p in state["positions"].items()}

    def streamer(self) -> Streamer:
        """The Streamer of this process's share (the calling DataLoader worker's)."""
        info = get_worker_info()
        options = dict(self.options)
        if info is not None:
            options.setdefault("workers", 0)
        s = Streamer(self.data, self.sampler, epoch=self.epoch, **options)
        position = self._positions.get(s.partition.worker, 0)
        if position:
            s.load_state_dict({**s.state_dict(), "position": position})
        return s

    def __iter__(self) -> Iterator[Crop]:
        yield from self.streamer()


def positions_after(batches: int, batch_size: int, num_workers: int) -> dict[int, int]:
    """Crops each DataLoader worker had delivered once ``batches`` batches were
    consumed (``in_order=True``: worker ``w`` makes batches ``w, w + n, ...``)."""
    workers = max(num_workers, 1)
    return {w: math.ceil(max(batches - w, 0) / workers) * batch_size for w in range(workers)}


def collate(crops: Sequence[Crop]) -> dict[str, Any]:
    """Stack crops into a batch: ``audio`` ``(batch, channels, samples)`` float32,
    zero-padded at the end to the longest crop, with each crop's ``lengths``;
    ``key``, ``start``, ``end``, ``sample_rate`` and ``shard`` per crop."""
    if not crops:
        raise ValueError("cannot collate an empty batch")
    channels = max(c.audio.shape[0] for c in crops)
    longest = max(c.audio.shape[1] for c in crops)
    audio = np.zeros((len(crops), channels, longest), dtype=np.float32)
    for row, crop in enumerate(crops):
        audio[row, : crop.audio.shape[0], : crop.audio.shape[1]] = crop.audio
    return {
        "audio": torch.from_numpy(audio),
        "lengths": torch.tensor([c.audio.shape[1] for c in crops], dtype=torch.int64),
        "sample_rate": torch.tensor([c.sample_rate for c in crops], dtype=torch.int64),
        "start": torch.tensor([c.start for c in crops], dtype=torch.float64),
        "end": torch.tensor([c.end for c in crops], dtype=torch.float64),
        "key": [c.key for c in crops],
        "shard": [c.shard for c in crops],
    }
