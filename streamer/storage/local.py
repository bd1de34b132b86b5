"""Local files, memory-mapped: reads are zero-copy slices of the mapping.

Writes go to a hidden temporary file in the target's own directory, renamed
over the target when complete: a rename within one file system is atomic, so
a reader (or a crashed writer's rerun) sees a whole file or the old one.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import stat
import uuid
import weakref
from collections.abc import Iterator, Sequence

import pyarrow as pa

from ..errors import StorageError
from ._bounds import check_range
from .base import Entry, NotFound, RangeReader, Source, Store
from .stats import StoreStats

__all__ = ["LocalFileReader", "LocalStore", "MemoryReader"]


class MemoryReader(RangeReader):
    """Bytes already in memory, behind the same interface as a store.

    Used where a buffer had to be materialised anyway (an IPC-compressed
    column is decompressed whole) and as the backing of a local mapping.
    """

    def __init__(self, buffer: pa.Buffer | bytes | memoryview, url: str = "memory://") -> None:
        if not isinstance(buffer, pa.Buffer):
            buffer = pa.py_buffer(buffer)
        self._view = memoryview(buffer)
        self.url = url

    @property
    def view(self) -> memoryview:
        """The whole object as one read-only view."""
        return self._view

    async def size(self) -> int:
        return len(self._view)

    async def read(self, offset: int, length: int) -> memoryview:
        return self.read_sync(offset, length)

    def size_sync(self) -> int:
        return len(self._view)

    def read_sync(self, offset: int, length: int) -> memoryview:
        check_range(self.url, offset, length, len(self._view))
        return self._view[offset : offset + length]


def _arrow_path(path: str) -> str | bytes:
    """``path`` as pyarrow can open it: pyarrow encodes a str path as strict
    UTF-8, which a name Python decoded with surrogates (an ASCII locale
    without UTF-8 mode, a Latin-1 folder name) is not; its bytes it takes."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path)
    return path


class LocalFileReader(MemoryReader):
    """A local file mapped read-only into memory.

    Only the pages a caller touches are faulted in, so reading 64 KiB out of a
    multi-GB shard costs about 64 KiB of I/O. ``mapping`` is the pyarrow
    memory map, which ``pyarrow.ipc`` can open without copying.
    """

    mapped = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        path = os.fspath(path)
        try:
            # Opening a named pipe (or a terminal) to read waits for a writer,
            # which a dataset listing one never has: only a file is mapped.
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            # Opened before the mapping, so that it is the mapped file (or,
            # renamed over in between, an older one), never a newer one;
            # closed with the reader (a descriptor, not a file object, whose
            # collection warns).
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            weakref.finalize(self, os.close, self._fd)
            self.mapping = pa.memory_map(_arrow_path(path), "r")
        except FileNotFoundError as exc:
            raise NotFound(f"cannot map {path}: {exc}") from exc
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot map {path}: {exc}") from exc
        self.path = path
        super().__init__(_whole(self.mapping), url=path)

    def read_sync(self, offset: int, length: int) -> memoryview:
        view = super().read_sync(offset, length)
        self._check_still_there(offset, offset + length)
        return view

    def read_many_sync(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        views = [super(LocalFileReader, self).read_sync(o, n) for o, n in ranges]
        if ranges:
            self._check_still_there(min(o for o, _ in ranges), max(o + n for o, n in ranges))
        return views

    def _check_still_there(self, start: int, end: int) -> None:
        """Raise ``StorageError`` when the file no longer holds ``[start, end)``.

        A file truncated in place after it was mapped (``truncate``, ``rsync
        --inplace``; not a copy renamed over it, which leaves the mapping
        whole) faults on the pages it lost: SIGBUS, which kills the process
        touching them with no exception. Its current size (one ``fstat``)
        turns that into this crop's error before anything touches them."""
        size = os.fstat(self._fd).st_size
        if end > size:
            raise StorageError(
                f"range [{start}, {end}) is past the end of {self.path}, which shrank from "
                f"{len(self.view)} to {size} bytes since it was opened (truncated or rewritten "
                "in place: replace a shard by renaming a complete copy over it)"
            )

    def __reduce__(self) -> tuple[object, tuple[str]]:
        # A mapping cannot be pickled; a worker process maps the file itself, once.
        return mapped_file, (self.path,)

    @property
    def base_address(self) -> int:
        """Address of the first mapped byte, for zero-copy checks."""
        return pa.py_buffer(self.view).address


@functools.lru_cache(maxsize=64)
def mapped_file(path: str) -> LocalFileReader:
    """This process's mapping of ``path`` (what an unpickled reader is)."""
    return LocalFileReader(path)


class LocalStore(Store):
    """The local file system (and ``file://``). The page cache is its cache.

    ``stats`` stays at zero: mapped reads are page faults, not requests.
    """

    url = "file://"

    def __init__(self, scheme: str = "file", options: dict[str, object] | None = None) -> None:
        if options:
            raise TypeError(f"local files take no storage options: {sorted(options)}")
        self.stats = StoreStats()

    def reader(self, path: str, size: int | None = None) -> LocalFileReader:
        return LocalFileReader(path)

    def list_sync(self, path: str) -> list[Entry]:
        try:
            with os.scandir(path) as entries:
                found = [_entry(e) for e in entries]
        except OSError as exc:
            raise StorageError(f"cannot list {path}: {exc.strerror or exc}") from exc
        return sorted(found, key=lambda e: e.name)

    def join(self, path: str, *names: str) -> str:
        return os.path.join(path, *names)

    def put_sync(self, path: str, source: Source) -> None:
        with self.staged_sync(path) as temp:
            if isinstance(source, (str, os.PathLike)):
                shutil.copyfile(source, temp)
            else:
                with open(temp, "wb") as file:
                    file.write(source)

    def move_in_sync(self, path: str, local_file: str) -> None:
        """A rename onto ``path`` (atomic); a copy first across file systems."""
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            os.replace(local_file, path)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
            super().move_in_sync(path, local_file)

    @contextlib.contextmanager
    def staged_sync(self, path: str) -> Iterator[str]:
        """A hidden file beside ``path``, renamed onto it on success (no copy)."""
        folder, name = os.path.split(path)
        temp = os.path.join(folder, f".{name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            os.makedirs(folder or ".", exist_ok=True)
            yield temp
            os.replace(temp, path)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
        finally:
            if os.path.exists(temp):
                os.remove(temp)


def _entry(entry: os.DirEntry[str]) -> Entry:
    """The entry, a file of unknown size when it cannot be stat'ed (a
    dangling symlink, a loop of symlinks: ``is_dir`` raises ``ELOOP``): its
    reader's error says why, the listing goes on."""
    try:
        is_dir = entry.is_dir()
        size = None if is_dir else entry.stat().st_size
    except OSError:
        is_dir, size = False, None
    return Entry(entry.name, is_dir, size)


def _whole(mapping: pa.MemoryMappedFile) -> pa.Buffer:
    """The entire mapping as one zero-copy buffer (position-independent slices)."""
    mapping.seek(0)
    return mapping.read_buffer()
