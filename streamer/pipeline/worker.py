"""The decode worker process: receive a batch of tasks, decode them, send the crops back, repeat.

Started by ``pool.py`` as ``python -m streamer.pipeline.worker FD [ARENA]``,
FD being its end of a socket pair and ARENA the pool's shared memory file
(``arena.py``), which the worker maps to write crops into.

PyAV holds the GIL for the per-frame Python work of a decode, so decoding
scales with processes, not threads. A worker ignores SIGINT: Ctrl-C reaches
the whole process group, and it is the parent's job to stop its workers
(``pool.py``), not each worker's to die with a traceback.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import sys
from multiprocessing.connection import Connection
from typing import NoReturn

from ..decode.crop import Crop
from ..formats.job import DecodeStats
from ..timing import flush_at_exit, record
from .tasks import (
    Failure,
    Sealed,
    Task,
    ask_held_back,
    attempt,
    send_answers,
    unseal,
    unshipped,
)

__all__ = ["leave", "serve"]


def serve(conn: Connection, shared: mmap.mmap | None = None) -> None:
    """The worker's main loop: a list of ``Sealed`` tasks in, their ``(crop
    or Failure, DecodeStats)`` out in one message once all are decoded
    (``tasks.send_answers``), asking for held-back pieces in between when
    it needs them; ``None`` or a closed pipe ends it. The first message out
    is the pid (ready). A task's crop goes into ``shared`` at the task's
    region when it has one. A task that does not unpickle here (its shard's
    file gone) is answered with that failure: the worker goes on."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send(os.getpid())
    while True:
        try:
            with record("worker_idle"):
                sealed: list[Sealed] | None = conn.recv()
        except (EOFError, OSError):
            return
        if sealed is None:
            return
        tasks = [unseal(task) for task in sealed]
        regions = [task.region if isinstance(task, Task) else None for task in tasks]
        send_answers(conn, _attempt_all(conn, tasks, shared), shared, regions)


def _attempt_all(
    conn: Connection, tasks: list[Task | Failure], shared: mmap.mmap | None
) -> list[tuple[Crop | Failure, DecodeStats]]:
    """The batch's answers. Once a crop's store gave up (``StoreUnavailable``:
    down for its whole budget) the rest are not tried: each would probe the
    dead store once more, a request timeout apiece before the batch is
    answered, and the pass ends on the first anyway. They fail with the
    same error (a storage failure is raised, never skipped)."""
    answers: list[tuple[Crop | Failure, DecodeStats]] = []
    gave_up: Failure | None = None
    for number, task in enumerate(tasks):
        if isinstance(task, Failure):  # it did not unpickle (``unseal``)
            answers.append((task, DecodeStats()))
        elif gave_up is not None:
            job = task.job
            failure = Failure.of(gave_up.error(), job.request.key, job.episode.shard)
            answers.append((failure, DecodeStats()))
        else:
            answers.append(_attempt(conn, number, unshipped(task, shared)))
        crop = answers[-1][0]
        if isinstance(crop, Failure) and crop.store_gave_up:
            gave_up = crop
    return answers


def _attempt(conn: Connection, number: int, task: Task) -> tuple[Crop | Failure, DecodeStats]:
    """The batch's task ``number`` decoded (or its failure), asking the parent
    for its deferred ranges if the decoder needs them."""
    return attempt(task, lambda: ask_held_back(conn, number))


def leave() -> NoReturn:
    """End the process without tearing the interpreter down, as
    ``multiprocessing``'s children do: freeing every module's objects
    (PyAV's, numpy's) cost a worker about 60 ms of CPU at each pool close,
    for nothing. What the exit hooks would write (the phase profiler's
    figures, buffered output) is written first."""
    flush_at_exit()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _map(fd: int) -> mmap.mmap:
    """The pool's arena, mapped (the descriptor is closed: the mapping stays)."""
    with open(fd, "rb", buffering=0) as file:
        return mmap.mmap(file.fileno(), os.fstat(file.fileno()).st_size)


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1])), _map(int(sys.argv[2])) if len(sys.argv) > 2 else None)
    leave()
