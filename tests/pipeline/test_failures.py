"""No crop lost without a word: every crop of the plan is yielded, counted in
``stats.skipped`` with its reason, or the iteration raises; ``state_dict()``
never moves past crops not handed over. Real worker processes, real SIGKILL,
real subprocesses for the interpreter's exit."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import gone, rewrite_index_shard, signature

import streamer
from streamer import ListCrops, Mix, RandomCrops, Streamer, WorkerDied
from streamer.dataset import Dataset
from streamer.formats.job import Episode
from streamer.pipeline.pool import WorkerPool
from streamer.pipeline.run import Run
from streamer.pipeline.stages import plan
from streamer.pipeline.stats import StreamerStats
from streamer.pipeline.warmup import warmup
from streamer.storage.loop import run_sync

SAMPLER = RandomCrops(0.5, per_episode=3)  # 21 crops over the 7 episodes of ``packed``


class BreaksOn(Dataset):
    """A dataset whose planning of one episode raises ``error``: any exception
    a bug or a bad row could raise there, not one streamer raises on purpose."""

    def __init__(self, root: Path, key: str, error: Exception) -> None:
        super().__init__(str(root))
        self.bad_key, self.error = key, error

    def episode(self, key: str) -> Episode:
        if key == self.bad_key:
            raise type(self.error)(*self.error.args)  # a fresh one: no traceback kept across tests
        return super().episode(key)


def worker_children() -> list[int]:
    """This process's decode workers, from /proc: whether the pool counts them
    yet or not (a worker still starting is fair game for the OOM killer)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and b"streamer.pipeline.worker" in command:
            found.append(int(entry))
    return found


class Storm:
    """SIGKILL every decode worker of this process as soon as one exists, then
    every ``every`` s, for ``rounds`` rounds that found workers (None: until
    stopped). The first round hits workers still starting."""

    def __init__(self, rounds: int | None, every: float = 0.25) -> None:
        self.rounds, self.every = rounds, every
        self.kills = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Storm:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        done = 0
        while not self._stop.is_set() and (self.rounds is None or done < self.rounds):
            pids = worker_children()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.kills += 1
                except ProcessLookupError:
                    pass
            done += bool(pids)
            self._stop.wait(self.every if pids else 0.005)


def pipeline_tasks() -> list[str]:
    """The Run tasks alive on the store loop (a stopped pipeline leaves none)."""
    import asyncio

    async def names() -> list[str]:
        return [
            task.get_coro().__qualname__
            for task in asyncio.all_tasks()
            if task.get_coro().__qualname__.startswith("Run.")
        ]

    return run_sync(names())


@pytest.fixture
def no_worker_left() -> Iterator[None]:
    """After the test: no decode worker process and no pipeline task remains."""
    yield
    assert worker_children() == [] and pipeline_tasks() == []


# -- a failure of one crop is that crop's: skipped and counted, or raised --------------


@pytest.mark.parametrize("error", [IndexError("index 0 is out of bounds"), RuntimeError("bug")])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_planner_raising_anything_costs_only_its_crops(
    packed: Path,
    error: Exception,
    workers: int,
    caplog: pytest.LogCaptureFixture,
    no_worker_left: None,
) -> None:
    """Any exception planning one crop (not only a StreamerError) is that
    crop's data failure: counted by its class name, logged with key and shard;
    every other crop is yielded and the epoch completes (it used to end the
    epoch early, silently, with the next epoch marked as begun)."""
    everything = signature(list(Streamer(streamer.open_dataset(packed), SAMPLER, seed=3)))
    s = Streamer(BreaksOn(packed, "set1/flac", error), SAMPLER, seed=3, workers=workers)
    with caplog.at_level(logging.WARNING, logger="streamer"):
        got = signature(list(s))
    assert got == [crop for crop in everything if crop[0] != "set1/flac"]
    assert s.stats.skipped == {type(error).__name__: 3} and s.stats.yielded == 18
    assert s.state_dict()["epoch"] == 1 and s.state_dict()["position"] == 0
    skips = [r.getMessage() for r in caplog.records if "skipping crop" in r.getMessage()]
    assert len(skips) == 3
    assert all("'set1/flac'" in line and "shard-0000" in line for line in skips), skips
    assert all(f"{type(error).__name__}: {error}" in line for line in skips), skips


def test_a_planner_failure_raises_as_itself_under_on_error_raise(
    packed: Path, no_worker_left: None
) -> None:
    everything = signature(list(Streamer(streamer.open_dataset(packed), SAMPLER, seed=3)))
    first_bad = [key for key, _, _ in everything].index("set1/flac")
    s = Streamer(
        BreaksOn(packed, "set1/flac", IndexError("no seek point")),
        SAMPLER,
        seed=3,
        workers=1,
        on_error="raise",
    )
    taken = []
    with pytest.raises(IndexError, match="no seek point"):
        for crop in s:
            taken.append(crop)
    assert signature(taken) == everything[:first_bad]
    # The crop that raised was handed over (as the error); nothing after it.
    assert (s.state_dict()["epoch"], s.state_dict()["position"]) == (0, first_bad + 1)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_crop_whose_times_make_no_request_is_skipped_once(
    packed: Path, workers: int, caplog: pytest.LogCaptureFixture, no_worker_left: None
) -> None:
    """A planned crop ending past any audio (a manifest row or segment at
    1e12 s) makes no ``CropRequest``: under ``on_error="skip"`` it is counted
    once and the pass goes on (it was counted, then its log line built the
    request again and ended the pass with that ``ValueError``)."""
    key = sorted(streamer.open_dataset(packed).keys())[0]
    crops = ListCrops([(key, 0.0, 0.5), (key, 1.0, 1e12), (key, 0.5, 1.0)])
    s = Streamer(packed, crops, workers=workers, shuffle_window=0)
    with caplog.at_level(logging.WARNING, logger="streamer"):
        got = [(c.start, c.end) for c in s]
    assert sorted(got) == [(0.0, 0.5), (0.5, 1.0)]
    assert s.stats.skipped == {"ValueError": 1} and s.state_dict()["epoch"] == 1
    [line] = [r.getMessage() for r in caplog.records if "skipping crop" in r.getMessage()]
    assert f"[1, 1e+12) s of key {key!r}" in line and "shard-0000" in line, line
    assert warmup(Streamer(packed, crops)).skipped == {"ValueError": 1}


def emptied_index(packed: Path, root: Path, key: str) -> Path:
    """A copy of ``packed`` whose seek-index row for ``key`` says "ok" but has
    no seek points (``read_crop`` then fails with a bare ``IndexError``)."""
    from streamer.index import IndexReader
    from streamer.shard import Shard

    shutil.copytree(packed, root)
    path = root / "seek_index" / Path(streamer.open_dataset(root).blob(key).shard).name
    shard = Shard(str(path))
    keys = [str(k) for k in shard.keys]
    reader = IndexReader(shard)
    empty = np.zeros(0, dtype=np.int64)
    rows = [
        dataclasses.replace(index, sample_pos=empty, byte_pos=empty) if k == key else index
        for k, index in ((k, reader.read(row)) for row, k in enumerate(keys))
    ]
    rewrite_index_shard(path, dict(zip(keys, rows, strict=True)))
    return root


@pytest.mark.parametrize("workers", [0, 2])
def test_an_index_row_without_seek_points_loses_no_crop(
    packed: Path, tmp_path: Path, workers: int, no_worker_left: None
) -> None:
    """The hostile run's trigger: an "ok" index row with no seek points. Its
    crops are yielded (a fallback) or counted with their reason; the others
    are all yielded; the epoch completes."""
    everything = signature(list(Streamer(streamer.open_dataset(packed), SAMPLER, seed=3)))
    root = emptied_index(packed, tmp_path / "emptied", "set0/mp3")
    # The row is caught when the episode is opened: not trusted, so its crops fall back.
    dataset = streamer.open_dataset(root)
    assert dataset.episode("set0/mp3").index.reason.startswith("implausible index")
    assert dataset.read_crop("set0/mp3", 0.5, 1.0).shape[1] > 0
    s = Streamer(streamer.open_dataset(root), SAMPLER, seed=3, workers=workers)
    got = signature(list(s))
    assert s.stats.yielded + sum(s.stats.skipped.values()) == len(everything) == 21
    assert [c for c in got if c[0] != "set0/mp3"] == [c for c in everything if c[0] != "set0/mp3"]
    assert s.stats.yielded == len(got) and s.epoch == 1


# -- the machinery's errors end the iteration: raised, never a silent end ---------------


def test_a_failing_pool_ends_the_pass_with_its_error_every_time(packed: Path) -> None:
    """The pass ends with the machinery's error (here: a closed pool refusing to
    start workers), never with an early "end of pass". The emitter closing the
    stream used to race with the error being recorded: usually no error."""
    dataset = streamer.open_dataset(packed)
    s = Streamer(dataset, SAMPLER, seed=1, workers=0)

    def plan_at(position: int) -> object:
        return plan(*s.request(position))

    pool = WorkerPool(1)
    pool.close()

    async def one_pass() -> BaseException | None:
        run = Run(plan_at, 0, 21, pool=pool, prefetch=4, queue_size=2, stats=StreamerStats())
        run.start()
        try:
            while await run.next() is not None:
                pass
        except RuntimeError as exc:
            return exc
        finally:
            await run.stop()
        return None

    outcomes = [run_sync(one_pass()) for _ in range(20)]
    assert all(isinstance(exc, RuntimeError) for exc in outcomes), outcomes
    assert {str(exc) for exc in outcomes} == {"the worker pool is closed"}


#: No restart allowed, and few crops decoded ahead: a kill is felt at once.
ONE_AHEAD = {"max_worker_restarts": 0, "prefetch": 1, "queue_size": 1}


def kill_the_only_worker(s: Streamer) -> None:
    (pid,) = s.worker_pids
    os.kill(pid, signal.SIGKILL)


def test_past_the_restart_budget_the_iteration_raises_and_resumes(
    packed: Path, no_worker_left: None
) -> None:
    """A death past ``max_worker_restarts`` is the pool's failure: WorkerDied
    naming the budget, raised under on_error="skip" too; nothing is skipped,
    the position stays on the crops not handed over, the epoch does not
    advance; the next pass (a new budget) yields exactly the rest."""
    everything = signature(list(Streamer(streamer.open_dataset(packed), SAMPLER, seed=3)))
    s = Streamer(streamer.open_dataset(packed), SAMPLER, seed=3, workers=1, **ONE_AHEAD)
    taken = []
    with s:
        with pytest.raises(WorkerDied, match=r"past the restart budget: max_worker_restarts=0"):
            for crop in s:
                taken.append(crop)
                if len(taken) == 5:
                    kill_the_only_worker(s)
        assert s.stats.skipped == {} and s.stats.worker_restarts == 1
        state = s.state_dict()
        assert (state["epoch"], state["position"]) == (0, len(taken))
        taken += list(s)
    assert signature(taken) == everything and s.epoch == 1


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.anyio
async def test_async_iteration_counts_crop_failures_and_raises_the_pools(
    packed: Path, no_worker_left: None
) -> None:
    broken = BreaksOn(packed, "set0/opus", KeyError("row"))
    s = Streamer(broken, SAMPLER, seed=3, workers=0)
    got = [crop.key async for crop in s]
    assert len(got) == 18 and "set0/opus" not in got and s.stats.skipped == {"KeyError": 3}
    assert s.epoch == 1
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=1, **ONE_AHEAD)
    async with s:
        kill_the_only_worker(s)
        with pytest.raises(WorkerDied, match="restart budget"):
            async for _ in s:
                pass
        assert (s.state_dict()["epoch"], s.state_dict()["position"]) == (0, 0)
        pids = s.worker_pids
    assert s.worker_pids == [] and all(gone(pid) for pid in pids)
    bare = Streamer(streamer.open_dataset(packed), SAMPLER, workers=1, **ONE_AHEAD)
    yielded = 0
    with pytest.raises(WorkerDied, match="restart budget"):
        async for _ in bare:  # no ``async with``: the error stops the workers itself
            yielded += 1
            if yielded == 1:
                pids = bare.worker_pids
                kill_the_only_worker(bare)
    assert bare.worker_pids == [] and all(gone(pid) for pid in pids)
    assert bare.state_dict()["position"] == yielded < 21


# -- worker kill storms -----------------------------------------------------------------


def test_a_kill_storm_loses_no_crop(packed: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Both workers SIGKILLed every 0.25 s, from their start-up on (the first
    round hits them before they report ready), six rounds: with room in the
    restart budget the epoch completes, every crop yielded or counted as
    WorkerDied, and every death is counted."""
    reference = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=20)
    everything = signature(list(Streamer(reference, sampler, seed=2, workers=0)))
    s = Streamer(reference, sampler, seed=2, workers=2, max_worker_restarts=1000)
    with caplog.at_level(logging.WARNING, logger="streamer"), Storm(rounds=6) as storm:
        crops = list(s)
    assert storm.kills >= 1
    assert s.stats.yielded + s.stats.skipped.get("WorkerDied", 0) == len(everything) == 140
    assert set(s.stats.skipped) <= {"WorkerDied"} and s.epoch == 1
    got = iter(everything)
    assert all(crop in got for crop in signature(crops))  # in plan order, none invented
    for crop in crops:  # a killed worker's shared-memory region is never handed out twice
        np.testing.assert_array_equal(
            crop.audio, reference.read_crop(crop.key, crop.start, crop.end)
        )
    assert 1 <= s.stats.worker_restarts <= storm.kills
    assert "died while starting" in caplog.text  # a replacement killed before it was ready
    assert worker_children() == []


def test_an_endless_kill_storm_raises_past_the_budget(packed: Path) -> None:
    # 700 crops: on a loaded machine 140 were all decoded before the storm's
    # seventh kill; under 1000, so the epoch earns no restart of its own.
    s = Streamer(
        streamer.open_dataset(packed),
        RandomCrops(0.5, per_episode=100),
        workers=2,
        max_worker_restarts=6,
    )
    taken = 0
    with Storm(rounds=None), pytest.raises(WorkerDied, match="past the restart budget") as died:
        for _ in s:
            taken += 1
    # The 7th death of the pass gives up; the deaths the other batches in
    # flight meet while that unwinds are not counted again. Deaths while the
    # pool started (before the pass) count in the stats, not in the budget.
    assert "that is 7 worker deaths in this pass" in str(died.value)
    assert s.stats.worker_restarts >= 7 and s.stats.skipped.keys() <= {"WorkerDied"}
    state = s.state_dict()
    assert state["epoch"] == 0 and state["position"] == taken + s.stats.skipped.get("WorkerDied", 0)
    assert worker_children() == []


# -- the interpreter's exit -------------------------------------------------------------


def run_script(
    code: str, timeout: float = 30
) -> tuple[subprocess.CompletedProcess[str], list[int]]:
    """Run ``code`` in a new interpreter; it prints the worker pids it saw on its
    first line. The timeout is what a hang fails with (its whole process group
    is killed then, workers included)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", textwrap.dedent(code)]
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            raise
    done = subprocess.CompletedProcess(argv, child.returncode, out, err)
    first = out.splitlines()[0] if out else ""
    return done, [int(pid) for pid in first.split()]


@pytest.mark.parametrize("workers", [0, 2])
def test_an_abandoned_sync_iterator_does_not_hang_the_exit(packed: Path, workers: int) -> None:
    """Take 8 crops with ``next`` and let the script end: the generator is
    finalized during interpreter shutdown, when the store loop's thread no
    longer runs; waiting on it hung the exit forever."""
    done, pids = run_script(f"""
        import streamer
        s = streamer.Streamer(streamer.open_dataset({str(packed)!r}),
                              streamer.RandomCrops(0.5, per_episode=20), workers={workers})
        it = iter(s)
        crops = [next(it) for _ in range(8)]
        print(*s.worker_pids, flush=True)
        print(len(crops), "crops", flush=True)
        """)
    assert done.returncode == 0, done.stderr
    assert "8 crops" in done.stdout and len(pids) == workers
    assert all(gone(pid) for pid in pids)


def test_an_error_raised_to_a_script_exits_it_promptly(packed: Path) -> None:
    done, pids = run_script(f"""
        import os, signal, streamer
        s = streamer.Streamer(streamer.open_dataset({str(packed)!r}),
                              streamer.RandomCrops(0.5, per_episode=20), workers=1,
                              max_worker_restarts=0, prefetch=1, queue_size=1)
        for n, crop in enumerate(s):
            if n == 0:
                print(*s.worker_pids, flush=True)
                os.kill(s.worker_pids[0], signal.SIGKILL)
        """)
    assert done.returncode == 1 and "WorkerDied" in done.stderr.splitlines()[-1]
    assert len(pids) == 1 and all(gone(pid) for pid in pids)


class BreaksOnAll(Dataset):
    """A dataset none of whose crops can be planned (``keys``: only these),
    as when every file is of a codec the FFmpeg build lacks."""

    def __init__(self, root: Path, keys: set[str] | None = None) -> None:
        super().__init__(str(root))
        self.bad_keys = keys

    def episode(self, key: str) -> Episode:
        if self.bad_keys is None or key in self.bad_keys:
            raise streamer.CropError("no decoder for this codec", key=key)
        return super().episode(key)


MANY = RandomCrops(0.1, per_episode=30)  # 210 crops over the 7 episodes of ``packed``


def test_a_pass_whose_crops_all_fail_raises_instead_of_ending_empty(packed: Path) -> None:
    """``on_error="skip"`` ended such a pass with nothing and warnings."""
    s = Streamer(BreaksOnAll(packed), MANY, workers=0, max_failures_in_a_row=50)
    with pytest.raises(
        streamer.TooManyFailures, match=r"50 crops in a row failed \(CropError x50\)"
    ):
        list(s)
    assert s.stats.skipped == {"CropError": 50} and s.stats.yielded == 0
    unlimited = Streamer(BreaksOnAll(packed), MANY, workers=0, max_failures_in_a_row=None)
    assert list(unlimited) == [] and unlimited.stats.skipped == {"CropError": 210}


def test_bad_files_among_good_ones_are_skipped_as_before(packed: Path) -> None:
    """Three of seven episodes failing: runs of failures, each ended by a crop."""
    keys = sorted(Dataset(str(packed)).keys())
    s = Streamer(BreaksOnAll(packed, set(keys[:3])), MANY, workers=0, max_failures_in_a_row=30)
    crops = list(s)
    assert len(crops) == 120 and s.stats.skipped == {"CropError": 90}


def test_a_dead_source_of_a_mix_raises_while_the_other_delivers(packed: Path) -> None:
    mix = Mix([(str(packed), 1.0, "good"), (BreaksOnAll(packed), 1.0, "dead")])
    s = Streamer(mix, MANY, workers=0, max_failures_in_a_row=20)
    with pytest.raises(streamer.TooManyFailures, match="20 crops of source 'dead' in a row"):
        list(s)
    assert s.stats.yielded > 0 and s.stats.skipped_by_source == {"dead": {"CropError": 20}}


@pytest.mark.parametrize("limit", [0, -1, 1.5, "3"])
def test_max_failures_in_a_row_is_a_whole_number(packed: Path, limit: object) -> None:
    with pytest.raises((ValueError, TypeError), match="max_failures_in_a_row"):
        Streamer(packed, MANY, workers=0, max_failures_in_a_row=limit)  # type: ignore[arg-type]
