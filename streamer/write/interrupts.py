"""Ctrl-C and SIGTERM held back while PyAV reads through a Python file object.

PyAV calls a Python file object's ``read`` from inside FFmpeg and ignores an
exception raised there: a ``KeyboardInterrupt`` delivered during such a read
is lost, and the read's failure taken for bytes that are not audio (a file
skipped by ``pack``, an episode stored "no index" by ``streamer index``).
``pack``'s probes and every index build or check hold the two signals for
one file or one episode at a time, so an interrupt waits for at most one
episode and then unwinds as usual (temporary files removed)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["INTERRUPTS", "interrupts_held", "sigterm_as_ctrl_c"]

#: The signals held: Ctrl-C, and the polite stop of job runners (Kubernetes, Modal, Slurm).
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


def sigterm_as_ctrl_c() -> None:
    """From now on SIGTERM unwinds the program as Ctrl-C does (a
    ``KeyboardInterrupt``), so a command stopped by its job runner removes
    its temporary files on the way out."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """SIGINT and SIGTERM held while the block runs and delivered, to the
    handlers the caller had, when it ends (the first one held). In threads
    other than the main one (signals are the main thread's) this does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    kept = {number: signal.getsignal(number) for number in INTERRUPTS}
    for number in INTERRUPTS:
        signal.signal(number, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for number, handler in kept.items():
            signal.signal(number, handler)
        if held:  # now, outside PyAV: the caller's handler runs (Ctrl-C: KeyboardInterrupt)
            signal.raise_signal(held[0])
