"""The block cache against a real HTTP server that counts what it is asked."""

from __future__ import annotations

import asyncio
import threading

import pytest

BLOCK = 64 * 1024


@pytest.fixture
def open_reader(http, make_store):  # type: ignore[no-untyped-def]
    def open_reader(**options):  # type: ignore[no-untyped-def]
        store = make_store("http", **{"block_size": BLOCK, "coalesce_gap": 0, **options})
        reader = store.reader(f"{http.url}/random.bin")
        reader.size_sync()
        http.reset()
        return reader

    return open_reader


def test_concurrent_readers_of_one_block_share_one_request(http, open_reader, data) -> None:  # type: ignore[no-untyped-def]
    reader = open_reader()
    http.faults.latency = 0.3

    async def main() -> list[memoryview]:
        return await asyncio.gather(*(reader.read(BLOCK + 100 * i, 50) for i in range(8)))

    views = asyncio.run(main())
    assert [bytes(v) for v in views] == [data[BLOCK + 100 * i :][:50] for i in range(8)]
    assert len(http.ranged()) == 1
    assert reader.store.stats.deduplicated == 7 and reader.store.stats.misses == 1


def test_blocking_readers_in_threads_share_one_request(http, open_reader, data) -> None:  # type: ignore[no-untyped-def]
    reader = open_reader()
    http.faults.latency = 0.3
    results: list[bytes] = [b""] * 6

    def work(i: int) -> None:
        results[i] = bytes(reader.read_sync(3 * BLOCK + i, 10))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [data[3 * BLOCK + i :][:10] for i in range(6)]
    assert len(http.ranged()) == 1


def test_adjacent_blocks_coalesce_into_one_request(http, open_reader, data) -> None:  # type: ignore[no-untyped-def]
    reader = open_reader()
    wanted = [(10, 20), (BLOCK + 5, 20), (2 * BLOCK - 1, 2)]
    assert [bytes(v) for v in reader.read_many_sync(wanted)] == [data[o : o + n] for o, n in wanted]
    assert [r.range for r in http.ranged()] == [f"bytes=0-{3 * BLOCK - 1}"]
    # A read that spans blocks is one request too.
    assert bytes(reader.read_sync(5 * BLOCK - 7, BLOCK + 14)) == data[5 * BLOCK - 7 :][: BLOCK + 14]
    assert http.ranged()[-1].range == f"bytes={4 * BLOCK}-{7 * BLOCK - 1}"


def test_nearby_ranges_coalesce_across_a_small_gap(http, open_reader, data) -> None:  # type: ignore[no-untyped-def]
    reader = open_reader(coalesce_gap=BLOCK)
    wanted = [(0, 10), (2 * BLOCK, 10), (9 * BLOCK, 10)]
    assert [bytes(v) for v in reader.read_many_sync(wanted)] == [data[o : o + n] for o, n in wanted]
    assert sorted(r.range for r in http.ranged()) == [
        f"bytes=0-{3 * BLOCK - 1}",  # block 1 is fetched to save a request
        f"bytes={9 * BLOCK}-{10 * BLOCK - 1}",
    ]


def test_long_reads_split_at_max_request(http, open_reader, data) -> None:  # type: ignore[no-untyped-def]
    reader = open_reader(max_request=2 * BLOCK)
    assert bytes(reader.read_sync(0, 5 * BLOCK)) == data[: 5 * BLOCK]
    assert len(http.ranged()) == 3


def test_lru_evicts_over_the_byte_budget(http, open_reader, data) -> None:  # type: ignore[no-untyped-def]
    reader = open_reader(cache_bytes=2 * BLOCK)
    for block in (0, 1, 2):
        reader.read_sync(block * BLOCK, 1)
    assert len(http.ranged()) == 3
    reader.read_sync(2 * BLOCK + 5, 1)  # still cached
    assert len(http.ranged()) == 3
    assert bytes(reader.read_sync(5, 3)) == data[5:8]  # block 0 was evicted
    assert len(http.ranged()) == 4
    state = reader.store._state.get()
    assert state.cache.memory_bytes <= 2 * BLOCK


def test_concurrency_limit_per_store(http, open_reader) -> None:  # type: ignore[no-untyped-def]
    reader = open_reader(max_concurrency=2)
    http.faults.latency = 0.15

    async def main() -> None:
        await asyncio.gather(*(reader.read(b * BLOCK, 10) for b in range(0, 10, 2)))

    asyncio.run(main())
    assert len(http.ranged()) == 5 and http.max_in_flight <= 2


def test_a_cancelled_reader_does_not_cancel_a_shared_fetch(http, open_reader, data) -> None:  # type: ignore[no-untyped-def]
    reader = open_reader()
    http.faults.latency = 0.3

    async def main() -> bytes:
        first = asyncio.ensure_future(reader.read(7 * BLOCK, 10))
        second = asyncio.ensure_future(reader.read(7 * BLOCK + 10, 10))
        await asyncio.sleep(0.1)
        first.cancel()
        return bytes(await second)

    assert asyncio.run(main()) == data[7 * BLOCK + 10 :][:10]
    assert len(http.ranged()) == 1


def test_closing_the_store_fails_a_fetch_that_has_not_started_yet(open_reader) -> None:  # type: ignore[no-untyped-def]
    """A reader whose fetch task was created but not yet run when the store
    closed gets the closing error, not a wait forever (a task cancelled
    before its first step never runs its body, which settles its readers)."""
    from streamer.errors import StorageError
    from streamer.storage.loop import run_sync

    reader = open_reader()
    cache = reader.store._state.get().cache

    async def main() -> None:
        read = asyncio.ensure_future(cache.read(reader.path, 700_001, [(0, 10)]))
        await asyncio.sleep(0)  # the read starts its fetch task and waits for it
        await cache.cancel_fetches()
        with pytest.raises(StorageError, match=r"random\.bin cancelled: the store was closed"):
            await asyncio.wait_for(read, 5)

    run_sync(main())
