"""The disk tier: shared by processes, bounded, self-repairing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from streamer.errors import StorageError
from streamer.storage.base import NotFound
from streamer.storage.disk import DiskCache
from streamer.storage.loop import run_sync

BLOCK = 64 * 1024

#: A child process: read ranges of random.bin over HTTP through a disk tier, print stats.
CHILD = """
import hashlib, json, sys
from streamer.storage.http import HTTPStore
url, cache_dir, ranges = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
BLOCK = int(sys.argv[4])
store = HTTPStore("http", {"block_size": BLOCK, "cache_dir": cache_dir})
reader = store.reader(url, size=700_001)
digest = [hashlib.sha256(v).hexdigest() for v in reader.read_many_sync(ranges)]
import asyncio
asyncio.run(store.aclose())  # waits for pending disk writes
print(json.dumps({"stats": store.stats.snapshot(), "digest": digest}))
"""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_child(url: str, cache_dir: Path, ranges: list[tuple[int, int]]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", CHILD, url, str(cache_dir), json.dumps(ranges), str(BLOCK)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)


def result(process: subprocess.Popen) -> dict:
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    return json.loads(out)


def test_two_processes_share_the_disk_tier(http, tmp_path: Path, storage_root: Path) -> None:  # type: ignore[no-untyped-def]
    data = (storage_root / "random.bin").read_bytes()
    url = f"{http.url}/random.bin"
    ranges = [(0, 100), (5 * BLOCK + 7, 2 * BLOCK), (700_000, 1)]
    expected = [sha256(data[o : o + n]) for o, n in ranges]
    # Two writers at once, racing on the same entries.
    first, second = (run_child(url, tmp_path, ranges) for _ in range(2))
    for outcome in (result(first), result(second)):
        assert outcome["digest"] == expected
    fetched = len(http.ranged())
    assert 1 <= fetched <= 2  # one request per process at most (coalesced)
    # A third process finds every block on disk and asks the server nothing.
    outcome = result(run_child(url, tmp_path, ranges))
    assert outcome["digest"] == expected
    assert outcome["stats"]["disk_hits"] == 5 and outcome["stats"]["requests"] == 0
    assert len(http.ranged()) == fetched
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


def test_corrupt_entries_are_dropped_and_refetched(
    http, tmp_path: Path, storage_root: Path
) -> None:  # type: ignore[no-untyped-def]
    data = (storage_root / "random.bin").read_bytes()
    url = f"{http.url}/random.bin"
    result(run_child(url, tmp_path, [(0, 10)]))
    *small, entry = sorted(tmp_path.rglob("*.blk"), key=lambda path: path.stat().st_size)
    # the object's stamp and version tag, then its block
    assert len(small) == 2 and all(p.stat().st_size < 100 < entry.stat().st_size for p in small)
    raw = bytearray(entry.read_bytes())
    raw[100] ^= 0xFF  # bit rot
    entry.write_bytes(bytes(raw))
    outcome = result(run_child(url, tmp_path, [(0, 10)]))
    assert outcome["digest"] == [sha256(data[:10])]
    assert outcome["stats"]["disk_hits"] == 0 and outcome["stats"]["requests"] == 1
    entry.write_bytes(bytes(raw[:50]))  # torn write
    outcome = result(run_child(url, tmp_path, [(0, 10)]))
    assert outcome["stats"]["requests"] == 1
    assert result(run_child(url, tmp_path, [(0, 10)]))["stats"]["disk_hits"] == 1  # repaired


def test_size_limit_evicts_least_recently_used(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_bytes=5 * 1000 + 200)
    for i in range(5):
        cache.put(f"block{i}", bytes([i]) * 1000)
        os.utime(cache.path(f"block{i}"), (i, i))  # distinct ages, oldest first
    assert cache.get("block0", 1000) is not None  # a hit makes block0 the newest
    cache.put("block5", b"x" * 1000)
    assert cache.usage() <= 5 * 1000 + 200
    assert cache.get("block0", 1000) == b"\0" * 1000
    assert cache.get("block1", 1000) is None  # the least recently used went first
    assert cache.get("block5", 1000) == b"x" * 1000


def test_concurrent_readers_behind_a_disk_lookup_join_one_fetch(
    http, tmp_path: Path, storage_root: Path, make_store
) -> None:  # type: ignore[no-untyped-def]
    """A reader that looked on disk (a thread hop) while another started fetching
    the same blocks joins that fetch (or takes its blocks from memory, when it
    ended meanwhile) instead of losing the blocks or asking for them again."""
    import asyncio

    store = make_store("http", block_size=BLOCK, cache_dir=str(tmp_path / "cache"))
    reader = store.reader(f"{http.url}/random.bin", size=700_001)
    data = (storage_root / "random.bin").read_bytes()
    ranges = [(start, 3 * BLOCK) for start in range(0, 8 * BLOCK, BLOCK // 2)]

    async def together() -> list:
        return await asyncio.gather(*(reader.read_many([r]) for r in ranges))

    answers = run_sync(together())
    assert [bytes(a[0]) for a in answers] == [data[s : s + n] for s, n in ranges]
    blocks = {b for s, n in ranges for b in range(s // BLOCK, (s + n - 1) // BLOCK + 1)}
    assert store.stats.bytes_fetched == len(data[: (max(blocks) + 1) * BLOCK])


def test_blocks_of_a_tail_read_are_kept_on_disk(
    http, tmp_path: Path, storage_root: Path, make_store
) -> None:  # type: ignore[no-untyped-def]
    """The whole blocks a tail read brings (a shard's last, partial block: a
    dataset without a manifest reads it only so) are kept in the disk tier,
    not in memory alone: a warmup leaves them behind for a later run."""
    data = (storage_root / "random.bin").read_bytes()
    url = f"{http.url}/random.bin"
    first = make_store("http", block_size=BLOCK, cache_dir=str(tmp_path))
    start, body = first.reader(url).read_tail_sync(BLOCK)
    assert bytes(body) == data[start:] and start < len(data) // BLOCK * BLOCK
    run_sync(first.drain())
    later = make_store("http", block_size=BLOCK, cache_dir=str(tmp_path))
    http.reset()
    reader = later.reader(url, size=len(data))
    assert bytes(reader.read_sync(len(data) - 100, 100)) == data[-100:]
    assert http.ranged() == [] and later.stats.disk_hits == 1


def test_an_entry_that_is_no_regular_file_is_a_miss(tmp_path: Path) -> None:
    """A FIFO at an entry's path (opened plainly, it waits for a writer
    forever, in a thread nothing can cancel) is dropped as a miss."""
    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    cache.put("block", b"x" * 10)
    path = cache.path("block")
    os.remove(path)
    os.mkfifo(path)
    got: list[bytes | None] = []
    reader = threading.Thread(target=lambda: got.append(cache.get("block", 10)), daemon=True)
    reader.start()
    reader.join(10)
    hung = reader.is_alive()
    if hung:  # let it go: a writer opens the FIFO
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert not hung and got == [None] and not os.path.exists(path)
    cache.put("block", b"y" * 10)
    assert cache.get("block", 10) == b"y" * 10


def test_an_entry_under_another_entrys_name_is_a_miss(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """An entry's header names its key: valid entries swapped between names
    (length and CRC intact) are misses, not each other's bytes; an entry of
    the older layout, without the key, is a quiet miss and is replaced."""
    import struct
    import zlib

    cache = DiskCache(tmp_path, max_bytes=1 << 20)
    cache.put("one", b"1" * 10)
    cache.put("two", b"2" * 10)
    one, two = Path(cache.path("one")), Path(cache.path("two"))
    first, second = one.read_bytes(), two.read_bytes()
    one.write_bytes(second)
    two.write_bytes(first)
    assert cache.get("one", 10) is None and cache.get("two", 10) is None
    assert not one.exists() and not two.exists()
    old = struct.pack("<8sQI", b"STRMBLK1", 5, zlib.crc32(b"stamp")) + b"stamp"
    Path(cache.path("stamp")).parent.mkdir(exist_ok=True)
    Path(cache.path("stamp")).write_bytes(old)
    caplog.clear()
    assert cache.get_or_add("stamp", b"new") == b"new" and cache.get("stamp") == b"new"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


@pytest.mark.parametrize("loss", ["deleted", "bit rot"])
def test_blocks_kept_under_lost_version_tags_are_not_served(
    tmp_path: Path, make_store, loss: str
) -> None:  # type: ignore[no-untyped-def]
    """An object's first version tag lost from the directory, then the object
    replaced by one of its size: a later store reads the new one whole. It
    took the new object's tag for the first one and served the old blocks
    kept beside the new ones fetched, without a word."""
    from testkit.servers import LoopbackServer, file_handler

    root, cache_dir = tmp_path / "served", tmp_path / "cache"
    root.mkdir()
    old = np.random.default_rng(1).bytes(4 * BLOCK)
    new = np.random.default_rng(2).bytes(4 * BLOCK)
    (root / "object").write_bytes(old)
    server = LoopbackServer(file_handler(root)).start()
    try:
        url = f"{server.url}/object"
        first = make_store("http", block_size=BLOCK, cache_dir=str(cache_dir))
        assert bytes(first.reader(url).read_sync(0, 2 * BLOCK)) == old[: 2 * BLOCK]
        run_sync(first.drain())
        disk = DiskCache(cache_dir, max_bytes=1 << 30)
        cache = first._state.peek().cache
        for stamp, kind in first.known_versions(url):
            entry = Path(disk.path(cache.tag_key(url, stamp, kind)))
            if loss == "deleted":
                entry.unlink()
            else:
                entry.write_bytes(entry.read_bytes()[:-1] + b"?")
        (root / "object").write_bytes(new)
        os.utime(root / "object", ns=(1, 1))
        later = make_store("http", block_size=BLOCK, cache_dir=str(cache_dir))
        assert bytes(later.reader(url).read_sync(0, 4 * BLOCK)) == new
    finally:
        server.stop()


def test_get_or_add_keeps_the_first_writers_entry(tmp_path: Path) -> None:
    """Stores sharing a directory agree on one entry (an object's stamp): the
    first one stored wins, and a corrupt one is replaced."""
    first, second = DiskCache(tmp_path, max_bytes=1 << 20), DiskCache(tmp_path, max_bytes=1 << 20)
    assert first.get_or_add("stamp", b"one") == b"one"
    assert second.get_or_add("stamp", b"two") == b"one"
    assert first.get("stamp") == b"one"
    Path(first.path("stamp")).write_bytes(b"torn")
    assert second.get_or_add("stamp", b"two") == b"two"
    assert first.get_or_add("stamp", b"three") == b"two"
    assert [name for _, _, names in os.walk(tmp_path) for name in names] == [
        os.path.basename(first.path("stamp"))
    ]  # no temporary file left behind


def test_a_disk_that_keeps_failing_is_said_once_a_minute(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """Every write fails (the directory is gone, a file in its place): one
    warning for a run's worth of blocks, not one per block; the failure is
    still there for ``problem`` (a warmup fails on it)."""
    cache = DiskCache(tmp_path / "cache", max_bytes=1 << 20)
    (tmp_path / "cache").rmdir()
    (tmp_path / "cache").write_bytes(b"")  # every fan-out directory now fails ENOTDIR
    with caplog.at_level("WARNING", logger="streamer.storage"):
        for block in range(200):
            cache.put(f"block {block}", b"x" * 100)
    said = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(said) == 1 and "Not a directory" in said[0], said
    assert "cannot write entries (Not a directory)" in (cache.problem(0.0) or "")


def test_fsspec_stores_of_other_options_do_not_share_entries(tmp_path: Path) -> None:
    """Two zip archives (``fo=``) holding a member of the same name, one cache
    directory: each store reads its own archive's bytes, not the other's
    entries (the disk tier once keyed fsspec objects by path alone)."""
    import zipfile

    from streamer.storage.fsspec import FsspecStore
    from streamer.storage.loop import run_sync

    cache_dir = tmp_path / "cache"
    for name, byte in (("a", b"A"), ("b", b"B")):
        with zipfile.ZipFile(tmp_path / f"{name}.zip", "w") as archive:
            archive.writestr("x.bin", byte * 3 * BLOCK)
        options = {"fo": str(tmp_path / f"{name}.zip"), "cache_dir": str(cache_dir)}
        secret = {"target_options": {"password": "first-secret"}}
        store = FsspecStore("zip", {**options, **secret, "block_size": BLOCK})
        assert bytes(store.reader("x.bin").read_sync(BLOCK, 4)) == byte * 4
        run_sync(store.drain())
        # Another store of the same archive finds the entries, whatever its
        # credentials (a rotated password reads the same files).
        secret = {"target_options": {"password": "second-secret"}}
        again = FsspecStore("zip", {**options, **secret, "block_size": BLOCK})
        assert bytes(again.reader("x.bin").read_sync(BLOCK, 4)) == byte * 4
        assert again.stats.disk_hits >= 1 and again.stats.requests == 0
        for made in (store, again):
            run_sync(made.aclose())


class CountingScans(DiskCache):
    """A disk tier that counts its full scans of the directory."""

    scans = 0

    def _scan(self) -> list[tuple[str, int, float]]:
        type(self).scans += 1
        return super()._scan()


def test_a_process_counts_a_full_directory_once_however_many_threads_write(
    tmp_path: Path,
) -> None:
    """The first writes of a process (its DataLoader worker's first blocks,
    from several threads at once) scan a directory of many entries once,
    not once per thread: a scan takes seconds on a large cache, and threads
    in it are threads reads cannot have. The estimate still counts all."""
    earlier = DiskCache(tmp_path, max_bytes=1 << 40)
    for i in range(3000):
        earlier.put(f"earlier{i}", b"e" * 10)
    cache = CountingScans(tmp_path, max_bytes=1 << 40)
    start = threading.Barrier(8)

    def write(n: int) -> None:
        start.wait()
        cache.put(f"new{n}", b"n" * 1000)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert CountingScans.scans == 1
    cache.put("one more", b"m" * 1000)  # counted from the estimate, no scan
    assert CountingScans.scans == 1
    assert cache._estimate is not None and cache._estimate >= cache.usage()


def test_a_directory_the_server_says_is_not_there_is_remembered(  # type: ignore[no-untyped-def]
    http, make_store, tmp_path: Path
) -> None:
    """A 404 to a listing (``seek_index/`` of an HTTP dataset packed without
    an index) is remembered by the disk tier, as an S3 prefix without keys
    is an empty listing: a later store asks nothing, also while the server
    is down (a warmed run of such a dataset sent this one request, and
    failed with the store). A failure a retry may mend (503) is not kept."""
    options = {"cache_dir": str(tmp_path / "cache"), "attempts": 1}
    missing = f"{http.url}/packed/seek_index_nowhere/"
    http.faults.only_ranged, http.faults.errors = False, 1
    with pytest.raises(StorageError, match="HTTP 503") as failed:
        make_store("http", **options).list_sync(missing)
    assert not isinstance(failed.value, NotFound)
    with pytest.raises(NotFound, match=r"seek_index_nowhere/: not found \(HTTP 404"):
        make_store("http", **options).list_sync(missing)
    http.reset()
    http.faults.only_ranged, http.faults.errors = False, 10**6
    again = make_store("http", **options)
    with pytest.raises(NotFound, match=r"seek_index_nowhere/: not found \(HTTP 404"):
        again.list_sync(missing)
    assert http.requests == [] and again.stats.disk_hits == 1


def test_a_write_drops_the_listings_it_makes_untrue(
    s3_proxy, s3_uploaded, make_store, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Listings are remembered as they were; one of a folder this store then
    writes into (or of its parent, for a new folder) is dropped: a job's
    final listing of ``seek_index/`` it had just written said it missing."""
    store = make_store("s3", s3_proxy.url, cache_dir=str(tmp_path / "cache"))
    root = f"{s3_uploaded}/written-{uuid.uuid4().hex}"
    store.put_sync(f"{root}/audio/a.wsds", b"a")
    assert [e.name for e in store.list_sync(root)] == ["audio"]
    assert store.list_sync(f"{root}/seek_index") == []  # remembered: no keys there
    store.put_sync(f"{root}/seek_index/a.wsds", b"i")
    later = make_store("s3", s3_proxy.url, cache_dir=str(tmp_path / "cache"))
    assert [e.name for e in later.list_sync(f"{root}/seek_index")] == ["a.wsds"]
    assert [e.name for e in later.list_sync(root)] == ["audio", "seek_index"]


def test_a_remembered_size_keeps_the_objects_version(
    s3_proxy, s3_uploaded, make_store, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A size request's answer is kept with the version it named (the
    ``stat`` entries; an earlier streamer's ``size`` entries held the size
    alone): a later store on the same disk tier says both without a
    request, as the size request said them."""
    cache = str(tmp_path / "cache")
    path = f"{s3_uploaded}/random.bin"
    s3_proxy.reset()
    asked = run_sync(make_store("s3", s3_proxy.url, cache_dir=cache).reader(path).stat())
    assert [r.method for r in s3_proxy.requests] == ["HEAD"]
    assert asked.size == 700_001 and asked.version and asked.version.startswith('ETag "')
    later = make_store("s3", s3_proxy.url, cache_dir=cache)
    assert run_sync(later.reader(path).stat()) == asked
    assert later.reader(path).size_sync() == asked.size
    assert [r.method for r in s3_proxy.requests] == ["HEAD"] and later.stats.disk_hits > 0
