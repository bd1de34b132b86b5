"""Shared memory for decoded crops: workers write them, the consumer reads them in place.

A crop of 8 s of 44.1 kHz stereo is 2.8 MB of float32. Sent through the
worker's pipe it is copied into the kernel, out again, and through
``multiprocessing``'s buffers (about 2.5 ms of the parent's CPU per crop).
Instead the pool owns one ``Arena``: an anonymous shared memory file
(``memfd_create``: it has no name, so nothing is left in ``/dev/shm``
whatever dies, and the kernel frees it when the last process holding it
ends) mapped by the parent and by every worker. For each task the parent
*leases* a region the size the crop will have (``crop_bytes``); the worker
copies its result there and answers with the shape alone; the parent hands
the caller a numpy array over the region, with no copy. The region is
released when that array (and every view of it) is garbage: a consumer may
keep crops as long as it likes.

A remote task's fetched bytes go to the worker the same way (``Task.shipped``):
the parent copies them into a leased region and the task travels without
them; the worker copies them out as it starts the task, and the region is
released when the batch is answered (or its worker reaped). Pickled into
the message instead they were copied three times in the parent (joined,
pickled, written to the socket) and read back through the socket.

Memory is bounded: the arena's pages are touched only where regions were
leased (first fit, so the low offsets are reused), which is at most the
crops in flight (prefetch and queue) plus those the consumer still holds;
a task for which no region is free (a consumer holding more than the
arena) gets none, and its crop comes through the pipe as before (counted
in ``piped``). Platforms without ``memfd_create`` use the pipe for all.
"""

from __future__ import annotations

import collections
import itertools
import mmap
import os
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from ..decode.crop import CropJob

__all__ = ["ARENA_BYTES", "Arena", "Lease", "crop_bytes", "open_arena"]

#: The arena's size (address space: only pages of leased regions become memory).
ARENA_BYTES = 256 << 20
#: Regions start on cache lines.
_ALIGN = 64


def crop_bytes(job: CropJob) -> int:
    """The float32 bytes the job's crop will take: its channels (one with
    ``mono``) times its samples at the output rate (the request's length;
    a crop clipped at the episode's end is shorter). 0 when unknown (no
    index: the fallback learns the rate as it decodes)."""
    index, request = job.episode.index, job.request
    if index is None or not index.ok or not index.sample_rate or not index.channels:
        return 0
    rate = request.sample_rate or index.sample_rate
    samples = round(request.end * rate) - round(request.start * rate)
    channels = 1 if request.mono else index.channels
    return channels * max(samples, 0) * 4


@dataclass(frozen=True)
class Lease:
    """A leased region. ``serial`` tells this lease from a later one of the
    same region: releasing twice (the pool after a cancelled task, and the
    finalizer of an array nobody received) gives it back once."""

    offset: int
    capacity: int
    serial: int

    @property
    def region(self) -> tuple[int, int]:
        """(offset, capacity), what a worker is told."""
        return self.offset, self.capacity


class Arena:
    """One shared memory file, its mapping in this process and a first-fit
    list of free regions. Regions are released by finalizers, which run in
    whatever thread drops the last reference, at any allocation (a garbage
    collection), even in the middle of ``lease``: ``release`` only queues
    the region, and the free list is changed under the lock, by ``lease``
    and ``leased``, which take the queue first."""

    def __init__(self, size: int = ARENA_BYTES) -> None:
        self.size = size
        self.fd = os.memfd_create("streamer-crops", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self._map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self._free: list[tuple[int, int]] = [(0, size)]  # (offset, length), by offset
        self._leases: dict[int, int] = {}  # offset -> serial of the lease on it
        self._serials = itertools.count()
        self._lock = threading.Lock()
        self._returned: collections.deque[Lease] = collections.deque()
        self._leased = 0
        self.piped = 0  # tasks that found no free region

    @property
    def leased(self) -> int:
        """Bytes in leased regions now."""
        with self._lock:
            self._take_returned()
            return self._leased

    def lease(self, nbytes: int, *, counted: bool = True) -> Lease | None:
        """A free region of ``nbytes``, or None when there is none (which,
        ``counted``, is a crop that goes through the pipe: ``piped``)."""
        if nbytes <= 0:
            return None
        need = -(-nbytes // _ALIGN) * _ALIGN
        with self._lock:
            self._take_returned()
            for number, (offset, length) in enumerate(self._free):
                if length >= need:
                    if length == need:
                        del self._free[number]
                    else:
                        self._free[number] = (offset + need, length - need)
                    self._leased += need
                    serial = next(self._serials)
                    self._leases[offset] = serial
                    return Lease(offset, need, serial)
            self.piped += counted
        return None

    def write(self, lease: Lease, pieces: list[memoryview]) -> list[tuple[int, int]]:
        """Copy ``pieces`` one after another into ``lease``'s region (they
        must fit); their ``(offset, length)`` in the arena."""
        placed, at = [], lease.offset
        for piece in pieces:
            self._map[at : at + len(piece)] = piece
            placed.append((at, len(piece)))
            at += len(piece)
        assert at <= lease.offset + lease.capacity
        return placed

    def release(self, lease: Lease) -> None:
        """Give a leased region back (a second release of a lease is ignored).
        Safe from any thread at any moment: it only queues the lease."""
        self._returned.append(lease)

    def _take_returned(self) -> None:
        """Put the queued regions back in the free list (under the lock)."""
        while self._returned:
            self._give_back(self._returned.popleft())

    def _give_back(self, lease: Lease) -> None:
        """One region back in the free list, merged with free neighbours."""
        offset, length = lease.region
        if self._leases.get(offset) != lease.serial:
            return
        del self._leases[offset]
        self._leased -= length
        free = self._free
        at = 0
        while at < len(free) and free[at][0] < offset:
            at += 1
        free.insert(at, (offset, length))
        if at + 1 < len(free) and offset + length == free[at + 1][0]:
            free[at] = (offset, length + free.pop(at + 1)[1])
        if at > 0 and free[at - 1][0] + free[at - 1][1] == offset:
            start, size = free.pop(at - 1)
            free[at - 1] = (start, size + free[at - 1][1])

    def array(self, lease: Lease, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """The crop a worker wrote in ``lease``'s region, as an array over the
        shared memory; the region is released when the array is garbage (its
        views keep it alive: numpy makes a view's base the array itself,
        since this one's base is not an array)."""
        array = np.ndarray(shape, dtype=dtype, buffer=self._map, offset=lease.offset)
        weakref.finalize(array, self.release, lease)
        return array

    def close(self) -> None:
        """Close the file. The mapping (and the descriptor ``mmap`` keeps) is
        never closed here: numpy arrays over it hold the ``mmap`` object, not
        a buffer export, so closing it could pull the memory from under a crop
        the consumer still holds. It goes when the arena and the last crop
        over it are garbage."""
        os.close(self.fd)


def open_arena(size: int = ARENA_BYTES) -> Arena | None:
    """An ``Arena``, or None where shared memory files are not available."""
    if not hasattr(os, "memfd_create"):
        return None
    try:
        return Arena(size)
    except OSError:
        return None
