"""Picking stores by URL, B2 defaults, the CLI's --endpoint-url, and the
event-loop bridge (trio callers, threads, forked and spawned workers)."""

from __future__ import annotations

import multiprocessing
import pickle
import shutil
import time
import urllib.parse
from pathlib import Path

import anyio
import pytest
from helpers import SECRET

from streamer import open_dataset
from streamer.cli import main
from streamer.errors import StorageError
from streamer.storage import LocalStore, open_url
from streamer.storage.fsspec import FsspecStore
from streamer.storage.http import HTTPStore
from streamer.storage.loop import run_sync
from streamer.storage.s3 import B2Store, S3Store
from testkit.servers import LoopbackServer, file_handler, proxy_handler


def test_the_scheme_picks_the_store(tmp_path: Path) -> None:
    assert isinstance(open_url(tmp_path)[0], LocalStore)
    assert open_url(f"file://{tmp_path}") == (open_url(tmp_path)[0], str(tmp_path))
    store, path = open_url("s3://bucket/some/prefix/", endpoint_url="http://127.0.0.1:9")
    assert (type(store), path) == (S3Store, "bucket/some/prefix")
    store, path = open_url("https://example.invalid/a/b?sig=1")
    assert (type(store), path) == (HTTPStore, "https://example.invalid/a/b?sig=1")
    assert type(open_url("memory://x")[0]) is FsspecStore
    with pytest.raises(StorageError, match="nosuch"):
        open_url("nosuch://x")
    with pytest.raises(TypeError, match="unknown s3:// options"):
        open_url("s3://bucket", endpoint_url="http://127.0.0.1:9", secrett="typo")


def test_a_file_url_names_a_local_path_on_this_host(tmp_path: Path) -> None:
    """``file://localhost/PATH`` is ``/PATH`` (RFC 8089); a ``file://`` URL
    naming another host, or user info, cannot be served. Both were taken as
    a relative path (``localhost/tmp/...``), which then failed to list with
    the URL's password in the message."""
    store = open_url(tmp_path)[0]
    assert open_url(f"file://localhost{tmp_path}") == (store, str(tmp_path))
    assert open_url(f"FILE://{tmp_path}") == (store, str(tmp_path))
    for url in (f"file://user:{SECRET}@host{tmp_path}", f"file://otherhost{tmp_path}"):
        with pytest.raises(StorageError, match="names a path on this machine") as caught:
            open_url(url)
        assert SECRET not in str(caught.value) and "file://" in str(caught.value)


def test_b2_needs_an_endpoint_and_says_where_to_put_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("B2_ENDPOINT_URL", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StorageError, match=r"endpoint_url=.*--endpoint-url.*B2_ENDPOINT_URL"):
        open_url("b2://bucket/prefix")


def test_b2_sends_no_flexible_checksums(s3, s3_uploaded, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("B2_ENDPOINT_URL", s3.url)
    credentials = {"key": "test-key-id", "secret": SECRET, "region_name": "us-east-1"}
    b2, path = open_url(f"b2://{s3_uploaded}/random.bin", **credentials)
    s3_store, _ = open_url(f"s3://{s3_uploaded}/random.bin", endpoint_url=s3.url, **credentials)
    assert isinstance(b2, B2Store) and b2.url == f"b2:// at {s3.url}"
    s3.reset()
    for store in (b2, s3_store):
        store.reader(path).read_sync(0, 10)
        store.put_sync(f"{s3_uploaded}/written-{store.scheme}.bin", b"x" * 100)
    b2_get, s3_get = (r.headers for r in s3.ranged())
    b2_put, s3_put = (r.headers for r in s3.requests if r.method == "PUT")

    def checksums(headers: dict[str, str]) -> list[str]:
        return [
            h for h in headers if h.lower().startswith(("x-amz-checksum", "x-amz-sdk-checksum"))
        ]

    assert checksums(b2_get) == checksums(b2_put) == []
    assert checksums(s3_put) != []  # botocore's default for writes, kept for S3
    # No ranged GET asks for a checksum: servers that send one send the whole object's.
    assert checksums(s3_get) == []


def test_cli_takes_endpoint_url_and_aws_environment(s3, s3_uploaded, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert main(["inspect", f"s3://{s3_uploaded}/packed", "--endpoint-url", s3.url]) == 0
    out = capsys.readouterr().out
    assert f"s3://{s3_uploaded}/packed" in out and "codecs" in out


@pytest.mark.parametrize(
    ("scheme", "variable"),
    [("s3", "AWS_ENDPOINT_URL"), ("s3", "AWS_ENDPOINT_URL_S3"), ("b2", "B2_ENDPOINT_URL")],
)
def test_a_changed_endpoint_variable_gives_a_store_of_the_new_endpoint(  # type: ignore[no-untyped-def]
    s3, s3_uploaded, moto_endpoint, monkeypatch, scheme, variable
) -> None:
    """Stores are shared per options: the environment's endpoint is one of
    them, so a process that points the variable elsewhere (a job runner
    reusing it) reads from the new endpoint, and back again from the first store."""
    for name in ("B2_ENDPOINT_URL", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    credentials = {"key": "test-key-id", "secret": SECRET, "region_name": "us-east-1"}
    url = f"{scheme}://{s3_uploaded}/random.bin"
    other = LoopbackServer(proxy_handler(moto_endpoint)).start()
    try:
        monkeypatch.setenv(variable, s3.url)
        first, path = open_url(url, **credentials)
        monkeypatch.setenv(variable, other.url)
        second, _ = open_url(url, **credentials)
        assert second is not first
        assert (first.url, second.url) == (
            f"{scheme}:// at {s3.url}",
            f"{scheme}:// at {other.url}",
        )
        for store in (first, second):
            store.clear_memory_cache()  # either may be shared with an earlier test
        s3.reset()
        assert second.reader(path).read_sync(0, 10) == first.reader(path).read_sync(0, 10)
        assert len(s3.ranged()) == len(other.ranged()) == 1
        monkeypatch.setenv(variable, s3.url)
        assert open_url(url, **credentials)[0] is first
        # An endpoint given as an option wins over the environment, as before.
        chosen, _ = open_url(url, endpoint_url=other.url, **credentials)
        assert chosen is second
    finally:
        other.stop()


@pytest.mark.parametrize("named_by", ["option", "AWS_PROFILE"])
def test_servers_named_by_profiles_get_stores_and_cache_entries_of_their_own(  # type: ignore[no-untyped-def]
    s3, s3_uploaded, moto_endpoint, monkeypatch, tmp_path, named_by
) -> None:
    """An endpoint set in the AWS config file (a profile's ``endpoint_url``)
    is the store's, as one given as an option: two profiles naming two
    servers get two stores, whose disk-cache entries stay apart. Before, both
    were ``s3://``: the second server's reads were answered from the first
    one's cached blocks without a request (another server's bytes under the
    same bucket and key), and one process switching ``AWS_PROFILE`` kept the
    first profile's store."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    other = LoopbackServer(proxy_handler(moto_endpoint)).start()
    try:
        config = tmp_path / "config"
        config.write_text(
            "".join(
                f"[profile {name}]\nendpoint_url = {server.url}\nregion = us-east-1\n"
                for name, server in (("first", s3), ("second", other))
            )
        )
        monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
        options = {"key": "test-key-id", "secret": SECRET, "cache_dir": str(tmp_path / "cache")}
        url = f"s3://{s3_uploaded}/random.bin"

        def store_of(profile: str) -> S3Store:
            if named_by == "option":
                return open_url(url, profile=profile, **options)[0]
            monkeypatch.setenv("AWS_PROFILE", profile)
            return open_url(url, **options)[0]

        first, second = store_of("first"), store_of("second")
        assert second is not first
        assert (first.url, second.url) == (f"s3:// at {s3.url}", f"s3:// at {other.url}")
        assert first.cache_namespace() != second.cache_namespace()
        path = f"{s3_uploaded}/random.bin"
        s3.reset()
        expected = first.reader(path).read_sync(0, 10)
        run_sync(first.drain())  # its disk writes done
        second.clear_memory_cache()
        assert second.reader(path).read_sync(0, 10) == expected
        assert len(s3.ranged()) == len(other.ranged()) == 1
        assert store_of("first") is first
    finally:
        other.stop()


def test_stores_answer_for_themselves(http, make_store, storage_root: Path) -> None:  # type: ignore[no-untyped-def]
    """What the pipeline asks of any store: is it remote, wait for its disk
    writes, drop its memory cache (no-ops for a store without a cache)."""
    from streamer.storage.loop import run_sync

    local = LocalStore()
    assert local.is_remote is False
    local.clear_memory_cache()
    assert run_sync(local.drain()) is None
    store = make_store("http")
    assert store.is_remote and make_store("memory").is_remote
    reader = store.reader(f"{http.url}/random.bin")
    data = (storage_root / "random.bin").read_bytes()
    assert bytes(reader.read_sync(0, 10)) == data[:10]
    assert bytes(reader.read_sync(0, 10)) == data[:10]
    assert (store.stats.hits, store.stats.misses) == (1, 1)
    store.clear_memory_cache()
    assert bytes(reader.read_sync(0, 10)) == data[:10]
    assert (store.stats.hits, store.stats.misses) == (1, 2)
    run_sync(store.drain())


def test_trio_callers_share_the_store_loop(http, make_store, storage_root: Path) -> None:  # type: ignore[no-untyped-def]
    data = (storage_root / "random.bin").read_bytes()
    reader = make_store("http").reader(f"{http.url}/random.bin")

    async def main() -> list[bytes]:
        results: list[bytes] = []
        async with anyio.create_task_group() as group:
            for offset in (0, 400_000):
                group.start_soon(lambda o=offset: _append(results, reader, o))
        return sorted(results)

    assert anyio.run(main, backend="trio") == sorted([data[:100], data[400_000:400_100]])


async def _append(results: list[bytes], reader, offset: int) -> None:  # type: ignore[no-untyped-def]
    results.append(bytes(await reader.read(offset, 100)))


def _read_in_worker(reader) -> bytes:  # type: ignore[no-untyped-def]
    return bytes(reader.read_sync(123, 50))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_readers_work_in_worker_processes(http, storage_root: Path, method: str) -> None:  # type: ignore[no-untyped-def]
    data = (storage_root / "random.bin").read_bytes()
    store, path = open_url(f"{http.url}/random.bin")
    reader = store.reader(path)
    assert bytes(reader.read_sync(0, 10)) == data[:10]  # the parent's loop thread is running
    assert pickle.loads(pickle.dumps(reader)).store is store  # same options -> same store
    with multiprocessing.get_context(method).Pool(1) as pool:
        assert pool.apply(_read_in_worker, (reader,)) == data[123:173]
    # The parent's pooled connections still work (a forked child must not
    # unregister them from the epoll instance it shares).
    fresh = store.reader(path)
    started = time.monotonic()
    assert fresh.size_sync() == len(data) and time.monotonic() - started < 5


def test_an_http_dataset_behind_a_token_query_lists_with_the_token_intact(  # type: ignore[no-untyped-def]
    storage_root: Path, make_store
) -> None:
    """A server that wants ``?token=...`` on every request (CDNs, signed
    dataset links): the listing of a directory must carry the token as
    given, not with the directory's slash appended to it."""
    files = file_handler(storage_root)

    async def handle(request):  # type: ignore[no-untyped-def]
        if request.query.get("token") != SECRET:
            return 403, {}, b"bad token"
        return await files(request)

    server = LoopbackServer(handle).start()
    try:
        store = make_store("http")
        names = [entry.name for entry in store.list_sync(f"{server.url}/packed?token={SECRET}")]
        assert "audio" in names
        assert server.requests[0].path == f"/packed/?token={SECRET}"
    finally:
        server.stop()


#: Shard names that need quoting in a URL: each must list and read as itself.
ODD_NAMES = ("a b.bin", "plus+sign.bin", "q?x=1.bin", "hash#1.bin", "pct%2Fx.bin", "café.bin")


def index_server(root: Path) -> LoopbackServer:
    """Files under ``root`` with index pages linking each entry by its
    absolute, percent-encoded path (as Jetty and IIS write them; Python's
    ``http.server`` and nginx link relative ones)."""

    async def handle(request):  # type: ignore[no-untyped-def]
        relative = urllib.parse.unquote(request.raw_path.partition("?")[0]).strip("/")
        path = root / relative
        if path.is_dir():
            folder = urllib.parse.quote(f"/{relative}/")
            links = (
                f'<a href="{folder}{urllib.parse.quote(p.name)}">x</a>' for p in path.iterdir()
            )
            return 200, {"Content-Type": "text/html"}, "".join(links).encode()
        if not path.is_file():
            return 404, {}, b""
        data = path.read_bytes()
        first, _, last = request.headers["Range"].removeprefix("bytes=").partition("-")
        end = min(int(last) + 1, len(data))
        return (
            206,
            {"Content-Range": f"bytes {first}-{end - 1}/{len(data)}"},
            data[int(first) : end],
        )

    return LoopbackServer(handle).start()


@pytest.mark.parametrize("typed", [str, urllib.parse.quote])
def test_a_directory_url_lists_its_absolute_links_however_it_is_quoted(  # type: ignore[no-untyped-def]
    typed, tmp_path
) -> None:
    """A directory whose name needs quoting, given as typed (``my data+ü #2``)
    or quoted (``my%20data%2B%C3%BC%20%232``): the links of its index page
    are its entries either way, and each reads by ``join`` (none was listed
    when the page's absolute links were quoted and the URL given was not;
    and a typed ``#`` started a fragment, which is never sent: the
    directory ``my data+ü `` was read instead, without a word)."""
    folder = tmp_path / "my data+ü #2"
    folder.mkdir()
    (tmp_path / "my data+ü ").mkdir()
    (tmp_path / "my data+ü " / "decoy.bin").write_bytes(b"decoy")
    for name in ODD_NAMES:
        (folder / name).write_bytes(name.encode())
    server = index_server(tmp_path)
    try:
        store, root = open_url(f"{server.url}/{typed(folder.name)}")
        assert sorted(entry.name for entry in store.list_sync(root)) == sorted(ODD_NAMES)
        for name in ODD_NAMES:
            assert bytes(store.reader(store.join(root, name)).read_sync(0, 3)) == name.encode()[:3]
    finally:
        server.stop()


def test_an_http_store_goes_through_the_proxy_the_environment_names(  # type: ignore[no-untyped-def]
    storage_root: Path, data, make_store, monkeypatch
) -> None:
    """``HTTP_PROXY`` / ``HTTPS_PROXY`` (and ``NO_PROXY``) apply to HTTP stores
    as to S3 endpoints: a host reachable only through the proxy (here one
    that does not resolve) is read through it, listings too; without it
    every request failed to connect and was retried for the whole budget."""
    proxy = LoopbackServer(file_handler(storage_root)).start()  # serves any host's paths
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        store = make_store("http", give_up_after=5)
        reader = store.reader("http://dataset.invalid/random.bin")
        assert bytes(reader.read_sync(1000, 100)) == data[1000:1100]
        assert "random.bin" in [e.name for e in store.list_sync("http://dataset.invalid/")]
        assert {r.headers["Host"] for r in proxy.requests} == {"dataset.invalid"}
    finally:
        proxy.stop()


def test_a_redirect_goes_through_the_proxy_of_the_host_it_names(  # type: ignore[no-untyped-def]
    storage_root: Path, data, make_store, monkeypatch
) -> None:
    """An HTTP front the proxy settings exempt (``NO_PROXY``) that redirects
    to a host only the proxy reaches (object storage outside): each hop
    goes the way the environment names for its own host (the redirect
    went direct, as its front did, and failed for the whole budget)."""
    proxy = LoopbackServer(file_handler(storage_root)).start()

    async def redirect(request):  # type: ignore[no-untyped-def]
        return 307, {"Location": f"http://dataset.invalid{request.path}"}, b""

    front = LoopbackServer(redirect).start()
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        reader = make_store("http", give_up_after=5).reader(f"{front.url}/random.bin")
        assert bytes(reader.read_sync(1000, 100)) == data[1000:1100]
        assert {r.headers["Host"] for r in proxy.requests} == {"dataset.invalid"}
    finally:
        front.stop()
        proxy.stop()


def test_a_file_url_is_percent_decoded_and_a_plain_path_is_not(
    packed: Path, tmp_path: Path
) -> None:
    """``file:///data/my%20set`` is ``/data/my set`` (RFC 8089): it was
    taken as the folder ``my%20set`` and failed to list. A plain path is
    the path as written: a folder named ``100%25`` stays ``100%25``."""
    spaced = tmp_path / "my set"
    literal = tmp_path / "100%25 done"
    shutil.copytree(packed, spaced)
    shutil.copytree(packed, literal)
    store = open_url(tmp_path)[0]
    assert open_url(f"file://{tmp_path}/my%20set") == (store, str(spaced))
    assert open_url(f"file://localhost{tmp_path}/%6Dy%20set") == (store, str(spaced))
    assert open_url(f"file://{tmp_path}/100%2525%20done") == (store, str(literal))
    assert open_url(str(literal)) == (store, str(literal))  # a path: no decoding
    assert open_url(f"file://{tmp_path}/caf%C3%A9")[1] == f"{tmp_path}/café"
    assert (
        open_url(f"file://{tmp_path}/%FF")[1].encode("utf-8", "surrogateescape").endswith(b"/\xff")
    )
    with pytest.raises(StorageError, match="cannot hold %00"):
        open_url(f"file://{tmp_path}/a%00b")
    keys = list(open_dataset(f"file://{tmp_path}/my%20set").keys())
    assert keys == list(open_dataset(literal).keys()) == list(open_dataset(packed).keys())
    assert main(["inspect", f"file://{tmp_path}/my%20set"]) == 0
