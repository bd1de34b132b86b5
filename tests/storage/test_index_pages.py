"""HTTP directory index pages: listings that come in pages, and pages too large to read."""

from __future__ import annotations

import gzip
import html
import time
import urllib.parse

import pytest
from helpers import SECRET

from streamer.errors import StorageError
from streamer.storage import http as http_store
from testkit.servers import LoopbackServer

FAST = {"backoff": 0.01, "max_backoff": 0.05}
NAMES = [f"shard-{n:06d}.wsds" for n in range(10)]
PER_PAGE = 3


def _continuation(style: str, page: int) -> str:
    """The link of a listing's page ``page`` (1-based), as servers write them."""
    if style == "page":
        return f'<a href="?page={page}">Next &raquo;</a>'
    if style == "marker":  # a listing by marker: the last name of the page before
        marker = urllib.parse.quote(NAMES[(page - 1) * PER_PAGE - 1])
        return f'<a rel="next" href="?marker={marker}">more</a>'
    return f'<link rel="next" href="/data/?offset={(page - 1) * PER_PAGE}">'  # absolute


def _page_of(style: str, query: dict[str, str]) -> int:
    if style == "page":
        return int(query.get("page", 1))
    if style == "marker":
        return 1 if "marker" not in query else NAMES.index(query["marker"]) // PER_PAGE + 2
    return int(query.get("offset", 0)) // PER_PAGE + 1


def paginated(
    style: str, *, token: bool = False, endless: bool = False, flaky: bool = False
) -> LoopbackServer:
    """A server listing ``NAMES`` under ``/data/`` ``PER_PAGE`` to a page, each
    page linking the next one (``style``: ``?page=N`` "Next", ``rel=next``
    ``?marker=``, a ``<link rel=next>`` in the head with ``?offset=``) and,
    for ``page``, every page by number (back to the first). ``token``: every
    request must carry ``?token=SECRET`` (a signed dataset link);
    ``endless``: pages past the names list made-up names, and never end;
    ``flaky``: the first request for the second page is answered 503."""
    failed: list[str] = []

    async def handle(request):  # type: ignore[no-untyped-def]
        query = dict(request.query)
        if flaky and not failed and _page_of(style, query) == 2:
            failed.append(request.path_qs)
            return 503, {}, b""
        if token and query.pop("token", None) != SECRET:
            return 403, {}, b"bad token"
        if request.path != "/data/":
            return 404, {}, b""
        page = _page_of(style, query)
        names = NAMES[(page - 1) * PER_PAGE : page * PER_PAGE]
        if endless and not names:
            names = [f"made-up-{page}.wsds"]
        links = "".join(f'<a href="{html.escape(n)}">{n}</a>\n' for n in names)
        links += '<a href="?C=N;O=D">Name</a> <a href="../">Parent Directory</a>\n'  # Apache's
        if style == "page":
            pages = -(-len(NAMES) // PER_PAGE)
            links += " ".join(f'<a href="?page={n}">{n}</a>' for n in range(1, pages + 1))
        if endless or page * PER_PAGE < len(NAMES):
            links += _continuation(style, page + 1)
        body = f"<html><head></head><body>{links}</body></html>"
        return 200, {"Content-Type": "text/html"}, body.encode()

    return LoopbackServer(handle).start()


@pytest.mark.parametrize("style", ["page", "marker", "link"])
@pytest.mark.parametrize("token", [False, True])
def test_a_listing_in_pages_lists_every_entry(style, token, make_store) -> None:  # type: ignore[no-untyped-def]
    """A directory whose index page lists its entries a page at a time, each
    page linking the next (``?page=2``, ``?marker=...``, ``rel="next"``):
    every entry of every page is listed, each page asked for once, a query
    the directory URL carries (an access token) kept on every page. Only the
    first page was read: a dataset's shards past it were silently left out
    of every epoch."""
    server = paginated(style, token=token)
    try:
        store = make_store("http", **FAST)
        url = f"{server.url}/data" + (f"?token={SECRET}" if token else "")
        assert [entry.name for entry in store.list_sync(url)] == NAMES
        asked = [r.path for r in server.requests]
        assert len(asked) == len(set(asked))
        pages = -(-len(NAMES) // PER_PAGE)
        assert pages <= len(asked) <= pages + 1  # ``?page=1`` is the first page again
        assert all(f"token={SECRET}" in path for path in asked) or not token
    finally:
        server.stop()


def test_a_listing_whose_pages_never_end_fails_clearly(make_store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Continuation links that never end (a server making up pages): a clear
    error after ``MAX_INDEX_PAGES`` pages naming the URL and what to do, not
    an endless loop, and not the pages read so far as if they were all."""
    monkeypatch.setattr(http_store, "MAX_INDEX_PAGES", 20)
    server = paginated("page", endless=True)
    try:
        store = make_store("http", **FAST)
        started = time.monotonic()
        with pytest.raises(StorageError, match="more than 20 pages") as caught:
            store.list_sync(f"{server.url}/data/")
        message = str(caught.value)
        assert message.startswith(f"{server.url}/data/: ") and "\n" not in message
        assert "manifest" in message
        assert len(server.requests) == 20 and time.monotonic() - started < 10
    finally:
        server.stop()


def test_a_next_page_at_a_path_of_its_own_fails_clearly(make_store) -> None:  # type: ignore[no-untyped-def]
    """A ``rel="next"`` page at another path than the directory's
    (``/data/page/2/``): its entries cannot be told from subdirectories'
    ones, so a clear error, not the first page as if it were all."""

    async def handle(request):  # type: ignore[no-untyped-def]
        links = "".join(f'<a href="{n}">{n}</a>' for n in NAMES[:PER_PAGE])
        body = f'{links}<a rel="next" href="/data/page/2/">next</a>'
        return 200, {"Content-Type": "text/html"}, body.encode()

    server = LoopbackServer(handle).start()
    try:
        with pytest.raises(StorageError, match=r"continues at .*/data/page/2/") as caught:
            make_store("http", **FAST).list_sync(f"{server.url}/data/")
        assert str(caught.value).startswith(f"{server.url}/data/: ")
        assert "manifest" in str(caught.value) and len(server.requests) == 1
    finally:
        server.stop()


def _serving(body: bytes, headers: dict[str, str]) -> LoopbackServer:
    async def handle(request):  # type: ignore[no-untyped-def]
        return 200, {"Content-Type": "text/html", **headers}, body

    return LoopbackServer(handle).start()


@pytest.mark.parametrize("encoding", ["gzip", "identity", "chunked"])
def test_an_index_page_past_the_size_limit_fails_clearly(encoding, make_store) -> None:  # type: ignore[no-untyped-def]
    """An index page that decodes to more than ``MAX_INDEX_PAGE`` bytes (a
    gzip bomb: 80 KiB on the wire, 80 MiB decoded; a page that large sent
    as it is, with or without a Content-Length): one line naming the URL
    (without its token) and the limit. It was read, decompressed and decoded
    whole into memory (and parsed), however large."""
    page = b"<html><body>" + b" " * (80 << 20) + b'<a href="x.wsds">x</a></body></html>'
    if encoding == "gzip":
        server = _serving(gzip.compress(page, 1), {"Content-Encoding": "gzip"})
    else:
        server = _serving(page, {})
        server.faults.chunked = encoding == "chunked"
        server.faults.only_ranged = False
    try:
        store = make_store("http", **FAST)
        with pytest.raises(StorageError, match="larger than 64 MiB") as caught:
            store.list_sync(f"{server.url}/data/?token={SECRET}")
        message = str(caught.value)
        assert message.startswith(f"{server.url}/data/?…: ") and "\n" not in message
        assert SECRET not in message and store.stats.retries == 0
    finally:
        server.stop()


def test_a_dataset_listed_across_pages_has_every_shard(tmp_path, make_store) -> None:  # type: ignore[no-untyped-def]
    """A wsds dataset (no manifest) behind a server whose index pages list two
    entries each, with "Next" links: every shard and every row is in the
    dataset (the shards past the first page were missing from every epoch)."""
    import pyarrow as pa

    from streamer.dataset.dataset import Dataset
    from testkit.servers import file_handler

    (tmp_path / "ds" / "audio").mkdir(parents=True)
    schema = pa.schema([("__key__", pa.string()), ("audio", pa.large_binary())])
    for n in range(7):
        table = pa.table({"__key__": [f"k{n}"], "audio": [bytes([n]) * 100]}, schema=schema)
        with pa.ipc.new_file(str(tmp_path / "ds" / "audio" / f"s{n}.wsds"), schema) as writer:
            writer.write_table(table)
    files = file_handler(tmp_path)

    async def two_a_page(request):  # type: ignore[no-untyped-def]
        status, headers, body = await files(request)
        if not request.path.endswith("/"):
            return status, headers, body
        links = [line for line in body.decode().split("\n") if "<a " in line]
        page = int(request.query.get("page", 1))
        shown = "\n".join(links[2 * (page - 1) : 2 * page])
        more = f'<a href="?page={page + 1}">Next</a>' if 2 * page < len(links) else ""
        return status, headers, f"<html><body>{shown}\n{more}</body></html>".encode()

    server = LoopbackServer(two_a_page).start()
    try:
        dataset = Dataset(f"{server.url}/ds", store=make_store("http", **FAST))
        assert dataset.listed_shards == [f"s{n}" for n in range(7)]
        assert sorted(dataset.keys()) == [f"k{n}" for n in range(7)]
    finally:
        server.stop()


def test_a_page_that_fails_is_retried_alone(make_store) -> None:  # type: ignore[no-untyped-def]
    """A 503 for the second page of a listing: that page is asked for again,
    not the listing from its start, and every entry is listed."""
    server = paginated("marker", flaky=True)
    try:
        store = make_store("http", **FAST)
        assert [entry.name for entry in store.list_sync(f"{server.url}/data/")] == NAMES
        asked = [r.path for r in server.requests]
        assert asked.count("/data/") == 1 and len(asked) == len(set(asked)) + 1
        assert store.stats.retries == 1 and store.stats.failures == 0
    finally:
        server.stop()
