"""The on-disk tier of the block cache: a directory several processes share.

Each cached block is one file, named by a hash of (store, the object's cache
name (``RemoteStore.cache_name``: its path, or a URL without its signature), the
object's stamp, object size, block size, block number), under 256 fan-out
subdirectories (a stamp is an entry too, see ``cache.py``); the
store's metadata answers (listings, shard tails and footers, sizes) are
entries too, so a warmed directory answers a whole run without requests. Safety
with many processes (DataLoader workers, a ``streamer warmup`` next to a
training run) comes from the file system, not from locks:

* a block is written to a private temporary file and ``os.replace``d into
  place, so a reader sees a whole entry or none (``get_or_add`` links it
  into place instead, so the first of several writers wins);
* every entry starts with a header (magic, payload length, CRC-32, a hash
  of its key); an entry that fails the check (torn by a crash, truncated,
  bit rot, moved to another entry's name, of an older layout) is deleted
  and reported as a miss, so the block is fetched again;
* a hit bumps the entry's mtime; when this process estimates the directory
  is over ``max_bytes`` it rescans and deletes the least recently used
  entries down to 90 %. Deleting an entry another process has open is
  harmless on POSIX, and a lost race is just a later miss.

A failed write (disk full) or an eviction costs a reader only a later miss,
but a warmup exists to leave its entries behind: ``problem(since)`` says
when an entry written or used since then may not be kept.

The methods block on file I/O; the block cache calls them in a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import struct
import threading
import time
import uuid
import zlib

from ..errors import StorageError

__all__ = ["DiskCache", "make_directory"]

log = logging.getLogger("streamer.storage")

#: The layout's version: an entry of another (an older streamer's) is a miss.
_MAGIC = b"STRMBLK2"
_LAYOUTS = b"STRMBLK"
#: magic, payload length, crc32(payload), the start of sha256(key): an entry
#: moved to another's name (a copy, a restore gone wrong) is no valid entry there.
_HEADER = struct.Struct("<8sQI16s")
_SUFFIX = ".blk"
_TEMP_MAX_AGE = 3600.0  # temporary files older than this belong to a dead writer
#: File times lag ``time.time()`` by up to a clock tick of the kernel's.
_MTIME_SLACK = 1.0
#: A disk that keeps failing writes (full) is said at most this often, with
#: the count since: every block of a run would otherwise log its own line.
_WARN_EVERY = 60.0


def make_directory(path: str, what: str) -> None:
    """Create the directory ``path`` (and its parents) for ``what``, or fail
    with one ``StorageError`` saying why (a file in the way, no permission)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        why = "not a directory" if isinstance(exc, FileExistsError) else exc.strerror or exc
        raise StorageError(f"cannot use {path!r} as {what}: {why}") from None


class DiskCache:
    """Blocks on local disk, bounded by ``max_bytes`` (checked approximately)."""

    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int) -> None:
        self.directory = os.fspath(directory)
        self.max_bytes = max_bytes
        make_directory(self.directory, "the disk cache (cache_dir)")
        self._estimate: int | None = None
        self._written = 0  # bytes this process has written, ever (``_evict``)
        self._evicting = threading.Lock()  # one eviction at a time in a process
        self._lock = threading.Lock()  # the two below: writers run in threads
        self._last_failure = (0.0, "")  # (when, why) of the last write that failed
        self._unsaid = 0  # failed writes not yet in a warning
        self._said_at = -_WARN_EVERY  # time.monotonic() of the last warning
        self._latest_evicted = 0.0  # the newest mtime of an entry evicted

    def __repr__(self) -> str:
        return f"DiskCache({self.directory!r}, max_bytes={self.max_bytes})"

    def path(self, key: str) -> str:
        """The entry file for a cache key (any string naming one block)."""
        digest = _digest(key).hex()
        return os.path.join(self.directory, digest[:2], digest[2:] + _SUFFIX)

    def get(self, key: str, length: int | None = None) -> bytes | None:
        """The entry's bytes if a valid entry (of ``length`` bytes, when given)
        exists, else ``None``."""
        path = self.path(key)
        try:
            data = _read(path, None if length is None else _HEADER.size + length + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("disk cache: cannot read %s: %s", path, exc)
            return None
        payload = None if data is None else _payload(data, length, _digest(key))
        if payload is None:
            if data is not None and data.startswith(_LAYOUTS) and not data.startswith(_MAGIC):
                log.debug("disk cache: dropping an entry of an older layout %s", path)
            else:
                log.warning("disk cache: dropping corrupt entry %s", path)
            _remove(path)
            return None
        _touch(path)
        return payload

    def has(self, key: str) -> bool:
        """Whether an entry for ``key`` exists (not checked: ``get`` does that)."""
        return os.path.isfile(self.path(key))

    def touch_after(self, key: str, others: list[str]) -> None:
        """Make the existing entries of ``others`` used later than ``key``'s (the
        size limit evicts them after it: entries that must not outlive it)."""
        try:
            after = os.stat(self.path(key)).st_mtime_ns + 1000
        except OSError:
            return
        when = max(time.time_ns(), after)
        for other in others:
            with contextlib.suppress(OSError):
                os.utime(self.path(other), ns=(when, when))

    def remove(self, key: str) -> None:
        """Drop ``key``'s entry, if any: an answer no longer true (a folder's
        listing, once this process wrote into the folder)."""
        _remove(self.path(key))

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Store a block atomically; failures (disk full, ...) only cost a later miss."""
        self._write(key, data, replace=True)

    def get_or_add(self, key: str, data: bytes) -> bytes:
        """The entry's bytes; where there is none, ``data``, stored unless another
        writer stores its own first (then theirs: every process agrees on one)."""
        found = self.get(key)
        if found is not None:
            return found
        if self._write(key, data, replace=False):
            return data
        found = self.get(key)
        return data if found is None else found

    def _write(self, key: str, data: bytes | memoryview, *, replace: bool) -> bool:
        """Whether the entry now holds ``data``: written to a private temporary file,
        then renamed over the entry (``replace``) or linked only where none is."""
        path = self.path(key)
        temp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        header = _HEADER.pack(_MAGIC, len(data), zlib.crc32(data), _digest(key)[:16])
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(temp, "wb") as file:
                file.write(header)
                file.write(data)
            if replace:
                os.replace(temp, path)
            else:
                os.link(temp, path)
                _remove(temp)
        except FileExistsError:
            _remove(temp)
            return False
        except OSError as exc:
            _remove(temp)
            self._failed(path, exc)
            return False
        self._account(_HEADER.size + len(data))
        return True

    def _failed(self, path: str, exc: OSError) -> None:
        """Note a failed write for ``problem``; warn, once a minute at most."""
        now = time.monotonic()
        with self._lock:
            self._last_failure = (time.time(), exc.strerror or str(exc))
            self._unsaid += 1
            failed, say = self._unsaid, now - self._said_at >= _WARN_EVERY
            if say:
                self._unsaid, self._said_at = 0, now
        if say:
            since = f" ({failed} writes failed since the last warning)" if failed > 1 else ""
            log.warning("disk cache: cannot write %s: %s%s", path, exc, since)

    def usage(self) -> int:
        """Bytes held by entries right now (a full scan)."""
        return sum(size for _, size, _ in self._scan())

    def _account(self, added: int) -> None:
        with self._lock:
            self._written += added
            if self._estimate is not None:
                self._estimate += added
            estimate = self._estimate
        if estimate is None:
            estimate = self._first_estimate()
            if estimate is None:
                return  # another thread of this process is counting the directory
        if estimate > self.max_bytes:
            self._evict()

    def _first_estimate(self) -> int | None:
        """The directory's usage, counted once in a process, by one thread: a
        scan of a large directory takes seconds, and writers that waited for
        it, or ran their own, would hold the threads that reads need too.
        The others go on writing meanwhile; what they write is added
        (counted twice if the scan saw it: the limit is approximate)."""
        if not self._evicting.acquire(blocking=False):
            return None
        try:
            with self._lock:
                before = self._written
            total = self.usage()
            with self._lock:
                if self._estimate is None:
                    self._estimate = total + self._written - before
                return self._estimate
        finally:
            self._evicting.release()

    def _evict(self) -> None:
        """Delete the least recently used entries down to 90 % of ``max_bytes``.
        A thread that finds another evicting leaves it to that one (two would
        both count the same entries and then delete newer ones); the one
        evicting counts what others wrote meanwhile and goes again while that
        keeps the directory over its limit (their writes were lost from the
        estimate, and the directory grew past the limit unseen)."""
        if not self._evicting.acquire(blocking=False):
            return
        try:
            while True:
                with self._lock:
                    before = self._written
                entries = sorted(self._scan(), key=lambda entry: entry[2])
                total = sum(size for _, size, _ in entries)
                target = int(self.max_bytes * 0.9)
                for path, size, mtime in entries:
                    if total <= target:
                        break
                    if _remove(path):  # gone, by this process or another
                        total -= size
                        with self._lock:
                            self._latest_evicted = max(self._latest_evicted, mtime)
                with self._lock:
                    since = self._written - before  # written while this pass ran
                    self._estimate = total + since
                if not since or self._estimate <= self.max_bytes:
                    return
        finally:
            self._evicting.release()

    def problem(self, since: float) -> str | None:
        """Why an entry written or used since ``since`` (``time.time()``) may be
        missing, or None: a write failed since then, or the size limit evicted
        such an entry (the directory cannot hold what was used since)."""
        with self._lock:
            (failed, why), evicted = self._last_failure, self._latest_evicted
        if failed >= since:
            return f"disk cache {self.directory}: cannot write entries ({why})"
        if evicted >= since - _MTIME_SLACK:
            return (
                f"disk cache {self.directory}: its size limit ({self.max_bytes} bytes, "
                "cache_dir_bytes) evicted entries written since: it cannot hold them all"
            )
        return None

    def _scan(self) -> list[tuple[str, int, float]]:
        """(path, size, mtime) of every entry; stale temporary files are removed."""
        found = []
        now = time.time()
        for folder, _, files in os.walk(self.directory):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    status = os.stat(path)
                except FileNotFoundError:
                    continue
                if name.endswith(_SUFFIX):
                    found.append((path, status.st_size, status.st_mtime))
                elif ".tmp-" in name and now - status.st_mtime > _TEMP_MAX_AGE:
                    _remove(path)
        return found


def _read(path: str, most: int | None) -> bytes | None:
    """The file's bytes (at most ``most``), or None when it is no regular file:
    opened without blocking, so a FIFO or a device put at an entry's path
    (it waits for a writer forever) is found out by its type, not read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with open(fd, "rb", closefd=False) as file:
            return file.read() if most is None else file.read(most)
    finally:
        os.close(fd)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _payload(data: bytes, length: int | None, digest: bytes) -> bytes | None:
    """The payload of an entry of ``digest``'s key, or None if ``data`` is not one."""
    if len(data) < _HEADER.size:
        return None
    magic, size, crc, owner = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    expected = size if length is None else length
    if magic != _MAGIC or owner != digest[:16] or size != expected or len(payload) != size:
        return None
    return payload if zlib.crc32(payload) == crc else None


def _touch(path: str) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def _remove(path: str) -> bool:
    """Whether the file is gone (removed now, or already)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.warning("disk cache: cannot remove %s: %s", path, exc)
        return False
    return True
