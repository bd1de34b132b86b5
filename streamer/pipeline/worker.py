"""The decode worker process: receive a task, decode, send the crop back, repeat.

Started by ``pool.py`` as ``python -m streamer.pipeline.worker FD [ARENA]``,
FD being its end of a socket pair and ARENA the pool's shared memory file
(``arena.py``), which the worker maps to write crops into.

PyAV holds the GIL for the per-frame Python work of a decode, so decoding
scales with processes, not threads. A worker ignores SIGINT: Ctrl-C reaches
the whole process group, and it is the parent's job to stop its workers
(``pool.py``), not each worker's to die with a traceback.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
from multiprocessing.connection import Connection

from ..timing import record
from .tasks import ask_held_back, attempt, send_answer

__all__ = ["serve"]


def serve(conn: Connection, shared: mmap.mmap | None = None) -> None:
    """The worker's main loop: ``Task`` in, ``(crop or Failure, DecodeStats)`` out
    (``tasks.send_answer``), asking for held-back pieces in between when it
    needs them; ``None`` or a closed pipe ends it. The first message out is
    the pid (ready). A task's crop goes into ``shared`` at the task's
    region when it has one."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send(os.getpid())
    while True:
        try:
            with record("worker_idle"):
                task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        send_answer(conn, attempt(task, lambda: ask_held_back(conn)), shared, task.region)


def _map(fd: int) -> mmap.mmap:
    """The pool's arena, mapped (the descriptor is closed: the mapping stays)."""
    with open(fd, "rb", buffering=0) as file:
        return mmap.mmap(file.fileno(), os.fstat(file.fileno()).st_size)


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1])), _map(int(sys.argv[2])) if len(sys.argv) > 2 else None)
