"""A per-phase profiler for the hot paths, off unless ``STREAMER_TIMING=1``.

Wrap a phase in ``with record("decode"):``. When profiling is on, each
process accumulates ``[count, total_s, max_s]`` per phase and writes them as
JSON to ``$STREAMER_TIMING_OUT.<pid>`` (default ``./streamer-timing.<pid>``)
every ``$STREAMER_TIMING_INTERVAL`` seconds (default 5) and at exit, so the
figures of a worker that gets killed survive up to its last write.
``streamer timing report FILES...`` merges the files of one run.

When profiling is off, ``record()`` returns one shared no-op object: the cost
is a function call and an empty ``with`` block (110-200 ns in CPython 3.11,
measured by ``benchmarks/bench_timing.py``).
"""

from __future__ import annotations

import atexit
import json
import logging
import multiprocessing.util as mp_util
import os
import threading
import time
from typing import Any

__all__ = ["enable", "enabled", "flush", "flush_at_exit", "record", "snapshot"]

ENV_ENABLE = "STREAMER_TIMING"
ENV_OUT = "STREAMER_TIMING_OUT"
DEFAULT_OUT = "streamer-timing"
ENV_INTERVAL = "STREAMER_TIMING_INTERVAL"
FLUSH_INTERVAL_S = float(os.environ.get(ENV_INTERVAL) or 5.0)


class _Noop:
    """What ``record`` returns when profiling is off: does nothing, shared."""

    __slots__ = ()

    def __enter__(self) -> _Noop:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None


_NOOP = _Noop()


class _State:
    """This process's figures. Reset in a forked child, which starts afresh."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.phases: dict[str, list[float]] = {}
        self.started = time.time()
        self.started_perf = time.perf_counter()
        self.last_flush = self.started_perf


_state = _State()
_enabled = os.environ.get(ENV_ENABLE, "") not in ("", "0")
_out = os.environ.get(ENV_OUT) or DEFAULT_OUT


class _Phase:
    __slots__ = ("_name", "_start")

    def __init__(self, name: str) -> None:
        self._name = name

    def __enter__(self) -> _Phase:
        self._start = time.perf_counter()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        now = time.perf_counter()
        elapsed = now - self._start
        state = _state
        with state.lock:
            figures = state.phases.get(self._name)
            if figures is None:
                state.phases[self._name] = [1, elapsed, elapsed]
            else:
                figures[0] += 1
                figures[1] += elapsed
                if elapsed > figures[2]:
                    figures[2] = elapsed
            due = now - state.last_flush >= FLUSH_INTERVAL_S
        if due:
            _flush_quietly()


def record(phase: str) -> _Phase | _Noop:
    """A context manager that times one occurrence of ``phase``."""
    if _enabled:
        return _Phase(phase)
    return _NOOP


def enabled() -> bool:
    return _enabled


def enable(on: bool = True, *, out: str | None = None) -> None:
    """Turn profiling on or off in this process (the env var sets the default)."""
    global _enabled, _out
    _enabled = on
    if out is not None:
        _out = out


def snapshot() -> dict[str, Any]:
    """This process's figures so far, in the JSON form the report reads."""
    with _state.lock:
        phases = {name: list(figures) for name, figures in _state.phases.items()}
    return {
        "pid": os.getpid(),
        "started": _state.started,
        "wall_s": time.perf_counter() - _state.started_perf,
        "phases": phases,
    }


def flush() -> str | None:
    """Write this process's figures to ``<out>.<pid>`` (atomically); returns the path."""
    if not _state.phases:
        return None
    path = f"{_out}.{os.getpid()}"
    temp = f"{path}.tmp"
    with _state.lock:
        _state.last_flush = time.perf_counter()
    with open(temp, "w") as file:
        json.dump(snapshot(), file)
    os.replace(temp, path)
    return path


def _flush_quietly() -> None:
    """Periodic writes must never break the code being timed: warn once and go on."""
    global _flush_failed
    try:
        flush()
    except OSError as exc:
        if not _flush_failed:
            _flush_failed = True
            logging.getLogger(__name__).warning("cannot write timing figures: %s", exc)


_flush_failed = False


def flush_at_exit() -> None:
    """The exit hook (registered with ``atexit``): the last write, when on.
    A process that leaves through ``os._exit`` calls it first."""
    if _enabled:
        _flush_quietly()


def _after_fork() -> None:
    global _state
    _state = _State()


class _Anchor:
    """An object for multiprocessing's after-fork registry, which holds weak references."""


_anchor = _Anchor()
atexit.register(flush_at_exit)
os.register_at_fork(after_in_child=_after_fork)
# multiprocessing's forked children leave through os._exit, skipping atexit;
# they do run multiprocessing's own finalizers, so register one in each child.
mp_util.register_after_fork(
    _anchor, lambda _: mp_util.Finalize(None, flush_at_exit, exitpriority=10)
)
