"""The pipeline over S3 (moto on loopback): same crops as local, warmup -> zero requests, bench."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import streamer
from streamer import Mix, RandomCrops, RetryPolicy, Streamer
from streamer.cli import main
from streamer.dataset.dataset import Dataset
from streamer.errors import StorageError
from streamer.pipeline.bench import BenchConfig, bench_streamer
from streamer.pipeline.pool import WORKERS_PER_CPU
from streamer.pipeline.streamer import default_prefetch
from streamer.pipeline.warmup import warmup


@pytest.fixture
def s3_dataset(s3, s3_uploaded, make_store):  # type: ignore[no-untyped-def]
    """``open(**store_options)``: the packed dataset on S3, through a new store."""

    def open_remote(**options) -> Dataset:  # type: ignore[no-untyped-def]
        return Dataset(f"{s3_uploaded}/packed", store=make_store("s3", s3.url, **options))

    return open_remote


@pytest.mark.parametrize("workers", [0, 1])
def test_remote_crops_equal_local_crops(s3_dataset, packed: Path, workers: int) -> None:  # type: ignore[no-untyped-def]
    sampler = RandomCrops(0.5, per_episode=2)
    local = list(Streamer(streamer.open_dataset(packed), sampler, seed=4, workers=0))
    s = Streamer(s3_dataset(), sampler, seed=4, workers=workers)
    remote = list(s)
    assert [(c.key, c.start) for c in remote] == [(c.key, c.start) for c in local]
    for a, b in zip(local, remote, strict=True):
        np.testing.assert_array_equal(a.audio, b.audio, err_msg=a.key)
    stats = s.stats
    assert stats.yielded == 14 and stats.requests > 0 and stats.bytes_read > 0


def test_a_url_opens_with_storage_options(http, packed: Path) -> None:  # type: ignore[no-untyped-def]
    """``Streamer(url, ..., storage_options=...)`` and ``Mix(..., storage_options=...)``
    open their URLs with those options (they used to share the Streamer's keywords)."""
    sampler = RandomCrops(0.5, per_episode=2)
    options = {"retry": RetryPolicy(attempts=3, backoff=0.01), "block_size": 64 * 1024}
    s = Streamer(f"{http.url}/packed", sampler, seed=4, workers=0, storage_options=options)
    store = s.sources[0][0].store
    assert store.retry.attempts == 3 and store.cache_config.block_size == 64 * 1024
    local = list(Streamer(streamer.open_dataset(packed), sampler, seed=4, workers=0))
    assert [(c.key, c.start) for c in s] == [(c.key, c.start) for c in local]
    assert s.stats.requests > 0
    mix = Mix([(f"{http.url}/packed", 1.0), (f"{http.url}/big", 1.0)], storage_options=options)
    assert [dataset.store for dataset, _ in mix.sources] == [store, store]


def test_remote_sources_prefetch_deeper_by_default(s3_dataset, packed: Path) -> None:  # type: ignore[no-untyped-def]
    """A remote crop waits a round trip before it decodes: more are kept in flight."""
    sampler = RandomCrops(0.5)
    local = Streamer(streamer.open_dataset(packed), sampler, workers=2)
    remote = Streamer(s3_dataset(), sampler, workers=2)
    assert (local.prefetch, remote.prefetch) == (16, 32)
    assert Streamer(s3_dataset(), sampler, workers=2, prefetch=5).prefetch == 5
    most = WORKERS_PER_CPU * (os.cpu_count() or 1)  # as many workers as may be
    assert Streamer(s3_dataset(), sampler, workers=most).prefetch == min(16 * most, 128)
    assert default_prefetch(64, remote=True) == 128  # memory cap


def test_remote_storage_failures_raise_and_lose_no_crop(s3_dataset, s3) -> None:  # type: ignore[no-untyped-def]
    """A store that fails after its retries is not bad data: even under
    on_error="skip" the iteration raises its StorageError (it used to skip
    and count all 7 crops) and no crop is skipped; the epoch does not
    advance, and once the store answers again every crop is yielded."""
    dataset = s3_dataset(attempts=1)
    s = Streamer(dataset, RandomCrops(0.5), workers=0, prefetch=1)
    s.plan()  # listing, footers and indexes are read before the faults start
    for key in dataset:
        dataset.seek_index(key)
    s3.faults.errors = 10_000
    with pytest.raises(StorageError) as raised:
        list(s)
    s3.faults.errors = 0
    # Which episode met the outage: the store's message names the object only.
    (note,) = raised.value.__notes__
    assert re.fullmatch(r"reading key '.+' \(shard s3://.+/shard-\d+\.wsds\)", note), note
    assert s.stats.skipped == {} and s.stats.yielded == 0
    assert (s.state_dict()["epoch"], s.state_dict()["position"]) == (0, 0)
    assert len(list(s)) == 7 and s.stats.skipped == {} and s.epoch == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_store_failing_mid_epoch_raises_and_resuming_redoes_the_rest(
    s3_dataset, s3, packed: Path, anyio_backend: str
) -> None:  # type: ignore[no-untyped-def]
    """The store fails after 3 crops: the crops decoded before are yielded, the
    iteration raises the StorageError (async, asyncio and trio), nothing is
    skipped, the position is the crops handed over, and resuming once the
    store is back yields exactly the rest of the epoch."""
    sampler = RandomCrops(0.5, per_episode=3)
    local = Streamer(streamer.open_dataset(packed), sampler, seed=4, workers=0)
    everything = [(c.key, c.start) for c in local]
    dataset = s3_dataset(attempts=1, block_size=4096)  # each crop needs blocks of its own
    s = Streamer(dataset, sampler, seed=4, workers=0, prefetch=1, queue_size=1)
    s.plan()  # listing, footers and indexes are read before the faults start
    for key in dataset:
        dataset.seek_index(key)
    taken = []
    with pytest.raises(StorageError):
        async for crop in s:
            taken.append(crop)
            if len(taken) == 3:
                s3.faults.errors = 10_000
    s3.faults.errors = 0
    assert 3 <= len(taken) < 21 and s.stats.skipped == {}
    assert (s.state_dict()["epoch"], s.state_dict()["position"]) == (0, len(taken))
    taken += [crop async for crop in s]
    assert [(c.key, c.start) for c in taken] == everything and s.epoch == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_remote_async_iteration(s3_dataset, anyio_backend: str) -> None:  # type: ignore[no-untyped-def]
    async with Streamer(s3_dataset(), RandomCrops(0.5), workers=0) as s:
        keys = [crop.key async for crop in s]
    assert len(keys) == 7


def test_warmup_then_a_run_sends_no_request(s3_dataset, s3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = str(tmp_path / "cache")
    config = BenchConfig(duration=0.5, crops=20, seed=1)
    warmed = bench_streamer(s3_dataset(cache_dir=cache), config, workers=0)
    report = warmup(warmed)
    assert report.crops == 20 and report.bytes > 0 and s3.requests
    s3.reset()
    dataset = s3_dataset(cache_dir=cache)  # a new store: empty memory, same disk tier
    s = bench_streamer(dataset, config, workers=1)
    crops = list(s)
    assert len(crops) == 20 and not s.stats.skipped
    assert s3.requests == [] and dataset.store.stats.requests == 0
    assert s.stats.cache_hits > 0


def test_warmup_raises_a_storage_failure(s3_dataset, s3) -> None:  # type: ignore[no-untyped-def]
    """An outage during warmup is its StorageError, not "warmed 0 crops"."""
    dataset = s3_dataset(attempts=1)
    s = Streamer(dataset, RandomCrops(0.5), workers=0)
    s.plan()  # listing, footers and indexes are read before the faults start
    for key in dataset:
        dataset.seek_index(key)
    s3.faults.errors = 10_000
    with pytest.raises(StorageError):
        warmup(s)
    s3.faults.errors = 0
    assert warmup(s).crops == 7


def test_bench_and_warmup_commands(
    s3, s3_uploaded, packed: Path, tmp_path: Path, capsys, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from helpers import SECRET

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    url = f"s3://{s3_uploaded}/packed"
    cache = str(tmp_path / "cache")
    common = ["--duration", "0.5", "--crops", "10", "--endpoint-url", s3.url, "--cache-dir", cache]
    assert main(["warmup", url, *common, "--no-progress"]) == 0
    assert "warmed 10 crops" in capsys.readouterr().out
    argv = ["bench", str(packed), url, *common, "--workers", "1", "--baseline", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("crops", "crops_per_s", "yielded", "skipped", "requests", "bytes_read"):
        assert key in result
    assert {"p50_ms", "p99_ms", "baseline_crops_per_s"} <= result.keys()
    local, remote = result["runs"]
    assert local["yielded"] == remote["yielded"] == 10 and local["requests"] == 0
    assert remote["url"] == url and remote["relative"] > 0
    assert main(["bench", str(packed), "--duration", "0.5", "--crops", "4", "--workers", "0"]) == 0
    assert "crops/s" in capsys.readouterr().out


def test_a_worker_reads_an_unindexed_remote_episode_through_its_own_store(  # type: ignore[no-untyped-def]
    s3, s3_uploaded, make_store, packed: Path, tmp_path: Path
) -> None:
    """Without an index nothing is planned or shipped: the worker reads the
    blob itself, through a store it builds from the task's reader on first
    use (an unpickled reader builds none until it reads)."""
    import shutil
    import uuid

    local = tmp_path / "unindexed"
    shutil.copytree(packed, local, ignore=shutil.ignore_patterns("seek_index"))
    store = make_store("s3", s3.url)
    prefix = f"{s3_uploaded}/unindexed-{uuid.uuid4().hex[:8]}"
    for path in sorted(local.rglob("*")):
        if path.is_file():
            store.put_sync(f"{prefix}/{path.relative_to(local).as_posix()}", path)
    sampler = RandomCrops(0.5, per_episode=2)
    expected = list(Streamer(streamer.open_dataset(local), sampler, seed=4, workers=0))
    s = Streamer(Dataset(prefix, store=store), sampler, seed=4, workers=1)
    remote = list(s)
    assert [(c.key, c.start) for c in remote] == [(c.key, c.start) for c in expected]
    for a, b in zip(expected, remote, strict=True):
        np.testing.assert_array_equal(a.audio, b.audio, err_msg=a.key)
    assert s.stats.yielded == 14 and not s.stats.skipped
    assert "index" not in s.stats.decode.paths and sum(s.stats.decode.paths.values()) == 14
