"""A pool of decode worker processes that survives its workers being killed.

``concurrent.futures.ProcessPoolExecutor`` breaks for good when one worker
dies, and ``multiprocessing.Pool`` loses the task; here each worker is a
process with its own pipe, driven one task at a time, so a worker that dies
(OOM killer, a crashing codec) is noticed by its pipe closing, replaced by a
fresh process, and its task retried once on the replacement. A task whose
worker dies twice fails with ``WorkerDied`` (``streamer.errors``).

Waiting on a pipe happens in a thread (one per busy worker, from the pool's
own limiter), so the event loop stays free. Closing the pool stops every
process and reaps it: no zombies.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import anyio
import anyio.to_thread

from ..decode.crop import read_deferred
from ..errors import WorkerDied
from .tasks import ASK_HELD_BACK, Task, receive_answer, send_held_back

__all__ = ["WorkerPool"]

log = logging.getLogger(__name__)


class _Worker:
    """One worker process and the parent's end of its socket pair.

    Workers are started as ``python -m streamer.pipeline.worker FD`` rather
    than by ``multiprocessing``: its spawn method re-runs the caller's main
    script in every child (a script without an ``if __name__ == "__main__"``
    guard would start workers recursively), and fork copies a process that
    already runs threads (the store loop).
    """

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        with ours, theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "streamer.pipeline.worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
            )
            self.conn = Connection(os.dup(ours.fileno()))
        # The parent's end sees EOF when the process dies: it holds no copy of theirs.
        self.pid: int = self.process.pid
        try:
            self.conn.recv()  # ready: imports done
        except (EOFError, OSError):
            self.process.wait()
            raise

    def call(self, task: Task) -> Any:
        self.conn.send(task)
        first = self.conn.recv()
        if first == ASK_HELD_BACK:  # read here, in the pool's thread, through the store
            send_held_back(self.conn, read_deferred(task.job))
            first = None
        return receive_answer(self.conn, first)

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


class WorkerPool:
    """``size`` decode processes; ``restarts`` counts workers replaced after dying."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one process")
        self.size = size
        self.restarts = 0
        self._idle: list[_Worker | None] = []
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._free = anyio.Semaphore(size)
        self._threads = anyio.CapacityLimiter(size)
        self._closed = False

    @property
    def pids(self) -> list[int]:
        """Process ids of the current workers."""
        return [worker.pid for worker in self._idle_or_busy()]

    async def start(self) -> None:
        """Start every worker and wait until each is ready (imports done)."""
        async with anyio.create_task_group() as group:
            for _ in range(self.size):
                group.start_soon(self._add_idle)

    async def run(self, task: Task) -> Any:
        """The worker's answer to ``task``; retried once if its worker dies.
        The job's deferred ranges are read and sent only if the worker asks."""
        async with self._free:
            for retry in (False, True):
                worker = self._idle.pop()
                if worker is None:
                    worker = await anyio.to_thread.run_sync(self._spawn)
                try:
                    answer = await anyio.to_thread.run_sync(
                        worker.call, task, abandon_on_cancel=True, limiter=self._threads
                    )
                except (EOFError, OSError) as exc:
                    self.restarts += 1
                    log.warning(
                        "decode worker %d died (%s); replacing it%s",
                        worker.pid,
                        str(exc) or type(exc).__name__,
                        " and giving up on its crop" if retry else " and retrying its crop",
                    )
                    self._retire(worker)
                    self._idle.append(None)
                    continue
                except BaseException:
                    # Cancelled mid-task: the worker's answer would arrive late.
                    self._retire(worker)
                    self._idle.append(None)
                    raise
                self._idle.append(worker)
                return answer
        raise WorkerDied("a decode worker process died twice while decoding this crop")

    def close(self) -> None:
        """Stop and reap every worker: politely, then SIGTERM, then SIGKILL."""
        self._closed = True
        with self._lock:
            workers, self._all = self._all, []
        self._idle.clear()
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

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)

    def _spawn(self) -> _Worker:
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        worker = _Worker()
        with self._lock:
            self._all.append(worker)
        return worker

    async def _add_idle(self) -> None:
        self._idle.append(await anyio.to_thread.run_sync(self._spawn))

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)
        worker.kill()

    def _idle_or_busy(self) -> list[_Worker]:
        with self._lock:
            return list(self._all)
