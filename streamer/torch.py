"""PyTorch adapters: ``CropDataset`` (an ``IterableDataset`` over a Streamer),
``collate``, and the checkpoint helpers of a training loop.

Only this module imports torch (the ``torch`` extra); the rest of streamer
works with numpy alone. Inside a DataLoader worker the Streamer takes that
worker's share of the epoch (``torch.utils.data.get_worker_info()``) and
decodes in the worker itself (``workers=0``): the DataLoader's processes are
the decode processes, none are nested under them unless ``workers`` says so.

Why a rank's progress is one number: the workers take turns by whole
batches of ``batch_size`` (``pipeline/sharding.py``), so a DataLoader, which
takes one batch from each worker in turn starting with worker 0, yields the
rank's share in its own order whatever ``num_workers`` is. Every crop
carries its ``position`` in that share; the last batch a loop consumed says
how far the rank got, and a resumed DataLoader (round robin from worker 0
again) continues from there.
"""

from __future__ import annotations

import collections
import functools
import json
import pickle
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .decode.crop import Crop
from .pipeline.arguments import whole_number
from .pipeline.mix import Mix
from .pipeline.samplers import Sampler
from .pipeline.sharding import Intervals, Partition, Split, merge_intervals, resolve_partition
from .pipeline.streamer import Streamer, check_mix, check_order, check_streamer_options

__all__ = ["CropDataset", "Skipped", "collate", "gather_state", "merge_states"]

#: Bytes of shared memory that carry the epoch and resume point to
#: persistent DataLoader workers (a JSON document, compressed). An elastic
#: job's merged resume point gains about 0.8 intervals per rank at every
#: restart within an epoch (15 bytes each, 6 compressed): 64 KiB of plain
#: JSON refused a 1024-rank job's checkpoint after four restarts; 1 MiB
#: compressed holds about 170 000 intervals (200 restarts at 1024 ranks).
_SHARED_BYTES = 1 << 20

Transform = Callable[[Crop], Any]

#: The works and tensors of the last two exchanges (``_exchange``), kept here
#: so that no backend thread drops the last reference to them (two: an
#: exchange's are let go of an exchange later, long after the backend has).
_EXCHANGED: collections.deque[tuple[Any, ...]] = collections.deque(maxlen=2)


@dataclass(frozen=True)
class Skipped:
    """A crop of the rank's order whose data failed (logged, and counted in
    the decoding process's ``stats.skipped``), yielded in its place.

    The DataLoader batches whatever a worker yields by count: a crop that
    just went missing would pull the worker's next turn into the batch
    (batches out of the rank's order, checkpoints that repeat crops) and
    could leave a rank one batch short of the others (a DDP hang).
    ``collate`` leaves it out of the batch's arrays and lists it under
    ``skipped``, its source under ``skipped_source``."""

    position: int  # in the rank's share, like ``Crop.position``
    reason: str  # the error's class name
    epoch: int | None = None
    source: str | None = None  # like ``Crop.source``: a Mix item's name, else the URL


class CropDataset(IterableDataset):
    """The crops of ``Streamer(data, sampler, **options)``, one epoch per iteration.

    ``options`` are the Streamer's keyword arguments, checked here (a typo is
    a ``TypeError`` now, not in a DataLoader worker later); store options go
    in ``storage_options={...}``. ``batch_size`` must be the DataLoader's:
    the workers take turns by whole batches, so batches come out in the
    rank's order and a checkpoint is one number per rank. Every rank gets
    the same number of crops (``even=True``, ``drop_last=True``: see
    ``Streamer``), so no rank of a distributed job waits on another.

    ``transform(crop)`` runs in the process that decodes (the DataLoader
    worker) and its result (an array or a tensor, e.g. features) replaces
    ``crop.audio``.

    ``set_epoch(n)`` before iterating picks the epoch, and reaches persistent
    workers too. Under ``torch.distributed`` the ranks compare their plans of
    each pass (``_agree``) and raise when they differ. ``state_dict(batch)``
    after a batch is the rank's checkpoint; ``load_state_dict`` resumes it
    with any ``num_workers``, and a state merged over the ranks
    (``gather_state``) resumes at any world size. Under torchdata's
    ``StatefulDataLoader`` the loader's own ``state_dict()`` /
    ``load_state_dict()`` work as they are.
    """

    def __init__(
        self,
        data: Any,
        sampler: Sampler,
        *,
        batch_size: int = 1,
        transform: Transform | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        check_streamer_options("CropDataset", data, options)
        if "loader_batch_size" in options:
            raise TypeError("CropDataset takes batch_size=, the DataLoader's batch size")
        for name in ("worker", "num_workers"):
            if name in options:
                raise TypeError(
                    f"CropDataset takes no {name}=: each copy learns its worker from the "
                    "DataLoader (set the DataLoader's num_workers; decode processes are workers=)"
                )
        self.data = data
        self.sampler = sampler
        self.batch_size = whole_number("batch_size", batch_size, least=1)
        self.transform = transform
        self.epoch = whole_number("epoch", options.pop("epoch", 0), least=0)
        if "seed" in options:  # a numpy integer overflowed; 1.5 was seed 1
            options["seed"] = whole_number("seed", options["seed"])
        self.options = options
        self._done: tuple[tuple[int, int], ...] = ()
        self._consumed = 0
        self._shared = torch.zeros(_SHARED_BYTES, dtype=torch.uint8).share_memory_()
        # [the generation the last pass started at, whether a repeat was warned of,
        #  passes started (counted by the process serving the rank's first turn),
        #  the generation whose pass DataLoader workers replaced (_load_worker_state)]
        self._passes = torch.zeros(4, dtype=torch.int64).share_memory_()
        self._lengths: dict[tuple[Any, ...], int] = {}
        self._generation = 0
        self._seen = 0
        self._worker_state: dict[str, Any] | None = None
        self._running: dict[str, Any] | None = None
        #: The pass ``_running`` is of (``_passes[2]`` when it began).
        self._running_pass = 0
        #: A rank's (or merged) state loaded, for ``set_epoch``: its epoch,
        #: ``_passes[2]`` when it was loaded, and whether it is mid-epoch
        #: (crops consumed, crops left).
        self._loaded: tuple[int, int, bool] | None = None
        self._epochs: dict[int, tuple[int, str]] = {}  # epoch -> (total, digest)
        self._ranks: tuple[int, int] | None = None
        self._agreed: set[tuple[int, Intervals]] = set()
        #: Whether ``set_epoch`` was called: a finished pass's state does not undo it.
        self._chosen = False
        #: ``_passes[2]`` at the last ``set_epoch``, and the epoch it chose when a
        #: state of another epoch was loaded after it with no pass between
        #: (warned of when the pass begins, unless ``set_epoch`` chooses again).
        self._chosen_at = 0
        self._overruled: int | None = None
        #: A finished state was loaded: the next pass is a StatefulDataLoader's
        #: restoring iteration, which it drops for a new one (not a repeat).
        self._restoring = False
        self._publish()
        self._agree(self.epoch, self._done)

    # -- what the training loop sees ------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning on the next iteration; right
        after ``load_state_dict`` (nothing iterated since), the loaded
        state's own epoch keeps its resume point, so a loop that calls
        ``set_epoch(epoch)`` before each epoch from ``data.epoch`` on resumes
        where the checkpoint was. Another epoch there discards the resume
        point, with a warning (a loop that starts elsewhere than the
        checkpoint's epoch repeats or skips crops)."""
        epoch = whole_number("epoch", epoch, least=0)  # 1.5 was epoch 1
        loaded = self._loaded if self._loaded is not None and not self._iterated_since() else None
        if loaded is not None and loaded[0] == epoch:  # the loaded resume point stays
            self._agree(epoch, self._done)
        else:
            self._agree(epoch, ())
            if loaded is not None and loaded[2]:
                warnings.warn(
                    f"CropDataset: set_epoch({epoch}) right after load_state_dict of a "
                    f"state of epoch {loaded[0]} (not iterated since) discards its resume "
                    f"point and starts epoch {epoch} from its beginning: the crops left in "
                    f"epoch {loaded[0]} are not served; to resume, call set_epoch({loaded[0]}) "
                    "first (start the epoch loop at data.epoch)",
                    stacklevel=2,
                )
            self._loaded = None
            self.epoch, self._done, self._consumed = epoch, (), 0
        self._running = None  # a pass of before: no state of the pass to come
        self._chosen, self._chosen_at, self._overruled = True, int(self._passes[2]), None
        self._publish()

    def _iterated_since(self) -> bool:
        """Whether a pass began (here or in a DataLoader worker) since the
        state was loaded."""
        return self._loaded is None or int(self._passes[2]) != self._loaded[1]

    def __len__(self) -> int:
        """Crops this consumer yields in the next iteration (the rank's in the
        main process, the worker's in a DataLoader worker); planned once per
        pass and consumer."""
        self._follow_shared()
        info, partition = get_worker_info(), self._partition()
        where = (partition, info.id if info is not None else None, json.dumps(self._worker_state))
        key = (self.epoch, self._done, self._consumed, *where)
        if key not in self._lengths:
            s = self.streamer()
            self._lengths[key] = len(s) - int(s.state_dict()["position"])
        return self._lengths[key]

    def __iter__(self) -> Iterator[Crop]:
        self._follow_shared()
        self._agree(self.epoch, self._done)
        self._note_pass()
        if self._overruled is not None:
            _warn_overruled(self.epoch, self._overruled)
            self._overruled = None
        s = self.streamer()
        self._worker_state = None
        length = len(s)
        end = {**s.state_dict(), "position": length, "consumed": s.consumed(length)}
        self._running = s.state_dict()
        self._running_pass = int(self._passes[2])
        return self._crops(s, _finished(end))

    def _note_pass(self) -> None:
        """Warn (once) when a pass starts where one already started: without
        ``set_epoch`` (or ``load_state_dict``) between them, the second pass
        repeats the first one's crops. The process that serves the rank's
        first turn (this one without DataLoader workers, else worker 0) notes
        each start in memory shared with every worker; a worker resuming its
        own state (``StatefulDataLoader``) is not a new pass."""
        info = get_worker_info()
        if info is None or not info.id:  # every pass, for set_epoch and state_dict()
            self._passes[2] += 1
        if (info is not None and info.id) or self._worker_state is not None:
            return
        if self._restoring:  # a StatefulDataLoader's iteration of a finished state: no pass
            self._restoring = False
            return
        repeated = int(self._passes[0]) == self._seen
        self._passes[0] = self._seen
        if repeated and not int(self._passes[1]):
            self._passes[1] = 1
            warnings.warn(
                f"CropDataset: epoch {self.epoch} is iterated again from the same point "
                "without set_epoch(n): it repeats the same crops in the same order; call "
                "data.set_epoch(epoch) before each epoch (set_epoch(0) each time for a "
                "fixed validation pass)",
                stacklevel=3,
            )

    def _crops(self, s: Streamer, end: dict[str, Any]) -> Iterator[Crop | Skipped]:
        """The pass of ``s``, a ``Skipped`` in the place of each crop that
        failed, keeping the state after every one handed over (what
        ``state_dict()`` reports inside the pass, and ``end`` after it: the
        Streamer itself moves on to the next epoch)."""
        failed: list[tuple[Skipped, dict[str, Any]]] = []

        def note(position: int, reason: str) -> None:
            state = s.state_dict()  # already past the failed crop
            stand_in = Skipped(state["consumed"] - 1, reason, state["epoch"], s.source_of(position))
            failed.append((stand_in, state))

        s.on_skip = note
        try:
            for crop in s:
                yield from self._stand_ins(failed, end)
                self._running = _finished(s.state_dict(), end)
                if self.transform is not None:
                    samples = crop.audio.shape[-1]
                    crop.audio = self.transform(crop)
                    if tuple(getattr(crop.audio, "shape", ()))[-1:] != (samples,):
                        crop.padded = 0  # its last axis is no longer samples: taken whole
                yield crop
        finally:
            # ``note`` holds ``s``: left set, the pass broken off waited in a
            # cycle for a full collection, in this process and in every
            # DataLoader worker forked from it meanwhile.
            s.on_skip = None
        yield from self._stand_ins(failed, end)
        self._running = end

    def _stand_ins(
        self, failed: list[tuple[Skipped, dict[str, Any]]], end: dict[str, Any]
    ) -> Iterator[Skipped]:
        """The ``Skipped`` noted since the last crop, each with its state."""
        while failed:
            stand_in, state = failed.pop(0)
            self._running = _finished(state, end)
            yield stand_in

    # -- checkpoints --------------------------------------------------------------

    def state_dict(self, batch: dict[str, Any] | None = None) -> dict[str, Any]:
        """This rank's checkpoint once the training loop consumed ``batch``
        (its ``position`` says how far the rank got, however many workers
        made it). Without ``batch``: where this process's own iteration is
        (a DataLoader with ``num_workers=0``, or inside a worker, which is
        what ``StatefulDataLoader`` asks for)."""
        partition = self._partition()
        rank = {"seed": self._seed(), "epoch": self.epoch, "rank": partition.rank}
        rank |= {"world_size": partition.world_size, "done": [list(r) for r in self._done]}
        if batch is not None:
            if "position" not in batch:
                raise ValueError("the batch has no 'position': make it with streamer.torch.collate")
            positions = torch.as_tensor(batch["position"]).tolist()
            positions = sorted(positions + [p for p, _ in batch.get("skipped", ())])
            if not positions:
                raise ValueError("the batch holds no crop: make it with streamer.torch.collate")
            if int(self._passes[3]) == self._seen:
                raise ValueError(
                    "the batch is of a pass a StatefulDataLoader restored in its workers, "
                    "resumed from crops consumed before it (done) that this dataset was not "
                    "given: its positions are places in another share; checkpoint with the "
                    "loader's state_dict() until the epoch ends, or resume the run with "
                    "data.load_state_dict(gather_state(...)) instead of the loader's state"
                )
            consumed = positions[-1] + 1
            if positions != list(range(consumed - len(positions), consumed)):
                raise ValueError(
                    "the batch's crops are not consecutive in the rank's order: give "
                    "CropDataset the DataLoader's batch_size (and a loader that keeps order)"
                )
            epochs = {e for e in torch.as_tensor(batch.get("epoch", [])).tolist()}
            epochs |= {e for e in batch.get("skipped_epoch", ()) if e is not None}
            if epochs - {self.epoch}:
                raise ValueError(
                    f"the batch is of epoch {min(epochs - {self.epoch})}, this dataset is at "
                    f"epoch {self.epoch}: take state_dict(batch) before set_epoch"
                )
            if consumed < self._consumed:
                raise ValueError(
                    f"the batch ends at crop {consumed} of this rank's share, before "
                    f"this pass began ({self._consumed}): is it from another epoch?"
                )
            split = self._split()
            self._check_turn(positions[0], len(positions), split, partition)
            return {
                **rank,
                "even": split.even,
                "drop_last": split.drop_last,
                "consumed": consumed,
                "total": self.total(),
                "plan": self.digest(),
                "mix": self._mix(),
            }
        if self._running is None or (
            get_worker_info() is None and int(self._passes[2]) != self._running_pass
        ):  # none, or of a pass before the one DataLoader workers iterate
            raise ValueError(
                "this process has not iterated the dataset: with DataLoader workers, "
                "pass the last batch the loop consumed: state_dict(batch)"
            )
        return dict(self._running)

    def _check_turn(self, first: int, size: int, split: Split, partition: Partition) -> None:
        """Refuse a batch that is not one whole turn of a worker: ``batch_size``
        crops from a turn's start (fewer only at the end of the rank's
        share). A DataLoader batching other than ``batch_size`` crops makes
        batches of part of a turn, or of several: consecutive ones too (a
        worker's first half turn, then the next worker's), whose checkpoint
        would count the crops between them as consumed."""
        share = len(split.rank_share(self.total(), partition.rank, partition.world_size))
        turn_start = (first - self._consumed) % self.batch_size == 0
        whole = size == self.batch_size or (size < self.batch_size and first + size == share)
        if not (turn_start and whole):
            raise ValueError(
                f"the batch holds crops {first} to {first + size - 1} of this rank's share "
                f"({share} crops), not one turn of {self.batch_size} crops from "
                f"crop {self._consumed} on (fewer only at the share's end): give "
                "CropDataset the DataLoader's batch_size (a checkpoint of it could skip "
                "or repeat crops)"
            )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict(...)`` (same world size), a DataLoader
        worker's state (inside that worker: ``StatefulDataLoader``), or a
        state merged over every rank (``merge_states``: any world size)."""
        if int(state["seed"]) != self._seed():
            raise ValueError(f"state is for seed {state['seed']}, this dataset has {self._seed()}")
        self._running, self._loaded = None, None
        if "worker" in state and (
            int(state["num_workers"]) > 1 or get_worker_info() is not None
        ):  # a DataLoader worker's (one worker's too: loaded inside it)
            self._load_worker_state(state)
            return
        if state.get("finished"):
            self._load_finished(state)
            return
        epoch, done = int(state["epoch"]), merge_intervals(state.get("done", ()))
        self._agree(epoch, done)  # first: a rank that raises alone leaves the others waiting
        if "rank" in state:
            partition = self._partition()
            theirs = (int(state["rank"]), int(state["world_size"]))
            if theirs[1] != partition.world_size:
                raise ValueError(
                    f"state is for rank {theirs[0]} of {theirs[1]}, this is rank "
                    f"{partition.rank} of {partition.world_size}: to resume at another "
                    "world size, load the state merged over every rank (gather_state)"
                )
            if theirs[0] != partition.rank:
                raise ValueError(
                    f"rank {theirs[0]}'s state loaded on rank {partition.rank} (of "
                    f"{partition.world_size}): each rank loads its own state_dict(batch), "
                    "or every rank loads the state gather_state merged over them all"
                )
            self._check_split(state)
        consumed = int(state.get("consumed", 0))
        if "total" in state:
            self._check_fits(state, epoch, done, consumed)
        since = self._chosen and int(self._passes[2]) == self._chosen_at
        self._overruled = self.epoch if since and epoch != self.epoch else None
        self.epoch, self._done, self._consumed = epoch, done, consumed
        partition = self._partition()
        share = self._split(done).rank_share(
            self.total(epoch), partition.rank, partition.world_size
        )
        mid_epoch = bool(consumed or done) and consumed < len(share)
        self._loaded = (epoch, int(self._passes[2]), mid_epoch)
        self._publish()

    def _check_fits(
        self, state: dict[str, Any], epoch: int, done: Intervals, consumed: int
    ) -> None:
        """Refuse a state whose epoch is not this dataset's (other data, sampler
        or options make another number of crops, or another order of
        them), whose ``done`` lies outside it, or that consumed more than
        the rank has: resuming it would repeat or skip crops unseen."""
        theirs, total = int(state["total"]), self.total(epoch)
        check_mix(state, self._mix())  # first: says more than another total would
        if theirs != total:
            raise ValueError(
                f"state is for an epoch of {theirs} crops, this dataset plans "
                f"{total} for epoch {epoch}: other data, sampler or options?"
            )
        check_order(state, total, self.digest(epoch))
        if any(not 0 <= first < last <= total for first, last in done):
            raise ValueError(f"state's done intervals lie outside the epoch's {total} crops")
        partition = self._partition()
        share = len(self._split(done).rank_share(total, partition.rank, partition.world_size))
        if consumed > share:
            raise ValueError(
                f"state says {consumed} crops of this rank's share were consumed, "
                f"but it has {share}"
            )

    def _check_split(self, state: dict[str, Any]) -> None:
        """Refuse a rank's state taken under another split (``even``,
        ``drop_last``): its ``consumed`` counts crops of a run that starts
        elsewhere, or holds other crops, under this one's."""
        split = self._split()
        theirs = (bool(state.get("even", True)), bool(state.get("drop_last", True)))
        if theirs != (split.even, split.drop_last):
            raise ValueError(
                f"state is of a split with even={theirs[0]}, drop_last={theirs[1]}, this "
                f"dataset has even={split.even}, drop_last={split.drop_last}: the rank's "
                "run holds other crops under each (resume with the options it was taken with)"
            )

    def _split(self, done: Any = None) -> Split:
        """How this dataset's epochs are split, from ``done`` (default: its own)."""
        return Split(
            even=bool(self.options.get("even", True)),
            drop_last=bool(self.options.get("drop_last", True)),
            done=self._done if done is None else merge_intervals(done),
        )

    def _load_finished(self, state: dict[str, Any]) -> None:
        """A state taken after its pass ended (``StatefulDataLoader`` restores
        one lazily, at the next ``iter``, after the loop's ``set_epoch``):
        nothing of it is left to resume. Another epoch ``set_epoch`` chose
        stays, from its beginning; the finished epoch itself, chosen again
        (a loop resuming at ``data.epoch``), is the finished pass, empty, as
        a DataLoader worker's state resumes it (without workers it began
        again: a checkpoint on an epoch's last batch served the epoch
        twice); without ``set_epoch``, the next epoch begins."""
        epoch = int(state["epoch"])
        if not self._chosen:
            self.epoch, self._done, self._consumed = epoch + 1, (), 0
        elif self.epoch == epoch:
            self._worker_state = dict(state)  # the next pass resumes it: nothing left
        self._agree(self.epoch, self._done)
        self._publish()
        self._restoring = True

    def _load_worker_state(self, state: dict[str, Any]) -> None:
        """A DataLoader worker's own state, for its next pass only: the
        passes after it follow the main process (``set_epoch``). (It set the
        worker's epoch for good: a persistent worker restarted the restored
        epoch on every pass after, whatever ``set_epoch`` said.) A pass that
        left out other crops consumed before it (``done``) than the main
        process knows of is noted in shared memory: its batches' positions
        are places in another share, which ``state_dict(batch)`` refuses (it
        marked other crops consumed). A state of another epoch than
        ``set_epoch`` chose (torchdata restores it after the loop's
        ``set_epoch``) is warned of: the pass serves the state's epoch."""
        info = get_worker_info()
        here = (info.id, info.num_workers) if info is not None else (0, 1)
        if here != (int(state["worker"]), int(state["num_workers"])):
            raise ValueError(
                f"state of DataLoader worker {state['worker']} of {state['num_workers']}, "
                f"loaded in worker {here[0]} of {here[1]}: resume a rank with "
                "state_dict(batch), or restore the StatefulDataLoader that took it"
            )
        self._follow_shared()
        self._worker_state = dict(state)
        if state.get("finished"):
            return
        if merge_intervals(state.get("done", ())) != self._done:
            self._passes[3] = self._seen  # every worker: the one whose batch comes first too
        epoch = int(state["epoch"])
        if self._chosen and epoch != self.epoch and not here[0]:
            _warn_overruled(epoch, self.epoch)

    # -- inside -------------------------------------------------------------------

    def streamer(self) -> Streamer:
        """A Streamer for this process's share (the calling DataLoader
        worker's), at the resume point (or at a DataLoader worker's own
        state, when one was loaded into it)."""
        options = dict(self.options)
        if get_worker_info() is not None:
            options.setdefault("workers", 0)
        partition = self._partition()
        options |= {"rank": partition.rank, "world_size": partition.world_size}
        epoch = self.epoch if self._worker_state is None else int(self._worker_state["epoch"])
        s = Streamer(
            self.data, self.sampler, epoch=epoch, loader_batch_size=self.batch_size, **options
        )
        state = self._worker_state or {
            **s.state_dict(),
            "done": self._done,
            "start": self._consumed,
            "position": 0,
        }
        s.load_state_dict(state)
        return s

    def total(self, epoch: int | None = None) -> int:
        """Crops in the whole of ``epoch`` (every rank's), before the split."""
        return self._epoch(epoch)[0]

    def digest(self, epoch: int | None = None) -> str:
        """A digest of the whole of ``epoch``'s order (``Streamer.digest``)."""
        return self._epoch(epoch)[1]

    def _epoch(self, epoch: int | None) -> tuple[int, str]:
        epoch = self.epoch if epoch is None else epoch
        if epoch not in self._epochs:
            s = self.streamer()
            self._epochs[epoch] = (s.total(epoch), s.digest(epoch))
        return self._epochs[epoch]

    def _agree(self, epoch: int, done: Intervals) -> None:
        """In the main process of a distributed job (once per pass): raise,
        on every rank, when the ranks plan different epochs or passes. A
        dataset that differs between nodes (a shard missing on one node's
        disk) plans another order there, and another split (``even``,
        ``drop_last``, ``batch_size``) other runs of the same order: the
        ranks' shares would overlap and leave crops out, and their lengths
        differ (a DDP hang), caught at best when states are merged. One
        exchange (``_exchange``) a pass, here where every rank calls in the
        same order (the constructor, ``set_epoch``, ``load_state_dict``,
        iterating without DataLoader workers): never in a DataLoader
        worker, which has no process group. A rank that cannot plan (its
        copy of the dataset is incomplete, unreadable) says so in the
        exchange and raises its error; the others raise naming it, instead
        of waiting on it in a collective (NCCL: until its timeout)."""
        dist = torch.distributed
        if get_worker_info() is not None or (epoch, done) in self._agreed:
            return
        if not (dist.is_available() and dist.is_initialized()):
            return
        partition = self._partition()
        if (partition.rank, partition.world_size) != (dist.get_rank(), dist.get_world_size()):
            return  # ranks of the caller's own making, not this group's
        try:
            summary, failed = self._plan_summary(epoch, done), None
        except Exception as exc:  # raised below, once every rank has heard of it
            summary, failed = {"failed": f"{type(exc).__name__}: {exc}"}, exc
        plans = _exchange(summary)
        if failed is not None:
            raise failed
        broken = [
            f"rank {rank}: {plan['failed']}" for rank, plan in enumerate(plans) if "failed" in plan
        ]
        if broken:
            raise ValueError("a rank cannot plan its epoch: " + "; ".join(broken))
        if len({(plan["epoch"], plan["done"], plan["plan"], plan["split"]) for plan in plans}) > 1:
            raise ValueError(
                "the ranks plan different epochs (each rank must see the same data, "
                "sampler and options: a shard missing on one node?): "
                + "; ".join(f"rank {rank}: {plan['says']}" for rank, plan in enumerate(plans))
            )
        self._agreed.add((epoch, done))

    def _plan_summary(self, epoch: int, done: Intervals) -> dict[str, Any]:
        """What ranks compare (``_agree``), and what an error says of this one."""
        total, digest = self._epoch(epoch)
        episodes = self.streamer().episodes()
        shards = sum(len(e.dataset.shard_names) for e in episodes)
        left = total - sum(last - first for first, last in done)
        split = self._split()
        split_says = f"even={split.even}, drop_last={split.drop_last}, batch_size={self.batch_size}"
        says = f"epoch {epoch}, {left} of {total} crops left (plan {digest}, {split_says}), "
        says += f"{sum(map(len, episodes))} episodes in {shards} shards"
        return {
            "epoch": epoch,
            "done": str(done),
            "plan": digest,
            "split": split_says,
            "says": says,
        }

    def _partition(self) -> Partition:
        """This rank: the options, else as the main process found it when it
        sent this copy to a DataLoader worker (``__getstate__``), else found
        here (``resolve_partition``)."""
        if self._ranks is not None:
            return Partition(*self._ranks)
        return resolve_partition(self.options.get("rank"), self.options.get("world_size"))

    def _mix(self) -> list[list[Any]] | None:
        """The mix's items and weights (``Mix.items``), None for a dataset."""
        return self.data.items if isinstance(self.data, Mix) else None

    def _seed(self) -> int:
        return int(self.options.get("seed", 0))

    def _publish(self) -> None:
        """Write the resume point where persistent workers will read it."""
        if get_worker_info() is not None:
            return
        self._generation += 1
        document = {"generation": self._generation, "epoch": self.epoch, "chosen": self._chosen}
        document |= {"done": self._done, "consumed": self._consumed}
        raw = zlib.compress(json.dumps(document, separators=(",", ":")).encode(), 1)
        if len(raw) + 4 > _SHARED_BYTES:
            raise ValueError(
                f"resume point of {len(self._done)} done intervals too large to share with "
                f"DataLoader workers ({len(raw)} bytes compressed, at most {_SHARED_BYTES - 4})"
            )
        data = np.frombuffer(len(raw).to_bytes(4, "little") + raw, dtype=np.uint8)
        self._shared[: len(data)] = torch.from_numpy(data.copy())
        self._seen = self._generation

    def _follow_shared(self) -> None:
        """In a (persistent) worker: take the epoch and resume point the main
        process set since this copy was made."""
        if get_worker_info() is None:
            return
        size = int.from_bytes(bytes(self._shared[:4].numpy()), "little")
        document = json.loads(zlib.decompress(bytes(self._shared[4 : 4 + size].numpy())))
        if document["generation"] != self._seen:
            self._seen = document["generation"]
            self.epoch, self._chosen = int(document["epoch"]), bool(document["chosen"])
            self._done = merge_intervals(document["done"])
            self._consumed = int(document["consumed"])
            self._worker_state = None

    def __getstate__(self) -> dict[str, Any]:
        """The copy a DataLoader worker gets carries the rank found here: a
        worker started by ``spawn`` or ``forkserver`` has no copy of the
        process group, and without ``RANK`` / ``WORLD_SIZE`` in the
        environment (``mp.spawn``) it would take the whole epoch as rank 0
        of 1, on every rank."""
        state = dict(self.__dict__)
        state["_running"] = None
        if get_worker_info() is None:
            partition = self._partition()
            state["_ranks"] = (partition.rank, partition.world_size)
        return state


def _warn_overruled(epoch: int, chosen: int) -> None:
    """Warn that a pass serves the loaded state's ``epoch``, not the one
    ``set_epoch`` ``chose`` before the state was loaded (torchdata's
    StatefulDataLoader restores its state as the pass begins, after the
    loop's ``set_epoch``): the loop's epochs are then not the data's."""
    warnings.warn(
        f"CropDataset: a StatefulDataLoader state of epoch {epoch}, restored after "
        f"set_epoch({chosen}), serves the rest of epoch {epoch} in this pass, "
        f"not epoch {chosen} (batch['epoch'] says {epoch}): the loop's epochs "
        f"are not the data's; start the epoch loop at the checkpoint's epoch",
        stacklevel=4,
    )


def _finished(state: dict[str, Any], end: dict[str, Any] | None = None) -> dict[str, Any]:
    """``state`` marked ``finished`` when it is at the pass's ``end`` (the
    state after its last crop, which is what a ``StatefulDataLoader`` worker
    last reports, or ``end`` itself): a resume of it has nothing left."""
    if end is None or state["position"] >= end["position"]:
        state["finished"] = True
    return state


def merge_states(dataset: CropDataset, states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One state for the whole job from every rank's ``state_dict(batch)``:
    the positions of the epoch consumed by any rank. It resumes at any world
    size and worker count: what is left is split evenly again, in order."""
    if not states:
        raise ValueError("merge_states needs every rank's state")
    first = states[0]
    same = {(int(s["seed"]), int(s["epoch"]), str(s.get("done", []))) for s in states}
    if len(same) != 1:
        raise ValueError("states to merge must be of the same seed, epoch and pass")
    if any(int(s.get("num_workers", 1)) > 1 for s in states):
        raise ValueError("merge the ranks' state_dict(batch), not DataLoader workers' states")
    sizes = sorted({int(s["world_size"]) for s in states})
    if len(sizes) > 1:
        raise ValueError(
            f"states to merge are of world sizes {', '.join(map(str, sizes))}: merge the "
            "states of one job's ranks, taken after the same step (each rank's crops are "
            "places in its own world size's split)"
        )
    world_size = sizes[0]
    if sorted(int(s["rank"]) for s in states) != list(range(world_size)):
        raise ValueError(f"merge_states needs the states of all {world_size} ranks")
    total, digest = dataset.total(int(first["epoch"])), dataset.digest(int(first["epoch"]))
    for state in states:
        check_mix(state, dataset._mix())
    if any(int(s.get("total", total)) != total or s.get("plan", digest) != digest for s in states):
        raise ValueError(f"states are for another epoch than this dataset's {total} crops")
    split = dataset._split(first.get("done", ()))
    positions = []
    for state in states:
        dataset._check_split(state)
        share = split.rank_share(total, int(state["rank"]), world_size)
        if not 0 <= int(state["consumed"]) <= len(share):
            raise ValueError(
                f"the state of rank {state['rank']} of {world_size} consumed "
                f"{state['consumed']} crops, its share has {len(share)}"
            )
        positions.append(share[: int(state["consumed"])])
    done = merge_intervals(split.done, np.concatenate(positions))
    merged = {"seed": int(first["seed"]), "epoch": int(first["epoch"]), "mix": dataset._mix()}
    return merged | {"total": total, "plan": digest, "done": [list(run) for run in done]}


def gather_state(dataset: CropDataset, batch: dict[str, Any]) -> dict[str, Any]:
    """The job's state after ``batch``, on every rank: each rank's
    ``state_dict(batch)`` gathered with ``torch.distributed`` (when it is
    initialised) and merged (``merge_states``). A batch that one rank's
    ``state_dict`` refuses raises on every rank, naming that rank."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return merge_states(dataset, [dataset.state_dict(batch)])
    try:
        mine: dict[str, Any] = dataset.state_dict(batch)
    except ValueError as error:  # said on every rank: one raising alone leaves the others waiting
        mine = {"error": str(error)}
    states = _exchange(mine)
    failed = [(rank, state["error"]) for rank, state in enumerate(states) if "error" in state]
    if failed:
        raise ValueError("; ".join(f"rank {rank}: {error}" for rank, error in failed))
    return merge_states(dataset, states)


def _exchange(mine: Any) -> list[Any]:
    """Every rank's ``mine``, in rank order, over the default process group:
    ``all_gather_object``, but the tensors sent and received stay referenced
    here (with their works) until the exchange after next.

    ``all_gather_object`` drops them as it returns, while gloo's thread may
    still hold its work a moment longer. That thread then frees them, and a
    Python object freed by a thread of C++ takes a Python thread state
    first, which takes CPython's thread-list lock without the GIL. A fork
    at that moment (a DataLoader starting its workers, right after
    ``load_state_dict`` or ``set_epoch`` compared the ranks' plans) copies
    the lock held: before CPython 3.11.10 and 3.12 (gh-112275) the child
    waits for it forever as it starts, a DataLoader worker that never
    runs, its rank waiting on it and the others timing out in their next
    collective. Kept here, they are freed on this thread, later."""
    dist = torch.distributed
    device = _object_device()
    sent = torch.frombuffer(bytearray(pickle.dumps(mine)), dtype=torch.uint8).to(device)
    size = torch.tensor([sent.numel()], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    works = [dist.all_gather(sizes, size, async_op=True)]
    works[0].wait()
    counts = [int(n.item()) for n in sizes]
    padded = torch.zeros(max(counts), dtype=torch.uint8, device=device)
    padded[: sent.numel()] = sent
    received = [torch.empty_like(padded) for _ in counts]
    works.append(dist.all_gather(received, padded, async_op=True))
    works[1].wait()
    _EXCHANGED.append((works, size, sizes, padded, received))
    return [pickle.loads(bytes(r[:n].cpu().numpy())) for r, n in zip(received, counts, strict=True)]


def _object_device() -> str:
    """The device type ``all_gather_object`` would send objects from: the CPU
    unless the default group has only a device's backend (NCCL: CUDA)."""
    found = getattr(torch.distributed.distributed_c10d, "_get_object_coll_device", None)
    if found is not None:
        return str(found())
    backend = str(torch.distributed.get_backend())  # "gloo", "nccl", "cpu:gloo,cuda:nccl"
    devices = [pair.split(":")[0] for pair in backend.split(",")] if ":" in backend else []
    if devices:
        return "cpu" if "cpu" in devices else devices[0]
    return {"nccl": "cuda", "xccl": "xpu"}.get(backend, "cpu")


def collate(
    items: Sequence[Crop | Skipped], *, length: int | None = None, mixed_rates: bool = False
) -> dict[str, Any]:
    """Stack crops into a batch: ``audio`` ``(batch, channels, samples)`` float32
    (or whatever a ``transform`` made, stacked on its last axis), zero-padded
    at the end to the longest crop, or padded and trimmed to ``length``
    samples (crops of fewer channels get silent ones: warned once);
    ``lengths`` (valid samples per crop) and ``mask`` ``(batch,
    samples)``, True where a sample is the crop's own (``pad=True``'s zeros past
    an episode's end are not); ``position`` in the
    rank's share and ``epoch`` (what ``CropDataset.state_dict(batch)``
    reads); ``key``,
    ``start``, ``end``, ``sample_rate``, ``shard`` and ``source`` per crop;
    each of the crops' ``fields`` under its name, a tensor when every value
    is a number (float64 when any is a float, else int64 or bool), else a
    list; ``supervisions`` (a list per crop) when they were asked for;
    ``skipped``: ``(position, reason)`` of the batch's crops that failed
    (``Skipped``: no row; a batch of only those has none: ``audio`` of
    shape ``(0, 0, 0)`` and no ``fields`` or ``supervisions`` keys) and
    ``skipped_source`` and ``skipped_epoch``, the source (which ``Mix``
    item lost it) and epoch of each. Use
    ``functools.partial(collate, length=n)`` as a DataLoader's
    ``collate_fn``.

    Crops of different sample rates are a ``ValueError`` (their samples
    mean different times: give the Streamer or ``CropDataset`` a
    ``sample_rate``); ``mixed_rates=True`` batches them anyway, each with
    its rate in ``sample_rate``."""
    if not items:
        raise ValueError("cannot collate an empty batch")
    crops = [c for c in items if not isinstance(c, Skipped)]
    if length is not None and length < 1:
        raise ValueError(f"collate length must be >= 1, not {length}")
    rates = sorted({c.sample_rate for c in crops})
    if len(rates) > 1 and not mixed_rates:
        first = {c.sample_rate: c.key for c in reversed(crops)}
        raise ValueError(
            "collate: crops of sample rates "
            + ", ".join(f"{rate} (key {first[rate]!r})" for rate in rates)
            + " in one batch: their samples are not alike; give the "
            "Streamer or CropDataset a sample_rate= to resample every crop to, or batch "
            "them anyway with functools.partial(collate, mixed_rates=True)"
        )
    arrays = [_audio_tensor(c) for c in crops]
    if len({a.ndim for a in arrays}) > 1:
        raise ValueError(f"cannot stack crops of shapes {[tuple(a.shape) for a in arrays]}")
    own = [a.shape[-1] - c.padded for a, c in zip(arrays, crops, strict=True)]
    valid = [min(n, length) if length is not None else n for n in own]
    width = length if length is not None else max((a.shape[-1] for a in arrays), default=0)
    ndim = arrays[0].ndim if arrays else 2
    leading = tuple(max((a.shape[i] for a in arrays), default=0) for i in range(ndim - 1))
    _warn_if_padded(arrays, leading)
    # one that holds every output's values (the first one's made 0.25 a 0 after an int16 crop)
    dtypes = [a.dtype for a in arrays]
    dtype = functools.reduce(torch.promote_types, dtypes) if dtypes else torch.float32
    audio = torch.zeros((len(crops), *leading, width), dtype=dtype)
    for row, array in enumerate(arrays):
        n = min(array.shape[-1], width)  # pad=True's zeros too: the crop's audio as served
        audio[(row, *(slice(0, d) for d in array.shape[:-1]), slice(0, n))] = array[..., :n]
    lengths = torch.tensor(valid, dtype=torch.int64)
    batch = {
        "audio": audio,
        "lengths": lengths,
        "mask": torch.arange(width)[None, :] < lengths[:, None],
        "sample_rate": torch.tensor([c.sample_rate for c in crops], dtype=torch.int64),
        "start": torch.tensor([c.start for c in crops], dtype=torch.float64),
        "end": torch.tensor([c.end for c in crops], dtype=torch.float64),
        "key": [c.key for c in crops],
        "shard": [c.shard for c in crops],
    }
    for name in ("position", "epoch"):
        if all(getattr(c, name) is not None for c in crops):
            batch[name] = torch.tensor([getattr(c, name) for c in crops], dtype=torch.int64)
    batch["source"] = [c.source for c in crops]
    skipped = [c for c in items if isinstance(c, Skipped)]
    batch["skipped"] = [(c.position, c.reason) for c in skipped]
    batch["skipped_source"] = [c.source for c in skipped]
    batch["skipped_epoch"] = [c.epoch for c in skipped]
    if any(c.supervisions is not None for c in crops):
        batch["supervisions"] = [c.supervisions or [] for c in crops]
    for name in dict.fromkeys(name for c in crops for name in c.fields):
        if name in batch:
            raise ValueError(f"a crop field named {name!r} would replace the batch's own")
        batch[name] = _stacked([c.fields.get(name) for c in crops])
    return batch


def _audio_tensor(crop: Crop) -> torch.Tensor:
    """A crop's audio (or what a transform made of it) as a tensor, detached
    from any graph; a ``ValueError`` naming the crop when it is none."""
    try:
        tensor = torch.as_tensor(crop.audio)
    except (TypeError, RuntimeError, ValueError) as exc:
        raise ValueError(
            f"collate: the audio of crop {crop.key!r} at {crop.start:g} s is "
            f"{type(crop.audio).__name__}, not an array ({exc}): a transform must return one"
        ) from None
    if tensor.ndim == 0:
        raise ValueError(
            f"collate: the audio of crop {crop.key!r} at {crop.start:g} s is a scalar, "
            "not an array: a transform must return one with the samples on its last axis"
        )
    return tensor.detach()


_padding_warned = False


def _warn_if_padded(arrays: list[torch.Tensor], leading: tuple[int, ...]) -> None:
    """Warn (once a process) when crops differ in more than their length: a
    mono crop batched with stereo ones gets a silent second channel, which
    the batch does not otherwise show."""
    global _padding_warned
    shapes = sorted({tuple(a.shape[:-1]) for a in arrays})
    if _padding_warned or len(shapes) < 2:
        return
    _padding_warned = True
    warnings.warn(
        f"collate: crops of leading shapes {', '.join(map(str, shapes))} in one batch are "
        f"zero-padded to {leading} (a mono crop gets silent channels); pass mono=True, or a "
        "transform that makes every crop the same shape but for its length",
        stacklevel=3,
    )


def _stacked(values: list[Any]) -> Any:
    """Numbers as one tensor (int64, float64 or bool), anything else as a
    list: a float64 column stays float64 (torch's default, float32, rounded
    0.43333333333333335 and any integer past 2**24 beside a float), and
    integers int64 can not hold (a uint64 past 2**63) stay a list."""
    if values and all(isinstance(v, bool | np.bool_) for v in values):
        return torch.tensor([bool(v) for v in values])
    if not values or not all(isinstance(v, int | float | np.number) for v in values):
        return values
    numbers = [v.item() if isinstance(v, np.number) else v for v in values]
    if all(isinstance(v, int) for v in numbers):
        return torch.tensor(numbers) if all(-(2**63) <= v < 2**63 for v in numbers) else values
    if any(isinstance(v, complex) for v in numbers):
        return torch.tensor(numbers)
    return torch.tensor(numbers, dtype=torch.float64)
