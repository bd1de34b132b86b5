"""What ``streamer pack`` reads: the source files of SRC, listed and fetched
through the stores.

SRC is a local folder, a store prefix (``s3://bucket/raw``, ``b2://...``,
any fsspec URL) of plain audio files, or a local *list file* naming one
file URL per line (``http(s)://``, ``s3://``, ``b2://``, a path; blank
lines and ``#`` comments are ignored). Every file is named by its path
relative to SRC (for a list file: to the longest folder its URLs share,
without scheme and query), which ``audio_info`` keeps as ``source``; the
key is that name without its extension. A local file name is its bytes
read as UTF-8, whatever the locale; bytes that are not UTF-8 are spelled
out (``caf\\xe9`` for Latin-1's ``café``: ``name_text``). Remote files are read through
their store, with its retries, request limits and credential hygiene.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import stat
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import PackError, StorageError
from ..storage import Stat, Store, open_url, safe_url
from ..storage.loop import run_sync

__all__ = [
    "SourceFile",
    "UnreadableSource",
    "is_remote_url",
    "list_sources",
    "name_text",
    "read_into",
    "shown",
]


def name_text(name: str) -> str:
    """A name from the OS (a local file name, a command-line argument) as
    text: its bytes read as UTF-8, bytes that are not UTF-8 spelled out as
    ``\\xNN``. Python decodes such names with the locale's encoding and
    stands in surrogates for what it cannot decode (``\\udce9``), which
    no Arrow string, JSON document or UTF-8 output can hold: under
    ``LC_ALL=C`` without UTF-8 mode every non-ASCII name, in any locale a
    name in another encoding (Latin-1's ``café``)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return name


class UnreadableSource(Exception):
    """A local source file that cannot be read (gone since the listing, a
    dangling symlink, no permission, an I/O error, not a regular file):
    skipped like a file that is not audio; ``str()`` is the reason."""


@dataclass(frozen=True)
class SourceFile:
    """One file to pack: its name under SRC, its size, where it is, and
    what its store says of its version (``Entry.version``: an S3 object's
    ETag as listed; a remote file the listing does not size, an HTTP index
    page's or a list file's, by its size request: ``Stat.version``; None
    for a local file, and where the store says none)."""

    #: Path relative to SRC with its extension, ``/``-separated (``a/b.mp3``).
    source: str
    size: int
    store: Store
    path: str  # the store's own path of the file
    version: str | None = None

    @property
    def key(self) -> str:
        """The dataset key: ``source`` without its extension (``a/b``)."""
        return posixpath.splitext(self.source)[0]

    @property
    def url(self) -> str:
        """Where the file is, safe to show (no credentials, no query)."""
        return self.store.display(self.path)


def list_sources(
    src: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    leave_out: str | None = None,
    hidden: list[str] | None = None,
) -> list[SourceFile]:
    """Every visible file of SRC, sorted by ``source``: the same list for
    every process that lists the same SRC (what a pack plan is made of).
    ``leave_out``: a local folder not walked (a local OUT inside SRC: its
    shards are not sources). The hidden names left out (``.DS_Store``,
    ``.git/``: a folder's with a ``/``, not walked) are appended to
    ``hidden``. ``PackError`` names SRC when it cannot be listed or read."""
    src = os.fspath(src)
    if "://" not in src and os.path.isfile(src):
        files = _listed_in(src, storage_options or {})
    else:
        store, root = open_store(src, storage_options)
        skip = os.path.realpath(leave_out) if leave_out is not None else None
        try:
            files = list(_walk(store, root, "", (), skip, [] if hidden is None else hidden))
        except StorageError as exc:
            raise PackError(f"cannot list the source {shown(src)}: {exc}") from None
    return sorted(files, key=lambda f: f.source)


def read_into(file: SourceFile, target: memoryview) -> None:
    """Fill ``target`` (``file.size`` bytes) with the file's bytes; ``PackError``
    when the file is no longer that size, ``UnreadableSource`` when a local
    one cannot be read (a remote store's failure is its ``StorageError``)."""
    if not file.store.is_remote:
        try:
            with _open_regular(file.path) as handle:
                got = handle.readinto(target)
                more = handle.read(1)
        except OSError as exc:
            raise UnreadableSource(f"cannot read it ({exc.strerror or exc})") from None
        if got != file.size or more:
            raise PackError(f"{file.source}: file changed size while packing")
        return
    reader = file.store.reader(file.path)
    size = reader.size_sync()
    if size != file.size:
        raise PackError(f"{file.source}: {file.url} changed size while packing")
    reader.read_into_sync(target)


def _open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading, or ``UnreadableSource`` when it is not a
    regular file: opening a named pipe waits for a writer (for ever, in a
    pack), a socket does not open, a device may act on being opened. Its
    kind is checked before the open, and again on what was opened, which
    ``O_NONBLOCK`` keeps from waiting should a pipe have taken the name since."""
    _check_regular(os.stat(path).st_mode)
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        _check_regular(os.fstat(handle).st_mode)
    except UnreadableSource:
        os.close(handle)
        raise
    return os.fdopen(handle, "rb")


def _check_regular(mode: int) -> None:
    """``UnreadableSource`` naming what a file of ``mode`` is, unless a regular file."""
    if stat.S_ISREG(mode):
        return
    kinds = (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    )
    kind = next((name for test, name in kinds if test(mode)), "a device")
    raise UnreadableSource(f"not a regular file ({kind})")


def open_store(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Store, str]:
    """``open_url`` with the storage options for a remote URL, none for a local path."""
    return open_url(url, **(dict(storage_options or {}) if is_remote_url(url) else {}))


def is_remote_url(url: str) -> bool:
    """Whether ``url`` names a store's object, not a local path or ``file://`` URL."""
    scheme, sep, _ = url.partition("://")
    return bool(sep) and scheme.lower() != "file"


#: Folders nested deeper than this under a source are taken for a loop: an
#: HTTP server following a symlink to a folder it is in (nginx's autoindex)
#: lists it again at every depth, which no path tells from a real folder.
MAX_DEPTH = 100


def _walk(
    store: Store,
    root: str,
    prefix: str,
    above: tuple[str, ...],
    skip: str | None,
    hidden: list[str],
) -> list[SourceFile]:
    """Files under ``root`` (skipping the local folder ``skip``, and hidden
    names, appended to ``hidden``), ``source`` = ``prefix`` + name. A local folder reached again
    through a symlink inside it (``d/up -> ..``) is a ``PackError``: walking
    it would never end. A local file that cannot be stat'ed (a dangling
    symlink) is listed with size 0: reading it says why. A folder deeper
    than ``MAX_DEPTH`` is a ``PackError`` too (recursion ran out)."""
    if prefix.count("/") > MAX_DEPTH:
        raise PackError(
            f"{prefix[:120]}... under the source is nested more than {MAX_DEPTH} folders deep: "
            "a server listing a folder inside itself (a symlink loop)? Remove the loop, or "
            "pack from a list file of the URLs (SRC a file, one URL per line)"
        )
    if not store.is_remote:
        real = os.path.realpath(root)
        if real in above:
            raise PackError(
                f"{prefix.rstrip('/')!r} under the source is a symlink to {real!r}, a folder "
                "it is in: remove the loop or pack another folder"
            )
        above = (*above, real)
    found = []
    for entry in store.list_sync(root):
        name = prefix + (entry.name if store.is_remote else name_text(entry.name))
        if entry.name.startswith("."):
            hidden.append(name + "/" if entry.is_dir else name)
            continue
        path = store.join(root, entry.name)
        if entry.is_dir and not store.is_remote and os.path.realpath(path) == skip:
            continue
        if entry.is_dir:
            found.extend(_walk(store, path, name + "/", above, skip, hidden))
        elif entry.size is not None:
            found.append(SourceFile(name, entry.size, store, path, entry.version))
        elif store.is_remote:  # an HTTP index page tells no sizes, nor versions
            stat = run_sync(store.reader(path).stat())
            found.append(SourceFile(name, stat.size, store, path, stat.version))
        else:
            found.append(SourceFile(name, 0, store, path))
    return found


def _listed_in(list_file: str, storage_options: Mapping[str, Any]) -> list[SourceFile]:
    """The files a list file names, sized concurrently (one request each for
    remote ones, which says their version too)."""
    try:
        with open(list_file, encoding="utf-8") as handle:
            lines = [line.strip() for line in handle]
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise PackError(f"cannot read the list file {list_file!r}: {reason}") from None
    urls = [line for line in lines if line and not line.startswith("#")]
    names = _relative_names(urls)
    located = []
    for line, url in enumerate(urls, 1):
        # ``endpoint_url`` and credentials are an object store's: a plain
        # HTTP(S) URL carries what it needs (a presigned query) itself.
        plain_http = url.lower().startswith(("http://", "https://"))
        try:
            located.append(open_store(url, None if plain_http else storage_options))
        except (StorageError, TypeError) as exc:
            raise PackError(f"{list_file!r} line {line}: {shown(url)}: {exc}") from None
    stats = run_sync(_stats(located))
    files = []
    for name, url, (store, path), found in zip(names, urls, located, stats, strict=True):
        if isinstance(found, BaseException):
            raise PackError(f"{list_file!r}: cannot read {shown(url)}: {found}") from None
        files.append(SourceFile(name, found.size, store, path, found.version))
    return files


async def _stats(located: Sequence[tuple[Store, str]]) -> list[Stat | BaseException]:
    async def one(store: Store, path: str) -> Stat:
        if not store.is_remote:
            return Stat(await asyncio.to_thread(os.path.getsize, path))
        return await store.reader(path).stat()

    return await asyncio.gather(*(one(s, p) for s, p in located), return_exceptions=True)


def _relative_names(urls: Sequence[str]) -> list[str]:
    """Each URL's host and path relative to the longest folder all of them
    share (no scheme, user info, query or fragment: those may hold
    credentials, and a name becomes a key every reader of the dataset sees)."""
    paths = []
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        path = urllib.parse.unquote(parts.path) if parts.scheme else url
        host = _host(parts)
        paths.append(f"{host}/{path.lstrip('/')}" if host else path.lstrip("/"))
    if len(paths) == 1:
        return [posixpath.basename(paths[0])]
    common = posixpath.commonpath(paths) if paths else ""
    if common in paths:  # one URL is the folder of the others: keep a name for it
        common = posixpath.dirname(common)
    start = len(common) + 1 if common else 0
    return [p[start:] for p in paths]


def _host(parts: urllib.parse.SplitResult) -> str:
    """``host[:port]`` of a URL, without its user info (``user:password@``)."""
    return parts.netloc.rpartition("@")[2]


def shown(url: str) -> str:
    """A URL as errors show it: no user info, no query."""
    return safe_url(url) if "://" in url else repr(url)
