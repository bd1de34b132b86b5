"""Fan-out over a real S3 server with processes: one partition SIGKILLed
mid-shard leaves no partial shard, its re-run finishes the dataset; two
runs of one partition at once do not corrupt each other."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import BUCKET, SECRET, write_audio

from streamer import open_dataset
from streamer.storage import open_url
from streamer.write.verify import verify_dataset

N = 3
SHARD_SIZE = "40K"  # two 1-second 16 kHz WAV files per shard: six shards, two per partition


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("crash-src")
    for i in range(12):
        write_audio(src, f"ep{i:02d}", "wav", 16000, 1, 1.0, seed=i)
    return src


@pytest.fixture(params=["moto", pytest.param("seaweedfs", marks=pytest.mark.slow)])
def server(
    request: pytest.FixtureRequest,
    s3_servers: Any,
    s3_uploaded: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    for name, value in _env().items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    proxy = s3_servers(request.param)
    proxy.reset()
    yield proxy
    proxy.reset()


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "test-key-id",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def _pack(src: Path, out: str, endpoint: str, part: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "streamer.cli", "pack", str(src), out]
    command += ["--endpoint-url", endpoint, "--shards", part, "--shard-size", SHARD_SIZE]
    command += ["--batch-size", "1", "--no-progress"]
    return subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(process: subprocess.Popen[bytes]) -> str:
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err.decode()
    return out.decode()


def _objects(out: str, endpoint: str, column_dir: str) -> list[str]:
    store, root = open_url(out, endpoint_url=endpoint, key="test-key-id", secret=SECRET)
    return [e.name for e in store.list_sync(store.join(root, column_dir))]


def test_a_partition_killed_mid_shard_is_finished_by_its_rerun(source: Path, server: Any) -> None:
    out = f"s3://{BUCKET}/fanout-{uuid.uuid4().hex[:8]}"
    server.faults.only_ranged = False
    server.faults.latency = 0.1  # every request: room to land the kill between objects
    victim = "shard-000004"  # partition 1's second shard
    processes = {i: _pack(source, out, server.url, f"{i}/{N}") for i in range(N)}
    deadline = time.monotonic() + 120
    while not any(
        victim in r.path and "audio_info" in r.path and r.method == "PUT"
        for r in list(server.requests)
    ):
        assert time.monotonic() < deadline, "partition 1 never reached its second shard"
        time.sleep(0.005)
    processes[1].send_signal(signal.SIGKILL)  # after its audio_info, before its audio
    processes[1].communicate(timeout=60)
    assert processes[1].returncode == -signal.SIGKILL
    for i in (0, 2):
        assert "manifest not written" in _finish(processes[i])
    server.faults.latency = 0.0
    # Nothing partial is visible: the shard's audio never appeared, no manifest.
    assert f"{victim}.wsds" not in _objects(out, server.url, "audio")
    options = {"endpoint_url": server.url}
    before = verify_dataset(out, storage_options=options)
    assert not before.ok and any("streamer-manifest.json: absent" in p for p in before.problems)
    rerun = _finish(_pack(source, out, server.url, f"1/{N}"))
    assert "left as they are: 1 shards already complete" in rerun
    assert "manifest written" in rerun
    report = verify_dataset(out, storage_options=options)
    assert report.ok, report.problems
    assert report.shards == 6 and report.rows == 12
    keys = Counter(open_dataset(out, endpoint_url=server.url).keys())
    assert keys == Counter(f"ep{i:02d}" for i in range(12))


def test_two_runs_of_one_partition_at_once_leave_a_dataset_that_verifies(
    source: Path, server: Any
) -> None:
    out = f"s3://{BUCKET}/twins-{uuid.uuid4().hex[:8]}"
    first, second = (_pack(source, out, server.url, "0/1") for _ in range(2))
    _finish(first)
    _finish(second)
    report = verify_dataset(out, storage_options={"endpoint_url": server.url})
    assert report.ok, report.problems
    assert report.rows == 12


def _stage_many(root: str, times: int) -> list[str]:
    """Enter and leave a pack run's staging folder ``times`` times (a part of
    a fan-out on this host); the errors met."""
    from streamer.storage.local import LocalStore
    from streamer.write.pack import _staging

    errors = []
    for _ in range(times):
        try:
            with _staging(LocalStore(), root):
                pass
        except OSError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    return errors


def test_runs_on_one_host_share_the_staging_folder_without_failing(tmp_path: Path) -> None:
    """A run ending removes the shared staging folder when it is empty; another
    making its own folder in it at that moment failed ("No such file or
    directory": about one run in 15 with four at once)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(4) as pool:
        found = pool.starmap(_stage_many, [(str(tmp_path), 400)] * 4)
    assert [error for errors in found for error in errors] == []
    assert not (tmp_path / ".streamer-pack").exists()
