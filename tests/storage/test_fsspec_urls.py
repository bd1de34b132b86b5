"""URLs of other fsspec file systems, as a user writes them: wrappers over a
sync file system (``dir://``), datasets inside archives, chained URLs
(``zip://ds::file:///x.zip``, ``simplecache::...``), hosts and credentials in
the URL (``ftp://user:password@host:port/ds`` against a real FTP server), and
schemes that cannot be served. Every crop equals the local dataset's."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamer
from streamer import open_dataset
from streamer.errors import ReadOnlyURLError, StreamerError
from streamer.storage.loop import run_sync
from streamer.write.plan import source_origin
from streamer.write.sources import list_sources


def assert_same_crops(dataset: streamer.Dataset, local: streamer.Dataset) -> None:
    """Every episode's blob and a crop of it equal the local dataset's."""
    assert list(dataset.keys()) == list(local.keys())
    for key in local:
        assert bytes(dataset.blob(key).view()) == bytes(local.blob(key).view())
        want = local.read_crop(key, 0.5, 1.7)
        got = dataset.read_crop(key, 0.5, 1.7)
        assert got.dtype == want.dtype and np.array_equal(got, want), key


def streamed(data: streamer.Dataset, workers: int) -> list[tuple[str, float, bytes]]:
    sampler = streamer.RandomCrops(0.5)
    return [
        (c.key, c.start, np.asarray(c.audio).tobytes())
        for c in streamer.Streamer(data, sampler, seed=3, workers=workers)
    ]


@pytest.fixture(scope="module")
def archives(packed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``packed`` as ``folder/dataset``, ``ds.zip`` (stored) and ``ds.tar``, each with
    the dataset under ``dataset/``."""
    root = tmp_path_factory.mktemp("fsspec-urls")
    shutil.copytree(packed, root / "folder" / "dataset")
    with zipfile.ZipFile(root / "ds.zip", "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(packed.rglob("*")):
            if path.is_file():
                archive.write(path, "dataset/" + path.relative_to(packed).as_posix())
    with tarfile.open(root / "ds.tar", "w") as archive:
        archive.add(packed, "dataset")
    return root


def test_a_dir_url_over_a_sync_file_system_serves_crops(packed: Path, archives: Path) -> None:
    """``dir://`` wraps another file system; over the local one (not async)
    every read failed with "can't use asynchronous with non-async fs"."""
    local = open_dataset(packed)
    folder = archives / "folder"
    dataset = open_dataset("dir://dataset", path=str(folder), target_protocol="file")
    assert_same_crops(dataset, local)
    # The reader pickled to decode workers rebuilds the same store.
    assert streamed(dataset, workers=2) == streamed(local, workers=0)


@pytest.mark.parametrize(
    "template",
    [
        "zip://dataset::file://{root}/ds.zip",
        "tar://dataset::file://{root}/ds.tar",
        "dir://dataset::file://{root}/folder",
        "simplecache::file://{root}/folder/dataset",
        "zip://dataset::simplecache::file://{root}/ds.zip",
        "ZIP://dataset::File://{root}/ds.zip",
    ],
)
def test_chained_urls_serve_the_crops_of_the_local_dataset(
    template: str, packed: Path, archives: Path
) -> None:
    """fsspec's URL chains (``A::B``) open the inner file system as the
    outer one's target; the first part was read as the path of the whole
    URL (``Is a directory``, ``unsupported URL scheme simplecache::file://``)."""
    url = template.format(root=archives)
    dataset = open_dataset(url)
    local = open_dataset(packed)
    assert_same_crops(dataset, local)
    if template.startswith("tar://"):  # decode workers rebuild the chain from its options
        assert streamed(dataset, workers=2) == streamed(local, workers=0)


@pytest.mark.parametrize("archive", ["zip", "tar"])
def test_an_archive_is_read_only_and_says_so_before_any_work(
    archive: str, archives: Path, tmp_path: Path
) -> None:
    """``streamer index`` over a dataset inside an archive built the first
    shard's indexes, then failed writing it with ``ValueError: write()
    requires mode 'w'`` after zipfile's "Duplicate name" warning; an archive
    opened for appending (``mode="a"``) would be written without its
    central directory ever being closed, a broken archive."""
    copy = tmp_path / f"ds.{archive}"
    shutil.copy(archives / f"ds.{archive}", copy)
    before = copy.read_bytes()
    url = f"{archive}://dataset::file://{copy}"
    done = run_cli("index", url, "--force", "--no-progress")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "read-only" in lines[0] and f"{archive}://" in lines[0], lines[0]
    dataset = open_dataset(url)
    with pytest.raises(ReadOnlyURLError, match="read-only"):
        dataset.store.put_sync("dataset/new.bin", b"x")
    if archive == "zip":
        with pytest.raises(ReadOnlyURLError, match="read-only"):
            open_dataset(url, mode="a").store.put_sync("dataset/new.bin", b"x")
    assert copy.read_bytes() == before


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamer.cli", *argv], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("foo://bucket/ds", "unknown"),
        ("gcs://bucket/ds", "gcsfs"),
        ("abfs://container/ds", "adlfs"),
        ("zip://ds::foo://x.zip", "unknown"),
    ],
)
def test_a_scheme_that_cannot_be_served_is_a_usage_error(url: str, says: str) -> None:
    """Exit code 2 and one line naming the URL (and the package to install),
    as for any command line that cannot mean anything; it was 1."""
    if says != "unknown" and importlib.util.find_spec(says) is not None:
        pytest.skip(f"{says} is installed")
    done = run_cli("inspect", url)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert url in lines[0] and says in lines[0], lines[0]


# -- ftp:// against a real FTP server (pyftpdlib) on loopback ------------------

FTP_PASSWORD = "ftp-sekrit-0xC0FFEE"


@contextlib.contextmanager
def ftp_server(root: Path, per_client: int = 0, idle: float = 300) -> Iterator[str]:
    """``ftp://user:PASSWORD@127.0.0.1:PORT`` serving ``root`` (a threaded
    server: one thread per connection, as real servers answer), at most
    ``per_client`` connections from one address (0: no limit), each closed
    after ``idle`` seconds without a command."""
    pytest.importorskip("pyftpdlib")
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.ioloop import IOLoop
    from pyftpdlib.servers import ThreadedFTPServer

    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
    authorizer = DummyAuthorizer()
    authorizer.add_user("user", FTP_PASSWORD, str(root), perm="elradfmwMT")
    handler = type("Handler", (FTPHandler,), {"authorizer": authorizer, "timeout": idle})
    # An IOLoop of its own: close_all() closes the loop, the shared one by default.
    server = ThreadedFTPServer(("127.0.0.1", 0), handler, ioloop=IOLoop())
    server.max_cons_per_ip = per_client
    port = server.socket.getsockname()[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"timeout": 0.2}, daemon=True)
    thread.start()
    try:
        yield f"ftp://user:{FTP_PASSWORD}@127.0.0.1:{port}"
    finally:
        server.close_all()
        thread.join(10)


@pytest.fixture
def ftp_url(archives: Path) -> Iterator[str]:
    with ftp_server(archives) as url:
        yield url


def concurrent_crops_match(dataset: streamer.Dataset, local: streamer.Dataset) -> bool:
    async def all_at_once() -> list[np.ndarray]:
        return await asyncio.gather(
            *(dataset.aread_crop(key, 0.1 * n, 0.1 * n + 0.6) for n in range(4) for key in local)
        )

    want = [local.read_crop(key, 0.1 * n, 0.1 * n + 0.6) for n in range(4) for key in local]
    got = asyncio.run(all_at_once())
    return all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_an_ftp_url_serves_concurrent_crops_of_the_local_dataset(
    ftp_url: str, packed: Path
) -> None:
    """The host, port, user and password come from the URL. fsspec's FTP file
    system has one control connection, which concurrent calls (run in
    threads) shared: listings and reads failed ("cannot read from timed out
    object", a shard "not found", the manifest "stale") or mixed answers."""
    local = open_dataset(packed)
    dataset = open_dataset(f"{ftp_url}/folder/dataset")
    assert_same_crops(dataset, local)

    assert concurrent_crops_match(dataset, local)
    assert streamed(dataset, workers=2) == streamed(local, workers=0)
    assert dataset.store.stats.failures == 0


def test_an_ftp_server_that_limits_connections_serves_every_crop(
    archives: Path, packed: Path
) -> None:
    """Each concurrent call has an FTP connection of its own; a server that
    allows two per client answers the third "421 Too many connections",
    which failed every crop: calls share the connections there are."""
    with ftp_server(archives, per_client=2) as url:
        dataset = open_dataset(f"{url}/folder/dataset", attempts=2)
        assert concurrent_crops_match(dataset, open_dataset(packed))
        assert dataset.store.stats.failures == 0


def test_an_ftp_connection_the_server_closed_when_idle_is_opened_anew(
    archives: Path, packed: Path
) -> None:
    """FTP servers close idle control connections ("421 Control connection
    timed out"): the next read through that connection failed, not retried."""
    local = open_dataset(packed)
    with ftp_server(archives, idle=0.5) as url:
        dataset = open_dataset(f"{url}/folder/dataset", attempts=3, backoff=0.01)
        key = next(iter(local))
        assert np.array_equal(dataset.read_crop(key, 0.0, 0.5), local.read_crop(key, 0.0, 0.5))
        time.sleep(1.5)
        assert_same_crops(dataset, local)
        assert dataset.store.stats.failures == 0


def test_an_ftp_password_appears_nowhere(
    ftp_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not in reprs, errors, logs (at DEBUG), stats, nor the disk tier's files."""
    caplog.set_level(logging.DEBUG)
    dataset = open_dataset(f"{ftp_url}/folder/dataset", cache_dir=str(tmp_path / "cache"))
    key = next(iter(dataset))
    dataset.read_crop(key, 0.0, 1.0)
    run_sync(dataset.store.drain())
    with pytest.raises(StreamerError) as missing:
        open_dataset(f"{ftp_url}/no/such/dataset", cache_dir=str(tmp_path / "cache"))
    said = [repr(dataset), repr(dataset.store), str(missing.value), caplog.text]
    said.append(str(dataset.store.stats.snapshot()))
    said.append(repr(dataset.store.reader("folder/dataset/streamer-manifest.json")))
    said += [str(path) for path in tmp_path.rglob("*")]
    assert "127.0.0.1" in str(missing.value)
    for text in said:
        assert FTP_PASSWORD not in text, text
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            assert FTP_PASSWORD.encode() not in path.read_bytes(), path


def test_a_dataset_packed_onto_an_ftp_server_serves_the_local_crops(
    ftp_url: str, audio_dir: Path, packed: Path, archives: Path
) -> None:
    """``streamer pack SRC ftp://...``: OUT's folders are not there yet, and an
    FTP server stores no file into a missing folder. Pack said "cannot use
    ftp://... as OUT: .../audio: not found", then "550 No such file or directory"."""
    from streamer.write.pack import pack

    pack(audio_dir, f"{ftp_url}/written", batch_size=2, shard_size=600_000, progress=False)
    assert (archives / "written" / "audio").is_dir()
    assert_same_crops(open_dataset(f"{ftp_url}/written"), open_dataset(packed))


# -- sftp:// against a real SSH server (asyncssh's SFTP server) on loopback -----

SFTP_PASSWORD = "sftp-sekrit-0xBEEF"


@pytest.fixture(scope="module")
def sftp_url(archives: Path) -> Iterator[str]:
    """``sftp://user:PASSWORD@127.0.0.1:PORT`` serving ``archives`` (chrooted)."""
    pytest.importorskip("paramiko")  # fsspec's SFTP client
    asyncssh = pytest.importorskip("asyncssh")

    class Server(asyncssh.SSHServer):  # type: ignore[misc]
        def begin_auth(self, username: str) -> bool:
            return True

        def password_auth_supported(self) -> bool:
            return True

        def validate_password(self, username: str, password: str) -> bool:
            return username == "user" and password == SFTP_PASSWORD

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def listen() -> Any:
        return await asyncssh.listen(
            "127.0.0.1",
            0,
            server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
            server_factory=Server,
            sftp_factory=lambda channel: asyncssh.SFTPServer(channel, chroot=bytes(archives)),
        )

    server = asyncio.run_coroutine_threadsafe(listen(), loop).result(30)
    port = server.sockets[0].getsockname()[1]
    yield f"sftp://user:{SFTP_PASSWORD}@127.0.0.1:{port}"
    loop.call_soon_threadsafe(server.close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_an_sftp_url_serves_the_crops_of_the_local_dataset(
    sftp_url: str, packed: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Host, port, user and password from the URL; paramiko's one SFTP channel
    per instance is used by one call at a time, in decode workers too."""
    caplog.set_level(logging.DEBUG)
    local = open_dataset(packed)
    dataset = open_dataset(f"{sftp_url}/folder/dataset")
    assert_same_crops(dataset, local)
    assert streamed(dataset, workers=2) == streamed(local, workers=0)
    with pytest.raises(StreamerError) as missing:
        open_dataset(f"{sftp_url}/no/such/dataset")
    assert "sftp://127.0.0.1:" in str(missing.value)
    for text in (repr(dataset), str(missing.value), caplog.text):
        assert SFTP_PASSWORD not in text


def test_an_ftp_listing_says_each_files_version(tmp_path: Path) -> None:
    """A pack of an ``ftp://`` SRC fingerprints each file's modification time,
    as the server lists it: a file rewritten at its size between two parts
    of the job is seen (``streamer.write.plan``)."""
    for name in ("a.wav", "b.wav"):
        (tmp_path / name).write_bytes(b"RIFF" + bytes(60))
    os.utime(tmp_path / "b.wav", (1_700_000_000, 1_700_000_000))
    with ftp_server(tmp_path) as url:
        listing = list_sources(url)
        origin = source_origin(url, listing)
    assert [f.source for f in listing] == ["a.wav", "b.wav"]
    assert origin.stamps["b.wav"] == "modify 20231114221320"
    assert origin.stamps["a.wav"].startswith("modify ")
