"""Property test: every read through the block cache equals the file's bytes,
whatever the offsets, with readers racing from tasks and threads, a cache far
smaller than the reads, and faults injected by the real HTTP server."""

from __future__ import annotations

import asyncio
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamer.storage.loop import run_sync

BLOCK = 4096
SIZE = 700_001  # random.bin
CACHE = 8 * BLOCK


@st.composite
def spans(draw: st.DrawFn) -> tuple[int, int]:
    """Offsets anywhere, at and around block edges and the end; lengths from
    zero to several blocks and up to the end."""
    kind = draw(st.sampled_from(["any", "edge", "end", "long"]))
    if kind == "edge":
        offset = draw(st.integers(1, SIZE // BLOCK)) * BLOCK + draw(st.integers(-3, 3))
    elif kind == "end":
        offset = SIZE - draw(st.integers(0, 3 * BLOCK))
    else:
        offset = draw(st.integers(0, SIZE))
    longest = SIZE - offset if kind == "long" else min(SIZE - offset, 3 * BLOCK)
    return offset, draw(st.integers(0, longest))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    reads=st.lists(st.lists(spans(), min_size=1, max_size=4), min_size=1, max_size=12),
    faults=st.sampled_from(["none", "resets", "truncations", "errors", "stalls"]),
)
def test_every_read_is_the_files_bytes(http, cached_store, data, reads, faults) -> None:  # type: ignore[no-untyped-def]
    store = cached_store
    reader = store.reader(f"{http.url}/random.bin", size=SIZE)
    http.reset()
    if faults == "stalls":  # a pause shorter than the timeouts, long enough to hedge
        http.faults.stall_every, http.faults.stall_seconds = 3, 0.1
    elif faults != "none":
        setattr(http.faults, faults, 2)
    half = len(reads) // 2
    got: dict[int, list[bytes]] = {}

    def in_thread(i: int) -> None:
        got[i] = [bytes(v) for v in reader.read_many_sync(reads[i])]

    async def in_tasks() -> None:
        views = await asyncio.gather(*(reader.read_many(r) for r in reads[half:]))
        got.update({half + i: [bytes(v) for v in found] for i, found in enumerate(views)})

    threads = [threading.Thread(target=in_thread, args=(i,)) for i in range(half)]
    for thread in threads:
        thread.start()
    asyncio.run(in_tasks())
    for thread in threads:
        thread.join()
    for i, ranges in enumerate(reads):
        assert got[i] == [data[o : o + n] for o, n in ranges], ranges
    assert run_sync(_leftovers(store)) == (True, 0, 0, 0)


@pytest.fixture
def cached_store(make_store):  # type: ignore[no-untyped-def]
    """One store for every example (hypothesis reuses a test's fixtures), so
    its small cache carries blocks from example to example and reads race
    evictions."""
    return make_store(
        "http",
        block_size=BLOCK,
        cache_bytes=CACHE,
        coalesce_gap=2 * BLOCK,
        max_request=4 * BLOCK,
        hedge_after=0.05,
        hedge_factor=1.0,
        backoff=0.01,
        max_backoff=0.05,
    )


async def _leftovers(store) -> tuple[bool, int, int, int]:  # type: ignore[no-untyped-def]
    """(memory within budget, fetches still offered, fetch tasks, connections
    held): once every read returned, only cached blocks may remain."""
    await asyncio.sleep(0.05)  # a hedge that lost finishes cancelling
    state = store._state.get()
    cache = state.cache
    held = len(state.client.connector._acquired) if state.client else 0
    return cache.memory_bytes <= CACHE, len(cache._inflight), len(cache._fetching), held
