"""A pool of decode worker processes that survives its workers being killed.

``concurrent.futures.ProcessPoolExecutor`` breaks for good when one worker
dies, and ``multiprocessing.Pool`` loses the task; here each worker is a
process with its own pipe, driven one batch of tasks at a time, so a worker that dies
(OOM killer, a crashing codec, a SIGKILL at any moment, even before it
reported ready) is noticed by its pipe closing and replaced by a fresh
process. A crop whose worker dies is tried again on a replacement, up to
``CROP_ATTEMPTS`` times in all; then the crop fails with ``WorkerDied``
(``streamer.errors``): a crop that kills every decoder is a bad crop.
A worker gets several crops per message and answers them in one
(``run_batch``): the parent's cost is mostly per message and per wake-up,
not per byte.

Every death counts (``restarts``), and the pool gives up past a *restart
budget*: ``max_restarts`` deaths since ``renew_budget()`` (the Streamer
renews it for each pass over an epoch), plus one for every
``CROPS_PER_RESTART`` crops decoded since. Then ``run_batch`` raises
``WorkerDied`` naming the budget: workers that cannot stay alive (a crash
loop, a machine out of memory) end the pass with a clear error instead of
being restarted forever, while sporadic deaths over a long epoch are paid
for by the crops decoded meanwhile.

Waiting on a worker's pipe is the event loop's (``anyio.wait_readable``):
no thread per crop (a hop to a thread and back costs about 0.1 ms of CPU).
Reading an MP4's deferred ranges for a worker that asks runs in a thread
(it may wait on the store), and so does a read or write of the pipe that
could block (``_Worker._in_a_thread``): a message larger than a socket
holds, to or from a worker that may stop halfway. Closing the pool stops
every process and reaps it: no zombies, and none is started after.

Decoded crops come back through the pool's shared memory (``arena.py``):
each task is given a region the size of its crop, which the worker fills;
a region whose worker dies, or whose crop fails, is released once that
worker is reaped (a killed worker writes nothing after). A remote task's
fetched bytes travel the same way, the other way (``tasks.ship``).
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import fcntl
import functools
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from numbers import Integral
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ..decode.crop import Crop, read_deferred
from ..errors import WorkerDied
from ..formats.job import DecodeStats
from ..storage.retry import StoreUnavailable
from . import arena
from .arena import Arena, Lease, crop_bytes, open_arena
from .tasks import (
    Failure,
    Task,
    failure_of,
    first_error,
    held_back_answer,
    is_ask,
    piped_answers,
    receive_answers,
    receive_piped,
    seal,
    ship,
)
from .turns import Turns

__all__ = [
    "CROPS_PER_RESTART",
    "CROP_ATTEMPTS",
    "RESTARTS_PER_WORKER",
    "WORKERS_PER_CPU",
    "WorkerPool",
    "check_workers",
    "default_restart_budget",
]

log = logging.getLogger(__name__)

#: How many workers one crop may be tried on when they die under it (retried once).
CROP_ATTEMPTS = 2
#: The default restart budget per worker (``default_restart_budget``).
RESTARTS_PER_WORKER = 8
#: Crops decoded that earn the budget one more restart.
CROPS_PER_RESTART = 1000
#: How long a new worker may take to start (imports) before it counts as dead.
READY_TIMEOUT = 60.0
#: How long a worker that owes an answer may go without using any CPU before
#: it counts as hung (stopped by SIGSTOP, a debugger, a deadlock, a read
#: that never returns): it is killed and its crops retried like a death's.
STALL_TIMEOUT = 60.0
#: How much CPU a worker may spend on one batch without answering before it
#: counts as stuck (an endless loop in a decoder fed hostile data, which the
#: stall watch cannot see): ``SPIN_TIMEOUT`` seconds plus ``SPIN_PER_SECOND``
#: for each second of audio the batch decodes (from the episode's start for
#: a crop without an index). That is four times slower than real time, far
#: below any codec's decode and resample speed: only a loop gets there.
#: It is killed and its crops retried like a death's.
SPIN_TIMEOUT = 120.0
SPIN_PER_SECOND = 0.25


#: Decode processes per CPU a pool starts at most (the ``streamer`` commands'
#: ``--workers`` too): more only queue for the CPUs, and a typo
#: (``workers=10**6``) forked until memory ran out.
WORKERS_PER_CPU = 4


def check_workers(workers: int) -> int:
    """``workers`` if it is a whole number from 0 (decode in this process) to
    ``WORKERS_PER_CPU`` per CPU; a ``ValueError`` naming the bound if not."""
    if isinstance(workers, bool) or not isinstance(workers, Integral):
        raise ValueError(f"workers must be a whole number, not {workers!r}")
    most = WORKERS_PER_CPU * (os.cpu_count() or 1)
    if workers < 0:
        raise ValueError(f"workers must be 0 or more, not {workers}")
    if workers > most:
        raise ValueError(
            f"workers must be at most {most} ({WORKERS_PER_CPU} processes per CPU), not {workers}"
        )
    return int(workers)


def default_restart_budget(workers: int) -> int:
    """Worker deaths a pass over an epoch tolerates (besides those earned by
    decoded crops) when ``max_worker_restarts`` is not given: a few per
    worker, so a pool of any size rides out an OOM kill or a crashing codec
    now and then, and a crash loop is given up on within seconds."""
    return RESTARTS_PER_WORKER * workers


#: glibc's malloc in a worker: buffers up to 32 MiB (decoded frames, a crop)
#: from the heap, which keeps up to 64 MiB free rather than handing it back.
#: By default a crop's few-MB arrays are mapped fresh and unmapped on every
#: crop (malloc's threshold adapts, but not for long): 1900 page faults and
#: 3-5 ms of CPU per 8 s stereo crop, measured, against 0 and none. Other C
#: libraries ignore these; the caller's environment wins.
_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}

_CROP_DIED = "a decode worker process died twice while decoding this crop"  # CROP_ATTEMPTS


def _decoding(crops: int) -> str:
    """What a worker that died was doing, for the log."""
    return "decoding a crop" if crops == 1 else f"decoding a batch of {crops} crops"


def _failed(task: Task, exc: Exception) -> tuple[Failure, DecodeStats]:
    """The answer for a crop that no worker could give one for."""
    return failure_of(exc, task.job.request.key, task.job.episode.shard), DecodeStats()


#: How often a worker that owes an answer is checked for using CPU.
_STALL_CHECK = 1.0


def _stall_limit(tasks: list[Task]) -> float:
    """How long a worker answering ``tasks`` may use no CPU before it counts
    as hung: ``STALL_TIMEOUT``, or no limit (0) when one of them reads a
    remote blob through the worker's own store (the fallback, without an
    index). That worker waits on the network, idle, and its store's own
    retry budget ends the wait with an answer (a ``StorageError`` the
    Streamer raises); taken for a hang it would be killed, and a slow store
    counted as crops lost to dead workers."""
    for task in tasks:
        if (
            task.fetched is None
            and task.shipped is None
            and not task.job.episode.blob.reader.mapped
        ):
            return 0.0
    return STALL_TIMEOUT


def _cpu_budget(tasks: list[Task]) -> float:
    """CPU seconds a worker may use on ``tasks`` before it counts as stuck."""
    audio = 0.0
    for task in tasks:
        request = task.job.request
        audio += request.end - (request.start if task.job.plan is not None else 0.0)
    return SPIN_TIMEOUT + SPIN_PER_SECOND * audio


_TICK = 1 / os.sysconf("SC_CLK_TCK")  # seconds per clock tick of ``_cpu_ticks``


def _cpu_ticks(pid: int) -> int | None:
    """CPU time process ``pid`` has used (clock ticks; None: no ``/proc``,
    or the process is gone: its pipe tells)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def _arrived(conn: Connection) -> bool:
    """Whether the whole of ``conn``'s next message is in its socket, so
    that reading it cannot block: ``Connection.send`` writes the length of
    a message over 16 KiB on its own before its bytes, and the bytes of one
    larger than the socket holds as the reader makes room."""
    fd = conn.fileno()
    waiting = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, waiting)
    if waiting[0] < 4:
        return False
    peek = socket.socket(fileno=fd)
    try:
        (length,) = struct.unpack("!i", peek.recv(4, socket.MSG_PEEK))
    finally:
        peek.detach()  # the descriptor stays the connection's
    return 0 <= length <= waiting[0] - 4  # -1: over 2 GiB, a longer header follows


_T = TypeVar("_T")


class _Worker:
    """One worker process and the parent's end of its socket pair.

    Workers are started as ``python -m streamer.pipeline.worker FD`` rather
    than by ``multiprocessing``: its spawn method re-runs the caller's main
    script in every child (a script without an ``if __name__ == "__main__"``
    guard would start workers recursively), and fork copies a process that
    already runs threads (the store loop).
    """

    def __init__(self, arena: Arena | None) -> None:
        self.arena = arena
        ours, theirs = socket.socketpair()
        env = {
            **_MALLOC,
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
        fds = (theirs.fileno(),) if arena is None else (theirs.fileno(), arena.fd)
        with ours, theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "streamer.pipeline.worker", *map(str, fds)],
                pass_fds=fds,
                env=env,
                stdin=subprocess.DEVNULL,
            )
            self.conn = Connection(os.dup(ours.fileno()))
            #: The largest message written on the loop (``_send``): into an
            #: empty socket, a write of up to half its send buffer goes in
            #: whole at once (the other half is the kernel's bookkeeping), and
            #: the socket is empty whenever the parent writes (the worker
            #: answers only what it has read); a quarter leaves a margin.
            self.at_once = ours.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 4
        # The parent's end sees EOF when the process dies: it holds no copy of theirs.
        self.pid: int = self.process.pid

    async def wait_ready(self, timeout: float) -> None:
        """Wait for the worker's first message (its imports are done):
        ``EOFError`` if it died first, ``TimeoutError`` if it hangs
        (``answer_begun``) or is still silent after ``timeout`` s."""
        with anyio.move_on_after(timeout) as waited:
            await self._receive(STALL_TIMEOUT)
        if waited.cancelled_caught:
            raise TimeoutError(f"no sign of life within {timeout:g} s")

    async def call(
        self, tasks: list[Task], leases: list[Lease | None]
    ) -> list[tuple[tuple[Crop | Failure, DecodeStats], bool]]:
        """The answers to a batch, each with whether its crop is in its
        lease's region. The messages are small (crops are in shared memory),
        written at once and read once they have arrived, so the loop barely
        blocks; the worker answers the whole batch at once. A transfer that
        could block runs in a thread (``_in_a_thread``): samples that come
        through the pipe (no arena, or a crop larger than its region), an
        MP4's ``moov`` asked for, remote bytes sent with the tasks (no room
        in the arena), a long answer (a failure's long message).
        ``TimeoutError`` if the worker hangs (``answer_begun``)."""
        stall, budget = _stall_limit(tasks), _cpu_budget(tasks)
        began = _cpu_ticks(self.pid)
        await self._send([seal(task) for task in tasks])
        while True:
            message = await self._receive(stall, None if began is None else (began, budget))
            if not is_ask(message):
                piped = piped_answers(message, self.arena, leases)
                receive = functools.partial(receive_piped, self.conn, message, piped)
                samples = await self._in_a_thread(receive) if piped else {}
                return receive_answers(message, samples, self.arena, leases)
            job = tasks[message[1]].job  # read in a thread: it may wait on the store
            pieces = await anyio.to_thread.run_sync(read_deferred, job, abandon_on_cancel=True)
            await self._send(held_back_answer(pieces))

    async def _send(self, message: object) -> None:
        """Send ``message`` (as ``Connection.send`` does): on the loop when
        it is small enough to go in at once (``at_once``), else in a thread
        (``_in_a_thread``): a worker stopped before reading it all left the
        parent blocked in the write."""
        data = ForkingPickler.dumps(message)
        if len(data) <= self.at_once:
            self.conn.send_bytes(data)
        else:
            await self._in_a_thread(lambda: self.conn.send_bytes(data))

    async def _receive(self, stall: float, budget: tuple[int, float] | None = None) -> Any:
        """The worker's next message, once it begins to arrive
        (``answer_begun``: ``stall``, ``budget``): read on the loop when it
        has all arrived (a small one, written at once, always has), else in
        a thread (``_in_a_thread``): a worker stopped halfway through writing
        it left the parent blocked in the read."""
        await self.answer_begun(stall, budget)
        if _arrived(self.conn):
            return self.conn.recv()
        return await self._in_a_thread(self.conn.recv)

    async def _in_a_thread(self, transfer: Callable[[], _T]) -> _T:
        """``transfer``, a read or write of the worker's pipe that may block,
        in a thread while the worker is watched (``answer_begun``): one that
        stops (no CPU used for ``STALL_TIMEOUT`` s: a worker that reads or
        writes a message waits on nothing else, not even a slow store) is
        killed, which ends the transfer (``EOFError``, ``BrokenPipeError``
        there), and this raises ``TimeoutError``. On the loop, a worker
        stopped halfway (SIGSTOP, a debugger) blocked it, and with it every
        store read of the process, the watch and Ctrl-C: a hang for good.
        Cancelled, the thread is left to the worker's end (``run_batch`` and
        ``_ready_worker`` retire a worker cancelled mid-call), having made
        nothing but objects of its own."""
        outcome: dict[str, Any] = {}
        done = anyio.Event()

        def run() -> None:
            try:
                outcome["result"] = transfer()
            except Exception as exc:  # raised below, outside the task group
                outcome["error"] = exc

        async def run_in_a_thread() -> None:
            await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
            done.set()

        hung: TimeoutError | None = None
        async with anyio.create_task_group() as group:  # raises nothing of its own
            group.start_soon(run_in_a_thread)
            try:
                await self._watch(done.wait, STALL_TIMEOUT)
            except TimeoutError as exc:
                hung = exc
                self.kill()  # ends the transfer: its pipe closes
            group.cancel_scope.cancel()
        if hung is not None:
            raise hung
        if "error" in outcome:
            raise outcome["error"]
        result: _T = outcome["result"]
        return result

    async def answer_begun(self, stall: float, budget: tuple[int, float] | None = None) -> None:
        """Wait until the worker's next message begins to arrive (or its pipe
        closes). A worker that decodes, however slowly, uses CPU; one that
        used none for ``stall`` seconds (0: no limit) is hung, and waiting
        longer would hang the pass: ``TimeoutError``; so is one that used
        more than ``budget`` = (its CPU ticks when the batch was sent, CPU
        seconds allowed) since then: it is stuck in a loop. Without
        ``/proc`` (not Linux) it is waited for as long as it takes."""
        await self._watch(lambda: anyio.wait_readable(self.conn.fileno()), stall, budget)

    async def _watch(
        self,
        arrived: Callable[[], Awaitable[object]],
        stall: float,
        budget: tuple[int, float] | None = None,
    ) -> None:
        """Wait for ``arrived()`` while the worker is watched (``answer_begun``)."""
        ticks = _cpu_ticks(self.pid)
        if ticks is None or (stall <= 0 and budget is None):
            await arrived()
            return
        since = time.monotonic()
        while True:
            with anyio.move_on_after(min(stall, _STALL_CHECK) if stall > 0 else _STALL_CHECK):
                await arrived()
                return
            now, used = time.monotonic(), _cpu_ticks(self.pid)
            if used is None:  # gone: its pipe tells
                continue
            if budget is not None and (used - budget[0]) * _TICK > budget[1]:
                raise TimeoutError(f"stuck (over {budget[1]:g} s of CPU on one batch)")
            if used != ticks:
                ticks, since = used, now
            elif stall > 0 and now - since >= stall:
                raise TimeoutError(f"hung (no CPU used for {stall:g} s)")

    def stop(self) -> None:
        """Ask the process to leave (it finishes its current crop first)."""
        with contextlib.suppress(OSError):
            self.conn.send(None)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()

    def status(self) -> str:
        """How the (reaped) process ended, for messages."""
        code = self.process.returncode
        if code is None:
            return "still running"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}"


class WorkerPool:
    """``size`` decode processes; ``restarts`` counts workers replaced after
    dying, ``on_restart()`` is called for each; past the restart budget
    (``max_restarts``, default ``default_restart_budget(size)``) ``run_batch``
    raises ``WorkerDied``. Crops come back through ``arena_bytes`` of
    shared memory (default ``arena.ARENA_BYTES``; 0: through the pipes)."""

    def __init__(
        self,
        size: int,
        *,
        max_restarts: int | None = None,
        on_restart: Callable[[], None] | None = None,
        arena_bytes: int | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one process")
        self.size = size
        self.max_restarts = default_restart_budget(size) if max_restarts is None else max_restarts
        self.restarts = 0
        self.decoded = 0
        self._on_restart = on_restart
        self._budget_from = (0, 0)  # (restarts, decoded) when the budget was renewed
        self._gave_up: str | None = None  # why, once a death was past the budget
        # One entry per free slot: an idle worker, or None for one to start.
        self._idle: list[_Worker | None] = [None] * size
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._turns = Turns(size)
        self._closed = False
        arena_bytes = arena.ARENA_BYTES if arena_bytes is None else arena_bytes
        self.arena = open_arena(arena_bytes) if arena_bytes > 0 else None

    @property
    def pids(self) -> list[int]:
        """Process ids of the current workers, the ones still starting included."""
        with self._lock:
            return [worker.pid for worker in self._all]

    async def start(self) -> None:
        """Start every worker and wait until each is ready (imports done)."""
        try:
            async with anyio.create_task_group() as group:
                for _ in range(self.size):
                    group.start_soon(self._start_one)
        except Exception as exc:
            raise first_error(exc) from None

    def renew_budget(self) -> None:
        """Start counting deaths against the budget afresh (a new pass)."""
        self._budget_from = (self.restarts, self.decoded)
        self._gave_up = None

    async def run_batch(
        self, tasks: list[Task], *, rank: int = 0
    ) -> list[tuple[Crop | Failure, DecodeStats]]:
        """The answers to ``tasks``, in their order, from one worker in one
        round trip (one message each way: the parent's cost per crop is
        mostly per message). When batches wait for a worker, the lowest
        ``rank`` goes first (the pipeline ranks a batch by its place in the
        epoch), then the first to come. A crop's answer is a ``WorkerDied`` failure
        once workers died under it ``CROP_ATTEMPTS`` times. Raises
        ``WorkerDied`` past the restart budget. The jobs' deferred ranges
        are read and sent only if the worker asks.

        When a worker dies under a batch, the crops it had not answered
        (all of them: it answers at the end) are tried again one at a time
        on its replacement, where a death is that crop's alone. Which crop
        killed the batch is unknown, so its first crop is the one charged
        with the death: an innocent crop is charged at most once, and every
        attempt after that is its own."""
        async with self._turns.turn(rank):
            worker = self._idle.pop()
            leases = [self._lease(task) for task in tasks]
            tasks = [
                task if lease is None else dataclasses.replace(task, region=lease.region)
                for task, lease in zip(tasks, leases, strict=True)
            ]
            moved = [ship(task, self.arena) for task in tasks]  # remote bytes: shared memory
            tasks, shipped = [task for task, _ in moved], [lease for _, lease in moved]
            answers: list[tuple[Crop | Failure, DecodeStats] | None] = [None] * len(tasks)
            used = [False] * len(tasks)
            deaths = [0] * len(tasks)
            groups = [list(range(len(tasks)))]  # the batch; after a death, one crop each
            try:
                while groups:
                    numbers = groups.pop(0)
                    if worker is None:
                        worker = await self._ready_worker()
                    try:
                        got = await worker.call(
                            [tasks[n] for n in numbers], [leases[n] for n in numbers]
                        )
                    except (EOFError, OSError) as exc:
                        dead, worker = worker, None
                        self._retire(dead)  # a hung one (TimeoutError) is killed here
                        charged = numbers[0]
                        deaths[charged] += 1
                        retry = deaths[charged] < CROP_ATTEMPTS
                        hung = f", {exc}" if isinstance(exc, TimeoutError) else ""
                        doing = _decoding(len(numbers)) + hung
                        self._died(dead, doing, "retrying" if retry else "")
                        if not retry:
                            answers[charged] = _failed(tasks[charged], WorkerDied(_CROP_DIED))
                            numbers = numbers[1:]
                        groups[:0] = [[n] for n in numbers]
                        continue
                    except StoreUnavailable:
                        # Reading its deferred ranges for the worker met an outage
                        # past the store's budget: the pass ends (the worker, which
                        # waits for them, is retired below). Taken for a task that
                        # does not pickle, its crops were asked for again one by one.
                        raise
                    except Exception as exc:  # a task or an answer does not pickle
                        dead, worker = worker, None
                        self._retire(dead)  # its pipe is in an unknown state
                        if len(numbers) > 1:  # find which one, alone
                            groups[:0] = [[n] for n in numbers]
                            continue
                        answers[numbers[0]] = _failed(tasks[numbers[0]], exc)
                        continue
                    for number, (answer, in_arena) in zip(numbers, got, strict=True):
                        answers[number], used[number] = answer, in_arena
                    self.decoded += len(numbers)
                done = [answer for answer in answers if answer is not None]
                assert len(done) == len(tasks)  # every path above answers each crop
                return done
            except BaseException:
                if worker is not None:  # cancelled mid-batch: its answers would arrive late
                    self._retire(worker)
                    worker = None
                raise
            finally:
                self._idle.append(worker)
                for lease, in_arena in zip(leases, used, strict=True):
                    if lease is not None and not in_arena:  # its worker is idle or reaped
                        self.arena.release(lease)
                for lease in shipped:  # read by now, or never to be
                    if lease is not None:
                        self.arena.release(lease)

    def _lease(self, task: Task) -> Lease | None:
        """A region of the arena for the task's crop (None: through the pipe)."""
        return self.arena.lease(crop_bytes(task.job)) if self.arena is not None else None

    def close(self) -> None:
        """Stop and reap every worker: politely, then SIGTERM, then SIGKILL.
        No worker is started after this. Only the first call does it: an
        interrupted pass and the exit hook of a Streamer can close one pool
        at once, from two threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers, self._all = self._all, []
        for worker in workers:
            worker.stop()
        deadline = time.monotonic() + 1.0
        for worker in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker.alive():
                worker.process.terminate()
        deadline = time.monotonic() + 1.0
        for worker in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            if worker.alive():
                worker.kill()
        if self.arena is not None:
            self.arena.close()

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)

    # -- starting and replacing workers -----------------------------------------

    async def _start_one(self) -> None:
        worker = await self._ready_worker()
        self._idle.remove(None)
        self._idle.append(worker)

    async def _ready_worker(self) -> _Worker:
        """A new worker that reported ready. One that dies (or hangs) before
        that is a death like any other: counted, and replaced in turn."""
        while True:
            worker = self._launch()
            try:
                await worker.wait_ready(READY_TIMEOUT)
            except (EOFError, OSError, TimeoutError) as exc:
                self._retire(worker)
                hung = f": {exc}" if isinstance(exc, TimeoutError) else ""
                self._died(worker, f"starting{hung}", "starting another")
                continue
            except BaseException:
                self._retire(worker)
                raise
            return worker

    def _launch(self) -> _Worker:
        """Start a process (registered at once, so ``close`` stops it even
        while it starts); refused once the pool is closed."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            worker = _Worker(self.arena)
            self._all.append(worker)
        return worker

    def _died(self, worker: _Worker, doing: str, then: str) -> None:
        """Count ``worker``'s death (it is reaped); raise ``WorkerDied`` past
        the budget, or when the pool was closed under it."""
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        if self._gave_up is not None:
            # Past the budget already: the other batches in flight meet their
            # dead workers while the first WorkerDied unwinds the run; those
            # deaths are the same storm's, not counted again.
            raise WorkerDied(self._gave_up)
        self.restarts += 1
        if self._on_restart is not None:
            self._on_restart()
        spent = self.restarts - self._budget_from[0]
        earned = (self.decoded - self._budget_from[1]) // CROPS_PER_RESTART
        what = f"decode worker {worker.pid} died while {doing} ({worker.status()})"
        if spent > self.max_restarts + earned:
            self._gave_up = (
                f"{what}; that is {spent} worker deaths in this pass over the epoch, past "
                f"the restart budget: max_worker_restarts={self.max_restarts} plus one per "
                f"{CROPS_PER_RESTART} crops decoded ({earned} so far)"
            )
            raise WorkerDied(self._gave_up)
        log.warning("%s; %s", what, then or "giving up on its crop")

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)
        worker.kill()
