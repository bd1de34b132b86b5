"""An outage ends the iteration within the time budget (``give_up_after``),
however many processes read: the parent planning and prefetching, the decode
workers reading blobs without an index, a warmup's planners.

Each test cuts a real S3 server (moto behind the fault-injecting proxy) and
measures from the first request the cut failed (the proxy's log) to the
raise: at most the budget plus one request's timeout, never a budget per
process or per request one after another.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import SECRET

from streamer import RandomCrops, Streamer
from streamer.dataset import Dataset
from streamer.errors import StorageError
from streamer.pipeline.warmup import warmup
from streamer.storage import StoreUnavailable
from streamer.write.pack import pack
from testkit.servers import LoopbackServer, upload_tree

BUDGET = 2.0
#: Probes every 0.05-0.3 s; an attempt that hangs costs one read timeout.
FAST = {"backoff": 0.05, "max_backoff": 0.3, "connect_timeout": 1.0, "read_timeout": 1.0}
#: Small blocks and cache: crops keep needing requests.
SMALL_CACHE = {"block_size": 16 * 1024, "cache_bytes": 64 * 1024, "hedge_after": None}
SAMPLER = RandomCrops(0.5, per_episode=3)
#: Hedged GETs, longer read timeouts: a hung attempt costs 1.5-2 s.
HEDGED = {"hedge_after": 0.5, "read_timeout": 1.5}
#: A hang's slack: the attempt in flight when the budget ends runs out its
#: read timeout (from its hedge's sending); more is another request's.
HEDGED_SLACK = HEDGED["hedge_after"] + HEDGED["read_timeout"] + 0.5


@pytest.fixture(scope="module")
def unindexed(audio_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``audio_dir`` packed without a seek index: every crop is decoded by
    FFmpeg from the blob's start, which a decode worker reads itself."""
    out = tmp_path_factory.mktemp("unindexed") / "dataset"
    pack(audio_dir, out, batch_size=2, shard_size=600_000, progress=False, index=False)
    return out


def _open(s3: LoopbackServer, make_store, folder: Path, name: str, **more: object) -> Dataset:  # type: ignore[no-untyped-def]
    upload_tree(s3.handler.upstream, folder, "data", name, "test-key-id", SECRET)
    options = {**FAST, **SMALL_CACHE, "give_up_after": BUDGET, **more}
    dataset = Dataset(f"data/{name}", store=make_store("s3", s3.url, **options))
    dataset.shard_names  # noqa: B018 (opens the shards while the store answers)
    return dataset


def _since_first_failure(s3: LoopbackServer, cut: float) -> float:
    """Seconds from the first request after ``cut`` (which failed) to now."""
    now = time.monotonic()
    failed = [r.at for r in s3.requests if r.at >= cut]
    assert failed, "no request reached the cut store"
    return now - failed[0]


def _check(error: StorageError, seconds: float, limit: float) -> None:
    message = str(error)
    assert isinstance(error, StoreUnavailable), repr(error)
    assert "\n" not in message and "gave up" in message and SECRET not in message, message
    assert "s3://data/" in message, message
    assert seconds < limit, f"raised {seconds:.2f} s after the outage began, budget {BUDGET} s"


@pytest.mark.parametrize("workers", [1, 2])
def test_an_outage_before_the_first_crop_raises_within_the_budget(
    s3, make_store, unindexed: Path, workers: int
) -> None:  # type: ignore[no-untyped-def]
    """503 for everything once the shards are open: planning asks the store
    for a seek index (a listing, the manifest naming none) and the workers
    read the blobs. The listing's outage was taken for "no index", so the
    crops went to the workers, whose stores waited a budget of their own:
    2 s, then 2 s more (4.4-5.3 s measured; 1.9-2.0 s now)."""
    dataset = _open(s3, make_store, unindexed, f"before-{workers}")
    cut = time.monotonic()
    s3.go_down(3600)
    with pytest.raises(StorageError) as caught:
        for _ in Streamer(dataset, SAMPLER, seed=3, workers=workers, prefetch=4):
            pass
    _check(caught.value, _since_first_failure(s3, cut), BUDGET * 1.5 + 0.5)


@pytest.mark.parametrize("workers", [1, 2])
def test_an_outage_mid_pass_raises_within_the_budget_from_the_workers(
    s3, make_store, unindexed: Path, workers: int
) -> None:  # type: ignore[no-untyped-def]
    """The store stops answering (no status line: each attempt costs a read
    timeout) after the third crop, while two workers read blobs: the first
    process to spend the budget ends the pass, the others' retries end with
    it (their batches are cancelled, the workers replaced). With one worker
    the batch's other crop went on after the first gave up, one more hung
    request on the dead store: 5.1 s for the 2 s budget (2.0 s now)."""
    dataset = _open(s3, make_store, unindexed, f"mid-{workers}", **HEDGED)
    crops, cut = 0, 0.0
    with pytest.raises(StorageError) as caught:
        for _ in Streamer(dataset, SAMPLER, seed=3, workers=workers, prefetch=4):
            crops += 1
            if crops == 3:
                cut = time.monotonic()
                s3.faults.only_ranged, s3.faults.stall_seconds = False, 3600
                s3.faults.hangs = 10**9
    _check(caught.value, _since_first_failure(s3, cut), BUDGET + HEDGED_SLACK)


def test_a_warmup_that_meets_a_hang_raises_within_the_budget(s3, make_store, packed: Path) -> None:  # type: ignore[no-untyped-def]
    """The store hangs while a warmup plans its crops: the first planner to
    spend the budget ends it. The other planners went on opening seek-index
    shards after it, each request on a clock of its own while the store had
    failed fewer than three times in a row (no outage yet), or as the
    gate's probe: 5.1 s for the 2 s budget (2.0 s now)."""
    dataset = _open(s3, make_store, packed, "warm", **HEDGED)
    stream = Streamer(dataset, SAMPLER, seed=3, workers=0)
    len(stream)  # the plan, from the shards opened while the store answered
    cut = time.monotonic()
    s3.faults.only_ranged, s3.faults.stall_seconds, s3.faults.hangs = False, 3600, 10**9
    with pytest.raises(StorageError) as caught:
        warmup(stream)
    _check(caught.value, _since_first_failure(s3, cut), BUDGET + HEDGED_SLACK)


@pytest.mark.parametrize("fault", ["hangs", "trickles"])
def test_a_store_that_stalls_mid_pass_raises_within_the_budget(
    s3, make_store, packed: Path, fault: str
) -> None:  # type: ignore[no-untyped-def]
    """After the third crop the store takes every request and then sends
    nothing (``hangs``) or a byte every 0.2 s (``trickles``), with the
    default read timeout (10 s) and whole-attempt timeout (30 s), far above
    the budget: the first request to stall fails when its budget ends, and
    ends the pass. Its first attempt, bounded by those timeouts alone, held
    the pass 10.0 s (a hang) and 30.0 s (a trickle) for the 2 s budget."""
    timeouts = {"read_timeout": 10.0, "timeout": 30.0}
    dataset = _open(s3, make_store, packed, f"stalls-{fault}", **timeouts)
    crops, cut = 0, 0.0
    with pytest.raises(StorageError) as caught:
        for _ in Streamer(dataset, SAMPLER, seed=3, workers=1, prefetch=4):
            crops += 1
            if crops == 3:
                cut = time.monotonic()
                s3.faults.only_ranged, s3.faults.stall_seconds = False, 3600
                setattr(s3.faults, fault, 10**9)
    _check(caught.value, _since_first_failure(s3, cut), BUDGET + 0.5)
    assert "give_up_after budget" in str(caught.value)
