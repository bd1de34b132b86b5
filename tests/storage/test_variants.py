"""Answers that differ from server to server, all legal or common: each read
right, or failed at once in one clear line (never retried for the whole
time budget, never buffered without bound)."""

from __future__ import annotations

import email.utils
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from streamer import open_dataset
from streamer.dataset.dataset import Dataset
from streamer.errors import StorageError
from streamer.storage.remote import MAX_PIECES
from testkit.servers import LoopbackServer, file_handler

#: Fail within seconds where the default budget would wait 300 s.
FAST = {"backoff": 0.01, "max_backoff": 0.05, "give_up_after": 5}


def test_range_answers_capped_by_the_server_are_read_in_pieces(served, data) -> None:  # type: ignore[no-untyped-def]
    """A server that sends at most 10,000 bytes per range answer (its
    Content-Range says which): the rest of every read, suffixes included,
    is asked for anew, each request starting where the last answer ended."""
    open_reader, server = served
    reader = open_reader(**FAST)
    server.faults.max_range = 10_000
    assert bytes(reader.read_sync(1000, 300_000)) == data[1000:301_000]
    assert bytes(reader.read_tail_sync(25_000)[1]) == data[-25_000:]
    start, whole = reader.store.reader(reader.path).read_tail_sync(2 * len(data))
    assert (start, bytes(whole)) == (0, data)
    stats = reader.store.stats
    assert stats.retries == 0 and stats.partial_answers >= 300_000 // 10_000


def test_crops_through_a_server_capping_ranges_equal_local_ones(  # type: ignore[no-untyped-def]
    http, make_store, storage_root: Path
) -> None:
    local = open_dataset(storage_root / "packed")
    http.faults.max_range = 4096
    dataset = Dataset(f"{http.url}/packed", store=make_store("http", **FAST))
    for key in local:
        for start, end in [(0.0, 0.5), (1.7, 2.4)]:
            np.testing.assert_array_equal(
                dataset.read_crop(key, start, end), local.read_crop(key, start, end)
            )
    assert dataset.store.stats.retries == 0 and dataset.store.stats.partial_answers > 0


def test_a_server_sending_tiny_pieces_fails_fast_in_one_line(http, make_store) -> None:  # type: ignore[no-untyped-def]
    """Bounded: a read that would take more than ``MAX_PIECES`` requests fails,
    naming the object and the option that helps."""
    reader = make_store("http", **FAST).reader(f"{http.url}/random.bin", size=700_001)
    http.faults.max_range = 100
    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        reader.read_sync(0, 10)
    message = str(caught.value)
    assert "random.bin" in message and "max_request" in message and "\n" not in message
    assert f"answered {MAX_PIECES} range requests with at most 100 bytes" in message
    assert len(http.ranged()) == MAX_PIECES and time.monotonic() - started < 10


def serving(root: Path, change):  # type: ignore[no-untyped-def]
    """A file server over ``root`` whose answers ``change(request, status,
    headers, body)`` rewrites."""
    files = file_handler(root)

    async def handle(request):  # type: ignore[no-untyped-def]
        return change(request, *await files(request))

    return LoopbackServer(handle).start()


def test_an_answer_starting_elsewhere_fails_at_once(storage_root, make_store) -> None:  # type: ignore[no-untyped-def]
    """Bytes from another offset than asked (Content-Range says so): no retry
    would change it, so no retry for the whole time budget."""

    def shifted(request, status, headers, body):  # type: ignore[no-untyped-def]
        first, last, total = map(int, re.findall(r"\d+", headers["Content-Range"]))
        moved = f"bytes {first + 1}-{last}/{total}"
        return status, {**headers, "Content-Range": moved}, body[1:]

    server = serving(storage_root, shifted)
    try:
        reader = make_store("http", **FAST).reader(f"{server.url}/random.bin", size=700_001)
        with pytest.raises(
            StorageError, match=r"answered bytes 1-131071 to a request for bytes 0-"
        ):
            reader.read_sync(0, 10)
        assert len(server.ranged()) == 1 and reader.store.stats.retries == 0
    finally:
        server.stop()


def test_a_chunked_body_longer_than_its_range_is_not_buffered(  # type: ignore[no-untyped-def]
    storage_root, data, make_store
) -> None:
    """A proxy that names the range but streams the whole object (no
    Content-Length): read one byte past the range, no further."""

    def whole(request, status, headers, body):  # type: ignore[no-untyped-def]
        return status, headers, data

    server = serving(storage_root, whole)
    server.faults.chunked = True
    try:
        reader = make_store("http", attempts=1).reader(f"{server.url}/random.bin", size=len(data))
        block = reader.store.cache_config.block_size
        with pytest.raises(StorageError, match=rf"over-long body: {block + 1} bytes instead of"):
            reader.read_sync(0, 10)
    finally:
        server.stop()


def test_a_multipart_answer_to_one_range_is_a_clear_error(storage_root, make_store) -> None:  # type: ignore[no-untyped-def]
    def multipart(request, status, headers, body):  # type: ignore[no-untyped-def]
        part = f"--x\r\nContent-Range: {headers['Content-Range']}\r\n\r\n".encode()
        kind = {"Content-Type": "multipart/byteranges; boundary=x"}
        return 206, kind, part + body + b"\r\n--x--\r\n"

    server = serving(storage_root, multipart)
    try:
        reader = make_store("http", **FAST).reader(f"{server.url}/random.bin", size=700_001)
        with pytest.raises(StorageError) as caught:
            reader.read_sync(0, 10)
        message = str(caught.value)
        assert "without a valid Content-Range but a multipart/byteranges body" in message
        assert "\n" not in message and len(server.ranged()) == 1
    finally:
        server.stop()


def test_answers_without_an_etag_are_compared_by_their_date(  # type: ignore[no-untyped-def]
    storage_root, data, make_store
) -> None:
    """Every answer has a Last-Modified, every other one an ETag (some CDNs
    drop it, or weaken it): the object did not change, and reads go on."""
    answers = iter(range(10**6))

    def sometimes(request, status, headers, body):  # type: ignore[no-untyped-def]
        headers = {**headers, "Last-Modified": "Wed, 21 Oct 2015 07:28:00 GMT"}
        etag, turn = headers.pop("ETag"), next(answers) % 3
        if turn:
            headers["ETag"] = etag if turn == 1 else f"W/{etag}"
        return status, headers, body

    server = serving(storage_root, sometimes)
    try:
        reader = make_store("http", **FAST).reader(f"{server.url}/random.bin")
        for offset in range(0, len(data) - 10, 150_000):
            assert bytes(reader.read_sync(offset, 10)) == data[offset : offset + 10]
        assert bytes(reader.read_tail_sync(10)[1]) == data[-10:]
    finally:
        server.stop()


def _dated(root: Path, etag: Callable[[], bool]) -> LoopbackServer:
    """A file server over ``root`` whose answers carry the file's mtime as
    ``Last-Modified``, and its ``ETag`` only while ``etag()``."""

    def change(request, status, headers, body):  # type: ignore[no-untyped-def]
        mtime = (root / request.path.lstrip("/")).stat().st_mtime
        headers = {**headers, "Last-Modified": email.utils.formatdate(mtime, usegmt=True)}
        if not etag():
            headers.pop("ETag")
        return status, headers, body

    return serving(root, change)


def test_a_replaced_object_is_caught_by_the_date_once_the_etag_is_dropped(  # type: ignore[no-untyped-def]
    tmp_path, make_store
) -> None:
    """The first answers carry an ETag and a Last-Modified, the object is
    replaced (same size), later answers carry a Last-Modified alone (a CDN
    dropping the ETag): compared with the first answers' date, they fail.
    (Only the ETag of the first answers was kept: the first answer without
    one set the "first" date, and the new bytes were read without a word.)"""
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) * 1024)
    os.utime(blob, (1_600_000_000, 1_600_000_000))
    with_etag = [True]
    server = _dated(tmp_path, lambda: with_etag[0])
    try:
        reader = make_store("http", block_size=65536, **FAST).reader(f"{server.url}/blob.bin")
        assert bytes(reader.read_sync(0, 4)) == bytes(range(4))
        blob.write_bytes(bytes([7]) * 256 * 1024)
        os.utime(blob, (1_700_000_000, 1_700_000_000))
        with_etag[0] = False
        with pytest.raises(StorageError, match=r"changed on the server .*Last-Modified Sun, 13"):
            reader.read_sync(200_000, 4)
    finally:
        server.stop()


def test_an_etag_that_agrees_decides_over_another_date(  # type: ignore[no-untyped-def]
    storage_root, data, make_store
) -> None:
    """Replicas with the same content ETag but their own mtimes: the same
    bytes, read on (now that every answer's date is recorded too)."""
    days = iter(range(10**6))

    def replicas(request, status, headers, body):  # type: ignore[no-untyped-def]
        date = f"Wed, {20 + next(days) % 3} Oct 2015 07:28:00 GMT"
        return status, {**headers, "Last-Modified": date}, body

    server = serving(storage_root, replicas)
    try:
        reader = make_store("http", **FAST).reader(f"{server.url}/random.bin")
        for offset in range(0, len(data) - 10, 150_000):
            assert bytes(reader.read_sync(offset, 10)) == data[offset : offset + 10]
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("refusal", "names_size"), [(416, True), (416, False), (200, True), (206, True)]
)
def test_small_and_empty_objects_behind_a_server_refusing_long_suffixes(  # type: ignore[no-untyped-def]
    tmp_path, make_store, refusal, names_size
) -> None:
    """A public bucket of an S3 server that answers 416 to a suffix range
    longer than the object (rclone, Ceph), read as plain HTTPS, whose 416
    names the object's size or not: the small shards of a dataset
    (``audio_info/``, ``seek_index/``) still open, and an empty object is
    empty (a 416 to ``bytes=0-0`` means just that). So too behind a
    gateway sending that 416's ``Content-Range: bytes */SIZE`` under a 200
    or 206 status: the size it names is the object's (a 206 so was refused
    as "without a valid Content-Range"; a 200 so made the 1000-byte object
    read as empty)."""

    def strict(request, status, headers, body):  # type: ignore[no-untyped-def]
        size = (tmp_path / request.path.lstrip("/")).stat().st_size
        suffix = request.headers["Range"].partition("=-")[2]
        if status == 416 or (suffix and int(suffix) > size):
            named = {"Content-Range": f"bytes */{size}"} if names_size else {}
            return refusal, {**named, "Content-Length": "0"}, b""
        return status, headers, body

    (tmp_path / "small.bin").write_bytes(b"0123456789" * 100)
    (tmp_path / "empty.bin").write_bytes(b"")
    server = serving(tmp_path, strict)
    try:
        store = make_store("http", **FAST)
        reader = store.reader(f"{server.url}/small.bin")
        start, tail = reader.read_tail_sync(65536)
        assert (start, bytes(tail)) == (0, b"0123456789" * 100)
        assert bytes(reader.read_tail_sync(5)[1]) == b"56789"
        empty = store.reader(f"{server.url}/empty.bin")
        assert empty.read_tail_sync(100)[0] == 0 and bytes(empty.read_tail_sync(100)[1]) == b""
        assert store.reader(f"{server.url}/empty.bin").size_sync() == 0
        assert store.stats.retries == 0
    finally:
        server.stop()


def test_an_empty_answer_to_a_range_of_bytes_is_a_clear_error(  # type: ignore[no-untyped-def]
    storage_root, data, make_store
) -> None:
    """A proxy or CDN answering every range with 200, ``Content-Length: 0``
    and no Content-Range (an empty answer it cached): bytes a reader knows
    are there are not read as none. One line naming the URL and the range,
    at once; it said the object "changed on the server" (restart, clear the
    cache), or named the garbled range ``bytes 0--1``."""

    def emptied(request, status, headers, body):  # type: ignore[no-untyped-def]
        return 200, {"Content-Length": "0"}, b""

    server = serving(storage_root, emptied)
    try:
        store = make_store("http", **FAST)
        url = f"{server.url}/random.bin"
        for offset in (0, 300_000):
            reader = store.reader(url, size=len(data))
            with pytest.raises(StorageError) as caught:
                reader.fetch_many_sync([(offset, 10)])
            message = str(caught.value)
            assert message.startswith(f"{url}: ") and "\n" not in message
            assert f"bytes {offset}-{offset + 9} with no bytes" in message
            assert "changed" not in message
        assert store.stats.retries == 0 and len(server.ranged()) == 2
    finally:
        server.stop()


def test_the_bytes_of_a_suffix_refused_are_never_read_as_none(  # type: ignore[no-untyped-def]
    tmp_path, make_store
) -> None:
    """A server refusing a suffix longer than the object (416 naming its
    size, 1000 bytes) that then answers the range by that size with 200 and
    no bytes: an error naming the URL and range, not the object read as
    empty (its tail came back as ``b""`` from offset 0: a shard, a manifest
    without a byte, without a word)."""

    def strict(request, status, headers, body):  # type: ignore[no-untyped-def]
        if request.headers["Range"].startswith("bytes=-"):
            return 416, {"Content-Range": "bytes */1000"}, b""
        return 200, {"Content-Length": "0"}, b""

    (tmp_path / "small.bin").write_bytes(b"0123456789" * 100)
    server = serving(tmp_path, strict)
    try:
        store = make_store("http", **FAST)
        url = f"{server.url}/small.bin"
        with pytest.raises(StorageError, match=r"bytes 0-999 with no bytes") as caught:
            store.reader(url).read_tail_sync(65536)
        assert str(caught.value).startswith(f"{url}: ") and store.stats.retries == 0
    finally:
        server.stop()


def test_a_suffix_answered_short_of_its_start_is_read_whole(  # type: ignore[no-untyped-def]
    storage_root, data, make_store
) -> None:
    """A server answering the suffix ``bytes=-N`` with fewer of the object's
    last bytes than asked, as its Content-Range says: the missing front is
    asked for by range, and the tail is the last N bytes, from where they
    start (it was taken as the last N/2: fewer bytes than asked, as if
    that were all)."""

    def halved(request, status, headers, body):  # type: ignore[no-untyped-def]
        if status != 206 or not request.headers["Range"].startswith("bytes=-"):
            return status, headers, body
        first, last, total = map(int, re.findall(r"\d+", headers["Content-Range"]))
        later = first + (last + 1 - first) // 2
        moved = f"bytes {later}-{last}/{total}"
        return status, {**headers, "Content-Range": moved}, body[later - first :]

    server = serving(storage_root, halved)
    try:
        store = make_store("http", **FAST)
        start, tail = store.reader(f"{server.url}/random.bin").read_tail_sync(20_000)
        assert (start, bytes(tail)) == (len(data) - 20_000, data[-20_000:])
        assert store.stats.retries == 0 and store.stats.partial_answers == 1
    finally:
        server.stop()
