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

import pytest
from helpers import SECRET

from streamer.storage.s3 import S3Store
from testkit import s3servers
from testkit.processes import ServerProcess
from testkit.servers import s3_client

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
    from streamer.errors import StorageError
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
