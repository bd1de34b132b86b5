"""URL scheme -> store implementation, imported only when a URL needs it.

Each entry is a ``"module:Class"`` string, so ``import streamer`` does not
import aiobotocore or aiohttp; a scheme missing here is tried as an fsspec
protocol. Stores are shared: every URL of one scheme with the same options
gets the same store (one connection pool and cache per process).
"""

from __future__ import annotations

import importlib
import os
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

from ..errors import StorageError
from ._urls import safe_url
from .base import Store

__all__ = ["SCHEMES", "get_store", "open_url"]

SCHEMES: dict[str, str] = {
    "file": "streamer.storage.local:LocalStore",
    "s3": "streamer.storage.s3:S3Store",
    "b2": "streamer.storage.s3:B2Store",
    "http": "streamer.storage.http:HTTPStore",
    "https": "streamer.storage.http:HTTPStore",
}
FSSPEC_STORE = "streamer.storage.fsspec:FsspecStore"

_stores: dict[tuple[str, str], Store] = {}
_lock = threading.Lock()
#: A forked child's lock is free: the parent's may have been held by a thread
#: making a store, which the child does not have (it would wait forever).
os.register_at_fork(after_in_child=_lock._at_fork_reinit)


def open_url(url: str | os.PathLike[str], **options: Any) -> tuple[Store, str]:
    """The store serving ``url`` and the path of ``url`` inside it.

    A plain path (no ``scheme://``) is a local file or directory.
    """
    url = os.fspath(url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "file", url
    elif scheme.lower() == "file":
        rest = _local_path(url, rest)
    scheme = scheme.lower()
    if scheme not in SCHEMES:  # an fsspec URL, maybe a chain (``zip://ds::file:///x.zip``)
        kind = _load(FSSPEC_STORE)
        scheme, options, path = kind.split_url(url, options)  # type: ignore[attr-defined]
        return get_store(scheme, options), path
    store = get_store(scheme, options)
    return store, store.path_of(scheme, rest)


def _local_path(url: str, rest: str) -> str:
    """The path of ``file://HOST/PATH``: ``/PATH`` for no host or
    ``localhost``, percent-decoded (RFC 8089: ``file:///data/my%20set`` is
    ``/data/my set``; a plain path is never decoded); any other host, user
    info included, is not this machine."""
    host, slash, path = rest.partition("/")
    if host.lower() not in ("", "localhost"):
        raise StorageError(
            f"{safe_url(url)}: a file:// URL names a path on this machine "
            "(file:///PATH or file://localhost/PATH), not on another host"
        )
    decoded = urllib.parse.unquote(slash + path, errors="surrogateescape")
    if "\0" in decoded:
        raise StorageError(f"{safe_url(url)}: a file:// URL's path cannot hold %00 (a NUL byte)")
    return decoded


def get_store(scheme: str, options: Mapping[str, Any]) -> Store:
    """The process's store for ``scheme`` with these options: options that
    configure a store alike (``retry=RetryPolicy(attempts=2)`` and
    ``attempts=2``) get the same store."""
    target = SCHEMES.get(scheme, FSSPEC_STORE)
    kind = _load(target)
    options = kind.canonical_options(options)
    key = (scheme if target == FSSPEC_STORE else target, _key(options))
    with _lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = kind(scheme, options)
        return store


def _key(options: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Options as a registry key: values by equality where they are hashable
    (``RetryPolicy``, ``CacheConfig``, numbers, strings), else by ``repr``."""
    return tuple(sorted((name, _hashable(value)) for name, value in options.items()))


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return ("repr", repr(value))
    return ("value", value)


def _load(target: str) -> type[Store]:
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StorageError(f"{module_name} cannot be imported ({exc}); is it installed?") from exc
    return getattr(module, class_name)
