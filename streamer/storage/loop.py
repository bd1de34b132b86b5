"""The background event loop every network store runs its I/O on.

Connection pools (aiohttp sessions, aiobotocore clients) and the block
cache's in-flight futures belong to one event loop. Callers, though, come
from anywhere: a training loop's asyncio or trio loop, DataLoader worker
threads, FFmpeg's file callbacks in a decode process. So each process runs
one daemon thread with one asyncio loop, and all store I/O happens there:

* sync callers (``read_sync``) submit a coroutine and block on its result;
* async callers on another loop submit it and await completion without
  blocking their own loop (``asyncio.wrap_future``, or an anyio event for
  trio and other backends);
* code already on the background loop awaits directly.

After ``fork`` the child has no such thread; the loop is recreated lazily in
the child, and stores get new per-process state (see ``ProcessLocal``). The
inherited loop and state are never finalized in the child: the child shares
the parent's epoll instance, and closing an inherited transport would
unregister the *parent's* sockets from it (its requests would then hang).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel
import sniffio

__all__ = [
    "CallGroup",
    "ProcessLocal",
    "background_loop",
    "retrieve_outcome",
    "run_async",
    "run_sync",
]

T = TypeVar("T")

#: Reentrant: a garbage collection while the loop is made can run a
#: finalizer (a dropped Streamer's) that needs the loop, on this thread.
#: Never held while waiting on another thread (``background_loop``).
_lock = threading.RLock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0
#: What a forked child inherited from its parent's store loop: kept alive, never closed.
_inherited: list[object] = []


def retrieve_outcome(future: asyncio.Future[Any]) -> None:
    """Mark a finished future's error as seen (a done callback): for one whose
    outcome nobody may be left to take (a shared fetch whose readers left, a
    hedged GET's copy that lost or whose caller was cancelled). asyncio logs
    an error never retrieved at ERROR with its traceback, "Task exception
    was never retrieved", whatever the program does with the failure."""
    if not future.cancelled():
        future.exception()


def background_loop() -> asyncio.AbstractEventLoop:
    """This process's store loop, started on first use.

    The loop is this process's as soon as it is made, before its thread
    runs it: work submitted meanwhile waits in its queue. Its thread is
    started outside the lock, and nobody waits for it to run: a collection
    on that thread as it starts can run a finalizer (a dropped Streamer's)
    that asks for the loop, and it waited for the lock while the thread
    holding it waited for the loop to run, both forever (a forked
    DataLoader worker that inherited an uncollected Streamer hung)."""
    global _loop, _loop_pid
    with _lock:
        if _loop is not None and _loop_pid == os.getpid():
            return _loop
        loop = asyncio.new_event_loop()
        if _loop is not None and _loop_pid == os.getpid():
            # A finalizer run by a collection inside new_event_loop made one
            # (re-entering the lock): keep it, drop ours.
            loop.close()
            return _loop
        _loop, _loop_pid = loop, os.getpid()
    try:
        thread = threading.Thread(target=_serve, args=(loop,), name="streamer-storage", daemon=True)
        thread.start()
    except RuntimeError:  # no thread could be started: no loop either
        with _lock:
            if _loop is loop:
                _loop = None
        raise
    return loop


def _forget_parent_loop() -> None:
    """In a forked child: retire the parent's loop without touching its file descriptors."""
    global _loop, _lock
    _lock = threading.RLock()  # the parent's may have been held by another thread
    if _loop is not None:
        # Marked closed, the loop's transports skip unregistering from the
        # shared epoll instance should they ever be finalized here.
        _loop._closed = True  # type: ignore[attr-defined]
        _inherited.append(_loop)
        _loop = None


os.register_at_fork(after_in_child=_forget_parent_loop)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


def _on_store_loop() -> bool:
    try:
        return asyncio.get_running_loop() is _loop and _loop_pid == os.getpid()
    except RuntimeError:
        return False


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the store loop and block until it finishes.

    Must not be called from the store loop itself (it would deadlock); that
    is a programming error and raises ``RuntimeError``. An interrupt of the
    waiting thread cancels the work on the store loop.
    """
    if _on_store_loop():
        coroutine.close()
        raise RuntimeError("blocking storage call made on the storage event loop")
    future = asyncio.run_coroutine_threadsafe(coroutine, background_loop())
    group: CallGroup | None = getattr(_calling, "group", None)
    if group is not None:
        group._add(future)
    try:
        return future.result()
    except BaseException:  # KeyboardInterrupt, SystemExit: stop the work too
        future.cancel()
        raise
    finally:
        if group is not None:
            group._discard(future)


#: The ``CallGroup`` the calling thread's ``run_sync`` calls belong to.
_calling = threading.local()


class CallGroup:
    """The blocking store calls several threads make for one piece of work,
    cancelled together: an interrupt reaches only the thread that waits for
    the work (``run_sync`` cancels that thread's call), while the others'
    calls would go on retrying for the whole outage budget, and a thread
    pool's exit waits for them (Ctrl-C while a remote dataset's shards were
    opened took the budget, 40 s, to stop).

    ``bind(function)`` makes ``function``'s calls, on whatever thread runs
    it, members; ``cancel()`` cancels those in flight and every later one
    (each raises ``CancelledError`` in its thread). As a context manager it
    cancels them when its block raises (an interrupt, a cancelled caller)."""

    def __init__(self) -> None:
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()
        self._cancelled = False

    def __enter__(self) -> CallGroup:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            self.cancel()

    def bind(self, function: Callable[..., T]) -> Callable[..., T]:
        def bound(*args: Any, **kwargs: Any) -> T:
            outer = getattr(_calling, "group", None)
            _calling.group = self
            try:
                return function(*args, **kwargs)
            finally:
                _calling.group = outer

        return bound

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            futures = list(self._futures)
        for future in futures:
            future.cancel()

    def _add(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._futures.add(future)
            cancelled = self._cancelled
        if cancelled:
            future.cancel()

    def _discard(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._futures.discard(future)


async def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Await ``coroutine`` on the store loop from whatever loop the caller runs.

    Cancelling the caller cancels the work on the store loop too.
    """
    if _on_store_loop():
        return await coroutine
    future = asyncio.run_coroutine_threadsafe(coroutine, background_loop())
    try:
        if sniffio.current_async_library() == "asyncio":
            return await asyncio.wrap_future(future)
        return await _await_foreign(future)
    except BaseException:
        future.cancel()
        raise


async def _await_foreign(future: concurrent.futures.Future[T]) -> T:
    """Wait for a store-loop future on trio (anyio's only other backend).

    The store loop must never block on the caller's loop, so completion is
    handed over with trio's non-blocking ``run_sync_soon``.
    """
    done = anyio.Event()
    trio_token = anyio.lowlevel.current_token().native_token
    future.add_done_callback(lambda _: trio_token.run_sync_soon(done.set))
    await done.wait()
    return future.result()


class ProcessLocal(Generic[T]):
    """A value built on first use in each process (it is dropped by ``fork``).

    Stores keep their client sessions and caches in one, so a forked worker
    builds its own instead of sharing sockets with its parent.
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._value: T | None = None
        self._pid = 0

    def get(self) -> T:
        if self._value is None or self._pid != os.getpid():
            if self._value is not None:
                _inherited.append(self._value)  # the parent's: see the module docstring
            self._value, self._pid = self._factory(), os.getpid()
        return self._value

    def peek(self) -> T | None:
        """The value if this process built it already, else ``None``."""
        return self._value if self._pid == os.getpid() else None
