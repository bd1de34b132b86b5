"""Ctrl-C and SIGTERM, never lost: held back while PyAV reads through a
Python file object, and raised again when Python swallowed them.

PyAV calls a Python file object's ``read`` from inside FFmpeg and ignores an
exception raised there: a ``KeyboardInterrupt`` delivered during such a read
is lost, and the read's failure taken for bytes that are not audio (a file
skipped by ``pack``, an episode stored "no index" by ``streamer index``).
``pack``'s probes and every index build or check hold the two signals for
one file or one episode at a time, so an interrupt waits for at most one
episode and then unwinds as usual (temporary files removed); so do the
crop decoders that have FFmpeg's demuxer read through Python (MP4, the
generic index, the fallback: the lost Ctrl-C of a ``read_crop`` on the
main thread made its crop fail as "past the end", or was not seen at
all), one crop at a time. Off the main thread (the pipeline's decoding
thread with ``workers=0``) they hold nothing: signals never reach there.

Python itself drops a ``KeyboardInterrupt`` that a signal handler raises
while a finalizer or a weakref callback runs (the garbage collector's, at
any moment): it only prints "Exception ignored", and the run goes on as if
nothing had been asked. Under ``interrupts_as_ctrl_c`` (the CLI's commands)
such a loss is noted (``sys.unraisablehook``) and the interrupt raised
again at the next ``interrupts_held`` (the next file or episode).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["INTERRUPTS", "interrupts_as_ctrl_c", "interrupts_held"]

#: The signals held: Ctrl-C, and the polite stop of job runners (Kubernetes, Modal, Slurm).
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)

#: An interrupt whose ``KeyboardInterrupt`` Python swallowed, not yet raised again.
_lost = threading.Event()


@contextlib.contextmanager
def interrupts_as_ctrl_c() -> Iterator[None]:
    """While the block runs, SIGTERM unwinds the program as Ctrl-C does (a
    ``KeyboardInterrupt``), so a command stopped by its job runner removes
    its temporary files on the way out; and an interrupt Python swallowed is
    raised again at the next ``interrupts_held`` (module docstring). Off the
    main thread, where signals cannot be handled, this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept_handler = signal.signal(signal.SIGTERM, _raise_interrupt)
    kept_hook = sys.unraisablehook

    def note_lost(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            _lost.set()  # no Python code may take the signal's place here: it would be lost too
            return
        kept_hook(unraisable)

    sys.unraisablehook = note_lost
    try:
        yield
    finally:
        sys.unraisablehook = kept_hook
        signal.signal(signal.SIGTERM, kept_handler)
        _lost.clear()


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """SIGINT and SIGTERM held while the block runs and delivered, to the
    handlers the caller had, when it ends (the first one held). A lost
    interrupt (``interrupts_as_ctrl_c``) is raised before the block starts.
    In threads other than the main one (signals are the main thread's) this
    does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _raise_lost()
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
    _raise_lost()


def _raise_lost() -> None:
    if _lost.is_set():
        _lost.clear()
        raise KeyboardInterrupt
