"""Plain HTTP(S) servers that honour ``Range``, through one aiohttp session per store.

For presigned URLs, B2 download URLs and any static file server. Every
answer is checked: a ranged GET must come back ``206`` with a
``Content-Range`` naming the asked bytes from the asked start (all of them,
or fewer, which the caller then asks for anew). A ``200`` means the server
ignored ``Range`` and is about to send the whole object; that, and bytes
from another start, are clear errors, never a silent mis-read; a ``416``
to a suffix longer than the object is read another way
(``RemoteStore._suffix``). ``RangeGetStore`` holds what this store shares
with ``s3.py``, whose GETs go the same way. URLs are shown without their
query string or user info (see ``_urls.safe_url``).

Listing a directory (for a dataset root) reads the server's HTML index and
follows its links, as ``python -m http.server``, nginx ``autoindex`` and the
like produce. HTTP stores are read-only (``read_only``): there is no common
way to upload to a plain web server.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import codecs
import contextlib
import functools
import html.parser
import re
import socket
import ssl as ssl_module
import urllib.parse
import urllib.request
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple

import aiohttp
import yarl

from ..errors import StorageError, UnsupportedURLError
from ._bounds import parse_content_range, parse_unsatisfied_range
from ._urls import cache_name, redact, register_secret, safe_url
from .base import Entry, NotFound, Stat
from .remote import Answer, RangeNotSatisfiable, RemoteReader, RemoteStore
from .retry import ARRIVING, Arrival, TransientError, parse_retry_after
from .throttle import is_timeout

__all__ = [
    "UNSUPPORTED",
    "HTTPStore",
    "RangeGetStore",
    "RangeNotSatisfiable",
    "Span",
    "check_span",
    "check_status",
    "describe",
    "open_session",
    "proxy_for",
    "ranged_get",
    "version_tags",
]

NETWORK_ERRORS = (aiohttp.ClientError, asyncio.IncompleteReadError, ConnectionError)
#: Answers that send a GET elsewhere (``Location``), and how many are followed.
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
#: Pages of one directory listing read at most: an index page may link the
#: next page of its entries (``_links``), and a listing must end.
MAX_INDEX_PAGES = 1000
#: The largest index page read (decoded): a page of 64 MiB lists some 300 000
#: entries; a larger one (or a gzip bomb) is refused, not read into memory.
MAX_INDEX_PAGE = 64 << 20
#: Query parameters that say where in a listing an index page starts.
CONTINUATION_KEYS = frozenset(
    {
        "page", "p", "pg", "marker", "offset", "start", "from", "after", "skip", "cursor",
        "next", "continuation", "continuation-token", "continuation_token", "continuationtoken",
        "start-after", "start_after", "startafter", "page_token", "pagetoken", "next_page",
    }
)  # fmt: skip
#: Link texts of a "next page" link: "Next", "Next page", "next »", "More", "»".
_NEXT_TEXT = re.compile(r"^(?:next\b|more\b|load more\b|[\u00bb\u203a>\u2192]+$)")
#: 5xx answers that say the server cannot do it at all, not for now: not retried.
UNSUPPORTED = frozenset({501, 505})
#: HTTP ranges: (start, end exclusive, object size).
Span = tuple[int, int, int]
#: The proxy for each request: one for all, or one per URL (``HTTPStore._proxy``).
Proxy = str | None | Callable[[str], str | None]


class RangeGetStore(RemoteStore):
    """A store whose every read is one ranged HTTP GET (``HTTPStore``,
    ``S3Store``): ranges, suffixes and sizes are all ``_ranged`` requests,
    and their answers checked here, once."""

    @abc.abstractmethod
    async def _ranged(self, client: Any, path: str, byte_range: str) -> tuple[Span, Answer]:
        """One GET of ``path`` for ``byte_range`` (``ranged_get``)."""

    async def _get_range(self, client: Any, path: str, start: int, end: int) -> Answer:
        span, answer = await self._ranged(client, path, f"bytes={start}-{end - 1}")
        check_span(self.display(path), span, start, end)
        return answer

    async def _get_tail(self, client: Any, path: str, length: int) -> tuple[int, Answer]:
        span, answer = await self._ranged(client, path, f"bytes=-{length}")
        if span[0] < span[2] - length:  # more than the suffix: from another start
            raise StorageError(
                f"{self.display(path)}: the server answered bytes {span[0]}-{span[1] - 1} to a "
                f"request for the last {length} of {span[2]}; it does not serve suffix ranges"
            )
        return span[0], answer

    async def _get_stat(self, client: Any, path: str) -> Stat:
        """The size a one-byte GET's ``Content-Range`` names, and the version
        its strongest tag does (``version_tags``): no HEAD needed, which
        some servers, policies and proxies refuse. An empty object has no
        byte 0: its 416 means size 0 (RFC 9110), whether it says so or not
        (moto and rclone do not), of no version."""
        try:
            span, answer = await self._ranged(client, path, "bytes=0-0")
        except RangeNotSatisfiable as exc:
            return Stat(exc.size or 0)
        return Stat(span[2], answer.tags[0] if answer.tags else None)


class HTTPStore(RangeGetStore):
    """HTTP(S) servers. Store paths are full URLs.

    Backend options: ``headers`` (sent with every request to the URL's own
    origin, e.g. ``{"Authorization": ...}``, never to a host a redirect
    names; never logged). Requests go through the proxy the environment
    names for the URL's host (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``),
    looked up once per host.
    """

    read_only = "HTTP stores are read-only (pack into a local or S3 OUT; index a local or S3 copy)"

    def __init__(self, scheme: str, options: dict[str, Any]) -> None:
        super().__init__(scheme, options)
        self._headers = dict(self.backend_options.pop("headers", {}))
        # The whole value, and the credential after an auth scheme ("Bearer TOKEN").
        values = [
            value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            for value in self._headers.values()
        ]
        register_secret(*values, *(value.split(None, 1)[-1] for value in values))
        if self.backend_options:
            raise TypeError(f"unknown {scheme}:// options {sorted(self.backend_options)}")
        self.url = "http(s)://"
        self._proxies: dict[str, str | None] = {}

    def path_of(self, scheme: str, rest: str) -> str:
        """The URL; a ``#`` in it is part of a name (``take #2``), as in an S3
        key: a fragment is never sent, and the server would answer for
        another object or directory (``take ``), without a word. A URL
        aiohttp cannot request is a ``StorageError`` here (``check_url``)."""
        url = f"{scheme}://{rest.replace('#', '%23')}"
        self._check(url)
        return url

    def reader(self, path: str, size: int | None = None) -> RemoteReader:
        """A reader of the URL ``path``, checked (``_check``: its password
        and query values are registered with ``redact`` before any request)."""
        self._check(path)
        return super().reader(path, size)

    def _check(self, url: str) -> None:
        """``check_url``, and an ``UnsupportedURLError`` for user info in a URL
        of a store whose ``headers`` hold an ``Authorization``: two
        credentials, which aiohttp refuses to send together (a bare
        ``ValueError`` from every request)."""
        check_url(url)
        if "@" in urllib.parse.urlsplit(url).netloc and "authorization" in {
            name.lower() for name in self._headers
        }:
            raise UnsupportedURLError(
                f"{safe_url(url)}: the URL's user info and the Authorization header are two "
                "credentials, which cannot be sent together: give one of them"
            )

    def join(self, path: str, *names: str) -> str:
        parts = urllib.parse.urlsplit(path)
        joined = "/".join([parts.path.rstrip("/"), *(urllib.parse.quote(n) for n in names)])
        return urllib.parse.urlunsplit(parts._replace(path=joined))

    def display(self, path: str) -> str:
        return safe_url(path)

    def basename(self, path: str) -> str:
        """The URL path's last name, unquoted: a dataset URL's query (a
        token) rides on every URL ``join`` makes, and is no file's name."""
        return super().basename(urllib.parse.unquote(urllib.parse.urlsplit(path).path))

    def cache_name(self, path: str) -> str:
        """The URL without the query parameters that only authenticate it
        (presigned S3, GCS, B2, CloudFront, Azure SAS) or a password
        (``_urls.cache_name``): a cache directory filled through URLs signed
        for one job serves the next job's, signed anew."""
        return cache_name(path)

    def _host(self, path: str) -> str:
        parts = urllib.parse.urlsplit(path)
        return safe_url(f"{parts.scheme}://{parts.netloc}")

    def _proxy(self, url: str) -> str | None:
        """The proxy for ``url``'s scheme and host (``proxy_for``), found once
        per host (a redirect's own too)."""
        parts = urllib.parse.urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in self._proxies:
            self._proxies[origin] = proxy_for(origin)
        return self._proxies[origin]

    # -- client ---------------------------------------------------------------

    async def _connect(self) -> aiohttp.ClientSession:
        return open_session(self)

    async def _disconnect(self, client: aiohttp.ClientSession) -> None:
        await client.close()

    # -- primitives -----------------------------------------------------------

    async def _ranged(
        self, client: aiohttp.ClientSession, path: str, byte_range: str
    ) -> tuple[Span, Answer]:
        return await ranged_get(
            client, path, self.display(path), byte_range, None, self._proxy, self._headers
        )

    async def _list_all(self, path: str) -> list[Entry]:
        """The entries of every index page of the directory: the first, and the
        pages it (and each of those) links as its continuation (``?page=2``,
        ``?marker=...``, ``rel="next"``: ``_links``), each asked for once and
        retried on its own, at most ``MAX_INDEX_PAGES`` of them; past that a
        ``StorageError``, never the pages read so far as if they were all."""
        directory = _directory(path)
        found: list[Entry] = []
        queue, seen, pages = [directory], {_page_key(directory)}, 0
        while queue:
            if pages == MAX_INDEX_PAGES:
                raise StorageError(
                    f"{self.display(directory)}: the index page links more than "
                    f"{MAX_INDEX_PAGES} pages of entries (next: {safe_url(queue[0])}); a listing "
                    "that long is not read: give the dataset a manifest (streamer-manifest.json, "
                    "written by `streamer index` on the copy the server publishes) so it opens "
                    "without a listing"
                )
            url = queue.pop(0)
            page = functools.partial(self._index_page, directory=directory, url=url)
            entries, more = await self._call(page, f"list {self.display(url)}", path)
            pages += 1
            found += entries
            for link in more:
                if _page_key(link) not in seen:
                    seen.add(_page_key(link))
                    queue.append(link)
        return found

    async def _index_page(
        self, client: aiohttp.ClientSession, directory: str, url: str
    ) -> tuple[list[Entry], list[str]]:
        """One index page of ``directory`` (``url``: the directory, or a page of
        its listing): its entries and the pages it links as continuations."""
        shown = self.display(url)
        try:
            async with follow(client, url, shown, {}, self._headers, self._proxy) as response:
                check_status(shown, None, response)
                page = _page(shown, response, await _page_body(shown, response))
        except NETWORK_ERRORS as exc:
            raise _network_error(shown, exc) from None
        return _links(directory, url, page)


def open_session(store: RemoteStore, verify: bool | str | None = None) -> aiohttp.ClientSession:
    """The aiohttp session of ``store``: a pool of ``max_concurrency``
    connections, bodies as sent (no decompression), the store's connect and
    read timeouts (the whole attempt is bounded by ``retry.timeout``, in
    ``retry.py``; these bound the connection and each wait for bytes:
    headers, every chunk). Not ``trust_env``: it reads the proxy variables
    and ``~/.netrc`` on every request, more CPU than the request itself
    (``proxy_for`` finds a proxy once instead). ``verify`` as botocore
    takes it: ``False`` (no certificate check), a CA bundle's path, or
    ``None`` (the system's certificates)."""
    ssl: bool | ssl_module.SSLContext = True
    if verify is False:
        ssl = False
    elif isinstance(verify, str):
        ssl = ssl_module.create_default_context(cafile=verify)
    connector = aiohttp.TCPConnector(limit=store.max_concurrency, ssl=ssl)
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=store.retry.connect_timeout, sock_read=store.retry.read_timeout
    )
    return aiohttp.ClientSession(
        connector=connector,
        headers={"Accept-Encoding": "identity"},
        auto_decompress=False,
        timeout=timeout,
    )


def proxy_for(url: str) -> str | None:
    """The proxy the environment (``HTTPS_PROXY``, ``NO_PROXY``, ...) names
    for ``url``'s host, as botocore would use it; ``None``: go direct."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


async def ranged_get(
    session: aiohttp.ClientSession,
    url: str | yarl.URL,
    shown: str,
    byte_range: str,
    detail: Callable[[aiohttp.ClientResponse], Awaitable[str]] | None = None,
    proxy: Proxy = None,
    private: dict[str, str] | None = None,
) -> tuple[Span, Answer]:
    """One GET of ``url`` for ``byte_range``: ``((start, end, total), answer)``.

    The answer must name its bytes in ``Content-Range``: with status 206,
    or 200 (some S3 servers, rclone's among them, send ranges so). A 200
    naming none is the whole object, usable when the range asked covers it
    (``_whole_object``; an empty one: for a size or a tail, never for bytes
    asked by offset, ``check_span``). One naming an unsatisfied
    range (``bytes */SIZE``) is the 416 it describes, with its size
    (``RangeNotSatisfiable``). Other answers raise
    (``check_status``), with ``detail(response)`` appended when given (an
    S3 error code). ``shown`` is the URL errors name: ``url`` may carry a
    signature. ``private`` headers go to ``url``'s origin only (``follow``).
    A ``yarl.URL`` is sent as it is (a presigned URL, ``encoded=True``); a
    str is parsed as aiohttp parses one (quoted, dot segments removed)."""
    try:
        async with follow(
            session, url, shown, {"Range": byte_range}, private or {}, proxy
        ) as response:
            named = response.headers.get("Content-Range")
            span = parse_content_range(named)
            unsatisfied = parse_unsatisfied_range(named)
            if response.status in (200, 206) and unsatisfied is not None:
                # The 416's answer under a 2xx status: its size is the object's.
                raise RangeNotSatisfiable(
                    f"{shown}: range not satisfiable ({byte_range}; {named}; "
                    f"HTTP {response.status})",
                    size=unsatisfied,
                )
            if response.status == 200 and span is None:
                span = _whole_object(shown, byte_range, response)
            if response.status in (200, 206) and span is not None:
                body = await _range_body(shown, response, span)
                tags = version_tags(
                    response.headers.get("ETag"), response.headers.get("Last-Modified")
                )
                return span, Answer(body, span[2], tags)
            if response.status == 206:
                kind = response.headers.get("Content-Type", "")
                sent = f" but a {kind.partition(';')[0]} body" if "multipart" in kind else ""
                raise StorageError(
                    f"{shown}: 206 without a valid Content-Range{sent} ({byte_range}); "
                    "the server must answer one range with one 'bytes FIRST-LAST/SIZE'"
                )
            more = await detail(response) if detail is not None else ""
            check_status(shown, byte_range, response, more)
            raise StorageError(f"{shown}: HTTP {response.status} {_reason(response)}")
    except NETWORK_ERRORS as exc:
        raise _network_error(shown, exc) from None


def _whole_object(url: str, byte_range: str, response: aiohttp.ClientResponse) -> Span | None:
    """The span of a 200 that names no bytes: the whole object, of
    ``length`` bytes (RFC 9110 lets a server ignore ``Range``). Usable when
    the range asked covers the whole object (``bytes=-N`` with N >= length,
    ``bytes=0-``, ``bytes=0-LAST`` with LAST >= length - 1: a small file's
    tail, a manifest), so the body is exactly the bytes asked; else None,
    and ``check_status`` says the server ignored Range. An empty object
    covers every request for a size or a tail (moto answers a suffix so).

    One with a ``Content-Encoding`` (a CDN compressing on the fly, though
    ``identity`` was asked for) is a ``StorageError``: its length is the
    encoded one, and no ``Content-Range`` tells its bytes from the object's
    (taken as they came, a manifest was "not JSON", a small shard another
    size)."""
    length = response.content_length
    if length is None:
        return None
    if length == 0:
        return (0, 0, 0)
    encoding = response.headers.get("Content-Encoding", "identity").strip()
    if encoding.lower() != "identity":
        raise StorageError(
            f"{url}: the server answered {byte_range} with the whole object {encoding}-encoded "
            "(200, no Content-Range); serve it uncompressed (Content-Encoding: identity) "
            "and by range"
        )
    first, _, last = byte_range.removeprefix("bytes=").partition("-")
    covers = (not first and last.isdigit() and int(last) >= length) or (
        first == "0" and (not last or (last.isdigit() and int(last) >= length - 1))
    )
    return (0, length, length) if covers else None


@contextlib.asynccontextmanager
async def follow(
    session: aiohttp.ClientSession,
    url: str | yarl.URL,
    shown: str,
    headers: dict[str, str],
    private: dict[str, str],
    proxy: Proxy = None,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """The answer to a GET of ``url`` with ``headers``, redirects followed,
    each through ``proxy``, or, when it names one per URL, its own.

    ``private`` headers (a store's ``headers`` option: a token, an API key)
    go only to ``url``'s origin, and to none once a redirect left it:
    aiohttp would keep every header but ``Authorization``, ``Cookie`` and
    ``Proxy-Authorization`` on a redirect to another host (an HTTP front
    sending readers to presigned object storage), handing the key to it.
    The URL's user info (basic auth) goes the same way: aiohttp drops it
    from the URL a redirect is answered from, so it is put back on a
    redirect within the origin (a server sending ``latest/`` to ``v3/``).
    A redirect loop is a ``StorageError``: no retry ends it."""
    try:
        target = url if isinstance(url, yarl.URL) else yarl.URL(url)  # as aiohttp parses a str
        origin, own, user = target.origin(), True, (target.user, target.password)
    except ValueError:
        raise aiohttp.InvalidURL(url) from None
    for _ in range(MAX_REDIRECTS):
        sent = {**headers, **private} if own else headers
        hop = proxy(str(target)) if callable(proxy) else proxy
        response = await session.get(target, headers=sent, proxy=hop, allow_redirects=False)
        location = response.headers.get("Location")
        if response.status not in REDIRECTS or location is None:
            break
        response.release()
        target = _redirect_target(shown, response.url, location)
        own = own and target.origin() == origin
        if own and user[0] is not None and target.user is None:
            target = target.with_user(user[0]).with_password(user[1])
    else:
        raise StorageError(f"{shown}: redirected {MAX_REDIRECTS} times without an answer")
    try:
        yield response
    finally:
        response.release()
        await response.wait_for_close()


def _redirect_target(shown: str, at: yarl.URL, location: str) -> yarl.URL:
    """Where a redirect from ``at`` to ``location`` goes: an HTTP(S) URL, else
    a ``StorageError`` (an unparsable ``Location``, ``ftp:``, ``file:``): no
    retry mends it, and the URL parser's ``ValueError`` is no message."""
    try:
        target = at.join(yarl.URL(location))
    except ValueError:
        target = None
    if target is None or target.scheme not in ("http", "https") or not target.host:
        raise StorageError(f"{shown}: redirected to {redact(location)!r}: not an HTTP(S) URL")
    return target


def check_url(url: str) -> None:
    """``StorageError`` unless aiohttp can request ``url`` (a host, a port in
    range, user info basic auth can send), named before any request: the
    errors of ``urllib`` and ``yarl`` name neither the URL nor the command.
    A password in it is registered with ``redact``, with its basic-auth form."""
    try:
        target = yarl.URL(url)
        if not target.host:
            raise ValueError("no host")
        if ":" in (target.user or ""):
            raise ValueError("its user name holds a ':', which basic auth cannot send")
        urllib.parse.urlsplit(url).port  # noqa: B018 (it raises when out of range)
    except ValueError as exc:
        raise StorageError(f"{safe_url(url)}: not a valid URL ({redact(str(exc))})") from None
    if target.password:  # redacted bare and as the header aiohttp makes of it
        pair = f"{target.user or ''}:{target.password}".encode(errors="replace")
        register_secret(target.password, base64.b64encode(pair))
    register_secret(*_query_values(url))


def _query_values(url: str) -> list[str]:
    """The values of ``url``'s query as sent and decoded: a signed CDN URL
    carries its credential under a name of its own (Akamai's ``hdnts``,
    ``auth_key``, CloudFront's ``Policy``), which no list of credential
    fields knows, and a server may repeat it in its reason phrase. Every
    value is a possible credential; masking one that is not (a long
    ``versionId``) costs a message a detail, never a secret."""
    query = urllib.parse.urlsplit(url).query
    values = [query]
    for field in query.split("&"):
        value = field.partition("=")[2]
        values += [value, urllib.parse.unquote_plus(value)]
    return values


def _network_error(url: str, exc: BaseException) -> Exception:
    """What a failure below HTTP means: retry it (``TransientError``), except a
    URL aiohttp cannot request and a TLS connection that cannot be made
    (``tls_failure``), which no retry mends (they would cost the whole time
    budget)."""
    if isinstance(exc, aiohttp.InvalidURL):
        return StorageError(f"{url}: not a valid URL")
    failure = tls_failure(exc)
    if failure is not None:
        return StorageError(f"{url}: {failure}")
    return TransientError(
        describe(exc), congestion=is_timeout(exc), unresolved=unresolved_host(exc)
    )


#: TLS errors of a handshake cut short (a server under load, a connection
#: reset): worth retrying, unlike the other TLS errors.
_HANDSHAKE_CUT = (ssl_module.SSLEOFError, ssl_module.SSLZeroReturnError, ssl_module.SSLSyscallError)


def tls_failure(exc: BaseException | None) -> str | None:
    """Why a TLS connection to the server can never be made, or None: its
    certificate does not verify, or the handshake fails on what the server
    sent (no TLS at all, as from an ``https://`` URL naming a plain HTTP
    port; no protocol version or cipher in common). A handshake cut short is
    None (``_HANDSHAKE_CUT``)."""
    if isinstance(exc, (aiohttp.ClientConnectorCertificateError, ssl_module.CertificateError)):
        return f"the server's certificate does not verify ({describe(exc)})"
    if isinstance(exc, aiohttp.ClientConnectorSSLError) and not isinstance(
        exc.os_error, _HANDSHAKE_CUT
    ):
        return (
            f"the TLS handshake fails ({describe(exc)}): does the URL name an https server "
            "(not a plain HTTP port)?"
        )
    return None


#: getaddrinfo's answers that the name does not exist (EAI_AGAIN, a resolver
#: that failed for now, is not one of them).
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def unresolved_host(exc: BaseException | None) -> str | None:
    """The host of a connection that failed because its name does not
    resolve, else None."""
    if (
        isinstance(exc, aiohttp.ClientConnectorError)
        and isinstance(exc.os_error, socket.gaierror)
        and exc.os_error.errno in _NO_SUCH_NAME
    ):
        return exc.host
    return None


def check_span(url: str, span: Span, start: int, end: int) -> None:
    """Raise unless the answer to ``bytes=start-(end-1)`` holds bytes from
    ``start`` on: all of them (up to the object's end), or fewer, which a
    server may send (it caps range sizes; the caller asks for the rest). One
    that starts elsewhere is no answer to the question, and asking again
    would not change it: an error, not a retry for the whole time budget.
    One that runs past the range is retried like an over-long body. One of
    no bytes (a 200 naming none: the whole object, empty) holds none of the
    bytes asked, which the reader knows are there: an error too, not an
    empty read, nor the "changed on the server" its size would make it."""
    if span[1] == span[0]:
        raise StorageError(
            f"{url}: the server answered the request for bytes {start}-{end - 1} with no bytes "
            "(200, Content-Length: 0, no Content-Range: the whole object, empty); the object "
            "was emptied on the server, or the server (a proxy, a CDN) does not send its bytes"
        )
    if span[0] != start:
        raise StorageError(
            f"{url}: the server answered bytes {span[0]}-{span[1] - 1} to a request for bytes "
            f"{start}-{end - 1}; it does not serve byte ranges as asked"
        )
    if span[1] > min(end, span[2]):
        raise TransientError(
            f"Content-Range {span[0]}-{span[1] - 1} does not match bytes {start}-{end - 1}"
        )


def check_status(
    url: str, byte_range: str | None, response: aiohttp.ClientResponse, detail: str = ""
) -> None:
    """Raise what an unusable answer means: ``TransientError`` for 5xx, 429
    (with ``Retry-After``) and 408 (a server, proxy or load balancer that
    closed an idle connection the request came on: RFC 9110 lets the client
    send it again), ``StorageError`` naming ``url`` for the rest (501 and
    505, ``UNSUPPORTED``, among them)."""
    status = response.status
    more = f" ({detail})" if detail else ""
    if (status >= 500 and status not in UNSUPPORTED) or status in (408, 429):
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        congestion = status in (429, 503)  # overloaded: the adaptive limit backs off
        message = f"HTTP {status} {_reason(response)}{more}"
        raise TransientError(message, retry_after=retry_after, congestion=congestion)
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
        raise RangeNotSatisfiable(
            f"{url}: range not satisfiable ({byte_range}; {total or 'no size'}){more}",
            size=_unsatisfied_size(total),
        )
    if status == 404:
        raise NotFound(f"{url}: not found (HTTP 404{': ' + detail if detail else ''})")
    asked = f", answering Range {byte_range}" if byte_range else ""
    raise StorageError(f"{url}: HTTP {status} {_reason(response)}{more}{asked}")


async def _range_body(url: str, response: aiohttp.ClientResponse, span: Span) -> bytes:
    """The body of an answer naming ``span``, read only when its declared
    length is the span's, and a body of no declared length (chunked) only up
    to one byte past the span's: a server (or proxy) that names the range
    but sends more, up to the whole object, is not read into memory for
    each block.

    A body compressed though ``identity`` was asked for (``Content-Encoding:
    gzip``) at another length than the span's fails for good: no retry
    changes it, and retried as a short body it would cost the whole time
    budget. Stored bytes merely labelled with an encoding, as S3 keeps
    them, come at the span's length and are read as they are."""
    named = span[1] - span[0]
    body, got = b"", response.content_length
    arrival = ARRIVING.get()
    if arrival is not None:  # counted as it comes: a slow body is told from a dead server
        arrival.answered, arrival.expected = True, named
    if got == named:
        body = await _read_at_most(response.content, named, arrival)
        got = len(body)
    elif got is None:  # chunked: enough to tell an over-long body, no more
        body = await _read_at_most(response.content, named + 1, arrival)
        got = len(body)
    encoding = response.headers.get("Content-Encoding", "identity")
    if encoding.lower() != "identity" and got != named:
        raise StorageError(
            f"{url}: the server sent the range {encoding}-encoded ({got} bytes for "
            f"{named}); serve it uncompressed (Content-Encoding: identity)"
        )
    if got != named:
        kind = "short" if got < named else "over-long"
        raise TransientError(f"{kind} body: {got} bytes instead of {named}")
    return body


async def _read_at_most(
    stream: aiohttp.StreamReader, limit: int, arrival: Arrival | None = None
) -> bytes:
    """The body's first ``limit`` bytes, or all of it if shorter; each chunk
    counted into ``arrival`` as it comes."""
    chunks, got = [], 0
    while got < limit:
        chunk = await stream.read(limit - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
        if arrival is not None:
            arrival.got = got
    return b"".join(chunks)


async def _page_body(url: str, response: aiohttp.ClientResponse) -> bytes:
    """An index page's body as sent, refused past ``MAX_INDEX_PAGE`` bytes
    (by its ``Content-Length`` before a byte is read; a body of no declared
    length once that much has come)."""
    if (response.content_length or 0) > MAX_INDEX_PAGE:
        raise _page_too_large(url)
    body = await _read_at_most(response.content, MAX_INDEX_PAGE + 1)
    if len(body) > MAX_INDEX_PAGE:
        raise _page_too_large(url)
    return body


def _page_too_large(url: str) -> StorageError:
    return StorageError(
        f"{url}: the index page is larger than {MAX_INDEX_PAGE >> 20} MiB (decoded); a listing "
        "that large is not read: give the dataset a manifest (streamer-manifest.json) so it "
        "opens without a listing"
    )


def _page(url: str, response: aiohttp.ClientResponse, body: bytes) -> str:
    """An index page's text, decompressed when a server (a CDN) sent it gzip-
    or deflate-encoded though ``identity`` was asked for: unlike a range, a
    whole page is the same page either way. Read as sent, it listed nothing.
    Decompressed up to ``MAX_INDEX_PAGE`` bytes, no further (a gzip bomb of
    kilobytes would be gigabytes in memory)."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        inflate = zlib.decompressobj(wbits=zlib.MAX_WBITS | 32)  # gzip or zlib header
        try:
            body = inflate.decompress(body, MAX_INDEX_PAGE + 1)
        except zlib.error:
            body, inflate = b"", None
        if len(body) > MAX_INDEX_PAGE:
            raise _page_too_large(url)
        if inflate is None or not inflate.eof:
            raise StorageError(f"{url}: the index page is not valid {encoding}")
    elif encoding not in ("", "identity"):
        raise StorageError(
            f"{url}: the server sent the index page {encoding}-encoded; "
            "serve it uncompressed (Content-Encoding: identity)"
        )
    return body.decode(_charset(response), errors="replace")


def _charset(response: aiohttp.ClientResponse) -> str:
    """The page's ``charset``, else UTF-8 (aiohttp's ``get_encoding``, which
    wants the body read by ``response.read()``)."""
    charset = response.charset or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        return "utf-8"
    return charset


def _unsatisfied_size(content_range: str) -> int | None:
    """The object size a 416's ``Content-Range: bytes */SIZE`` names."""
    total = content_range.rpartition("/")[2].strip()
    return int(total) if total.isascii() and total.isdigit() else None


def version_tags(etag: str | None, modified: str | None) -> tuple[str, ...]:
    """What names the version of the object an answer comes from, by its
    ``ETag`` and ``Last-Modified`` headers: named by kind, strongest first,
    each if it carries one (``RemoteStore._version_change`` compares each
    with the first of its kind: some servers and CDNs drop the ``ETag``
    from some answers, which are then compared by their date). A weak ETag
    (``W/``) names the same version as its strong form (servers weaken it
    on some answers)."""
    return tuple(
        f"{kind} {value}"
        for kind, value in (("ETag", etag and etag.removeprefix("W/")), ("Last-Modified", modified))
        if value
    )


def _reason(response: aiohttp.ClientResponse) -> str:
    """The status line's reason phrase: server text, which may echo the
    request's URL (its signature, its token), so it is redacted like any."""
    return redact(response.reason or "")


def describe(exc: BaseException) -> str:
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


def _directory(url: str) -> str:
    """``url`` as a directory (its path ending in ``/``), for its index page.
    The slash goes on the path: a query (an access token) stays as given."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/"))


class _Link(NamedTuple):
    href: str
    rel: str  # the ``rel`` attribute, lower case
    text: str  # the link's text, stripped, lower case


class _LinkParser(html.parser.HTMLParser):
    """The ``<a href>`` links of a page with their ``rel`` and text, and the
    ``<link rel=... href>`` ones of its head."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[_Link] = []
        self._open: tuple[str, str, list[str]] | None = None  # the <a> being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        href, rel = named.get("href"), (named.get("rel") or "").lower()
        if tag == "a" and href:
            self._close()
            self._open = (href, rel, [])
        elif tag == "link" and href and rel:
            self.links.append(_Link(href, rel, ""))

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open[2].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._close()

    def close(self) -> None:
        super().close()
        self._close()

    def _close(self) -> None:
        if self._open is not None:
            href, rel, text = self._open
            self.links.append(_Link(href, rel, " ".join("".join(text).split()).lower()))
            self._open = None


def _links(directory: str, url: str, page: str) -> tuple[list[Entry], list[str]]:
    """Children of ``directory`` linked from its index page at ``url``
    (deduplicated), and the pages of the listing the page links as its
    continuation (``_continues``), carrying the directory URL's query
    parameters (an access token) where they do not set them. Paths are
    compared unquoted: the URL may be given as typed (``my data``) and the
    page link its entries by their quoted absolute path (``/my%20data/x``),
    or the other way round.

    A ``rel="next"`` link to anything but the directory itself (a path of
    its own: ``/data/page/2/``) is a ``StorageError``: its entries would
    be missed without a word."""
    parser = _LinkParser()
    parser.feed(page)
    parser.close()
    base = urllib.parse.urlsplit(directory)
    folder = urllib.parse.unquote(base.path)
    found: dict[str, Entry] = {}
    pages: list[str] = []
    for link in parser.links:
        joined = urllib.parse.urljoin(url, link.href)
        target = urllib.parse.urlsplit(joined)
        path = urllib.parse.unquote(target.path)
        same = target.netloc.lower() == base.netloc.lower()
        itself = same and path.rstrip("/") == folder.rstrip("/")
        if "next" in link.rel.split() and not itself and target.scheme in ("http", "https"):
            raise StorageError(
                f"{safe_url(url)}: the index page continues at {safe_url(joined)}, not at "
                "the directory's own URL: its entries cannot be listed; give the dataset a "
                "manifest (streamer-manifest.json) so it opens without a listing"
            )
        if itself and _continues(link, target):
            pages.append(_with_query(target, base.query))
            continue
        if not same or not path.startswith(folder):
            continue
        rest = path[len(folder) :]
        name = rest.rstrip("/")
        if name and "/" not in name and not name.startswith("."):
            found[name] = Entry(name, rest.endswith("/"))
    return list(found.values()), pages


def _continues(link: _Link, target: urllib.parse.SplitResult) -> bool:
    """Whether ``link`` to the directory itself is a page of its listing:
    ``rel="next"``, or a query that names a position in it (``?page=2``,
    ``?marker=x``, ``?offset=100``: ``CONTINUATION_KEYS``) or a text that
    says "next" or "more". Other queries of the directory (Apache's sort
    orders ``?C=N;O=D``) list the same entries again, and are not read."""
    if "next" in link.rel.split():
        return True
    if not target.query:
        return False
    keys = {key.lower() for key, _ in urllib.parse.parse_qsl(target.query, keep_blank_values=True)}
    return bool(keys & CONTINUATION_KEYS) or _NEXT_TEXT.match(link.text) is not None


def _with_query(target: urllib.parse.SplitResult, query: str) -> str:
    """``target`` with the parameters of ``query`` it does not set itself added."""
    own = urllib.parse.parse_qsl(target.query, keep_blank_values=True)
    keys = {key for key, _ in own}
    extra = [
        (k, v) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True) if k not in keys
    ]
    if not extra:
        return urllib.parse.urlunsplit(target._replace(fragment=""))
    joined = "&".join(filter(None, [target.query, urllib.parse.urlencode(extra)]))
    return urllib.parse.urlunsplit(target._replace(query=joined, fragment=""))


def _page_key(url: str) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """What makes two page URLs the same page: host, unquoted path, query parameters."""
    parts = urllib.parse.urlsplit(url)
    query = sorted(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return parts.netloc.lower(), urllib.parse.unquote(parts.path), tuple(query)
