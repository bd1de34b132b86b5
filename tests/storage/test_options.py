"""Retry and cache settings as objects (``retry=RetryPolicy(...)``,
``cache=CacheConfig(...)``) or as flat options, against real loopback servers:
what they configure, which store they share, and how they reach worker processes."""

from __future__ import annotations

import multiprocessing
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SECRET

import streamer
from streamer import CacheConfig, RetryPolicy
from streamer.errors import StorageError
from streamer.storage import open_url

BLOCK = 64 * 1024
FAST = {"backoff": 0.01, "max_backoff": 0.05}
CREDENTIALS = {"key": "test-key-id", "secret": SECRET, "region_name": "us-east-1"}


@pytest.fixture(params=["s3", "http"])
def served(request, s3, http, s3_uploaded):  # type: ignore[no-untyped-def]
    """(open random.bin by URL with options, its server) for S3 and HTTP."""
    kind = request.param
    server = s3 if kind == "s3" else http

    def open_reader(**options):  # type: ignore[no-untyped-def]
        if kind == "s3":
            url = f"s3://{s3_uploaded}/random.bin"
            options = {"endpoint_url": s3.url, **CREDENTIALS, **options}
        else:
            url = f"{http.url}/random.bin"
        store, path = open_url(url, **options)
        reader = store.reader(path)
        reader.size_sync()
        server.reset()
        store.stats.reset()
        return reader

    return open_reader, server


def test_policy_objects_configure_the_store(served, data) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = served
    retry = RetryPolicy(attempts=2, timeout=5.0, **FAST)
    cache = CacheConfig(block_size=BLOCK, coalesce_gap=0, cache_bytes=4 * BLOCK)
    reader = open_reader(retry=retry, cache=cache)
    assert (reader.store.retry, reader.store.cache_config) == (retry, cache)
    assert bytes(reader.read_sync(10, 20)) == data[10:30]
    assert [r.range for r in server.ranged()] == [f"bytes=0-{BLOCK - 1}"]  # one 64 KiB block
    server.faults.errors = 1  # one 503: the second attempt succeeds
    assert bytes(reader.read_sync(3 * BLOCK, 5)) == data[3 * BLOCK :][:5]
    assert reader.store.stats.retries == 1
    server.faults.errors = 2  # two in a row: two attempts are spent
    with pytest.raises(StorageError, match="gave up after 2 attempts"):
        reader.read_sync(5 * BLOCK, 5)


def test_objects_and_flat_options_alike_share_one_store(http) -> None:  # type: ignore[no-untyped-def]
    url = f"{http.url}/random.bin"
    by_object, _ = open_url(url, retry=RetryPolicy(attempts=2), cache=CacheConfig(block_size=BLOCK))
    by_fields, _ = open_url(url, attempts=2, block_size=BLOCK)
    assert by_object is by_fields
    assert open_url(url, retry=RetryPolicy(attempts=2))[0] is open_url(url, attempts=2)[0]
    assert open_url(url, retry=RetryPolicy())[0] is open_url(url)[0]  # the defaults
    assert open_url(url, timeout=30)[0] is open_url(url, retry=RetryPolicy(timeout=30.0))[0]
    assert open_url(url, retry=RetryPolicy(attempts=3))[0] is not by_object
    assert open_url(url, cache=CacheConfig(block_size=2 * BLOCK))[0] is not by_object
    headers = {"X-One": "1"}
    assert open_url(url, headers=headers)[0] is open_url(url, headers=dict(headers))[0]
    assert open_url(url, headers={"X-One": "2"})[0] is not open_url(url, headers=headers)[0]


def test_an_object_and_flat_options_of_one_group_are_an_error(http, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = f"{http.url}/random.bin"
    with pytest.raises(
        ValueError, match=r"retry=RetryPolicy\(\.\.\.\) and the options \['attempts'"
    ):
        open_url(url, retry=RetryPolicy(), attempts=2)
    with pytest.raises(ValueError, match=r"cache=CacheConfig\(\.\.\.\) and the options"):
        streamer.open_dataset(f"{http.url}/packed", cache=CacheConfig(), cache_dir=str(tmp_path))
    # Different groups mix freely.
    store, _ = open_url(url, retry=RetryPolicy(attempts=4), block_size=BLOCK)
    assert (store.retry.attempts, store.cache_config.block_size) == (4, BLOCK)
    with pytest.raises(TypeError, match="retry= takes a RetryPolicy, not dict"):
        open_url(url, retry={"attempts": 2})
    with pytest.raises(TypeError, match="local files take no storage options"):
        open_url(tmp_path, retry=RetryPolicy())


def _settings_in_worker(reader):  # type: ignore[no-untyped-def]
    store = reader.store
    return store.retry, store.cache_config, bytes(reader.read_sync(123, 50))


def test_a_store_with_policy_objects_pickles_to_a_worker_process(  # type: ignore[no-untyped-def]
    s3, s3_uploaded, data, tmp_path: Path
) -> None:
    retry = RetryPolicy(attempts=3, **FAST)
    cache = CacheConfig(block_size=BLOCK, cache_dir=str(tmp_path / "cache"))
    options = {"endpoint_url": s3.url, **CREDENTIALS, "retry": retry, "cache": cache}
    store, path = open_url(f"s3://{s3_uploaded}/random.bin", **options)
    reader = store.reader(path)
    assert pickle.loads(pickle.dumps(store)) is store  # same options -> same store
    assert pickle.loads(pickle.dumps(reader)).store is store
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply(_settings_in_worker, (reader,))
    assert got == (retry, cache, data[123:173])


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_an_unpickled_reader_builds_its_store_only_when_it_reads(  # type: ignore[no-untyped-def]
    s3, http, s3_uploaded, data, kind: str
) -> None:
    """A decode worker handed a crop's bytes never reads through the store:
    unpickling its reader imports no client library (150 ms per worker);
    the first read builds the store from the pickled options."""
    if kind == "s3":
        url, options = f"s3://{s3_uploaded}/random.bin", {"endpoint_url": s3.url, **CREDENTIALS}
    else:
        url, options = f"{http.url}/random.bin", {}
    store, path = open_url(url, **options)
    pickled = pickle.dumps(store.reader(path))
    script = (
        "import pickle, sys\n"
        "reader = pickle.loads(sys.stdin.buffer.read())\n"
        "print(repr(reader), 'aiohttp' in sys.modules, 'aiobotocore' in sys.modules)\n"
        "print(bytes(reader.read_sync(123, 50)).hex(), 'aiohttp' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=pickled, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    unpickled, read = done.stdout.decode().splitlines()
    assert unpickled == f"{store.reader(path)!r} False False"
    assert read == f"{data[123:173].hex()} True"


def test_remote_crops_in_decode_workers_with_policy_objects(  # type: ignore[no-untyped-def]
    s3, s3_uploaded, packed: Path
) -> None:
    """Decode workers rebuild the store from the pickled reader of each task."""
    sampler = streamer.RandomCrops(0.5)
    options = {"endpoint_url": s3.url, **CREDENTIALS}
    options |= {"retry": RetryPolicy(attempts=3, **FAST), "cache": CacheConfig(block_size=BLOCK)}
    remote = streamer.open_dataset(f"s3://{s3_uploaded}/packed", **options)
    s = streamer.Streamer(remote, sampler, workers=1)
    local = streamer.Streamer(streamer.open_dataset(packed), sampler, workers=0)
    assert [(c.key, c.start) for c in s] == [(c.key, c.start) for c in local]
    assert not s.stats.skipped and s.stats.requests > 0


def test_a_budget_of_no_time_is_refused() -> None:
    """``give_up_after`` bounds a request's first attempt too: 0 would let
    none be answered, so it is refused, pointing to ``attempts=1``."""
    with pytest.raises(ValueError, match=r"give_up_after must be positive.*attempts=1"):
        RetryPolicy(give_up_after=0)
