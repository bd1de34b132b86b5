"""Any other fsspec file system (``gcs://``, ``abfs://``, ``memory://``, ...).

fsspec implementations with an async API are driven on the store loop
directly; synchronous ones run each call in a worker thread, so a slow file
system never blocks the loop. fsspec's ``cat_file`` takes an exclusive
``end``; the lengths it returns are checked like any other store's. Writes
are one ``pipe_file``: atomic on object stores (gcs, abfs, memory), not on
every file system fsspec wraps; a file system that cannot write raises
``StorageError``.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import re
from typing import Any

import fsspec
import fsspec.asyn

from ..errors import StorageError
from .base import Entry
from .remote import Answer, NotFound, RemoteStore, check_length
from .retry import TransientError

__all__ = ["FsspecStore"]


class FsspecStore(RemoteStore):
    """An fsspec file system picked by protocol; backend options go to its constructor."""

    def __init__(self, scheme: str, options: dict[str, Any]) -> None:
        super().__init__(scheme, options)
        try:
            self._class = fsspec.get_filesystem_class(scheme)
        except (ValueError, ImportError) as exc:
            raise StorageError(f"unsupported URL scheme {scheme}:// ({exc})") from exc
        _check_options(scheme, self._class, self.backend_options)
        self._async = _drives_async(self._class, self.backend_options)
        self.url = f"{scheme}://"

    def cache_namespace(self) -> str:
        """The scheme and the options that pick the file system (``fo=`` of a
        zip archive, an FTP ``host``, an Azure ``account_name``): its paths
        name other bytes under other options. Credentials are left out (a
        rotated password reads the same files), and the rest goes in hashed."""
        text = json.dumps(_without_credentials(self.backend_options), sort_keys=True, default=repr)
        return f"{self.url} {hashlib.sha256(text.encode()).hexdigest()}"

    def display(self, path: str) -> str:
        return f"{self.scheme}://{path.lstrip('/')}" if "://" not in path else path

    def path_of(self, scheme: str, rest: str) -> str:
        return self._class._strip_protocol(f"{scheme}://{rest}")

    async def _connect(self) -> fsspec.AbstractFileSystem:
        if self._async:
            return self._class(**_on_loop(self._class, self.backend_options))
        return self._class(**self.backend_options)

    async def _disconnect(self, client: fsspec.AbstractFileSystem) -> None:
        """Nothing to do: fsspec file systems close their own sessions at exit."""

    async def _call_fs(self, client: fsspec.AbstractFileSystem, method: str, *args: Any) -> Any:
        """``client.method(*args)``: its coroutine form if async, else in a thread."""
        try:
            if self._async:
                return await getattr(client, f"_{method}")(*args)
            return await asyncio.to_thread(getattr(client, method), *args)
        except FileNotFoundError as exc:
            raise NotFound(f"{self.display(args[0])}: not found") from exc
        except (NotImplementedError, PermissionError) as exc:
            raise StorageError(f"{self.display(args[0])}: cannot {method} ({exc})") from exc
        except (ConnectionError, TimeoutError) as exc:
            raise TransientError(f"{type(exc).__name__}: {exc}") from None

    async def _get_range(self, client: Any, path: str, start: int, end: int) -> Answer:
        """The bytes alone: file systems do not say which version they read, nor
        that they sent fewer bytes on purpose (so a short body is a failure)."""
        body = await self._call_fs(client, "cat_file", path, start, end)
        check_length(len(body), end - start)
        return Answer(body)

    async def _get_tail(self, client: Any, path: str, length: int) -> tuple[int, Answer]:
        size = await self._get_size(client, path)
        start = max(0, size - length)
        answer = await self._get_range(client, path, start, size)
        return start, answer._replace(size=size)

    async def _get_size(self, client: Any, path: str) -> int:
        return int((await self._call_fs(client, "info", path))["size"])

    async def _put(self, client: Any, path: str, body: bytes) -> None:
        await self._call_fs(client, "pipe_file", path, body)
        # The file system's own listing cache must show the new object.
        client.invalidate_cache(path)

    async def _list(self, client: Any, path: str) -> list[Entry]:
        listing = await self._call_fs(client, "ls", path, True)
        entries = []
        for item in listing:
            name = item["name"].rstrip("/").rsplit("/", 1)[-1]
            is_dir = item["type"] == "directory"
            entries.append(Entry(name, is_dir, None if is_dir else item.get("size")))
        return entries


#: Option names of credentials, which do not change what a path reads.
_CREDENTIAL = re.compile(r"(?i)password|passwd|secret|token|key|credential|sas|sig|auth|connection")


def _without_credentials(value: Any) -> Any:
    """``value`` with every credential option left out, in nested options too
    (``target_options``, ``client_kwargs``)."""
    if isinstance(value, dict):
        return {
            k: _without_credentials(v)
            for k, v in value.items()
            if not (isinstance(k, str) and _CREDENTIAL.search(k))
        }
    return value


def _drives_async(kind: type, options: dict[str, Any]) -> bool:
    """Whether ``kind(**options)`` can run on the store loop: an async file
    system, and for a wrapper (``dir://``) one whose target is async too
    (``DirFileSystem(asynchronous=True)`` over a sync file system raises
    "can't use asynchronous with non-async fs")."""
    if not issubclass(kind, fsspec.asyn.AsyncFileSystem):
        return False
    target = options.get("fs")
    if isinstance(target, fsspec.AbstractFileSystem):
        return bool(target.async_impl and target.asynchronous)
    if "target_protocol" not in inspect.signature(kind.__init__).parameters:
        return True
    try:
        inner = fsspec.get_filesystem_class(options.get("target_protocol") or "file")
    except (ValueError, ImportError):
        return False  # making the target fails, and says why, when the store connects
    return _drives_async(inner, options.get("target_options") or {})


def _on_loop(kind: type, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` that make an async ``kind`` on the running (store) loop, and
    a wrapper's target too (``dir://`` over ``http://``: both must be async)."""
    options = {
        **options,
        "asynchronous": True,
        "loop": asyncio.get_running_loop(),
        "skip_instance_cache": True,
    }
    if "target_protocol" in inspect.signature(kind.__init__).parameters and "fs" not in options:
        inner = fsspec.get_filesystem_class(options.get("target_protocol") or "file")
        options["target_options"] = _on_loop(inner, options.get("target_options") or {})
    return options


def _check_options(scheme: str, kind: type, options: dict[str, Any]) -> None:
    """``StorageError`` unless ``kind(**options)`` can be called: a file system
    that needs an argument (FTP's ``host``) gets it as a storage option, the
    URL's host and user info are not read. Checked before any instance is
    made (a half-made one may fail again, noisily, in its ``__del__``)."""
    try:
        inspect.signature(kind.__init__).bind(None, **options)
    except TypeError as exc:
        raise StorageError(
            f"{kind.__name__} for {scheme}:// URLs cannot be made from the storage options "
            f"given ({exc}); a host or credentials in the URL are not read, give them as "
            "storage options"
        ) from None
