"""Plain HTTP(S) servers that honour ``Range``, through one aiohttp session per store.

For presigned URLs, B2 download URLs and any static file server. Every
answer is checked: a ranged GET must come back ``206`` with a
``Content-Range`` naming exactly the asked bytes. A ``200`` means the server
ignored ``Range`` and is about to send the whole object; that, and ``416``,
are clear errors, never a silent mis-read. URLs are shown without their
query string or user info (see ``_urls.safe_url``).

Listing a directory (for a dataset root) reads the server's HTML index and
follows its links, as ``python -m http.server``, nginx ``autoindex`` and the
like produce. HTTP stores are read-only (``read_only``): there is no common
way to upload to a plain web server.
"""

from __future__ import annotations

import asyncio
import html.parser
import urllib.parse
from typing import Any

import aiohttp

from ..errors import StorageError
from ._bounds import parse_content_range
from ._urls import register_secret, safe_url
from .base import Entry
from .remote import RemoteStore
from .retry import TransientError, parse_retry_after
from .throttle import is_timeout

__all__ = ["HTTPStore"]

_NETWORK_ERRORS = (aiohttp.ClientError, asyncio.IncompleteReadError, ConnectionError)


class HTTPStore(RemoteStore):
    """HTTP(S) servers. Store paths are full URLs.

    Backend options: ``headers`` (sent with every request, e.g.
    ``{"Authorization": ...}``; never logged).
    """

    read_only = "HTTP stores are read-only: index a local or S3 copy"

    def __init__(self, scheme: str, options: dict[str, Any]) -> None:
        super().__init__(scheme, options)
        self._headers = dict(self.backend_options.pop("headers", {}))
        register_secret(*self._headers.values())
        if self.backend_options:
            raise TypeError(f"unknown {scheme}:// options {sorted(self.backend_options)}")
        self.url = "http(s)://"

    def path_of(self, scheme: str, rest: str) -> str:
        return f"{scheme}://{rest}"

    def join(self, path: str, *names: str) -> str:
        parts = urllib.parse.urlsplit(path)
        joined = "/".join([parts.path.rstrip("/"), *(urllib.parse.quote(n) for n in names)])
        return urllib.parse.urlunsplit(parts._replace(path=joined))

    def display(self, path: str) -> str:
        return safe_url(path)

    def _host(self, path: str) -> str:
        parts = urllib.parse.urlsplit(path)
        return safe_url(f"{parts.scheme}://{parts.netloc}")

    # -- client ---------------------------------------------------------------

    async def _connect(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=self.max_concurrency)
        # The whole attempt is bounded by ``retry.timeout`` (retry.py); these
        # bound the connection and each wait for bytes (headers, every chunk).
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.retry.connect_timeout, sock_read=self.retry.read_timeout
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers={**self._headers, "Accept-Encoding": "identity"},
            auto_decompress=False,
            timeout=timeout,
        )

    async def _disconnect(self, client: aiohttp.ClientSession) -> None:
        await client.close()

    # -- primitives -----------------------------------------------------------

    async def _get_range(
        self, client: aiohttp.ClientSession, path: str, start: int, end: int
    ) -> bytes:
        span, body = await self._ranged(client, path, f"bytes={start}-{end - 1}")
        if span[:2] != (start, min(end, span[2])):
            raise TransientError(
                f"Content-Range {span[0]}-{span[1] - 1} does not match bytes {start}-{end - 1}"
            )
        return body

    async def _get_tail(
        self, client: aiohttp.ClientSession, path: str, length: int
    ) -> tuple[int, int, bytes]:
        span, body = await self._ranged(client, path, f"bytes=-{length}")
        return span[0], span[2], body

    async def _get_size(self, client: aiohttp.ClientSession, path: str) -> int:
        span, _ = await self._ranged(client, path, "bytes=0-0")
        return span[2]

    async def _ranged(
        self, client: aiohttp.ClientSession, path: str, byte_range: str
    ) -> tuple[tuple[int, int, int], bytes]:
        url = self.display(path)
        try:
            async with client.get(path, headers={"Range": byte_range}) as response:
                _check_status(url, byte_range, response)
                span = parse_content_range(response.headers.get("Content-Range"))
                if span is None:
                    raise StorageError(f"{url}: 206 without a valid Content-Range ({byte_range})")
                return span, await response.read()
        except aiohttp.InvalidURL:
            raise StorageError(f"{url}: not a valid URL") from None
        except _NETWORK_ERRORS as exc:
            raise TransientError(_describe(exc), congestion=is_timeout(exc)) from None

    async def _list(self, client: aiohttp.ClientSession, path: str) -> list[Entry]:
        directory = path.rstrip("/") + "/"
        try:
            async with client.get(directory) as response:
                _check_status(self.display(directory), None, response)
                page = await response.text(errors="replace")
        except _NETWORK_ERRORS as exc:
            raise TransientError(_describe(exc), congestion=is_timeout(exc)) from None
        return _links(directory, page)


def _check_status(url: str, byte_range: str | None, response: aiohttp.ClientResponse) -> None:
    status = response.status
    if status >= 500 or status == 429:
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        congestion = status in (429, 503)  # overloaded: the adaptive limit backs off
        raise TransientError(
            f"HTTP {status} {response.reason}", retry_after=retry_after, congestion=congestion
        )
    if byte_range is None and status == 200:
        return
    if status == 206 and byte_range is not None:
        return
    if status == 200:
        raise StorageError(
            f"{url}: the server ignored Range {byte_range} and answered 200 with the "
            "whole object; it cannot serve byte ranges"
        )
    if status == 416:
        total = response.headers.get("Content-Range", "")
        raise StorageError(f"{url}: range not satisfiable ({byte_range}; {total or 'no size'})")
    if status == 404:
        raise StorageError(f"{url}: not found (HTTP 404)")
    raise StorageError(f"{url}: HTTP {status} {response.reason}")


def _describe(exc: BaseException) -> str:
    """An aiohttp error's class and reason, without the URL (it may hold a signature)."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"{type(exc).__name__}: {exc.status} {exc.message}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"{type(exc).__name__}: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"{type(exc).__name__}: body ended early"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return f"{type(exc).__name__}: no connection within the connect timeout"
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return f"{type(exc).__name__}: no data within the read timeout"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return f"{type(exc).__name__}: server closed the connection"
    return type(exc).__name__ + (f": {exc.strerror}" if isinstance(exc, OSError) else "")


class _LinkParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.links.append(href)


def _links(directory: str, page: str) -> list[Entry]:
    """Children of ``directory`` linked from its index page (deduplicated)."""
    parser = _LinkParser()
    parser.feed(page)
    base = urllib.parse.urlsplit(directory)
    found: dict[str, Entry] = {}
    for href in parser.links:
        target = urllib.parse.urlsplit(urllib.parse.urljoin(directory, href))
        if target.netloc != base.netloc or not target.path.startswith(base.path):
            continue
        rest = urllib.parse.unquote(target.path[len(base.path) :])
        name = rest.rstrip("/")
        if name and "/" not in name and not name.startswith("."):
            found[name] = Entry(name, rest.endswith("/"))
    return list(found.values())
