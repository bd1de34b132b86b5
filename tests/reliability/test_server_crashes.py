"""Real servers that crash, hang and come back: the failures a proxy does not imitate.

Each test runs its own server process (``testkit.s3servers``,
``testkit.httpservers``), kills it (SIGKILL: the kernel refuses its port
until it is back), stops it (SIGSTOP: the kernel still accepts connections,
nothing answers them) or replaces it, and checks the contract: every crop
yielded, counted, or the iteration raising one clear ``StorageError``;
nothing written half.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import SECRET, write_audio

from streamer import RandomCrops, Streamer, open_dataset
from streamer.dataset import Dataset
from streamer.errors import StorageError
from streamer.storage.s3 import S3Store
from testkit import httpservers, s3servers
from testkit.processes import ServerProcess
from testkit.servers import s3_client, upload_tree

KEY_ID = "test-key-id"
FAST = {"backoff": 0.05, "max_backoff": 0.5, "connect_timeout": 2.0, "read_timeout": 2.0}


@pytest.fixture
def rclone(tmp_path: Path) -> Iterator[ServerProcess]:
    """An rclone S3 server of this test alone, with an empty bucket ``data``."""
    process = s3servers.start("rclone", tmp_path / "rclone", KEY_ID, SECRET)
    try:
        _client(process.url).create_bucket(Bucket="data")
        yield process
    finally:
        process.stop()


def _client(endpoint: str):  # type: ignore[no-untyped-def]
    return s3_client(endpoint, KEY_ID, SECRET)


def _s3_store(endpoint: str, **options: object) -> S3Store:
    credentials = {"key": KEY_ID, "secret": SECRET, "region_name": "us-east-1"}
    return S3Store("s3", {"endpoint_url": endpoint, **credentials, **FAST, **options})


def _crash_when(
    condition, server: ServerProcess, down: float, timeout: float = 30.0
) -> threading.Thread:  # type: ignore[no-untyped-def]
    """A thread that SIGKILLs ``server`` once ``condition()`` holds and
    restarts it on the same port ``down`` seconds later."""

    def run() -> None:
        deadline = time.monotonic() + timeout
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.002)
        server.kill()
        time.sleep(down)
        server.restart()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_multipart_upload_the_restarted_server_forgot_is_started_anew(
    rclone: ServerProcess, tmp_path: Path
) -> None:
    """rclone keeps multipart uploads in memory: killed in the middle of one and
    restarted, it answers the next part with 404 NoSuchUpload. The upload is
    started again from the first part (it used to fail as
    ``s3://data/big: not found (404 NoSuchUpload ...)``); the object appears
    whole, once."""
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(48 << 20))
    store = _s3_store(rclone.url, multipart_threshold=8 << 20, multipart_part_size=5 << 20)
    crash = _crash_when(lambda: store.stats.bytes_stored > 0, rclone, down=1.0)
    store.put_sync("data/big", str(source))
    crash.join()
    assert store.stats.retries > 0  # the crash hit the upload
    body = _client(rclone.url).get_object(Bucket="data", Key="big")["Body"].read()
    assert body == source.read_bytes()


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_a_host_that_does_not_resolve_fails_at_once_in_one_line(kind: str) -> None:
    """An endpoint whose name does not resolve (a typo; ``.invalid`` never
    does) is no outage to wait out: the first request of a store that never
    answered fails at once, saying so (it used to wait the whole budget, 30 s
    in the CLI and 300 s in a training run, and botocore's message did not
    say why it 'could not connect')."""
    from streamer.storage.http import HTTPStore

    host = "no-such-host.invalid"
    began = time.monotonic()
    with pytest.raises(StorageError) as caught:
        if kind == "http":
            HTTPStore("http", {"give_up_after": 20.0, **FAST}).list_sync(f"http://{host}/ds")
        else:
            _s3_store(f"http://{host}:9000", give_up_after=20.0).list_sync("data/ds")
    message = str(caught.value)
    assert time.monotonic() - began < 5.0, message
    assert "\n" not in message and host in message and "does not resolve" in message


# -- a pass over a server that crashes or hangs --------------------------------------

#: Small blocks and cache: the crops after the crash still need requests.
SMALL_CACHE = {"block_size": 16 * 1024, "cache_bytes": 64 * 1024, "hedge_after": 0.5}


@pytest.fixture(params=["nginx", "rclone"])
def served_packed(request, packed: Path, tmp_path: Path, make_store):  # type: ignore[no-untyped-def]
    """(open the ``packed`` dataset through a new store with options, its
    server process): nginx over the folder, or rclone holding it in a bucket."""
    if request.param == "nginx":
        process = httpservers.start("nginx", packed.parent, tmp_path / "nginx")

        def open_remote(**options: object) -> Dataset:
            store = make_store("http", **FAST, **SMALL_CACHE, **options)
            return Dataset(f"{process.url}/{packed.name}", store=store)

    else:
        process = s3servers.start("rclone", tmp_path / "rclone", KEY_ID, SECRET)
        upload_tree(process.url, packed, "data", "packed", KEY_ID, SECRET)

        def open_remote(**options: object) -> Dataset:
            store = make_store("s3", process.url, **FAST, **SMALL_CACHE, **options)
            return Dataset("data/packed", store=store)

    try:
        yield open_remote, process
    finally:
        process.stop()


def _local_crops(packed: Path) -> dict[tuple[str, float], np.ndarray]:
    crops = Streamer(open_dataset(packed), SAMPLER, seed=3, workers=0)
    return {(c.key, c.start): c.audio for c in crops}


SAMPLER = RandomCrops(0.5, per_episode=3)


def _stream(dataset, on_crop) -> tuple[list, BaseException | None]:  # type: ignore[no-untyped-def]
    """Crops of one pass (workers=1) and the error that ended it, if any;
    ``on_crop(n)`` after the n-th crop."""
    crops: list = []
    try:
        for crop in Streamer(dataset, SAMPLER, seed=3, workers=1, prefetch=2):
            crops.append(crop)
            on_crop(len(crops))
    except StorageError as exc:
        return crops, exc
    return crops, None


def _pass_through_a_break(dataset, packed: Path, stop, start, seconds: float) -> None:  # type: ignore[no-untyped-def]
    """A pass whose server is ``stop()``-ped after its third crop and
    ``start()``-ed ``seconds`` later: every crop, each equal to the local one."""
    later: list[threading.Timer] = []

    def pause(n: int) -> None:
        if n == 3:
            stop()
            later.append(threading.Timer(seconds, start))
            later[0].start()

    crops, error = _stream(dataset, pause)
    later[0].join()
    assert error is None
    local = _local_crops(packed)
    assert sorted((c.key, c.start) for c in crops) == sorted(local)
    for crop in crops:
        np.testing.assert_array_equal(crop.audio, local[(crop.key, crop.start)], err_msg=crop.key)


def test_a_pass_rides_out_a_server_killed_and_restarted_on_its_port(
    served_packed, packed: Path
) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL mid-pass (connections refused), the server back on the same
    port 2 s later: every crop of the pass, each equal to the local one, the
    retries counted."""
    open_remote, process = served_packed
    dataset = open_remote(give_up_after=20.0)
    _pass_through_a_break(dataset, packed, process.kill, process.restart, 2.0)
    stats = dataset.store.stats
    assert stats.retries > 0 and stats.outages == 1 and stats.failures == 0


def test_a_server_back_after_the_budget_ends_the_pass_with_one_clear_error(
    served_packed,
) -> None:  # type: ignore[no-untyped-def]
    """Killed and back only after the time budget: the pass raises one
    ``StorageError`` naming the object, the crops before it yielded."""
    open_remote, process = served_packed
    dataset = open_remote(give_up_after=1.5)
    began: list[float] = []

    def crash(n: int) -> None:
        if n == 3:
            process.kill()
            began.append(time.monotonic())

    crops, error = _stream(dataset, crash)
    assert isinstance(error, StorageError), error
    assert time.monotonic() - began[0] < 8.0
    message = str(error)
    assert "\n" not in message and ".wsds" in message and "gave up" in message
    assert len(crops) >= 3
    assert dataset.store.stats.failure_reasons.get("gave up retrying", 0) >= 1


def test_a_paused_server_costs_timeouts_not_the_pass(served_packed, packed: Path) -> None:  # type: ignore[no-untyped-def]
    """SIGSTOP mid-pass (the kernel accepts connections, nothing answers),
    SIGCONT 3 s later: read timeouts and hedges, no deadlock, every crop."""
    open_remote, process = served_packed
    dataset = open_remote(give_up_after=20.0)
    _pass_through_a_break(dataset, packed, process.pause, process.resume, 3.0)


def test_a_server_paused_for_good_ends_the_pass_within_the_budget(served_packed) -> None:  # type: ignore[no-untyped-def]
    """SIGSTOP for good: the pass raises ``StorageError`` once the budget is
    spent (plus one read timeout), never waits forever."""
    open_remote, process = served_packed
    dataset = open_remote(give_up_after=3.0)
    began: list[float] = []

    def pause(n: int) -> None:
        if n == 3:
            process.pause()
            began.append(time.monotonic())

    try:
        _, error = _stream(dataset, pause)
    finally:
        process.resume()
    assert isinstance(error, StorageError), error
    assert time.monotonic() - began[0] < 3.0 + 2 * FAST["read_timeout"] + 3.0
    assert ".wsds" in str(error)


def test_another_dataset_at_the_same_url_after_a_crash_is_a_change_not_a_mix(
    tmp_path: Path, make_store, caplog
) -> None:  # type: ignore[no-untyped-def]
    """nginx serving dataset A crashes mid-pass; Caddy comes up on its port
    serving dataset B at the same path (same keys, same shard names, other
    audio). The pass raises 'changed on the server' (A's audio shards,
    opened before, now answer with another size or ETag), every crop it
    yielded is A's, and B's shards were not taken for A's stale ones."""
    from streamer import SequentialCrops
    from streamer.write.pack import pack

    for name, seed in (("a", 0), ("b", 100)):
        for n, codec in enumerate(("mp3", "flac", "wav", "aac")):
            write_audio(tmp_path / f"src-{name}", f"f{n}", codec, 22050, 1, 2.0, seed=seed + n)
        pack(
            tmp_path / f"src-{name}",
            tmp_path / name / "ds",
            shard_size=40_000,
            batch_size=1,
            progress=False,
        )
    first = httpservers.start("nginx", tmp_path / "a", tmp_path / "nginx")
    port = int(first.url.rsplit(":", 1)[1])
    second: list[ServerProcess] = []
    dataset = Dataset(f"{first.url}/ds", store=make_store("http", give_up_after=20.0, **FAST))
    assert dataset.manifest is not None and len(dataset.shard_names) >= 3

    def swap(n: int) -> None:
        if n == 2:
            first.kill()
            second.append(httpservers.start("caddy", tmp_path / "b", tmp_path / "caddy", port))

    sampler = SequentialCrops(0.5)
    crops: list = []
    try:
        with pytest.raises(StorageError, match="changed on the server"):
            for crop in Streamer(dataset, sampler, workers=1, prefetch=2, shuffle_window=0):
                crops.append(crop)
                swap(len(crops))
    finally:
        for process in (first, *second):
            process.stop()
    local = {
        (c.key, c.start): c.audio
        for c in Streamer(open_dataset(tmp_path / "a" / "ds"), sampler, workers=0)
    }
    for crop in crops:  # what was yielded is A's
        np.testing.assert_array_equal(crop.audio, local[(crop.key, crop.start)], err_msg=crop.key)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("streamer.dataset")]
    assert not any("keys differ" in line or "is stale" in line for line in said), said


def test_a_hang_while_shards_open_is_no_reason_to_list_the_store(
    packed: Path, tmp_path: Path, make_store, caplog
) -> None:  # type: ignore[no-untyped-def]
    """nginx stopped (SIGSTOP) between reading the manifest and opening the
    shards: each footer read gives up at the budget. A shard the manifest
    names that cannot be read used to send a listing of its directory (is
    the manifest stale?) whatever the failure, so each hung shard cost one
    more probe of the dead store after the budget (a 2 s budget ended after
    3 footer reads and 3 listings, 8-10 s) and the failed listing was
    remembered; only a missing shard (404) asks the listing now."""
    import logging

    process = httpservers.start("nginx", packed.parent, tmp_path / "nginx")
    options = {**FAST, "read_timeout": 1.0, "give_up_after": 2.0, "hedge_after": None}
    dataset = Dataset(f"{process.url}/{packed.name}", store=make_store("http", **options))
    assert dataset.manifest is not None
    caplog.set_level(logging.DEBUG, logger="streamer")
    process.pause()
    began = time.monotonic()
    try:
        with pytest.raises(StorageError, match=r"\.wsds"):
            dataset.shard_names  # noqa: B018 (opens every shard)
    finally:
        process.resume()
        process.stop()
    listed = [r.getMessage() for r in caplog.records if "list http" in r.getMessage()]
    assert listed == []
    assert time.monotonic() - began < 2.0 + 2 * 1.0 + 1.5


def test_after_the_budget_the_next_pass_goes_on_from_the_crop_that_failed(
    served_packed, packed: Path
) -> None:  # type: ignore[no-untyped-def]
    """The pass the dead server ended raises; once the server is back,
    iterating again yields the rest: together every crop of the epoch, once
    each, equal to the local ones (nothing dropped by the error)."""
    open_remote, process = served_packed
    dataset = open_remote(give_up_after=1.0)
    stream = Streamer(dataset, SAMPLER, seed=3, workers=1, prefetch=2)
    crops: list = []
    with pytest.raises(StorageError):
        for crop in stream:
            crops.append(crop)
            if len(crops) == 3:
                process.kill()
    assert stream.epoch == 0
    process.restart()
    crops.extend(stream)
    local = _local_crops(packed)
    assert sorted((c.key, c.start) for c in crops) == sorted(local)
    for crop in crops:
        np.testing.assert_array_equal(crop.audio, local[(crop.key, crop.start)], err_msg=crop.key)
    assert stream.epoch == 1
