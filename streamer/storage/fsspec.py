"""Any other fsspec file system (``gcs://``, ``abfs://``, ``memory://``, ...).

URLs are read as fsspec reads them: a chain (``zip://ds::file:///x.zip``,
``simplecache::s3://...``) is the outer file system over the inner one, and
a host, port, user and password in a URL (``ftp://``, ``sftp://``) are
options of its file system (credentials masked wherever they turn up).

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
import contextlib
import ftplib
import hashlib
import inspect
import json
import os
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import fsspec
import fsspec.asyn

from ..errors import StorageError, UnsupportedURLError
from ._urls import redact, register_secret, safe_url
from .base import Entry, NotFound, Stat
from .remote import GENERIC_OPTIONS, Answer, RemoteStore, check_length
from .retry import TransientError

__all__ = ["FsspecStore"]


class _Instances:
    """Instances of a sync file system, each used by one call at a time: most
    are not thread-safe (FTP's one control connection, SFTP's channel, a tar
    archive's one file object), and the store's calls run in threads at
    once. There are at most ``limit`` (no more calls than that run at once
    anyway: the threads of ``asyncio.to_thread``); when the server refuses
    another (an FTP server's "421 Too many connections"), calls share the
    ones there are. An instance whose call failed is dropped, with the
    idle ones (their connections may be broken: servers close idle ones)."""

    def __init__(self, make: Any, limit: int) -> None:
        self._make = make
        #: Idle instances; ``None``: room to make one (an instance was dropped).
        self._idle: asyncio.Queue[fsspec.AbstractFileSystem | None] = asyncio.Queue()
        self._all: list[fsspec.AbstractFileSystem] = []
        self._room = asyncio.Semaphore(limit)
        self._full = False  # the server refused one more

    async def make(self) -> fsspec.AbstractFileSystem:
        fs = await asyncio.to_thread(self._make)
        self._all.append(fs)
        return fs

    def put(self, fs: fsspec.AbstractFileSystem) -> None:
        self._idle.put_nowait(fs)

    async def _take(self) -> fsspec.AbstractFileSystem:
        while True:
            if not self._idle.empty():
                fs = self._idle.get_nowait()
            elif self._full and self._all:
                fs = await self._idle.get()
            else:
                fs = None
            if fs is not None:
                return fs
            try:
                return await self.make()
            except StorageError:
                if not self._all:
                    raise
                self._full = True

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[fsspec.AbstractFileSystem]:
        async with self._room:
            fs = await self._take()
            try:
                yield fs
            except (FileNotFoundError, PermissionError, NotImplementedError):
                self._idle.put_nowait(fs)  # an answer: the connection is fine
                raise
            except asyncio.CancelledError:
                self._drop(fs)  # its thread may still be using it (a lost hedge)
                raise
            except BaseException:
                # Its connection may be broken, and the idle ones, as old, too
                # (a server closes idle connections): made anew when needed.
                self._drop(fs)
                while not self._idle.empty():
                    if (idle := self._idle.get_nowait()) is not None:
                        self._all.remove(idle)
                raise
            self._idle.put_nowait(fs)

    def _drop(self, fs: fsspec.AbstractFileSystem) -> None:
        """Forget ``fs``; a waiting call may make another in its place."""
        self._all.remove(fs)
        self._full = False
        self._idle.put_nowait(None)

    def invalidate_cache(self, path: str) -> None:
        for fs in self._all:
            fs.invalidate_cache(path)


class FsspecStore(RemoteStore):
    """An fsspec file system picked by protocol; backend options go to its constructor."""

    def __init__(self, scheme: str, options: dict[str, Any]) -> None:
        super().__init__(scheme, options)
        self._class = _filesystem_class(scheme, f"{scheme}://")
        _check_options(scheme, self._class, self.backend_options)
        self._async = _drives_async(self._class, self.backend_options)
        for value in _credentials(self.backend_options):
            register_secret(value)
        self.url = f"{scheme}://"
        # Where the paths are: an FTP server's host, a chain's target (an archive).
        host = self.backend_options.get("host")
        port = self.backend_options.get("port")
        self._server = f"{host}:{port}" if host and port else str(host or "")
        self._within = _target(self.backend_options)
        if scheme in _ARCHIVES:
            self.read_only = (
                f"{scheme}:// archives are read-only (a written member would leave the "
                "archive without its index until it is closed): pack or index a folder"
            )

    @classmethod
    def split_url(cls, url: str, options: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
        """(protocol, store options, path) of an fsspec URL, as fsspec reads it
        (``url_to_fs``): a chain ``zip://ds::file:///x.zip`` is the outer file
        system with the inner one as its target (``fo``, ``target_protocol``,
        ``target_options``), and what each part's URL says of its file
        system (an FTP host, port, user and password) goes into its options;
        options given explicitly win."""
        options = cls.canonical_options(options)
        generic = {name: options.pop(name) for name in GENERIC_OPTIONS if name in options}
        url = "::".join(map(_lower_scheme, url.split("::")))  # ``FTP://`` is ``ftp://``
        try:
            chain = fsspec.core._un_chain(url, options)
        except (ValueError, ImportError) as exc:
            raise _unsupported(url, exc) from None
        inner: dict[str, Any] = {}
        for depth, (path, protocol, kwargs) in enumerate(reversed(chain)):
            if depth == len(chain) - 1:
                inner = {**kwargs, **inner}
            else:
                inner = {
                    "target_options": {**kwargs, **inner},
                    "target_protocol": protocol,
                    "fo": path,
                }
        path, protocol, _ = chain[0]
        return protocol, {**inner, **generic}, path

    def cache_namespace(self) -> str:
        """The scheme and the options that pick the file system (``fo=`` of a
        zip archive, an FTP ``host``, an Azure ``account_name``): its paths
        name other bytes under other options. Credentials are left out (a
        rotated password reads the same files), and the rest goes in hashed."""
        text = json.dumps(_without_credentials(self.backend_options), sort_keys=True, default=repr)
        return f"{self.url} {hashlib.sha256(text.encode()).hexdigest()}"

    def display(self, path: str) -> str:
        if "://" in path:
            return safe_url(path)
        where = f"{self._server}/" if self._server else ""
        url = f"{self.scheme}://{where}{path.lstrip('/')}"
        # A file system whose URLs fsspec does not take apart keeps their
        # user info and query in its paths (``memory://user:pw@host/x?token=``).
        return (safe_url(url) if "@" in url or "?" in url else url) + self._within

    async def _connect(self) -> Any:
        """The async file system, made on the store loop; for a sync one, its
        ``_Instances`` (the first made now, so that a file system that
        cannot be opened says so at once)."""
        if self._async:
            return self._open(self._class, **_fresh(self._class, self.backend_options, True))
        threads = min(32, (os.cpu_count() or 1) + 4)  # asyncio.to_thread's pool
        instances = _Instances(self._open_sync, min(self.max_concurrency, threads))
        instances.put(await instances.make())
        return instances

    def _open(self, kind: type, **options: Any) -> fsspec.AbstractFileSystem:
        try:
            return kind(**options)
        except Exception as exc:
            reason = " ".join(redact(f"{type(exc).__name__}: {exc}").split())[:300]
            raise StorageError(f"cannot open {self.display('')}: {reason}") from exc

    def _open_sync(self) -> fsspec.AbstractFileSystem:
        # Run in a thread: some connect (FTP) or read an archive's index.
        return self._open(self._class, **_fresh(self._class, self.backend_options, False))

    async def _disconnect(self, client: Any) -> None:
        """Nothing to do: fsspec file systems close their own sessions at exit."""

    async def _call_fs(self, client: Any, method: str, *args: Any) -> Any:
        """``client.method(*args)``: its coroutine form if async, else in a thread
        on an instance that no other call uses meanwhile."""
        try:
            if self._async:
                return await getattr(client, f"_{method}")(*args)
            async with client.lease() as fs:
                return await asyncio.to_thread(getattr(fs, method), *args)
        except StorageError:
            raise
        except FileNotFoundError as exc:
            raise NotFound(f"{self.display(args[0])}: not found") from exc
        except (NotImplementedError, PermissionError) as exc:
            raise StorageError(f"{self.display(args[0])}: cannot {method} ({exc})") from exc
        except _TRANSIENT as exc:
            raise TransientError(f"{type(exc).__name__}: {redact(str(exc))}") from None
        except Exception as exc:  # a file system's own error: one line naming the object
            reason = " ".join(redact(f"{type(exc).__name__}: {exc}").split())[:300]
            raise StorageError(f"{self.display(args[0])}: cannot {method} ({reason})") from exc

    async def _get_range(self, client: Any, path: str, start: int, end: int) -> Answer:
        """The bytes alone: file systems do not say which version they read, nor
        that they sent fewer bytes on purpose (so a short body is a failure)."""
        body = await self._call_fs(client, "cat_file", path, start, end)
        check_length(len(body), end - start)
        return Answer(body)

    async def _get_tail(self, client: Any, path: str, length: int) -> tuple[int, Answer]:
        size = (await self._get_stat(client, path)).size
        start = max(0, size - length)
        answer = await self._get_range(client, path, start, size)
        return start, answer._replace(size=size)

    async def _get_stat(self, client: Any, path: str) -> Stat:
        info = await self._call_fs(client, "info", path)
        return Stat(int(info["size"]), _version(info))

    async def _put(self, client: Any, path: str, body: bytes) -> None:
        try:
            await self._call_fs(client, "pipe_file", path, body)
        except StorageError as refused:
            # A file system with folders (FTP: "550 No such file or directory")
            # writes no file into a folder that is not there; object stores
            # have none to make, and fail as they did.
            try:
                await self._call_fs(client, "makedirs", path.rsplit("/", 1)[0], True)
            except StorageError:
                raise refused from None
            await self._call_fs(client, "pipe_file", path, body)
        # The file system's own listing cache must show the new object.
        client.invalidate_cache(path)

    async def _list(self, client: Any, path: str) -> list[Entry]:
        listing = await self._call_fs(client, "ls", path, True)
        entries = []
        for item in listing:
            name = item["name"].rstrip("/").rsplit("/", 1)[-1]
            is_dir = item["type"] == "directory"
            if is_dir:
                entries.append(Entry(name, True))
            else:
                entries.append(Entry(name, False, item.get("size"), _version(item)))
        return entries


#: Where file systems' listings say what version of a file they list: an
#: ETag (HTTP, GCS, Azure), else a modification time (SFTP, local, Azure,
#: GCS's ``updated``, FTP's ``modify``), in that order.
_VERSION_FIELDS = ("ETag", "etag", "mtime", "LastModified", "last_modified", "updated", "modify")


def _version(item: Mapping[str, Any]) -> str | None:
    """What a listing entry says of its file's version (``Entry.version``)."""
    for name in _VERSION_FIELDS:
        if item.get(name) is not None:
            return f"{name} {item[name]}"
    return None


#: Failures a new connection mends: resets, timeouts, a connection the server
#: closed (EOF), an FTP server's 4xx ("421 Control connection timed out",
#: "421 Too many connections"). The failed instance is dropped first.
_TRANSIENT = (ConnectionError, TimeoutError, EOFError, ftplib.error_temp)

#: Protocols of archive file systems, which streamer only reads.
_ARCHIVES = frozenset({"zip", "tar", "libarchive"})

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


def _filesystem_class(protocol: str, url: str) -> type:
    try:
        return fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as exc:
        raise _unsupported(url, exc) from None


def _lower_scheme(part: str) -> str:
    """One part of a chain with its scheme in lower case (schemes are
    case-insensitive, RFC 3986; fsspec's protocol names are lower case)."""
    scheme, sep, rest = part.partition("://")
    return scheme.lower() + sep + rest if sep and "/" not in scheme else part


def _unsupported(url: str, exc: Exception) -> UnsupportedURLError:
    """The error for a URL no installed fsspec file system serves: fsspec's
    "Protocol not known" or "Install gcsfs to access ..." (which package)."""
    reason = str(exc)
    if isinstance(exc, ValueError) and "not known" in reason:
        reason = f"unknown URL scheme ({reason})"
    return UnsupportedURLError(f"cannot read {safe_url(url)} ({reason})")


def _target(options: dict[str, Any]) -> str:
    """What a chained file system reads from, as the end of a URL
    (``::file:///data/ds.zip``), without credentials; "" for no target."""
    target = options.get("target_protocol")
    fo = options.get("fo")
    if not target or not isinstance(fo, str):
        return ""
    inner = options.get("target_options") or {}
    host = inner.get("host")
    where = f"{host}:{inner['port']}/" if host and inner.get("port") else f"{host}/" if host else ""
    path = fo if target == "file" and not where else fo.lstrip("/")
    return f"::{target}://{where}{path}{_target(inner)}"


def _credentials(value: Any) -> list[str]:
    """Every credential option's value (nested ones too), to be masked wherever it appears."""
    if not isinstance(value, dict):
        return []
    found = []
    for key, item in value.items():
        if isinstance(key, str) and _CREDENTIAL.search(key):
            # ``password="..."``, or ``auth=("user", "password")`` (WebDAV)
            items = item if isinstance(item, tuple | list) else (item,)
            found.extend(value for value in items if isinstance(value, str))
        found.extend(_credentials(item))
    return found


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


def _fresh(kind: type, options: dict[str, Any], on_loop: bool) -> dict[str, Any]:
    """``options`` that make a new instance of ``kind`` (not fsspec's cached
    one, which other code shares), on the running store loop if ``on_loop``,
    and its target likewise (``dir://`` over ``http://``: both async)."""
    options = {**options, "skip_instance_cache": True}
    if on_loop:
        options |= {"asynchronous": True, "loop": asyncio.get_running_loop()}
    if "target_protocol" in inspect.signature(kind.__init__).parameters and "fs" not in options:
        inner = fsspec.get_filesystem_class(options.get("target_protocol") or "file")
        options["target_options"] = _fresh(inner, options.get("target_options") or {}, on_loop)
    return options


def _check_options(scheme: str, kind: type, options: dict[str, Any]) -> None:
    """``UnsupportedURLError`` unless ``kind(**options)`` can be called: a file system
    that needs an argument its URLs do not carry (GitHub's ``org``) gets it
    as a storage option. Checked before any instance is made (a half-made
    one may fail again, noisily, in its ``__del__``)."""
    try:
        inspect.signature(kind.__init__).bind(None, **options)
    except TypeError as exc:
        raise UnsupportedURLError(
            f"{kind.__name__} for {scheme}:// URLs cannot be made from the storage options "
            f"given ({exc}); give them as storage options"
        ) from None
