"""Timeouts, retries and clear failures, injected by real servers on loopback."""

from __future__ import annotations

import email.utils
import functools
import gzip
import time
from collections.abc import Callable

import numpy as np
import pytest
from helpers import SECRET

from streamer import open_dataset
from streamer.dataset.dataset import Dataset
from streamer.dataset.manifest import MANIFEST_NAME
from streamer.errors import StorageError
from testkit.servers import S3_SLOWDOWN, Handler, LoopbackServer, file_handler

FAST = {"backoff": 0.01, "max_backoff": 0.05}


def answering(status: int, headers: dict[str, str], body: bytes = b"") -> LoopbackServer:
    """A server answering every request alike."""

    async def handle(request):  # type: ignore[no-untyped-def]
        return status, headers, body

    return LoopbackServer(handle).start()


def fails_at_once(store, read: Callable[[], object], url: str, match: str) -> None:  # type: ignore[no-untyped-def]
    """``read()`` raises one line that names ``url`` first and matches
    ``match``, within seconds and without a retry (what no retry mends)."""
    started = time.monotonic()
    with pytest.raises(StorageError, match=match) as got:
        read()
    assert str(got.value).startswith(f"{url}: ") and "\n" not in str(got.value)
    assert time.monotonic() - started < 5 and store.stats.retries == 0


def test_503_bursts_are_retried_honouring_retry_after(served, data) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = served
    reader = open_reader(**FAST)
    server.faults.errors, server.faults.retry_after = 2, "0.3"
    server.faults.error_body = S3_SLOWDOWN  # what S3 and B2 say (an HTTP client ignores it)
    started = time.monotonic()
    assert bytes(reader.read_sync(1000, 100)) == data[1000:1100]
    assert time.monotonic() - started >= 0.6
    assert len(server.ranged()) == 3
    assert reader.store.stats.retries == 2


def test_a_408_is_retried(served, data) -> None:  # type: ignore[no-untyped-def]
    """408 Request Timeout (nginx, load balancers and CDNs close an idle
    kept-alive connection so; RFC 9110 lets the client send the request
    again) is retried. It failed the read at once, over HTTP and S3."""
    open_reader, server = served
    reader = open_reader(**FAST)
    server.faults.errors, server.faults.error_status = 1, 408
    assert bytes(reader.read_sync(1000, 100)) == data[1000:1100]
    assert len(server.ranged()) == 2
    assert reader.store.stats.retries == 1


@pytest.fixture
def local_zone(request, monkeypatch):  # type: ignore[no-untyped-def]
    """The process's local time zone set to ``request.param`` (``TZ``) for the test."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("local_zone", ["Asia/Tokyo", "America/New_York"], indirect=True)
@pytest.mark.parametrize("form", ["-0000", "asctime"])
def test_a_retry_after_date_without_a_zone_is_gmt(served_http, data, local_zone, form) -> None:  # type: ignore[no-untyped-def]
    """``Retry-After`` as an HTTP date in the forms that name no zone (``-0000``,
    asctime's): GMT, as RFC 9110 has every HTTP date, whatever the machine's
    zone. It was read as local time: east of Greenwich the date lay hours in
    the past (retried at once, hammering a store that asked for a pause),
    west of it hours ahead (waited ``max_retry_after``)."""
    open_reader, server = served_http
    reader = open_reader(**FAST, max_retry_after=5)
    when = time.time() + 2.5
    if form == "-0000":
        date = email.utils.formatdate(when)  # "Fri, 04 Dec 2026 15:20:02 -0000"
    else:
        date = time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(when))
    server.faults.errors, server.faults.retry_after = 1, date
    started = time.monotonic()
    assert bytes(reader.read_sync(1000, 100)) == data[1000:1100]
    assert 1.0 <= time.monotonic() - started < 4
    assert reader.store.stats.retries == 1


def test_connection_resets_are_retried(served, data) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = served
    reader = open_reader(**FAST)
    server.faults.resets = 2
    assert bytes(reader.read_sync(300_000, 5000)) == data[300_000:305_000]
    assert len(server.ranged()) == 3
    # aiobotocore re-sends once by itself when a pooled connection was dropped.
    assert reader.store.stats.retries >= 1


def test_truncated_bodies_are_detected_and_retried(served, data) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = served
    reader = open_reader(**FAST)
    server.faults.truncations = 1
    assert bytes(reader.read_sync(10, 200_000)) == data[10:200_010]
    assert reader.store.stats.retries == 1 and len(server.ranged()) == 2


def test_over_long_bodies_are_detected_and_retried(served, data) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = served
    reader = open_reader(**FAST)
    server.faults.overlong = 1
    assert bytes(reader.read_sync(0, 100)) == data[:100]
    assert reader.store.stats.retries == 1


def test_a_stall_times_out_and_is_retried(served, data) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = served
    reader = open_reader(timeout=0.5, **FAST)
    server.faults.stalls, server.faults.stall_seconds = 1, 5
    started = time.monotonic()
    assert bytes(reader.read_sync(5, 10)) == data[5:15]
    assert time.monotonic() - started < 3
    assert reader.store.stats.retries == 1


def test_a_stall_shorter_than_the_timeouts_delivers_the_exact_bytes(served_http, data) -> None:  # type: ignore[no-untyped-def]
    """A body that pauses mid-way and then goes on is read whole and unchanged
    (the test server itself once resent the whole body after the pause)."""
    open_reader, server = served_http
    reader = open_reader(hedge_after=None, **FAST)
    server.faults.stalls, server.faults.stall_seconds = 1, 0.3
    assert bytes(reader.read_sync(1000, 200_000)) == data[1000:201_000]
    assert reader.store.stats.retries == 0


def test_giving_up_names_url_range_and_cause(served) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = served
    reader = open_reader(attempts=3, **FAST)
    server.faults.errors = 10
    with pytest.raises(StorageError) as caught:
        reader.read_sync(70_000, 10)
    message = str(caught.value)
    assert reader.url in message and "random.bin" in message
    block = reader.store.cache_config.block_size
    assert f"bytes=0-{block - 1}" in message  # the block-aligned request that failed
    assert "503" in message and "gave up after 3 attempts" in message
    assert len(server.ranged()) == 3


def test_persistent_stalls_fail_with_a_timeout(served) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = served
    reader = open_reader(attempts=2, timeout=0.3, **FAST)
    server.faults.stalls, server.faults.stall_seconds = 5, 5
    with pytest.raises(StorageError, match=r"no complete response within 0\.3 s"):
        reader.read_sync(0, 10)


def test_a_server_ignoring_range_is_a_clear_error(http, make_store) -> None:  # type: ignore[no-untyped-def]
    reader = make_store("http").reader(f"{http.url}/random.bin", size=700_001)
    http.faults.ignore_range = True
    with pytest.raises(StorageError, match=r"ignored Range .* answered 200 with the whole object"):
        reader.read_sync(0, 10)
    assert len(http.ranged()) == 1  # not retried: it would never work


def test_a_200_with_the_whole_object_serves_a_range_that_covers_it(  # type: ignore[no-untyped-def]
    http, make_store, storage_root
) -> None:
    """A server may ignore Range (RFC 9110) and answer 200 with the whole
    object: the bytes asked when the range covers it (every suffix read of
    a file smaller than the suffix: the manifest, audio_info/ and
    seek_index/ shards). Such a server made every dataset unreadable;
    a range within the object is still refused."""
    http.faults.whole_as_200 = True
    dataset = Dataset(f"{http.url}/packed", store=make_store("http"))
    local = open_dataset(storage_root / "packed")
    key = next(iter(local))
    assert np.array_equal(dataset.read_crop(key, 0.1, 0.4), local.read_crop(key, 0.1, 0.4))
    assert any(r.range.startswith("bytes=-") for r in http.ranged())
    data = (storage_root / "random.bin").read_bytes()
    reader = make_store("http").reader(f"{http.url}/random.bin")
    assert bytes(reader.read_sync(0, len(data))) == data  # bytes=0-(size-1): the whole object
    with pytest.raises(StorageError, match=r"ignored Range .* answered 200 with the whole object"):
        http.faults.ignore_range = True
        make_store("http").reader(f"{http.url}/random.bin", size=len(data)).read_sync(0, 10)


def test_416_is_a_clear_error(http, make_store) -> None:  # type: ignore[no-untyped-def]
    reader = make_store("http").reader(f"{http.url}/random.bin", size=10**9)  # a wrong size
    # The 416 names the object's size: not the one the reader was given.
    with pytest.raises(StorageError, match=r"\(1000000000 bytes, now 700001\)"):
        reader.read_sync(900_000_000, 10)
    http.reset()
    http.faults.only_ranged, http.faults.error_status = True, 416  # a 416 naming no size
    http.faults.errors = 1
    with pytest.raises(StorageError, match="range not satisfiable"):
        make_store("http").reader(f"{http.url}/random.bin", size=700_001).read_sync(0, 10)


def test_missing_objects_are_not_retried(served, make_store, http, s3, s3_uploaded) -> None:  # type: ignore[no-untyped-def]
    s3_reader = make_store("s3", s3.url).reader(f"{s3_uploaded}/nope.bin")
    http_reader = make_store("http").reader(f"{http.url}/nope.bin")
    for reader in (s3_reader, http_reader):
        with pytest.raises(StorageError, match="not found"):
            reader.size_sync()
        assert reader.store.stats.retries == 0


def redirecting(files: Handler) -> Handler:
    """``/moved/...`` is served by ``files``; ``/loop/...`` redirects to itself;
    anything else redirects (307) to ``/moved/...``."""

    async def handle(request):  # type: ignore[no-untyped-def]
        if request.path.startswith("/moved/"):
            return await files(request.clone(rel_url=request.path_qs.removeprefix("/moved")))
        target = (
            request.path_qs if request.path.startswith("/loop/") else "/moved" + request.path_qs
        )
        return 307, {"Location": target}, b""

    return handle


def test_redirects_are_followed_and_a_redirect_loop_is_a_clear_error(  # type: ignore[no-untyped-def]
    storage_root, data, make_store
) -> None:
    """A redirect to another path keeps the Range; a redirect loop fails at
    once, naming the URL, instead of being retried for the whole time budget."""
    server = LoopbackServer(redirecting(file_handler(storage_root))).start()
    try:
        store = make_store("http", give_up_after=30, **FAST)
        assert bytes(store.reader(f"{server.url}/random.bin").read_sync(5, 10)) == data[5:15]
        started = time.monotonic()
        with pytest.raises(StorageError, match=r"/loop/random\.bin: redirected 10 times"):
            store.reader(f"{server.url}/loop/random.bin").size_sync()
        assert time.monotonic() - started < 5
        assert store.stats.retries == 0
    finally:
        server.stop()


def gzipping(files: Handler) -> Handler:
    """``files``, every answer gzipped (``?labelled``: only labelled so)."""

    async def handle(request):  # type: ignore[no-untyped-def]
        status, headers, body = await files(request)
        if "labelled" in request.query:
            return status, {**headers, "Content-Encoding": "gzip"}, body
        return status, {**headers, "Content-Encoding": "gzip"}, gzip.compress(body)

    return handle


def test_a_range_compressed_on_the_fly_is_a_clear_error(storage_root, data, make_store) -> None:  # type: ignore[no-untyped-def]
    """A server that gzips answers though asked for ``identity``: not retried as
    a short body for the whole time budget. Bytes merely labelled gzip (as S3
    keeps an object's Content-Encoding) arrive at their length and are read."""
    server = LoopbackServer(gzipping(file_handler(storage_root))).start()
    try:
        store = make_store("http", give_up_after=30, **FAST)
        labelled = store.reader(f"{server.url}/random.bin?labelled", size=len(data))
        assert bytes(labelled.read_sync(5, 10)) == data[5:15]
        started = time.monotonic()
        with pytest.raises(StorageError, match=r"random\.bin: the server sent the range gzip-"):
            store.reader(f"{server.url}/random.bin", size=len(data)).read_sync(100_000, 10)
        assert time.monotonic() - started < 5 and store.stats.retries == 0
    finally:
        server.stop()


def test_a_whole_object_compressed_on_the_fly_is_a_clear_error(storage_root, make_store) -> None:  # type: ignore[no-untyped-def]
    """A server (a CDN) that ignores Range and gzips the whole object, though
    asked for ``identity``: a 200 naming no range, whose bytes are the
    object only as sent. Its compressed bytes were taken for the object (a
    manifest "not JSON", a small shard's tail of another size), for every
    read that covers the object; now one line naming the URL, at once."""
    files = file_handler(storage_root)

    async def whole_gzipped(request):  # type: ignore[no-untyped-def]
        clone = request.clone(headers={k: v for k, v in request.headers.items() if k != "Range"})
        status, headers, body = await files(clone)
        return status, {"ETag": headers["ETag"], "Content-Encoding": "gzip"}, gzip.compress(body)

    server = LoopbackServer(whole_gzipped).start()
    try:
        store = make_store("http", give_up_after=30, **FAST)
        manifest = store.reader(f"{server.url}/packed/{MANIFEST_NAME}")
        started = time.monotonic()
        with pytest.raises(
            StorageError, match=r"streamer-manifest\.json: the server answered .*gzip"
        ):
            manifest.read_tail_sync(65536)
        assert time.monotonic() - started < 5 and store.stats.retries == 0
    finally:
        server.stop()


def test_a_url_aiohttp_cannot_request_fails_at_once(make_store) -> None:  # type: ignore[no-untyped-def]
    """A port out of range, no host: not retried for the whole time budget,
    and the user info stays out of the error."""
    store = make_store("http", give_up_after=30, **FAST)
    started = time.monotonic()
    for url in (f"http://user:{SECRET}@127.0.0.1:99999/data/", "http:///data/"):
        with pytest.raises(StorageError, match="not a valid URL") as listing:
            store.list_sync(url)
        with pytest.raises(StorageError, match="not a valid URL") as reading:
            store.reader(url + "random.bin").size_sync()
        assert SECRET not in str(listing.value) + str(reading.value)
    assert time.monotonic() - started < 5 and store.stats.retries == 0


def test_a_range_answer_declaring_more_bytes_is_not_read(storage_root, data, make_store) -> None:  # type: ignore[no-untyped-def]
    """A proxy that names the asked range but sends the whole object: failed
    (and retried) on its Content-Length, before its body is read into memory
    (here the body stalls: reading it would wait out the attempt's timeout)."""
    files = file_handler(storage_root)

    async def whole(request):  # type: ignore[no-untyped-def]
        status, headers, _ = await files(request)
        return status, {**headers, "Content-Length": str(len(data))}, data

    server = LoopbackServer(whole).start()
    try:
        server.faults.stalls, server.faults.stall_seconds = 1, 30
        reader = make_store("http", attempts=1, timeout=5).reader(
            f"{server.url}/random.bin", size=len(data)
        )
        started = time.monotonic()
        with pytest.raises(StorageError, match=rf"over-long body: {len(data)} bytes instead of"):
            reader.read_sync(0, 10)
        assert time.monotonic() - started < 2
    finally:
        server.stop()


NOT_HTTP = r"redirected to .*: not an HTTP\(S\) URL"
NO_SPAN = "206 without a valid Content-Range"


@pytest.mark.parametrize(
    ("status", "header", "match"),
    [
        (302, "http://[::1/x.bin", NOT_HTTP),
        (302, "javascript:alert(1)", NOT_HTTP),
        (302, "ftp://127.0.0.1/x.bin", NOT_HTTP),
        (302, "file:///etc/passwd", NOT_HTTP),
        (206, "bytes \u00b2-5/700001", NO_SPAN),
        (206, "bytes 5-\u00b9/700001", NO_SPAN),
        (206, "bytes 5-2/700001", NO_SPAN),
        (206, "bytes 0-9/5", NO_SPAN),
        (416, "bytes */\u00b3", "range not satisfiable"),
        (501, "", "HTTP 501 Not Implemented"),
        (505, "", "HTTP 505 HTTP Version Not Supported"),
    ],
)
def test_an_answer_no_retry_mends_fails_at_once(status, header, match, make_store) -> None:  # type: ignore[no-untyped-def]
    """A redirect whose ``Location`` is no URL, or names no HTTP(S) one; a
    ``Content-Range`` naming no span of the object (digits that are not
    ASCII, a last byte before the first, a span past the size it names); a
    416 naming no size; 501 and 505, which no server answers for a while:
    one line naming the URL, not a ``ValueError`` traceback, nor retries
    for the whole time budget (a redirect to ``ftp:`` as a network failure,
    ``bytes 5-2`` as a body of -2 bytes, 501 as an overloaded server)."""
    name = "Location" if status == 302 else "Content-Range"
    headers = {name: header} if header else {}
    server = answering(status, headers, b"0123456789" if status == 206 else b"")
    try:
        store = make_store("http", give_up_after=30, **FAST)
        file, folder = f"{server.url}/x.bin", f"{server.url}/d/"
        fails_at_once(
            store, functools.partial(store.reader(file, size=100).read_sync, 0, 10), file, match
        )
        if status == 302:
            fails_at_once(store, functools.partial(store.list_sync, folder), folder, match)
    finally:
        server.stop()


def test_an_index_page_compressed_on_the_fly_lists_its_entries(  # type: ignore[no-untyped-def]
    storage_root, http, make_store
) -> None:
    """A directory index gzipped though ``identity`` was asked for is a whole
    page, not a range: it is read decompressed (it was read as text as sent,
    and listed nothing: a dataset with no shards)."""
    server = LoopbackServer(gzipping(file_handler(storage_root))).start()
    try:
        expected = make_store("http").list_sync(f"{http.url}/packed")
        assert expected and make_store("http").list_sync(f"{server.url}/packed") == expected
    finally:
        server.stop()


def test_a_suffix_answered_from_the_start_is_a_clear_error(storage_root, data, make_store) -> None:  # type: ignore[no-untyped-def]
    """A server that takes ``bytes=-N`` for the first N bytes: an error naming
    the URL, at once; not the rest of the object read range by range into
    memory (a shard's footer read fetched the whole shard)."""
    files = file_handler(storage_root)

    async def prefix(request):  # type: ignore[no-untyped-def]
        spec = request.headers.get("Range", "")
        if spec.startswith("bytes=-"):
            request = request.clone(headers={"Range": f"bytes=0-{int(spec[7:]) - 1}"})
        return await files(request)

    server = LoopbackServer(prefix).start()
    try:
        store = make_store("http", give_up_after=30, **FAST)
        url = f"{server.url}/random.bin"
        tail = lambda: store.reader(url).read_tail_sync(1000)  # noqa: E731
        fails_at_once(store, tail, url, "bytes 0-999 to a request for the last 1000")
        assert len(server.ranged()) == 1
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("served_as", "match"),
    [("https", "certificate does not verify"), ("http", "TLS handshake fails")],
)
def test_a_tls_connection_that_cannot_be_made_fails_at_once(  # type: ignore[no-untyped-def]
    storage_root, make_store, request, served_as, match
) -> None:
    """An HTTPS server whose certificate does not verify (self-signed, another
    host, expired), or an ``https://`` URL naming a plain HTTP server (its
    handshake fails on every try: WRONG_VERSION_NUMBER): no retry mends
    either, so one clear error at once, not retries for the whole time
    budget (5 minutes by default; the second was retried until 2026-12-06)."""
    context = request.getfixturevalue("self_signed")[1] if served_as == "https" else None
    server = LoopbackServer(file_handler(storage_root), ssl_context=context).start()
    try:
        store = make_store("http", give_up_after=30, **FAST)
        url = f"{server.url.replace('http:', 'https:')}/random.bin"
        fails_at_once(store, store.reader(url).size_sync, url, match)
    finally:
        server.stop()


def test_every_failed_request_is_counted_once_with_its_reason(served, make_store) -> None:  # type: ignore[no-untyped-def]
    """``stats.failures`` counts every request that failed, once, and
    ``stats.failure_reasons`` why: those no retry mends (a missing object,
    a refused range, access denied) as well as those that spent their
    retries. Only the retried ones were counted: a run whose every shard was
    missing showed no failure at all."""
    open_reader, server = served
    reader = open_reader(**FAST, attempts=2)
    store, missing = reader.store, reader.path.replace("random.bin", "missing.bin")
    with pytest.raises(StorageError, match="not found"):
        store.reader(missing).size_sync()
    server.faults.errors, server.faults.error_status = 1, 403
    with pytest.raises(StorageError, match="403"):
        reader.read_sync(0, 10)
    server.faults.errors, server.faults.error_status = 2, 503
    with pytest.raises(StorageError, match="gave up after 2 attempts"):
        reader.read_sync(300_000, 10)
    assert store.stats.failures == 3 and store.stats.retries == 1
    assert store.stats.failure_reasons == {
        "not found": 1,
        "not retryable": 1,
        "gave up retrying": 1,
    }
    store.stats.reset()
    assert store.stats.failure_reasons == {}


def test_a_refused_range_is_counted_as_such(make_store) -> None:  # type: ignore[no-untyped-def]
    server = answering(416, {})
    try:
        store = make_store("http", **FAST)
        url = f"{server.url}/x.bin"
        read = functools.partial(store.reader(url, size=100).read_sync, 0, 10)
        fails_at_once(store, read, url, "range not satisfiable")
        assert store.stats.failure_reasons == {"range not satisfiable": 1}
        assert store.stats.failures == 1
    finally:
        server.stop()
