"""Real servers on loopback for the storage tests: S3 (moto) and a fault-injecting HTTP server.

``LoopbackServer`` is an aiohttp server in its own thread. It either serves a
directory (honouring ``Range``, with HTML directory listings) or forwards
every request to an upstream server (moto), and in both modes can inject
faults — latency, 5xx bursts with ``Retry-After`` or outages of a given
length, connection resets, truncated or over-long bodies, stalls mid-body,
hangs before any answer, range answers capped at a size, HEAD refused —
while logging every request it gets.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import os
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yarl
from aiohttp import web

__all__ = [
    "S3_SLOWDOWN",
    "Faults",
    "Handler",
    "LoopbackServer",
    "Seen",
    "file_handler",
    "proxy_handler",
    "s3_client",
    "s3_error",
    "upload_tree",
]

Handler = Callable[[web.Request], Awaitable[tuple[int, dict[str, str], bytes]]]


def s3_error(code: str, message: str, **fields: str) -> bytes:
    """An S3 error document, as S3 and its imitations send with a 4xx/5xx:
    ``<Error><Code>code</Code><Message>message</Message>...</Error>``, plus
    one element per keyword (``Region="eu-west-1"``)."""
    elements = {"Code": code, "Message": message, **fields}
    inner = "".join(
        f"<{tag}>{html.escape(text, quote=False)}</{tag}>" for tag, text in elements.items()
    )
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<Error>{inner}</Error>'.encode()


#: What S3 servers answer to creating a bucket that exists (SeaweedFS, rclone).
_BUCKET_EXISTS = {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}

S3_SLOWDOWN = s3_error("SlowDown", "Please reduce your request rate.")

#: The largest request body the servers take (aiohttp's default is 1 MiB;
#: multipart uploads send 5 MiB parts and more).
MAX_BODY = 64 << 20


@dataclasses.dataclass
class Faults:
    """Switches; each counter applies to that many next matching requests.

    ``down_until`` (a ``time.monotonic()`` instant) answers every matching
    request with ``error_status`` until then: an outage of the whole server.
    ``hangs`` requests get no answer at all (not even a status line) for
    ``stall_seconds``, then the connection is closed; ``stalls`` send half
    the body, then wait ``stall_seconds`` before the rest; with
    ``stall_every`` = n, so does every n-th matching request besides;
    ``trickles`` send the body a byte at a time, ``trickle_seconds`` apart
    (never silent for a read timeout, never done).
    """

    latency: float = 0.0
    errors: int = 0
    down_until: float = 0.0
    error_status: int = 503
    error_body: bytes = b""
    echo_reason: bool = False  # error answers' reason phrase repeats the request's path and query
    retry_after: str | None = None
    resets: int = 0
    truncations: int = 0
    overlong: int = 0
    stalls: int = 0
    hangs: int = 0
    stall_every: int = 0
    stall_seconds: float = 30.0
    trickles: int = 0
    trickle_seconds: float = 0.2
    ignore_range: bool = False
    #: A range covering the whole object is answered 200 with the whole
    #: object and no Content-Range (RFC 9110 lets a server ignore Range);
    #: other ranges as asked.
    whole_as_200: bool = False
    chunked: bool = False  # bodies sent without Content-Length (chunked encoding)
    only_ranged: bool = True  # faults hit only requests with a Range header
    only_under: str = ""  # ... and only those whose path holds this (empty: every path)
    #: Range answers carry at most this many bytes, their Content-Range says
    #: which (a server or CDN that caps range sizes, as HTTP allows); 0: no cap.
    max_range: int = 0
    #: Range answers of at least ``shift_from`` bytes (targeted ones) carry
    #: the bytes ``shift`` further on, their Content-Range the range asked
    #: for (a server or proxy that lies), zeros past the object's end; 0: none.
    shift: int = 0
    shift_from: int = 0
    #: HEAD requests are answered with this status (a policy or proxy that
    #: allows GET only: 403, 405); 0: served.
    refuse_head: int = 0
    #: HEAD answers carry no Content-Length (a gateway answering them chunked).
    head_without_length: bool = False
    #: Listing pages say there is more (IsTruncated) without saying where it
    #: goes on: their NextContinuationToken is dropped.
    drop_continuation: bool = False
    #: Listing pages name each key and common prefix twice (a server whose
    #: pages overlap, as some S3 implementations' do at page boundaries).
    repeat_listed: bool = False


@dataclasses.dataclass(frozen=True)
class Seen:
    """One request as the server saw it."""

    method: str
    path: str
    range: str | None
    headers: dict[str, str]
    at: float = 0.0  # time.monotonic() when it arrived


class LoopbackServer:
    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl_context = ssl_context  # serve HTTPS with this context
        self.faults = Faults()
        self.requests: list[Seen] = []
        self.in_flight = self.max_in_flight = 0
        self._stalled: set[asyncio.Task] = set()  # answers sleeping in a stall or hang
        self._targeted = 0  # requests the faults applied to, for ``stall_every``
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> LoopbackServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def reset(self) -> None:
        """Clear faults and the request log; answers still held by a stall or
        hang are cut off, so they do not linger into the next test."""
        self.faults = Faults()
        asyncio.run_coroutine_threadsafe(self._cut_stalled(), self._loop).result()
        self.requests.clear()
        self.max_in_flight = self._targeted = 0

    def ranged(self) -> list[Seen]:
        """The GETs that asked for a byte range."""
        return [r for r in self.requests if r.method == "GET" and r.range]

    def go_down(self, seconds: float, status: int = 503) -> float:
        """Answer every request with ``status`` for ``seconds`` from now; returns
        the ``time.monotonic()`` instant the outage ends."""
        self.faults.only_ranged = False
        self.faults.error_status = status
        self.faults.down_until = time.monotonic() + seconds
        return self.faults.down_until

    async def _start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._serve)
        self._runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=0.5, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()
        close = getattr(self.handler, "close", None)
        if close is not None:
            await close()
        stalled = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)

    async def _cut_stalled(self) -> None:
        stalled, self._stalled = self._stalled, set()
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)

    async def _stall(self, seconds: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._stalled.add(task)
        try:
            await asyncio.sleep(seconds)
        finally:
            self._stalled.discard(task)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            Seen(
                request.method,
                request.path_qs,
                request.headers.get("Range"),
                dict(request.headers),
                time.monotonic(),
            )
        )
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        faults = self.faults
        targeted = not faults.only_ranged or "Range" in request.headers
        targeted = targeted and faults.only_under in request.path
        if faults.latency:
            await asyncio.sleep(faults.latency)
        if targeted and faults.hangs:
            faults.hangs -= 1
            await self._stall(faults.stall_seconds)
            if request.transport is not None:
                request.transport.close()
            return web.Response()
        down = time.monotonic() < faults.down_until
        if targeted and (faults.errors or down):
            faults.errors -= 0 if down else 1
            headers = {"Retry-After": faults.retry_after} if faults.retry_after else {}
            reason = f"Refused {request.path_qs}" if faults.echo_reason else None
            return web.Response(
                status=faults.error_status, reason=reason, body=faults.error_body, headers=headers
            )
        if targeted and faults.resets:
            faults.resets -= 1
            request.transport.abort()
            return web.Response()
        if faults.refuse_head and request.method == "HEAD":
            return web.Response(status=faults.refuse_head)
        status, headers, body = await self.handler(request)
        if faults.drop_continuation:
            body = re.sub(rb"<NextContinuationToken>[^<]*</NextContinuationToken>", b"", body)
        if faults.repeat_listed:
            body = re.sub(rb"(<(Contents|CommonPrefixes)>.*?</\2>)", rb"\1\1", body, flags=re.S)
        unsized = faults.chunked
        if faults.head_without_length and request.method == "HEAD":
            headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
            unsized = True
        # A range answer: 206, or 200 with a Content-Range (rclone's S3 server).
        ranged = status in (200, 206) and "Content-Range" in headers
        if faults.ignore_range and ranged:
            status, body = 200, await _whole(request, self.handler)
            headers = {k: v for k, v in headers.items() if k != "Content-Range"}
            ranged = False
        if ranged and faults.whole_as_200 and _whole_range(headers["Content-Range"]):
            headers = {k: v for k, v in headers.items() if k != "Content-Range"}
            status, ranged = 200, False
        if ranged and faults.max_range and len(body) > faults.max_range:
            headers, body = _capped(headers, body, faults.max_range)
        if targeted and ranged and faults.shift and len(body) >= faults.shift_from:
            body = await _shifted(request, self.handler, headers, body, faults.shift)
        if targeted and ranged and faults.overlong:
            faults.overlong -= 1
            return _overlong(status, headers, body)
        response = web.StreamResponse(status=status, headers=headers)
        if "Content-Length" not in headers and not unsized:  # HEAD keeps its length
            response.content_length = len(body)
        await response.prepare(request)
        if targeted and faults.truncations and len(body) > 1:
            faults.truncations -= 1
            await response.write(body[: len(body) // 2])
            request.transport.close()
            return response
        if targeted:
            self._targeted += 1
        periodic = faults.stall_every and self._targeted % faults.stall_every == 0
        sent = 0
        if targeted and (faults.stalls or periodic):
            faults.stalls -= 0 if periodic else 1
            sent = len(body) // 2
            await response.write(body[:sent])
            await self._stall(faults.stall_seconds)
        if targeted and faults.trickles:
            faults.trickles -= 1
            for at in range(sent, len(body)):
                await response.write(body[at : at + 1])
                await self._stall(faults.trickle_seconds)
            sent = len(body)
        await response.write(body[sent:])  # the rest: a stall shorter than a timeout ends well
        await response.write_eof()
        return response


def _whole_range(content_range: str) -> bool:
    """Whether a range answer's ``Content-Range`` names every byte of the object."""
    first, last, total = map(int, re.findall(r"\d+", content_range))
    return first == 0 and last == total - 1


def _capped(headers: dict[str, str], body: bytes, cap: int) -> tuple[dict[str, str], bytes]:
    """A range answer cut to its first ``cap`` bytes, its Content-Range saying so."""
    first, _, total = map(int, re.findall(r"\d+", headers["Content-Range"]))
    capped = {k: v for k, v in headers.items() if k.lower() != "content-length"}
    capped["Content-Range"] = f"bytes {first}-{first + cap - 1}/{total}"
    return capped, body[:cap]


async def _shifted(
    request: web.Request, handler: Handler, headers: dict[str, str], body: bytes, shift: int
) -> bytes:
    """The range answer's bytes ``shift`` further on in the object (its
    Content-Range unchanged), zeros past the object's end."""
    first, last, _ = map(int, re.findall(r"\d+", headers["Content-Range"]))
    shifted = (await _whole(request, handler))[first + shift : last + 1 + shift]
    return shifted + bytes(len(body) - len(shifted))


def _overlong(status: int, headers: dict[str, str], body: bytes) -> web.Response:
    """A range answer that claims (and sends) one byte more than asked."""
    first, last, total = map(int, re.findall(r"\d+", headers["Content-Range"]))
    extended = {**headers, "Content-Range": f"bytes {first}-{last + 1}/{total}"}
    return web.Response(status=status, body=body + b"\0", headers=extended)


async def _whole(request: web.Request, handler: Handler) -> bytes:
    clone = request.clone(headers={k: v for k, v in request.headers.items() if k != "Range"})
    return (await handler(clone))[2]


def file_handler(root: Path) -> Handler:
    """Serve files under ``root`` with Range support, an ``ETag`` (from the
    file's mtime and size) and HTML directory indexes."""

    async def handle(request: web.Request) -> tuple[int, dict[str, str], bytes]:
        relative = urllib.parse.unquote(request.path).lstrip("/")
        path = root / relative
        if path.is_dir():
            links = "".join(
                f'<a href="{html.escape(p.name)}{"/" if p.is_dir() else ""}">{p.name}</a>\n'
                for p in sorted(path.iterdir())
            )
            return 200, {"Content-Type": "text/html"}, f"<html><body>{links}</body></html>".encode()
        if not path.is_file():
            return 404, {}, b"not found"
        stat = path.stat()
        size = stat.st_size
        etag = {"ETag": f'"{stat.st_mtime_ns:x}-{size:x}"'}  # as nginx makes it, finer
        spec = request.headers.get("Range")
        if spec is None:
            return 200, etag, path.read_bytes()
        span = _parse_range(spec, size)
        if span is None:
            return 416, {"Content-Range": f"bytes */{size}"}, b""
        start, end = span
        with open(path, "rb") as file:  # only the range: big shards stay cheap to serve
            file.seek(start)
            body = file.read(end - start)
        headers = {"Content-Range": f"bytes {start}-{end - 1}/{size}", **etag}
        return 206, headers, body

    return handle


def _parse_range(spec: str, size: int) -> tuple[int, int] | None:
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", spec.strip())
    if not match or not (match[1] or match[2]):
        return None
    if not match[1]:
        start = max(0, size - int(match[2]))
        return (start, size) if size else None
    start = int(match[1])
    end = min(size, int(match[2]) + 1) if match[2] else size
    return (start, end) if start < size and start < end else None


class proxy_handler:
    """Forward requests unchanged to ``upstream`` (moto), keeping the signed Host."""

    _skip = frozenset({"content-length", "transfer-encoding", "connection", "content-encoding"})

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, request: web.Request) -> tuple[int, dict[str, str], bytes]:
        if self._session is None:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        async with self._session.request(
            request.method,
            # As sent: a presigned URL's signature covers its exact query encoding.
            yarl.URL(self.upstream + request.raw_path, encoded=True),
            headers=dict(request.headers),
            data=await request.read() or None,  # no body: no Content-Type added (SigV2 signs it)
            allow_redirects=False,
        ) as answer:
            payload = await answer.read()
            skip = self._skip - ({"content-length"} if request.method == "HEAD" else set())
            headers = {k: v for k, v in answer.headers.items() if k.lower() not in skip}
            return answer.status, headers, payload

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def s3_client(endpoint: str, key_id: str, secret: str) -> Any:
    """A boto3 S3 client (the test extra's) talking straight to ``endpoint``:
    what the tests use to set a server up or look behind streamer's back."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )


def upload_tree(
    endpoint: str,
    folder: str | os.PathLike[str],
    bucket: str,
    prefix: str,
    key_id: str,
    secret: str,
) -> None:
    """Create ``bucket`` on an S3 server (if it has none of that name) and
    upload every file under ``folder`` to ``<prefix>/<relative path>`` (no
    prefix: ``<relative path>``), with boto3 from the test extra, straight to
    the server."""
    import botocore.exceptions

    client = s3_client(endpoint, key_id, secret)
    try:
        client.create_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as exc:  # moto lets it pass; others do not
        if exc.response.get("Error", {}).get("Code") not in _BUCKET_EXISTS:
            raise
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, folder).replace(os.sep, "/")
            client.upload_file(path, bucket, f"{prefix}/{relative}" if prefix else relative)
