"""A training loop's view of CropDataset: checkpoints that survive any number of
resumes and any worker count, equal ranks, persistent workers, elastic resume."""

from __future__ import annotations

import faulthandler
import gc
import itertools
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")


import streamer  # noqa: E402
from streamer import ListCrops, RandomCrops  # noqa: E402
from streamer.torch import CropDataset, Skipped, collate, gather_state, merge_states  # noqa: E402

SAMPLER = RandomCrops(0.5, per_episode=9, min_duration=0.1)  # 63 crops of 7 episodes
BATCH = 4

#: A DataLoader worker that hangs leaves the loader polling until the test's
#: timeout, whose report shows only this process. Forked children of these
#: tests print every thread's stack and exit before that (the loader then
#: fails on the dead worker, the stacks in the test's captured stderr).
_CHILD_DEADLINE = 240.0
_watching = False


def _watch_a_forked_child() -> None:
    if _watching:
        faulthandler.dump_traceback_later(_CHILD_DEADLINE, exit=True)


os.register_at_fork(after_in_child=_watch_a_forked_child)


@pytest.fixture(autouse=True)
def hung_children_say_where() -> Iterator[None]:
    global _watching
    _watching = True
    yield
    _watching = False


def ids(batch: dict[str, Any]) -> list[str]:
    return [f"{k}@{s:.4f}" for k, s in zip(batch["key"], batch["start"].tolist(), strict=True)]


def loader(dataset: Any, num_workers: int, **options: Any) -> Any:
    return torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, num_workers=num_workers, collate_fn=collate, **options
    )


def dataset(packed: Path, **options: Any) -> CropDataset:
    options.setdefault("sample_rate", 16000)  # collate batches one rate
    return CropDataset(str(packed), SAMPLER, batch_size=BATCH, seed=5, **options)


@pytest.mark.parametrize(
    "workers", [(0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (2, 0, 1, 2)], ids=str
)
def test_three_resumes_reproduce_the_uninterrupted_batches(packed: Path, workers) -> None:  # type: ignore[no-untyped-def]
    """Stop after batches 2, 5 and 9, resume from state_dict(batch) each time
    (the last case with a different num_workers at every restart)."""
    whole = [ids(b) for b in loader(dataset(packed), workers[0])]
    assert len(whole) == 16  # 63 crops: 15 full batches and one of 3
    got: list[list[str]] = []
    state = None
    for stop, num_workers in zip((2, 5, 9, None), workers, strict=True):
        data = dataset(packed)
        if state is not None:
            data.load_state_dict(state)
            assert len(data) == 63 - BATCH * len(got)  # what is left of the rank's share
        for batch in loader(data, num_workers):
            got.append(ids(batch))
            if len(got) == stop:
                state = data.state_dict(batch)
                break
    assert got == whole


def test_a_pass_broken_off_in_the_main_process_leaves_no_streamer_to_the_collector(
    packed: Path,
) -> None:
    """A loop without DataLoader workers left mid-epoch (``break``): the
    pass's Streamer (its dataset's shard maps and plan) stayed alive in a
    reference cycle of its own (the skip callback) until a full garbage
    collection, in this process and in every DataLoader worker forked
    meanwhile, which inherited it and ran its finalizer at whatever moment
    and on whatever thread its collector ran (one such moment hung the
    worker: its store loop's start)."""
    data = dataset(packed)
    made: list[weakref.ref[Any]] = []
    planner = data.streamer

    def recorded() -> Any:
        s = planner()
        made.append(weakref.ref(s))
        return s

    data.streamer = recorded  # type: ignore[method-assign]
    gc.disable()
    try:
        for n, _ in enumerate(loader(data, 0), start=1):
            if n == 2:
                break
        assert made and [ref() for ref in made] == [None] * len(made)
    finally:
        gc.enable()


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_stateful_dataloader_resumes_three_times(packed: Path, num_workers: int) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def make() -> Any:
        return stateful.StatefulDataLoader(
            dataset(packed), batch_size=BATCH, num_workers=num_workers, collate_fn=collate
        )

    whole = [ids(b) for b in make()]
    got: list[list[str]] = []
    state = None
    for stop in (3, 6, 11, None):
        dl = make()
        if state is not None:
            dl.load_state_dict(state)
        for batch in dl:
            got.append(ids(batch))
            if len(got) == stop:
                state = dl.state_dict()
                break
    assert got == whole


def test_a_stateful_dataloader_state_of_another_batch_size_names_the_setting(
    packed: Path,
) -> None:
    """A worker's state restored by a loader of another batch size: refused
    with both whole settings dumped ("state is for {...}, this Streamer is
    {...}"), eight entries each, for the reader to tell which one differs."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def make(batch_size: int) -> Any:
        data = CropDataset(str(packed), SAMPLER, batch_size=batch_size, seed=5, sample_rate=16000)
        return stateful.StatefulDataLoader(
            data, batch_size=batch_size, num_workers=2, collate_fn=collate
        )

    first = make(BATCH)
    next(iter(first))
    state = first.state_dict()
    del first
    resumed = make(2)
    resumed.load_state_dict(state)
    with pytest.raises(ValueError) as refused:
        next(iter(resumed))
    assert (
        "state was taken with batch_size=4, this Streamer has batch_size=2: resume with "
        "batch_size=4, as it was taken" in str(refused.value)
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_batch_of_a_pass_the_loader_restored_from_a_resumed_one_is_no_rank_checkpoint(
    packed: Path, num_workers: int
) -> None:
    """A ``StatefulDataLoader`` checkpoint of a pass resumed from a merged
    state (``done``: crops consumed before it), restored in a new run
    whose dataset was not given that state: its workers go on with that
    pass, whose crops' positions are places in the share left after
    ``done``. ``state_dict(batch)`` read them as places in the whole
    epoch's share: the checkpoint marked other crops consumed, and its
    resume served 8 crops a second time and never served 8 others. Without
    workers the loader restores the state into the dataset itself, which
    then knows the pass: its checkpoint resumes exactly."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def make(data: CropDataset) -> Any:
        return stateful.StatefulDataLoader(
            data, batch_size=BATCH, num_workers=num_workers, collate_fn=collate
        )

    whole = [ids(b) for b in loader(dataset(packed), 0)]
    data = dataset(packed)
    batch = next(iter(loader(data, 0)))
    merged = merge_states(data, [data.state_dict(batch)])  # the job's state after one batch
    data = dataset(packed)
    data.load_state_dict(merged)
    first = make(data)
    for n, _ in enumerate(first, start=1):
        if n == 2:
            state = first.state_dict()  # after batches 1 and 2 of the resumed pass
            break
    del first
    data = dataset(packed)  # a new run: the loader's state restores the pass
    resumed = make(data)
    resumed.load_state_dict(state)
    data.set_epoch(0)
    batch = next(iter(resumed))
    assert ids(batch) == whole[3]
    if num_workers:
        with pytest.raises(ValueError, match="a StatefulDataLoader restored in its workers"):
            data.state_dict(batch)
        return
    again = dataset(packed)
    again.load_state_dict(data.state_dict(batch))
    assert [ids(b) for b in loader(again, 0)] == whole[4:]


@pytest.mark.parametrize("crops", [None, 60], ids=["last batch short", "whole batches"])
@pytest.mark.parametrize("on_the_last_batch", [False, True])
@pytest.mark.parametrize(
    ("num_workers", "persistent"), [(0, False), (1, False), (1, True), (2, False), (2, True)]
)
def test_a_stateful_dataloader_checkpoint_at_an_epoch_end_goes_on_with_set_epoch(
    packed: Path,
    num_workers: int,
    persistent: bool,
    on_the_last_batch: bool,
    crops: int | None,
    recwarn: pytest.WarningsRecorder,
) -> None:
    """A ``StatefulDataLoader`` checkpoint taken once epoch 0 ended (or in
    the loop, on its last batch: a "checkpoint every N steps" that lands
    there), restored in a new loader, then the documented loop
    (``set_epoch(e)`` before each epoch): epochs 1 and 2 are served. The
    loader restores the dataset's state lazily, at ``iter``, after
    ``set_epoch``: the finished state overrode it, and epoch 1 came out
    empty (no workers, one persistent worker) or as epoch 0 again (two
    persistent workers), without a word; taken on the last batch with one
    worker, epoch 0 came again whole (the worker's own state was read as
    a rank's). An epoch of whole batches, taken on its last batch without
    workers, came again whole (its state, finished in this process, restarted
    the epoch set_epoch chose again)."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    options = {} if crops is None else {"crops_per_epoch": crops}

    def make(data: Any) -> Any:
        return stateful.StatefulDataLoader(
            data,
            batch_size=BATCH,
            num_workers=num_workers,
            persistent_workers=persistent,
            collate_fn=collate,
        )

    reference = dataset(packed, **options)
    epochs = []
    for epoch in range(3):
        reference.set_epoch(epoch)
        epochs.append([ids(b) for b in loader(reference, 0)])
    assert epochs[0] != epochs[1] != epochs[2]
    first = make(dataset(packed, **options))
    served = []
    for batch in first:
        served.append(ids(batch))
        if on_the_last_batch and len(served) == len(epochs[0]):
            state = first.state_dict()
    assert served == epochs[0]
    if not on_the_last_batch:
        state = first.state_dict()
    data = dataset(packed, **options)  # later, in a new process
    resumed = make(data)
    resumed.load_state_dict(state)
    # Taken in the loop, the checkpoint is of epoch 0, all of it consumed:
    # the loop resumes at epoch 0, which has nothing left.
    for epoch in (0, 1, 2) if on_the_last_batch else (1, 2):
        data.set_epoch(epoch)
        want = [] if on_the_last_batch and epoch == 0 else epochs[epoch]
        assert [ids(b) for b in resumed] == want, epoch
    assert not [w for w in recwarn if "iterated again" in str(w.message)]


def test_a_finished_state_without_set_epoch_goes_on_with_the_next_epoch(packed: Path) -> None:
    """Restored with no ``set_epoch`` since, a finished pass's state starts
    the next epoch (as a Streamer goes on), not an empty one."""
    data = dataset(packed)
    data.set_epoch(4)
    finished = [ids(b) for b in loader(data, 0)]
    state = data.state_dict()
    reference = dataset(packed)
    reference.set_epoch(5)
    fresh = dataset(packed)
    fresh.load_state_dict(state)
    assert fresh.epoch == 5
    assert [ids(b) for b in loader(fresh, 0)] == [ids(b) for b in loader(reference, 0)] != finished


def test_a_worker_state_is_refused_outside_its_worker(packed: Path) -> None:
    data = dataset(packed)
    worker_state = {**data.streamer().state_dict(), "worker": 1, "num_workers": 2}
    with pytest.raises(ValueError, match="state of DataLoader worker 1 of 2"):
        data.load_state_dict(worker_state)
    with pytest.raises(ValueError, match="has not iterated the dataset"):
        data.state_dict()
    with pytest.raises(ValueError, match="seed"):
        CropDataset(str(packed), SAMPLER, seed=6).load_state_dict(
            data.state_dict({"position": [0, 1, 2, 3]})
        )


@pytest.mark.parametrize("peek", ["set_epoch", "no set_epoch", "an epoch"])
def test_state_dict_without_a_batch_is_never_of_a_pass_before(packed: Path, peek: str) -> None:
    """The main process iterated once (a peek at a crop, or a whole epoch
    with ``num_workers=0``), then DataLoader workers iterate: the main
    process's ``state_dict()`` returned the old pass's state (position 1 of
    the peek, or a finished one), whose resume repeated the epoch. It says
    it has not iterated this pass, as a fresh dataset does."""
    data = dataset(packed)
    if peek == "an epoch":
        assert len(list(loader(data, 0))) == 16
        data.state_dict()  # the epoch it iterated: finished
    else:
        next(iter(data))
        assert data.state_dict()["position"] == 1
    if peek != "no set_epoch":
        data.set_epoch(0 if peek == "set_epoch" else 1)
        with pytest.raises(ValueError, match="has not iterated the dataset"):
            data.state_dict()
    batch = next(iter(loader(data, 2)))
    assert data.state_dict(batch)["consumed"] == BATCH
    with pytest.raises(ValueError, match="has not iterated the dataset"):
        data.state_dict()
    data.set_epoch(2)
    batch = next(iter(loader(data, 0)))  # its own pass again: its state
    assert data.state_dict()["consumed"] == data.state_dict(batch)["consumed"] == BATCH


@pytest.mark.parametrize(
    ("num_workers", "persistent"), [(0, False), (2, False), (2, True)], ids=str
)
def test_the_epoch_loop_resumes_a_checkpoint_with_set_epoch(
    packed: Path, num_workers: int, persistent: bool, recwarn: pytest.WarningsRecorder
) -> None:
    """The README's loop, ``for epoch in range(data.epoch, n):
    data.set_epoch(epoch)``, after ``load_state_dict``: ``set_epoch`` of the
    loaded epoch restarted it, serving the crops before the checkpoint
    again without a word. It keeps the resume point now; another epoch
    there discards it with a warning naming both."""
    reference = dataset(packed)
    whole = []
    for epoch in range(2):
        reference.set_epoch(epoch)
        whole.append([ids(b) for b in loader(reference, 0)])
    first = dataset(packed)
    got = []
    for batch in loader(first, num_workers):
        got.append(ids(batch))
        if len(got) == 5:
            state = first.state_dict(batch)
            break
    data = dataset(packed)
    data.load_state_dict(state)
    resumed = loader(data, num_workers, persistent_workers=persistent)
    for epoch in range(data.epoch, 2):
        data.set_epoch(epoch)
        got += [ids(b) for b in resumed]
    assert got == whole[0] + whole[1]
    assert not [w for w in recwarn if "resume point" in str(w.message)]
    elsewhere = dataset(packed)
    elsewhere.load_state_dict(state)
    with pytest.warns(UserWarning, match=r"set_epoch\(1\) .* of epoch 0 .* discards"):
        elsewhere.set_epoch(1)
    assert [ids(b) for b in loader(elsewhere, num_workers)] == whole[1]


def test_persistent_workers_follow_set_epoch(packed: Path) -> None:
    data = dataset(packed)
    persistent = loader(data, 2, persistent_workers=True)
    epochs = []
    for epoch in range(2):
        data.set_epoch(epoch)
        epochs.append([ids(b) for b in persistent])
    assert epochs[0] != epochs[1]
    fresh = dataset(packed)
    fresh.set_epoch(1)
    assert [ids(b) for b in loader(fresh, 2)] == epochs[1]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_pass_repeated_without_set_epoch_is_warned_of_once(
    packed: Path, num_workers: int, capfd: pytest.CaptureFixture[str]
) -> None:
    """Iterating again without ``set_epoch`` serves the same crops again: a
    careful loop wants to hear of it, once (in the process that serves the
    rank's first turn: the main one, or DataLoader worker 0)."""
    data = dataset(packed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options = {"worker_init_fn": warnings_to_stderr} if num_workers else {}
        passes = [[ids(b) for b in loader(data, num_workers, **options)] for _ in range(3)]
        data.set_epoch(1)
        passes.append([ids(b) for b in loader(data, num_workers, **options)])
        data.set_epoch(1)
        passes.append([ids(b) for b in loader(data, num_workers, **options)])
    assert passes[0] == passes[1] == passes[2] != passes[3] == passes[4]
    said = [str(w.message) for w in caught if "iterated again" in str(w.message)]
    said += [line for line in capfd.readouterr().err.splitlines() if "iterated again" in line]
    assert len(said) == 1 and "epoch 0 is iterated again from the same point" in said[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stateful_dataloader_state_of_another_epoch_than_set_epoch_is_warned_of(
    packed: Path, workers: int, capfd: pytest.CaptureFixture[str]
) -> None:
    """A loop that restores a ``StatefulDataLoader`` checkpoint taken in
    epoch 1 and then counts its epochs from 0 (``set_epoch(0)``): the
    loader restores the state in its workers after ``set_epoch``, so its
    first pass serves the rest of epoch 1, and the loop's next "epoch 1"
    all of it again. That went without a word (``set_epoch`` of another
    epoch right after ``load_state_dict`` warns); worker 0 says so now, once
    (without workers, the loop's process). The checkpoint's own epoch is no
    warning."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def make(data: CropDataset) -> Any:
        return stateful.StatefulDataLoader(
            data,
            batch_size=BATCH,
            num_workers=workers,
            collate_fn=collate,
            worker_init_fn=warnings_to_stderr,
        )

    data = dataset(packed)
    data.set_epoch(1)
    first = make(data)
    for n, _ in enumerate(first, start=1):
        if n == 3:
            state = first.state_dict()
            break
    del first
    capfd.readouterr()
    said = []
    for epoch in (0, 1):
        data = dataset(packed)
        resumed = make(data)
        resumed.load_state_dict(state)
        data.set_epoch(epoch)
        with warnings.catch_warnings(record=True) as here:  # without workers: this process
            warnings.simplefilter("always")
            served = {e for b in resumed for e in b["epoch"].tolist()}
        assert served == {1}  # the checkpoint's epoch, as before
        lines = capfd.readouterr().err.splitlines() + [str(w.message) for w in here]
        said.append([line for line in lines if "set_epoch(" in line])
    assert len(said[0]) == 1 and "state of epoch 1" in said[0][0] and "set_epoch(0)" in said[0][0]
    assert said[1] == []


def warnings_to_stderr(worker: int) -> None:
    """Show a DataLoader worker's warnings on its stderr, as an ordinary
    process does (a forked worker inherits the test's warning recorder)."""

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


def test_len_is_planned_once_a_pass(packed: Path) -> None:
    data = dataset(packed, rank=1, world_size=2)
    assert len(data) == 31
    planner = data.streamer
    data.streamer = None  # type: ignore[assignment,method-assign]
    assert [len(data) for _ in range(3)] == [31] * 3  # no Streamer made
    data.streamer = planner  # type: ignore[method-assign]
    data.load_state_dict(data.state_dict({"position": [0, 1, 2, 3]}))
    assert len(data) == 27
    data.set_epoch(0)  # the loaded state's epoch: its resume point stays
    assert len(data) == 27
    with pytest.warns(UserWarning, match="discards its resume point"):
        data.set_epoch(1)
    assert len(data) == 31


@pytest.mark.parametrize(("drop_last", "per_rank"), [(True, 31), (False, 32)])
def test_ranks_get_equal_shares_of_an_odd_count(
    packed: Path, drop_last: bool, per_rank: int
) -> None:
    """63 crops over 2 ranks: 31 each (one dropped) or 32 each (one repeated)."""
    shares = []
    for rank in range(2):
        data = dataset(packed, rank=rank, world_size=2, drop_last=drop_last)
        assert len(data) == per_rank
        batches = list(loader(data, 2))
        assert len(batches) == -(-per_rank // BATCH)
        shares.append([crop for b in batches for crop in ids(b)])
    assert [len(s) for s in shares] == [per_rank, per_rank]
    everything = {crop for b in loader(dataset(packed), 0) for crop in ids(b)}
    union = set(shares[0]) | set(shares[1])
    assert union <= everything and len(everything - union) == (1 if drop_last else 0)


def test_spawned_loader_workers_take_their_ranks_share(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ranks of a gloo group given their rank in code (``mp.spawn``: no
    ``RANK`` / ``WORLD_SIZE`` in the environment), DataLoader workers started
    by ``spawn`` (no copy of the group): each rank's workers serve that
    rank's share, not the whole epoch each."""
    shares = spawn_two_ranks(monkeypatch, spawned_rank, packed, tmp_path)
    assert [len(s["crops"]) for s in shares] == [s["len"] for s in shares] == [4, 4]
    everything = [crop for b in loader(dataset(packed, max_crops=8), 0) for crop in ids(b)]
    assert shares[0]["crops"] + shares[1]["crops"] == everything


def test_a_dataset_of_a_mix_or_an_open_dataset_travels_to_spawned_workers(
    packed: Path, tmp_path: Path
) -> None:
    """DataLoader workers started by ``spawn`` or ``forkserver`` get the
    dataset pickled: a CropDataset over a ``Mix`` (or an open ``Dataset``)
    failed there with ``TypeError: cannot pickle '_thread.lock' object``
    (an open dataset's locks). An open dataset travels as what opens it
    again, and its copy plans and decodes the same crops."""
    import pickle

    mix = streamer.Mix([(str(packed), 1.0, "path"), (streamer.open_dataset(packed), 1.0, "open")])
    data = CropDataset(mix, SAMPLER, batch_size=BATCH, seed=5, sample_rate=16000, max_crops=6)
    copy = pickle.loads(pickle.dumps(data))
    assert [ids(b) for b in loader(copy, 0)] == [ids(b) for b in loader(data, 0)]
    opened = streamer.open_dataset(packed)
    again = pickle.loads(pickle.dumps(opened))
    assert (again.url, again.shard_names) == (opened.url, opened.shard_names)


def spawn_two_ranks(monkeypatch: pytest.MonkeyPatch, target: Any, *args: Any) -> list[Any]:
    """Run ``target(rank, *args[:-1], port, out)`` in two spawned processes
    that form a gloo group on a free loopback port, with no rank in the
    environment (``mp.spawn``: the group alone says it); what each wrote
    to ``out / f"{rank}.json"`` (``out`` is ``args[-1]``)."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    torch.multiprocessing.spawn(target, args=(*args[:-1], port, args[-1]), nprocs=2)
    return [json.loads((args[-1] / f"{rank}.json").read_text()) for rank in range(2)]


def spawned_rank(rank: int, packed: Path, port: int, out: Path) -> None:
    """One rank of ``test_spawned_loader_workers_take_their_ranks_share``."""
    url = f"tcp://127.0.0.1:{port}"
    torch.distributed.init_process_group("gloo", init_method=url, rank=rank, world_size=2)
    try:
        data = dataset(packed, max_crops=8)
        crops = [c for b in loader(data, 1, multiprocessing_context="spawn") for c in ids(b)]
        (out / f"{rank}.json").write_text(json.dumps({"len": len(data), "crops": crops}))
    finally:
        torch.distributed.destroy_process_group()


def test_ranks_that_see_different_data_are_stopped_before_an_epoch(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two gloo ranks, one of whose local copy lacks a shard (served anyway:
    ``allow_incomplete``): they would plan different epochs (crops served
    twice and never, shares of different lengths: a DDP hang). Both raise
    when the dataset is made, naming what each rank sees; later epochs and
    resumes are compared too."""
    short = tmp_path / "node1"
    shutil.copytree(packed, short)
    for missing in short.glob("*/shard-000001.wsds"):
        missing.unlink()
    said = spawn_two_ranks(monkeypatch, rank_of_another_dataset, packed, short, tmp_path)
    assert said[0] == said[1]
    assert said[0]["made"].startswith("the ranks plan different epochs")
    assert "rank 0: epoch 0, 63 of 63 crops left" in said[0]["made"]
    assert "7 episodes in 2 shards; rank 1: epoch 0, 54 of 54 crops left" in said[0]["made"]
    assert "6 episodes in 1 shards" in said[0]["made"]
    assert said[0]["set_epoch"].startswith("the ranks plan different epochs")
    assert said[0]["same data"] == [63, 31, 31]


def rank_of_another_dataset(rank: int, packed: Path, short: Path, port: int, out: Path) -> None:
    """One rank of ``test_ranks_that_see_different_data_are_stopped_before_an_epoch``."""
    url = f"tcp://127.0.0.1:{port}"
    torch.distributed.init_process_group("gloo", init_method=url, rank=rank, world_size=2)
    said: dict[str, Any] = {}
    try:
        try:
            CropDataset(str(short if rank else packed), SAMPLER, seed=5, allow_incomplete=True)
        except ValueError as error:
            said["made"] = str(error)
        data = CropDataset(str(packed), SAMPLER, seed=5)  # the same everywhere: no error
        said["same data"] = [data.total(), len(data), len(list(data))]
        data.sampler = SAMPLER if rank else RandomCrops(0.5, per_episode=8)
        try:
            data.set_epoch(1)
        except ValueError as error:
            said["set_epoch"] = str(error).split(":")[0]
        (out / f"{rank}.json").write_text(json.dumps(said))
    finally:
        torch.distributed.destroy_process_group()


def test_a_rank_whose_copy_is_incomplete_stops_every_rank(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not allowed, the incomplete copy is an error on its rank, which used
    to raise it alone while the other waited on it in the plans' exchange
    (gloo: "connection closed by peer"; NCCL: until its timeout). It says
    so in the exchange: both raise, the other naming it."""
    short = tmp_path / "node1"
    shutil.copytree(packed, short)
    for missing in short.glob("*/shard-000001.wsds"):
        missing.unlink()
    said = spawn_two_ranks(monkeypatch, rank_of_an_incomplete_copy, packed, short, tmp_path)
    assert said[1]["type"] == "IncompleteDatasetError"
    assert "1 of the 2 shards its pack planned are present" in said[1]["made"]
    assert said[0]["type"] == "ValueError"
    assert said[0]["made"].startswith(
        "a rank cannot plan its epoch: rank 1: IncompleteDatasetError"
    )
    assert str(short) in said[0]["made"]


def rank_of_an_incomplete_copy(rank: int, packed: Path, short: Path, port: int, out: Path) -> None:
    """One rank of ``test_a_rank_whose_copy_is_incomplete_stops_every_rank``."""
    url = f"tcp://127.0.0.1:{port}"
    torch.distributed.init_process_group("gloo", init_method=url, rank=rank, world_size=2)
    said: dict[str, Any] = {}
    try:
        try:
            CropDataset(str(short if rank else packed), SAMPLER, seed=5)
        except Exception as error:  # what each rank raised is the result
            said = {"type": type(error).__name__, "made": str(error)}
        (out / f"{rank}.json").write_text(json.dumps(said))
    finally:
        torch.distributed.destroy_process_group()


def test_the_ranks_exchanges_leave_nothing_for_a_backend_thread_to_free(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CropDataset compares the ranks' plans (when made, on ``load_state_dict``
    and ``set_epoch``) and ``gather_state`` their states by all-gathers whose
    tensors gloo's threads still hold a moment after the call returns. A
    Python object whose last reference such a thread drops is freed there,
    under a Python thread state it takes first: CPython's thread-list lock,
    without the GIL. A DataLoader forking its workers at that moment (right
    after ``load_state_dict``) copies the lock held, and before CPython
    3.11.10 / 3.12 (gh-112275) the worker waits for it forever as it starts:
    in CI a resumed 2-rank run of examples/torch_ddp.py hung, its other rank
    timing out in an all-reduce. Here a stand-in for gloo's threads holds
    every tensor given to an all-gather until the call has returned and
    lets go of it on a thread of its own: none of CropDataset's may be freed
    there (a plain ``all_gather_object``'s are: the stand-in sees them)."""
    said = spawn_two_ranks(monkeypatch, rank_behind_a_holding_backend, packed, tmp_path)
    assert said[0] == said[1]
    assert said[0].pop("all_gather_object") > 0
    assert said[0] == {"made": 0, "gather_state": 0, "load_state_dict": 0, "set_epoch": 0}


class HoldingBackend:
    """All-gathers whose tensors are held after the call returns, then let go
    of on another thread (``let_go``), as gloo's threads do; it counts those
    freed there (the last reference was the held one)."""

    def __init__(self) -> None:
        self.caller = threading.get_native_id()
        self.held: list[Any] = []
        self.freed_elsewhere = 0
        self.real = torch.distributed.all_gather

    def all_gather(
        self, tensor_list: list[Any], tensor: Any, group: Any = None, async_op: bool = False
    ) -> Any:
        work = self.real(tensor_list, tensor, group=group, async_op=True)
        work.wait()
        for held in (*tensor_list, tensor):
            weakref.finalize(held, self._freed)
            self.held.append(held)
        return work if async_op else None

    def _freed(self) -> None:
        if threading.get_native_id() != self.caller:
            self.freed_elsewhere += 1

    def let_go(self) -> int:
        """Drop what is held, on a thread of its own: how many were freed there.
        Only references dropped count: cyclic garbage is collected here first,
        and no collection runs while the thread lets go (one started by its
        allocations would free other threads' garbage there: a false count)."""
        gc.collect()
        before, held = self.freed_elsewhere, self.held
        self.held = []
        thread = threading.Thread(target=held.clear)
        gc.disable()
        try:
            thread.start()
            thread.join()
        finally:
            gc.enable()
        return self.freed_elsewhere - before


def rank_behind_a_holding_backend(rank: int, packed: Path, port: int, out: Path) -> None:
    """One rank of ``test_the_ranks_exchanges_leave_nothing_for_a_backend_thread_to_free``."""
    url = f"tcp://127.0.0.1:{port}"
    torch.distributed.init_process_group("gloo", init_method=url, rank=rank, world_size=2)
    backend = HoldingBackend()
    c10d = torch.distributed.distributed_c10d  # all_gather_object calls its all_gather
    c10d.all_gather = torch.distributed.all_gather = backend.all_gather
    freed: dict[str, int] = {}
    try:
        torch.distributed.all_gather_object([None, None], rank)
        freed["all_gather_object"] = backend.let_go()
        data = dataset(packed, mono=True)
        freed["made"] = backend.let_go()
        batch = next(iter(loader(data, 0)))
        state = gather_state(data, batch)
        freed["gather_state"] = backend.let_go()
        data.load_state_dict(state)
        freed["load_state_dict"] = backend.let_go()
        data.set_epoch(1)
        freed["set_epoch"] = backend.let_go()
        (out / f"{rank}.json").write_text(json.dumps(freed))
    finally:
        c10d.all_gather = torch.distributed.all_gather = backend.real
        torch.distributed.destroy_process_group()


def test_uneven_shares_on_request(packed: Path) -> None:
    sizes = [len(dataset(packed, rank=r, world_size=2, even=False)) for r in range(2)]
    assert sorted(sizes) == [31, 32]


def consume(packed: Path, world_size: int, state: dict[str, Any] | None, batches: int | None):  # type: ignore[no-untyped-def]
    """Each rank of ``world_size`` resumes ``state`` and consumes ``batches``
    batches (all: None); their crops and their states."""
    crops, states = [], []
    for rank in range(world_size):
        data = dataset(packed, rank=rank, world_size=world_size)
        if state is not None:
            data.load_state_dict(state)
        taken: list[str] = []
        for n, batch in enumerate(loader(data, 1 + rank % 2), start=1):
            taken += ids(batch)
            if n == batches:
                states.append(data.state_dict(batch))
                break
        crops.append(taken)
    return crops, states


@pytest.mark.parametrize("world_sizes", [(2, 1, 2), (2, 3, 1), (3, 2, 4)], ids=str)
def test_elastic_resume_takes_every_crop_once(packed: Path, world_sizes) -> None:  # type: ignore[no-untyped-def]
    """Checkpoint at W, resume at W' then W'': no crop twice, the ranks
    equal, every crop taken but fewer than W'' dropped at the end."""
    everything = [crop for b in loader(dataset(packed), 0) for crop in ids(b)]
    first, second, last = world_sizes
    taken: list[str] = []
    crops, states = consume(packed, first, None, 2)
    taken += [c for part in crops for c in part]
    merged = merge_states(dataset(packed, rank=0, world_size=first), states)
    assert merged == merge_states(dataset(packed, rank=0, world_size=first), states[::-1])
    crops, states = consume(packed, second, merged, 1)
    taken += [c for part in crops for c in part]
    merged = merge_states(dataset(packed, rank=0, world_size=second), states)
    crops, _ = consume(packed, last, merged, None)
    assert len({len(part) for part in crops}) == 1  # equal ranks
    taken += [c for part in crops for c in part]
    assert len(taken) == len(set(taken))  # nothing twice
    assert set(taken) <= set(everything) and len(everything) - len(taken) < last


def test_merge_needs_every_rank(packed: Path) -> None:
    _, states = consume(packed, 2, None, 1)
    with pytest.raises(ValueError, match="all 2 ranks"):
        merge_states(dataset(packed), states[:1])
    with pytest.raises(ValueError, match="rank 0 of 2, this is rank 0 of 3"):
        dataset(packed, rank=0, world_size=3).load_state_dict(states[0])


def test_transform_runs_in_the_decoding_worker(packed: Path) -> None:
    def spectrum(crop: Any) -> Any:
        frames = torch.stft(torch.as_tensor(crop.audio), 256, return_complex=True).abs()
        return torch.cat([frames, torch.full_like(frames[:, :1], float(os.getpid()))], 1)

    data = dataset(packed, sample_rate=16000, mono=True, max_crops=8, transform=spectrum)
    batch = next(iter(loader(data, 1)))
    assert batch["audio"].shape[:3] == (BATCH, 1, 130)  # 129 bins + the pid row
    assert int(batch["audio"][0, 0, 129, 0]) != os.getpid()


def test_collate_masks_and_fixes_the_length(packed: Path) -> None:
    crops = list(dataset(packed, sample_rate=16000, mono=True, max_crops=3))
    crops[0].audio = crops[0].audio[:, :100]
    batch = collate(crops, length=4000)
    assert batch["audio"].shape == (3, 1, 4000) and batch["lengths"].tolist()[0] == 100
    assert batch["mask"].shape == (3, 4000) and int(batch["mask"][0].sum()) == 100
    assert bool(batch["mask"][1].all()) and batch["lengths"].tolist()[1:] == [4000, 4000]
    assert float(batch["audio"][0, 0, 100:].abs().sum()) == 0.0
    assert torch.equal(batch["audio"][1, 0], torch.as_tensor(crops[1].audio[0, :4000]))
    assert batch["position"].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="length must be >= 1"):
        collate(crops, length=0)


def test_a_state_for_other_data_is_refused(packed: Path) -> None:
    """A checkpoint of another sampler (or data, or options) plans another
    epoch; resuming it would repeat or skip crops without a word."""
    data = dataset(packed)
    batch = next(iter(loader(data, 0)))
    state = data.state_dict(batch)
    assert state["consumed"] == BATCH and state["total"] == 63
    other = CropDataset(str(packed), RandomCrops(0.5, per_episode=8), seed=5)
    with pytest.raises(ValueError, match="epoch of 63 crops, this dataset plans 56"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="another order of epoch 0"):
        dataset(packed, shuffle_window=0).load_state_dict(state)  # same crops, reordered
    with pytest.raises(ValueError, match="1000 crops of this rank's share were consumed"):
        dataset(packed).load_state_dict({**state, "consumed": 1000})
    with pytest.raises(ValueError, match="outside the epoch's 63 crops"):
        dataset(packed).load_state_dict({**state, "done": [[-3, 2]]})
    with pytest.raises(ValueError, match="batch_size must be a whole number >= 1"):
        CropDataset(str(packed), SAMPLER, batch_size=0)
    with pytest.raises(ValueError, match="another epoch"):
        merge_states(other, [state])
    with pytest.raises(ValueError, match="has no 'position'"):
        data.state_dict({"audio": batch["audio"]})


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_batch_of_the_last_epoch_is_no_checkpoint_of_the_next(
    packed: Path, num_workers: int
) -> None:
    """A checkpoint taken with the last batch once ``set_epoch`` moved on
    would say the next epoch's first 63 crops were consumed: a resume would
    skip that whole epoch without a word."""
    data = dataset(packed)
    batches = list(loader(data, num_workers))
    assert batches[-1]["epoch"].tolist() == [0, 0, 0]
    assert data.state_dict(batches[-1])["consumed"] == 63
    data.set_epoch(1)
    with pytest.raises(ValueError, match="batch is of epoch 0, this dataset is at epoch 1"):
        data.state_dict(batches[-1])


def test_a_batch_size_other_than_the_loaders_is_caught(packed: Path) -> None:
    """Workers that take turns by 2 crops under a DataLoader batching 4: the
    first batch is worker 0's positions 0, 1, 4, 5. A checkpoint after it
    would count 2 and 3 as consumed, so it is refused."""
    data = CropDataset(str(packed), SAMPLER, batch_size=2, seed=5, sample_rate=16000)
    batch = next(iter(loader(data, 2)))
    with pytest.raises(ValueError, match="not consecutive"):
        data.state_dict(batch)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("loader_batch", [2, 3, 8])
def test_a_loader_batching_other_than_batch_size_is_refused_at_its_first_batch(
    packed: Path, num_workers: int, loader_batch: int
) -> None:
    """``CropDataset(batch_size=4)`` under a DataLoader batching 2 with two
    workers: worker 0's turn (crops 0-3) came out as [0, 1] and [2, 3],
    worker 1's as [4, 5] and [6, 7], and the loader yielded [0, 1] then
    [4, 5]. Each batch is consecutive, so the checkpoint after the second
    said 6 crops were consumed: 2 and 3, never seen, were lost on resume.
    Every batch that is not one whole turn is refused, the first one
    already (and by ``gather_state``); the last, short batch of the rank's
    share is one."""
    data = dataset(packed)
    mismatched = torch.utils.data.DataLoader(
        data, batch_size=loader_batch, num_workers=num_workers, collate_fn=collate
    )
    first = next(iter(mismatched))
    for checkpoint in (data.state_dict, lambda batch: gather_state(data, batch)):
        with pytest.raises(ValueError, match=r"not one turn of 4 crops from crop 0 on|not consec"):
            checkpoint(first)
    data.set_epoch(0)
    batches = list(loader(data, num_workers))
    assert [len(b["key"]) for b in batches[-2:]] == [4, 3]
    assert [data.state_dict(b)["consumed"] for b in batches[-2:]] == [60, 63]
    resumed = dataset(packed)
    resumed.load_state_dict(data.state_dict(batches[1]))
    skewed = collate([Skipped(p, "CropError") for p in range(9, 13)])  # not at a turn's start
    with pytest.raises(ValueError, match=r"crops 9 to 12 .* from crop 8 on"):
        resumed.state_dict(skewed)


def test_a_batch_refused_on_one_rank_stops_gather_state_on_every_rank(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gather_state`` with a batch only one rank refuses: that rank raised
    alone, and the others waited in the exchange for it. Every rank raises,
    naming the rank and what it refused."""
    said = spawn_two_ranks(monkeypatch, rank_of_a_refused_batch, packed, tmp_path)
    assert said[0] == said[1]
    assert said[0].startswith("rank 1: the batch holds crops 0 to 1")


def rank_of_a_refused_batch(rank: int, packed: Path, port: int, out: Path) -> None:
    """One rank of ``test_a_batch_refused_on_one_rank_stops_gather_state_on_every_rank``."""
    url = f"tcp://127.0.0.1:{port}"
    torch.distributed.init_process_group("gloo", init_method=url, rank=rank, world_size=2)
    try:
        data = dataset(packed)
        batch = collate([Skipped(p, "CropError", 0) for p in range(2 if rank else BATCH)])
        try:
            gather_state(data, batch)
        except ValueError as error:
            (out / f"{rank}.json").write_text(json.dumps(str(error)))
    finally:
        torch.distributed.destroy_process_group()


def test_a_killed_dataloader_worker_loses_no_crop(packed: Path) -> None:
    """SIGKILL a DataLoader worker mid-epoch: the DataLoader raises, and the
    checkpoint of the last batch the loop consumed resumes the exact rest."""
    whole = [ids(b) for b in loader(dataset(packed), 2)]
    got, state = in_a_child_process(packed, after=5)
    assert 5 <= len(got) < len(whole)
    resumed = dataset(packed)
    resumed.load_state_dict(state)
    assert got + [ids(b) for b in loader(resumed, 2)] == whole


def failing(packed: Path) -> ListCrops:
    """4 crops of each of the 7 episodes; those of the first episode start
    past its end, so they fail (``CropError``) wherever they fall in turns."""
    keys = sorted(streamer.open_dataset(packed).keys())
    starts = [(key, 0.5 * n + (50 if key == keys[0] else 0)) for key in keys for n in range(4)]
    return ListCrops([(key, start, start + 0.4) for key, start in starts])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_failed_crops_keep_the_batches_and_the_checkpoints(packed: Path, num_workers: int) -> None:
    """Crops that fail keep their place in their batch, named in it: every
    rank's batch count stays the rank's share, each batch's checkpoint is
    exact, and a resume after one continues with the next batch."""

    def data() -> CropDataset:
        return CropDataset(
            str(packed), failing(packed), batch_size=BATCH, seed=5, sample_rate=16000
        )

    whole = list(loader(data(), num_workers))
    assert len(whole) == 7  # 28 crops
    skipped = [reason for batch in whole for _, reason in batch["skipped"]]
    assert skipped == ["CropError"] * 4
    assert sum(len(b["key"]) for b in whole) == 24
    data_then = data()
    for n, batch in enumerate(loader(data_then, num_workers), start=1):
        if n == 3:
            state = data_then.state_dict(batch)
            break
    assert state["consumed"] == 12
    resumed = data()
    resumed.load_state_dict(state)
    assert [ids(b) for b in loader(resumed, num_workers)] == [ids(b) for b in whole[3:]]


def test_a_batch_of_failed_crops_has_no_rows(packed: Path) -> None:
    batch = collate([Skipped(4, "CropError"), Skipped(5, "WorkerDied")])
    assert batch["audio"].shape == (0, 0, 0) and batch["key"] == []
    assert batch["skipped"] == [(4, "CropError"), (5, "WorkerDied")]
    batch = collate([Skipped(p, "CropError") for p in range(4, 8)])
    assert dataset(packed).state_dict(batch)["consumed"] == 8


#: Runs ``until_a_worker_is_killed`` and prints its result. In a process of its
#: own because torch's SIGCHLD handler raises in the main thread whenever any
#: worker exits while a loader with a killed worker is still alive (until the
#: garbage collector reaps its iterator): inside pytest that surfaced as an
#: INTERNALERROR at a random later point.
KILL_SCRIPT = """
import importlib.util, json, os, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("training_tests", sys.argv[3])
tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests)
data = tests.dataset(Path(sys.argv[1]))
got, state = tests.until_a_worker_is_killed(data, after=int(sys.argv[2]))
print(json.dumps({"got": got, "state": state}), flush=True)
os._exit(0)  # no exit-time SIGCHLD from the dead loader's workers
"""


def in_a_child_process(packed: Path, after: int):  # type: ignore[no-untyped-def]
    run = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(packed), str(after), __file__],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout.splitlines()[-1])
    return answer["got"], answer["state"]


def until_a_worker_is_killed(data: CropDataset, after: int):  # type: ignore[no-untyped-def]
    """Batches (and the state after the last) until the DataLoader raises for
    the worker killed after ``after`` batches. The iterator is dropped before
    returning: torch checks the workers of every live iterator on each
    SIGCHLD, and would raise again for this one when later workers exit."""
    got, state = [], None
    # Another test's DataLoader workers may still be exiting: only this
    # loader's own are candidates.
    earlier = {child.pid for child in multiprocessing.active_children()}
    batches = iter(loader(data, 2))
    try:
        for batch in batches:
            got.append(ids(batch))
            state = data.state_dict(batch)
            if len(got) == after:
                workers = [c for c in multiprocessing.active_children() if c.pid not in earlier]
                assert len(workers) == 2
                os.kill(workers[0].pid, signal.SIGKILL)  # type: ignore[arg-type]
    except (RuntimeError, ConnectionResetError):  # torch says it either way
        pass
    else:
        raise AssertionError("the DataLoader did not notice its killed worker")
    finally:
        del batches
    return got, state


def test_a_mix_resumes_under_two_loader_workers(packed: Path, tmp_path: Path) -> None:
    """A checkpoint of a Mix taken under two DataLoader workers resumes to
    the uninterrupted batches, every crop with its source, none twice; a
    Mix of other weights refuses it."""
    from helpers import pack_audio  # not at the top: a subprocess imports this file alone

    other = pack_audio(tmp_path, {"b1": ("flac", 44100, 2), "b2": ("wav", 22050, 2)}, 2.0)

    def make(music: float = 1.0) -> CropDataset:
        mix = streamer.Mix([(str(packed), 2.0, "speech"), (other, music, "music")])
        return CropDataset(mix, SAMPLER, batch_size=BATCH, seed=5, sample_rate=16000, mono=True)

    def named(batch: dict[str, Any]) -> list[str]:
        return [f"{s}:{i}" for s, i in zip(batch["source"], ids(batch), strict=True)]

    whole = [named(b) for b in loader(make(), 2)]
    crops = [c for b in whole for c in b]
    assert len(crops) == 81 and sum(c.startswith("music:b") for c in crops) == 27
    data = make()
    got: list[list[str]] = []
    for batch in loader(data, 2):
        got.append(named(batch))
        if len(got) == 5:
            state = data.state_dict(batch)
            break
    with pytest.raises(ValueError, match=r"state is for the Mix of items"):
        make(music=2.0).load_state_dict(state)
    resumed = make()
    resumed.load_state_dict(state)
    got += [named(b) for b in loader(resumed, 2)]
    assert got == whole


def test_a_checkpoint_of_a_mix_is_refused_by_the_mix_of_swapped_names(
    packed: Path, tmp_path: Path
) -> None:
    """The same two datasets with their names swapped plan the same order:
    the rank's checkpoint (and the merged one) loaded into it without a
    word, and every later crop carried the other item's name."""
    from helpers import pack_audio  # not at the top: a subprocess imports this file alone

    other = pack_audio(tmp_path, {"b1": ("flac", 44100, 2), "b2": ("wav", 22050, 2)}, 2.0)

    def make(first: str, second: str) -> CropDataset:
        mix = streamer.Mix([(str(packed), 1.0, first), (other, 1.0, second)])
        return CropDataset(
            mix, SAMPLER, batch_size=BATCH, seed=5, max_crops=12, mono=True, sample_rate=16000
        )

    data = make("speech", "music")
    batch = next(iter(loader(data, 0)))
    state = data.state_dict(batch)
    assert state["mix"] == [["speech", 0.5], ["music", 0.5]]
    merged = merge_states(data, [state])
    swapped = make("music", "speech")
    for saved in (state, merged):
        with pytest.raises(ValueError, match=r"state is for the Mix of items \[\('speech'"):
            swapped.load_state_dict(saved)
    with pytest.raises(ValueError, match="state is for the Mix of items"):
        merge_states(swapped, [state])
    resumed = make("speech", "music")
    resumed.load_state_dict(merged)
    assert sum(len(b["key"]) for b in loader(resumed, 0)) == 12 - BATCH


def test_a_skipped_crop_of_a_mix_names_its_source(packed: Path, tmp_path: Path) -> None:
    """Under DataLoader workers the skip counts stay in the workers: a
    batch's ``skipped`` said only position and reason, so a training loop
    over a Mix could not tell which dataset lost crops."""
    from helpers import pack_audio  # not at the top: a subprocess imports this file alone

    other = pack_audio(tmp_path, {"b1": ("flac", 44100, 2), "b2": ("wav", 22050, 2)}, 2.0)
    shard = next((Path(other.url) / "audio").glob("*.wsds"))
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 4 : 3 * len(raw) // 4] = b"\x55" * (len(raw) // 2)
    shard.write_bytes(bytes(raw))
    mix = streamer.Mix([(str(packed), 2.0, "speech"), (other, 1.0, "music")])
    data = CropDataset(mix, SAMPLER, batch_size=BATCH, seed=5, mono=True, sample_rate=16000)
    batches = list(loader(data, 2))
    lost = [s for b in batches for s in b["skipped_source"]]
    assert lost and set(lost) == {"music"}
    assert [len(b["skipped_source"]) for b in batches] == [len(b["skipped"]) for b in batches]
    batch = collate([Skipped(4, "CropError", 0, "music"), Skipped(5, "WorkerDied")])
    assert batch["skipped"] == [(4, "CropError"), (5, "WorkerDied")]
    assert batch["skipped_source"] == ["music", None]


def test_merge_refuses_states_of_other_world_sizes_or_past_a_share(packed: Path) -> None:
    """Rank 0 of 2 and rank 1 of 3 made a "whole job" of ranks 0 and 1: the
    crops rank 1 of 3 took were marked done at rank 1 of 2's places (crops
    never served left out, served ones repeated); a state that consumed
    more than its rank's share was cut to the share without a word."""
    _, two = consume(packed, 2, None, 2)
    _, three = consume(packed, 3, None, 1)
    with pytest.raises(ValueError, match=r"world sizes 2, 3"):
        merge_states(dataset(packed, rank=0, world_size=2), [two[0], three[1]])
    with pytest.raises(ValueError, match=r"rank 1 of 2 consumed 1000 crops, its share has 31"):
        merge_states(dataset(packed, rank=0, world_size=2), [two[0], {**two[1], "consumed": 1000}])


def test_a_rank_state_loaded_on_another_rank_says_so(packed: Path) -> None:
    """At the same world size: refused with advice to resume "at another world
    size", which the run was not doing."""
    data = dataset(packed, rank=1, world_size=2)
    state = data.state_dict(next(iter(loader(data, 0))))
    with pytest.raises(ValueError) as refused:
        dataset(packed, rank=0, world_size=2).load_state_dict(state)
    assert str(refused.value) == (
        "rank 1's state loaded on rank 0 (of 2): each rank loads its own "
        "state_dict(batch), or every rank loads the state gather_state merged over them all"
    )
    with pytest.raises(ValueError, match="to resume at another world size"):
        dataset(packed, rank=1, world_size=3).load_state_dict(state)
    dataset(packed, rank=1, world_size=2).load_state_dict(state)


def test_a_rank_state_of_another_split_is_refused(packed: Path) -> None:
    """63 crops over 4 ranks: rank 2's run starts at crop 31 with
    ``even=False`` and at 30 with ``even=True``. Its checkpoint (crops of
    its run consumed) resumed under the other split, or merged by a dataset
    of the other split, marked other crops as served: repeats and gaps,
    without a word."""
    uneven = dataset(packed, rank=2, world_size=4, even=False)
    state = uneven.state_dict(next(iter(loader(uneven, 0))))
    assert (state["even"], state["drop_last"]) == (False, True)
    with pytest.raises(ValueError, match=r"even=False, drop_last=True.*even=True, drop_last=True"):
        dataset(packed, rank=2, world_size=4).load_state_dict(state)
    with pytest.raises(ValueError, match=r"even=True, drop_last=False"):
        dataset(packed, rank=2, world_size=4, drop_last=False, even=False).load_state_dict(
            {**state, "even": True, "drop_last": False}
        )
    _, states = consume(packed, 2, None, 1)
    with pytest.raises(ValueError, match=r"even=True, drop_last=True.*even=False"):
        merge_states(dataset(packed, rank=0, world_size=2, even=False), states)
    dataset(packed, rank=2, world_size=4, even=False).load_state_dict(state)


def test_a_batch_of_failed_crops_of_the_last_epoch_is_no_checkpoint_of_the_next(
    packed: Path,
) -> None:
    """A batch with no rows has no ``epoch`` to compare: taken after
    ``set_epoch`` of the next epoch, its checkpoint said that epoch's first
    crops were consumed (a resume skipped them without a word)."""
    data = dataset(packed)
    batch = collate([Skipped(p, "CropError", 0) for p in range(4, 8)])
    assert batch["skipped_epoch"] == [0, 0, 0, 0]
    assert data.state_dict(batch)["consumed"] == 8
    data.set_epoch(1)
    with pytest.raises(ValueError, match="batch is of epoch 0, this dataset is at epoch 1"):
        data.state_dict(batch)


def test_ranks_of_other_splits_are_stopped_before_an_epoch(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two gloo ranks over the same data, one with ``even=False`` (or
    another ``batch_size``): the same plan, so they agreed, but their runs
    overlap and leave crops out, and their batch counts can differ (a DDP
    hang). Both raise, naming each rank's split."""
    said = spawn_two_ranks(monkeypatch, rank_of_another_split, packed, tmp_path)
    assert said[0] == said[1]
    assert said[0]["even"].startswith("the ranks plan different epochs")
    assert "even=True, drop_last=True, batch_size=4" in said[0]["even"]
    assert "even=False, drop_last=True, batch_size=4" in said[0]["even"]
    assert "batch_size=2" in said[0]["batch_size"]


def rank_of_another_split(rank: int, packed: Path, port: int, out: Path) -> None:
    """One rank of ``test_ranks_of_other_splits_are_stopped_before_an_epoch``."""
    url = f"tcp://127.0.0.1:{port}"
    torch.distributed.init_process_group("gloo", init_method=url, rank=rank, world_size=2)
    said: dict[str, Any] = {}
    try:
        for name, options in (("even", {"even": not rank}), ("batch_size", {})):
            batch = 2 if rank and name == "batch_size" else BATCH
            try:
                CropDataset(str(packed), SAMPLER, seed=5, batch_size=batch, **options)
            except ValueError as error:
                said[name] = str(error)
        (out / f"{rank}.json").write_text(json.dumps(said))
    finally:
        torch.distributed.destroy_process_group()


def test_a_resume_point_of_many_intervals_reaches_persistent_workers(packed: Path) -> None:
    """An elastic job's merged resume point gains about 0.8 intervals per rank
    at every restart within an epoch. 64 KiB of plain JSON carried it to
    DataLoader workers: a 1024-rank job's checkpoint was refused after four
    restarts (``resume point too large to share with workers``), even
    without workers. 6 000 intervals now load, and workers serve the crops
    a loop without workers does (the first 12 not done)."""
    sampler = RandomCrops(0.05, per_episode=2000, min_duration=0.05)  # 14 000 crops

    def resumed() -> CropDataset:
        data = CropDataset(
            str(packed), sampler, batch_size=BATCH, seed=5, sample_rate=16000, mono=True
        )
        done = [[2 * n, 2 * n + 1] for n in range(6_000)]  # every other crop of 12 000
        data.load_state_dict(  # what state_dict(batch) and merge_states return
            {"seed": 5, "epoch": 0, "rank": 0, "world_size": 1, "done": done, "consumed": 0}
            | {"even": True, "drop_last": True, "total": data.total(), "plan": data.digest()}
            | {"mix": None}
        )
        return data

    def served(data: CropDataset, workers: int, **options: Any) -> list[str]:
        batches = itertools.islice(loader(data, workers, **options), 3)
        return [crop for batch in batches for crop in ids(batch)]

    alone = served(resumed(), 0)
    assert len(alone) == 12
    assert served(resumed(), 2, persistent_workers=True) == alone
    fresh = CropDataset(
        str(packed), sampler, batch_size=BATCH, seed=5, sample_rate=16000, mono=True
    )
    assert alone != served(fresh, 0)
