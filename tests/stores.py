"""Stores the tests plug into a ``Dataset``: what a store the pipeline does not
know by class looks like to it. Importable by decode worker processes (the
tests folder is on their ``sys.path``), so their readers can travel in tasks."""

from __future__ import annotations

import os
import signal
from typing import Any

from streamer.errors import StorageError
from streamer.storage.base import Entry, RangeReader, Source, Store
from streamer.storage.local import LocalFileReader, LocalStore
from streamer.storage.stats import StoreStats


class MappedStore(Store):
    """Local files, memory-mapped, through a store that is not ``LocalStore``:
    a new memory-mappable store. The pipeline must not take it for a remote one."""

    url = "mapped://"
    read_only = "a test store"

    def __init__(self) -> None:
        self.stats = StoreStats()

    def reader(self, path: str, size: int | None = None) -> RangeReader:
        return LocalFileReader(path)

    def list_sync(self, path: str) -> list[Entry]:
        return LocalStore().list_sync(path)

    def put_sync(self, path: str, source: Source) -> None:
        raise StorageError(self.read_only)

    def join(self, path: str, *names: str) -> str:
        return os.path.join(path, *names)


class SabotagedReader(RangeReader):
    """A local file's bytes here; in the process it is sent to, a reader that
    raises ``error`` on every read (or, with ``error`` None, the end of that
    process: ``os._exit`` while the task carrying it is unpickled; with
    ``KILL_ON_READ``, a SIGKILL of that process at its first read)."""

    def __init__(self, path: str, error: BaseException | str | None) -> None:
        self._file = LocalFileReader(path)
        self.url = path
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        if self.error is None:
            return os._exit, (70,)
        if self.error == KILL_ON_READ:
            return _Killing, (self.url,)
        return _Raising, (self.url, self.error)

    async def size(self) -> int:
        return self._file.size_sync()

    async def read(self, offset: int, length: int) -> memoryview:
        return self._file.read_sync(offset, length)

    def size_sync(self) -> int:
        return self._file.size_sync()

    def read_sync(self, offset: int, length: int) -> memoryview:
        return self._file.read_sync(offset, length)


#: ``SabotagedStore``'s error that makes the reading process SIGKILL itself.
KILL_ON_READ = "SIGKILL on read"


class _Killing(RangeReader):
    """A reader whose process dies by SIGKILL when it reads: a worker killed in
    the middle of its work, after the crops before this one were decoded."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def size(self) -> int:
        return self._die()

    async def read(self, offset: int, length: int) -> memoryview:
        return self._die()

    def size_sync(self) -> int:
        return self._die()

    def read_sync(self, offset: int, length: int) -> memoryview:
        return self._die()

    def _die(self) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("still alive after SIGKILL")


class _Raising(RangeReader):
    def __init__(self, url: str, error: BaseException) -> None:
        self.url = url
        self.error = error

    async def size(self) -> int:
        raise self.error

    async def read(self, offset: int, length: int) -> memoryview:
        raise self.error

    def size_sync(self) -> int:
        raise self.error

    def read_sync(self, offset: int, length: int) -> memoryview:
        raise self.error


class SabotagedStore(MappedStore):
    """``MappedStore`` whose readers are ``SabotagedReader``: an episode decoded
    in a worker process from its blob (no seek index) fails there with ``error``
    (``KILL_ON_READ``: the worker SIGKILLs itself at its first read of the blob)."""

    def __init__(self, error: BaseException | str | None) -> None:
        super().__init__()
        self.error = error

    def reader(self, path: str, size: int | None = None) -> RangeReader:
        return SabotagedReader(path, self.error)
