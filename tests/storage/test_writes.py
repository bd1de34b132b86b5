"""The write path: whole objects stored atomically, through the same retries,
stats and cache as reads; refused clearly where a store cannot write."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers import BUCKET, HTTP_KINDS, S3_KINDS, SECRET, everything_said, servers

from streamer.errors import ReadOnlyURLError, StorageError
from streamer.storage import LocalStore
from streamer.storage.loop import run_sync
from testkit.servers import LoopbackServer, file_handler, s3_client


def test_local_staging_is_renamed_into_place_or_dropped(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store, target = LocalStore(), str(tmp_path / "new" / "shard.wsds")
    with store.staged_sync(target) as temp:
        assert os.path.dirname(temp) == os.path.dirname(target)  # same file system: rename
        with open(temp, "wb") as file:
            file.write(b"first")
    with pytest.raises(RuntimeError), store.staged_sync(target) as temp:
        with open(temp, "wb") as file:
            file.write(b"half of the sec")
        raise RuntimeError("interrupted")
    assert (tmp_path / "new" / "shard.wsds").read_bytes() == b"first"
    assert os.listdir(tmp_path / "new") == ["shard.wsds"]  # no temporary left behind
    store.put_sync(target, b"second")
    assert (tmp_path / "new" / "shard.wsds").read_bytes() == b"second"


def test_s3_put_retries_counts_and_interrupts_cleanly(s3, s3_uploaded, make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store("s3", s3.url, backoff=0.01)
    path = f"{s3_uploaded}/writes-{uuid.uuid4().hex[:8]}/object.bin"
    s3.faults.only_ranged, s3.faults.errors = False, 2
    store.put_sync(path, b"x" * 1000)
    assert [r.method for r in s3.requests] == ["PUT"] * 3
    assert (store.stats.retries, store.stats.requests, store.stats.bytes_stored) == (2, 3, 1000)
    s3.reset()
    with pytest.raises(RuntimeError), store.staged_sync(path) as temp:
        with open(temp, "wb") as file:
            file.write(b"partial")
        raise RuntimeError("interrupted")
    assert s3.requests == []  # nothing was stored
    assert not os.path.exists(temp)
    assert bytes(store.reader(path).read_sync(0, 1000)) == b"x" * 1000


def test_a_rewritten_object_is_never_read_stale(s3, s3_uploaded, make_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Same path, same size, new bytes: neither the memory nor the disk tier
    (shared with another store, as by another process) serves the old ones."""
    cache = {"cache_dir": str(tmp_path / "cache"), "block_size": 4096}
    writer, other = make_store("s3", s3.url, **cache), make_store("s3", s3.url, **cache)
    path = f"{s3_uploaded}/writes-{uuid.uuid4().hex[:8]}/index.wsds"
    writer.put_sync(path, b"a" * 10_000)
    for store in (writer, other):
        assert bytes(store.reader(path).read_sync(0, 10_000)) == b"a" * 10_000
    writer.put_sync(path, b"b" * 10_000)
    assert bytes(writer.reader(path).read_sync(0, 10_000)) == b"b" * 10_000
    assert bytes(make_store("s3", s3.url, **cache).reader(path).read_sync(0, 10_000)) == (
        b"b" * 10_000
    )


def test_http_stores_refuse_writes(http, make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store("http")
    for write in (
        lambda: store.put_sync(f"{http.url}/packed/x.wsds", b"data"),
        lambda: store.staged_sync(f"{http.url}/packed/x.wsds").__enter__(),
    ):
        with pytest.raises(
            ReadOnlyURLError,
            match=r"HTTP stores are read-only \(pack into a local or S3 OUT; index a local or S3",
        ):
            write()
    assert http.requests == []


def test_failed_puts_keep_the_secret(s3, make_store, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    store = make_store("s3", s3.url, attempts=2, backoff=0.01)
    with pytest.raises(StorageError) as missing:
        store.put_sync("no-such-bucket/key", b"data")
    s3.faults.only_ranged, s3.faults.errors = False, 10
    with pytest.raises(StorageError) as exhausted:
        store.put_sync(f"{BUCKET}/key", b"data")
    said = everything_said(caplog, store, errors=[missing.value, exhausted.value])
    assert "PUT s3://data/key (4 bytes): 503" in said and "no-such-bucket" in said
    assert SECRET not in said


def _wait_for(condition, what: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def test_a_read_of_the_old_version_finishing_after_a_rewrite_is_not_kept(  # type: ignore[no-untyped-def]
    s3, s3_uploaded, make_store, tmp_path
) -> None:
    """A GET answered with the old bytes but delivered after the rewrite (held by
    a slow server) reaches its reader, and neither tier keeps it."""
    cache = {"cache_dir": str(tmp_path / "cache"), "block_size": 4096, "hedge_after": None}
    store = make_store("s3", s3.url, **cache)
    path = f"{s3_uploaded}/writes-{uuid.uuid4().hex[:8]}/index.wsds"
    store.put_sync(path, b"a" * 10_000)
    s3.faults.stalls, s3.faults.stall_seconds = 1, 0.5
    old: list[bytes] = []
    reading = threading.Thread(
        target=lambda: old.append(bytes(store.reader(path, 10_000).read_sync(0, 10_000)))
    )
    reading.start()
    # The proxy has the old answer and holds half of it back.
    _wait_for(lambda: s3._stalled, "the GET of the old version to stall")
    store.put_sync(path, b"b" * 10_000)
    reading.join()
    assert old == [b"a" * 10_000]  # read before the rewrite finished: the old bytes
    run_sync(store.drain())
    assert bytes(store.reader(path, 10_000).read_sync(0, 10_000)) == b"b" * 10_000
    fresh = make_store("s3", s3.url, **cache)
    assert bytes(fresh.reader(path, 10_000).read_sync(0, 10_000)) == b"b" * 10_000


def test_a_disk_write_of_the_old_version_landing_after_a_rewrite_is_not_served(  # type: ignore[no-untyped-def]
    s3, s3_uploaded, make_store, tmp_path, monkeypatch
) -> None:
    """Another store (as another process) caches the old blocks on the shared
    disk tier, and its writes land only after the rewrite: never served."""
    cache = {"cache_dir": str(tmp_path / "cache"), "block_size": 4096}
    writer, other = make_store("s3", s3.url, **cache), make_store("s3", s3.url, **cache)
    path = f"{s3_uploaded}/writes-{uuid.uuid4().hex[:8]}/index.wsds"
    writer.put_sync(path, b"a" * 10_000)
    disk = other._state.get().cache.disk
    held: list[tuple[str, bytes]] = []
    monkeypatch.setattr(disk, "put", lambda key, data: held.append((key, bytes(data))))
    assert bytes(other.reader(path, 10_000).read_sync(0, 10_000)) == b"a" * 10_000
    run_sync(other.drain())
    assert held  # the old blocks, on their way to the disk tier
    writer.put_sync(path, b"b" * 10_000)
    monkeypatch.undo()
    for key, data in held:  # the writes land late, after the rewrite
        disk.put(key, data)
    fresh = make_store("s3", s3.url, **cache)
    assert bytes(fresh.reader(path, 10_000).read_sync(0, 10_000)) == b"b" * 10_000
    assert bytes(writer.reader(path, 10_000).read_sync(0, 10_000)) == b"b" * 10_000


def test_a_rewrite_with_a_new_size_is_not_read_at_the_old_one(  # type: ignore[no-untyped-def]
    s3, s3_uploaded, make_store, tmp_path
) -> None:
    """The object's size, remembered by the disk tier, is forgotten with its blocks."""
    store = make_store("s3", s3.url, cache_dir=str(tmp_path / "cache"), block_size=4096)
    path = f"{s3_uploaded}/writes-{uuid.uuid4().hex[:8]}/index.wsds"
    store.put_sync(path, b"a" * 10_000)
    assert bytes(store.reader(path).read_sync(0, 10_000)) == b"a" * 10_000
    assert store.reader(path).read_tail_sync(100)[0] == 9_900
    store.put_sync(path, b"b" * 12_000)
    assert store.reader(path).size_sync() == 12_000
    assert bytes(store.reader(path).read_sync(0, 12_000)) == b"b" * 12_000
    start, tail = store.reader(path).read_tail_sync(100)
    assert (start, bytes(tail)) == (11_900, b"b" * 100)


# -- objects replaced on the server behind the store's back -------------------------

#: S3 servers that send no ETag (JuiceFS's gateway keeps none by default).
WHOLE_SECONDS = {"juicefs"}


@pytest.fixture
def replaceable(tmp_path, s3_servers, http_published, s3_uploaded, make_store):  # type: ignore[no-untyped-def]
    """``replaceable(kind, **options)``: (store, path, put) of a fresh object on
    a server of ``kind``; ``put(data)`` replaces it there without the store
    knowing (boto3 straight to the S3 server, a second after the last time
    on a server without ETags; the file an HTTP file server serves, its
    modification time two seconds later each time: nginx's ETag and every
    server's Last-Modified have whole seconds)."""
    published, http_servers = http_published

    def make(kind: str, **options):  # type: ignore[no-untyped-def]
        if kind in HTTP_KINDS:
            file = published / tmp_path.name / "object.bin"
            file.parent.mkdir(exist_ok=True)
            url = f"{http_servers(kind).url}/{tmp_path.name}/object.bin"
            return make_store("http", **options), url, functools.partial(_replace_file, file)
        server = s3_servers(kind)
        key = f"replaced-{uuid.uuid4().hex[:8]}/object.bin"
        client = s3_client(server.handler.upstream, "test-key-id", SECRET)
        last = [0.0]

        def put(data: bytes) -> None:
            if kind in WHOLE_SECONDS:  # its one version tag, Last-Modified, has whole seconds
                time.sleep(max(0.0, last[0] + 1.1 - time.monotonic()))
            client.put_object(Bucket=BUCKET, Key=key, Body=data)
            last[0] = time.monotonic()

        return make_store("s3", server.url, **options), f"{s3_uploaded}/{key}", put

    return make


def _replace_file(file: Path, data: bytes) -> None:
    """Write ``file`` anew, dated two seconds after its last version."""
    before = file.stat().st_mtime_ns if file.exists() else time.time_ns()
    file.write_bytes(data)
    later = before + 2_000_000_000
    os.utime(file, ns=(later, later))


@pytest.mark.parametrize("kind", servers(*S3_KINDS, *HTTP_KINDS))
def test_an_object_replaced_on_the_server_is_never_mixed_with_the_old(  # type: ignore[no-untyped-def]
    replaceable, kind
) -> None:
    """Same size, other bytes: the answers' ETag differs from the first one's,
    so the read fails instead of returning new bytes at the old offsets."""
    store, path, put = replaceable(kind, block_size=4096)
    put(b"a" * 40_000)
    reader = store.reader(path)
    assert reader.read_tail_sync(100)[0] == 39_900  # what a shard's opening reads
    assert bytes(reader.read_sync(0, 10)) == b"a" * 10
    put(b"b" * 40_000)
    with pytest.raises(StorageError, match=r"changed on the server while it was being read"):
        reader.read_sync(20_000, 10)
    assert bytes(reader.read_sync(0, 10)) == b"a" * 10  # cached: the old version, whole


def test_a_changed_size_is_caught_without_versions(make_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A server that sends neither ETag nor Last-Modified: a different
    Content-Range total still shows the object changed."""
    files = file_handler(tmp_path)

    async def without_versions(request):  # type: ignore[no-untyped-def]
        status, headers, body = await files(request)
        return status, {k: v for k, v in headers.items() if k != "ETag"}, body

    server = LoopbackServer(without_versions).start()
    try:
        (tmp_path / "object.bin").write_bytes(b"a" * 40_000)
        reader = make_store("http", block_size=4096).reader(f"{server.url}/object.bin")
        assert bytes(reader.read_sync(0, 10)) == b"a" * 10
        (tmp_path / "object.bin").write_bytes(b"b" * 50_000)
        with pytest.raises(StorageError, match=r"\(40000 bytes, now 50000\)"):
            reader.read_sync(20_000, 10)
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["moto", "http"])
def test_a_disk_tier_of_an_earlier_run_never_mixes_versions(  # type: ignore[no-untyped-def]
    replaceable, kind, tmp_path
) -> None:
    """The object is replaced between two runs sharing a cache directory: the
    second run's cached blocks and size are of the old version, so a block it
    must fetch (of the new one) fails, naming the directory to clear."""
    cache = {"block_size": 4096, "cache_dir": str(tmp_path / "cache")}
    first, path, put = replaceable(kind, **cache)
    put(b"a" * 40_000)
    assert bytes(first.reader(path).read_sync(0, 10)) == b"a" * 10
    run_sync(first.drain())
    put(b"b" * 40_000)
    second = type(first)(first.scheme, first._options)  # as a new process would build it
    reader = second.reader(path)
    assert bytes(reader.read_sync(0, 10)) == b"a" * 10  # from the disk tier
    with pytest.raises(StorageError, match=r"changed on the server.*clear its cache directory"):
        reader.read_sync(20_000, 10)
    run_sync(second._close_on_loop())


@pytest.mark.parametrize("kind", servers(*S3_KINDS, *HTTP_KINDS))
def test_an_object_that_shrank_on_the_server_fails_at_once(replaceable, kind) -> None:  # type: ignore[no-untyped-def]
    """A block across the new end comes back short: that is the object's new
    size, not a transient short body to retry for the whole time budget."""
    store, path, put = replaceable(kind, block_size=4096, give_up_after=30, backoff=0.01)
    put(b"a" * 40_000)
    reader = store.reader(path)
    assert bytes(reader.read_sync(0, 10)) == b"a" * 10
    put(b"b" * 30_000)
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"changed on the server .*\(40000 bytes, now 30000\)"):
        reader.read_sync(29_000, 10)  # the block 28672-32767: 1328 bytes now
    with pytest.raises(StorageError) as past_the_end:
        reader.read_sync(35_000, 10)  # past the new end: 416
    # The file server names the size in its 416, not every S3 server does (then: not retried).
    said = str(past_the_end.value)
    assert "changed on the server" in said or (kind != "http" and "not satisfiable" in said)
    assert time.monotonic() - started < 5 and store.stats.retries == 0


@pytest.mark.parametrize("kind", ["moto", "http"])
def test_eviction_keeps_an_objects_version_tag_while_its_stamp_is_used(  # type: ignore[no-untyped-def]
    replaceable, kind, tmp_path
) -> None:
    """A warmed directory keeps serving a run from disk (its object's stamp is
    used, its version tag, read only when a block is fetched, is not); the
    size limit evicts the oldest entries. Had the tag gone and the stamp
    stayed, a later run fetching an evicted block would take the replaced
    object's tag for the first one and mix the two versions."""
    from streamer.storage.disk import DiskCache

    directory = tmp_path / "cache"
    cache = {"block_size": 4096, "cache_dir": str(directory)}
    warm, path, put = replaceable(kind, **cache)
    put(b"a" * 40_000)
    reader = warm.reader(path)
    assert bytes(reader.read_sync(0, 10)) + bytes(reader.read_sync(20_000, 10)) == b"a" * 20
    run_sync(warm.drain())
    for entry in directory.rglob("*.blk"):  # warmed long ago
        os.utime(entry, (1000, 1000))
    put(b"b" * 40_000)  # replaced on the server: same size, other bytes
    train = type(warm)(warm.scheme, warm._options)  # a run served by the disk tier
    assert bytes(train.reader(path).read_sync(0, 10)) == b"a" * 10
    assert train.stats.requests == 0
    used = sum(p.stat().st_size for p in directory.rglob("*.blk") if p.stat().st_mtime > 1000)
    # Down to what the run used and an empty entry (36 bytes): the rest is evicted.
    DiskCache(directory, max_bytes=int((used + 46) / 0.9)).put("filler", b"")
    later = type(warm)(warm.scheme, {**warm._options, "max_concurrency": 7})
    with pytest.raises(StorageError, match=r"changed on the server while it was being read"):
        later.reader(path).read_sync(20_000, 10)
    for store in (train, later):
        run_sync(store._close_on_loop())
