"""Shared fixtures: small audio files made by real encoders, and packed datasets."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _index_support import encoded
from helpers import (
    BUCKET,
    FIXTURE_FILES,
    HTTP_KINDS,
    S3_KINDS,
    SECRET,
    servers,
    write_audio,
    write_blob_dataset,
)

from streamer.dataset.dataset import Dataset
from streamer.write.pack import pack
from testkit import httpservers, s3servers
from testkit.processes import ServerProcess
from testkit.servers import LoopbackServer, file_handler, proxy_handler, upload_tree


@pytest.fixture(scope="session")
def audio_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of 3-second files, one per codec, under nested subfolders."""
    folder = tmp_path_factory.mktemp("audio")
    for index, (codec, rate, channels) in enumerate(FIXTURE_FILES):
        write_audio(folder, f"set{index % 2}/{codec}", codec, rate, channels, 3.0, seed=index)
    return folder


@pytest.fixture(scope="session")
def packed(audio_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``audio_dir`` packed into a dataset with small batches and shards."""
    out = tmp_path_factory.mktemp("packed") / "dataset"
    pack(audio_dir, out, batch_size=2, shard_size=600_000, progress=False)
    return out


@pytest.fixture(scope="session")
def docs_audio(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The episodes the docs' snippets name (``show/episode-0042``), long
    enough for their crops (``read_crop(key, 12.5, 20.5)``), with a sidecar
    of the labels their ``columns=`` and ``supervisions=`` ask for."""
    folder = tmp_path_factory.mktemp("docs-audio")
    for number, codec in ((42, "mp3"), (43, "flac")):
        write_audio(folder / "in", f"show/episode-00{number}", codec, 16000, 1, 24.0, seed=number)
    segments = [{"start": 10.0, "end": 14.0, "text": "hello", "words": []}]
    labels = [
        {"path": f"show/episode-00{n}.{ext}", "speaker": f"spk{n}", "language": "en"}
        | {"label": n, "transcript": segments}
        for n, ext in ((42, "mp3"), (43, "flac"))
    ]
    (folder / "labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in labels))
    return folder


@pytest.fixture(scope="session")
def docs_dataset(docs_audio: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``docs_audio`` packed, its labels in ``labels/``: the dataset the docs'
    snippets read as ``/data/podcasts`` or ``s3://bucket/podcasts``."""
    out = tmp_path_factory.mktemp("docs-dataset") / "podcasts"
    pack(docs_audio / "in", out, columns=docs_audio / "labels.jsonl", progress=False)
    return out


@pytest.fixture
def unindexed(packed: Path, tmp_path: Path) -> Path:
    """``packed`` without its seek indexes: a worker decodes each crop from the
    episode's blob, through the reader the task carries."""
    root = tmp_path / "unindexed"
    shutil.copytree(packed, root, ignore=shutil.ignore_patterns("seek_index"))
    return root


@pytest.fixture(scope="session")
def index_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten 1-second files (two per codec, named without extensions: sniffed)
    and a chained Opus stream whose links differ in channel count, which
    cannot be indexed (FFmpeg cannot decode it as one stream)."""
    src = tmp_path_factory.mktemp("index-src")
    for codec in ("mp3", "opus", "flac", "aac", "wav"):
        for n in range(2):
            data = encoded(codec, 48000, 1 + n, seconds=1.0)
            (src / f"{codec}{n}.bin").write_bytes(data)
    mono, stereo = (encoded("opus", 48000, n, seconds=0.5) for n in (1, 2))
    (src / "chained.opus").write_bytes(mono + stereo)
    return src


# -- storage: real servers on loopback -------------------------------------------


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3 protocol server (moto's server mode) on a free loopback port."""
    from moto.server import ThreadedMotoServer

    # The server's access log (it runs in this process) prints each request
    # line, presigned queries included: the server's output, not streamer's.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def s3_proxy(moto_endpoint: str) -> Iterator[LoopbackServer]:
    """moto behind the fault-injecting, request-logging proxy."""
    server = LoopbackServer(proxy_handler(moto_endpoint)).start()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_proxy: LoopbackServer) -> Iterator[LoopbackServer]:
    """The S3 proxy with faults and request log cleared around the test."""
    s3_proxy.reset()
    yield s3_proxy
    s3_proxy.reset()


@pytest.fixture(scope="session")
def storage_root(packed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the stores serve: the packed dataset, shards with a big blob, random bytes."""
    root = tmp_path_factory.mktemp("served")
    shutil.copytree(packed, root / "packed")
    write_blob_dataset(root / "big", blob_sizes=(3000, 1_500_000), batches=1)
    write_blob_dataset(root / "batches", blob_sizes=(2000, 400_000, 300_000, 500_000), batches=4)
    (root / "random.bin").write_bytes(np.random.default_rng(7).bytes(700_001))
    return root


@pytest.fixture(scope="session")
def s3_uploaded(moto_endpoint: str, storage_root: Path) -> str:
    """``storage_root`` uploaded to ``s3://data/`` (with boto3, straight to moto)."""
    upload_tree(moto_endpoint, storage_root, BUCKET, "", "test-key-id", SECRET)
    return BUCKET


@pytest.fixture(scope="session")
def s3_servers(
    s3_proxy: LoopbackServer, s3_uploaded: str, storage_root: Path, tmp_path_factory: Any
) -> Iterator[Callable[[str], LoopbackServer]]:
    """``s3_servers(kind)``: the fault-injecting proxy in front of an S3 server of
    ``kind`` (one of ``S3_KINDS``) holding ``storage_root`` in ``s3://data/``.
    Each server starts on first use and runs until the session ends."""
    proxies = {"moto": s3_proxy}
    processes: list[ServerProcess] = []

    def get(kind: str) -> LoopbackServer:
        if kind not in proxies:
            process = s3servers.start(kind, tmp_path_factory.mktemp(kind), "test-key-id", SECRET)
            processes.append(process)
            upload_tree(process.url, storage_root, BUCKET, "", "test-key-id", SECRET)
            proxies[kind] = LoopbackServer(proxy_handler(process.url)).start()
        return proxies[kind]

    yield get
    for proxy in proxies.values():
        proxy.reset()
    for kind, proxy in proxies.items():
        if kind != "moto":
            proxy.stop()
    for process in processes:
        process.stop()


@pytest.fixture(params=servers(*S3_KINDS))
def s3_any(request: pytest.FixtureRequest, s3_servers: Any) -> Iterator[LoopbackServer]:
    """The proxy of each S3 implementation in turn, faults and request log
    cleared around the test; ``s3_uploaded`` names its bucket."""
    server = s3_servers(request.param)
    server.reset()
    yield server
    server.reset()


@pytest.fixture(scope="session")
def http_files(storage_root: Path) -> Iterator[LoopbackServer]:
    """An aiohttp file server over ``storage_root`` (Range, listings, fault switches)."""
    server = LoopbackServer(file_handler(storage_root)).start()
    yield server
    server.stop()


@pytest.fixture
def http(http_files: LoopbackServer) -> Iterator[LoopbackServer]:
    http_files.reset()
    yield http_files
    http_files.reset()


class _HTTPServers:
    """The HTTP servers of one kind each (``HTTP_KINDS``) over one folder, each
    behind the fault-injecting proxy but the tests' own (it injects faults
    itself); started on first use, stopped by ``stop``."""

    def __init__(self, root: Path, work: Path, own: LoopbackServer | None = None) -> None:
        self.root, self.work = root, work
        self.fronts: dict[str, LoopbackServer] = {} if own is None else {"http": own}
        self.processes: list[ServerProcess] = []

    def __call__(self, kind: str) -> LoopbackServer:
        if kind not in self.fronts:
            if kind == "http":
                front = LoopbackServer(file_handler(self.root)).start()
            else:
                process = httpservers.start(kind, self.root, self.work / kind)
                self.processes.append(process)
                front = LoopbackServer(proxy_handler(process.url)).start()
            self.fronts[kind] = front
        return self.fronts[kind]

    def stop(self, own: LoopbackServer | None = None) -> None:
        for front in self.fronts.values():
            if front is not own:
                front.stop()
        for process in self.processes:
            process.stop()


@pytest.fixture(scope="session")
def http_servers(
    http_files: LoopbackServer, storage_root: Path, tmp_path_factory: Any
) -> Iterator[Callable[[str], LoopbackServer]]:
    """``http_servers(kind)``: the server of ``kind`` (one of ``HTTP_KINDS``)
    over ``storage_root``; real ones behind the fault-injecting proxy."""
    servers = _HTTPServers(storage_root, tmp_path_factory.mktemp("http-servers"), http_files)
    yield servers
    servers.stop(http_files)


@pytest.fixture(scope="session")
def http_published(tmp_path_factory: Any) -> Iterator[tuple[Path, Callable[[str], LoopbackServer]]]:
    """(folder, ``servers(kind)``): the servers of each of ``HTTP_KINDS`` over
    one folder that tests publish datasets into (``remote_folder``)."""
    root = tmp_path_factory.mktemp("http-published")
    servers = _HTTPServers(root, tmp_path_factory.mktemp("http-published-servers"))
    yield root, servers
    servers.stop()


@pytest.fixture
def make_store() -> Iterator[Callable[..., Any]]:
    """``make_store(kind, endpoint="", **options)``: a new, unshared store (own pool,
    cache and stats) of kind ``s3``, ``http`` or an fsspec protocol; closed after the test."""
    from streamer.storage.fsspec import FsspecStore
    from streamer.storage.http import HTTPStore
    from streamer.storage.loop import run_sync
    from streamer.storage.s3 import S3Store

    made = []

    def make(kind: str, endpoint: str = "", **options: Any) -> Any:
        if kind == "s3":
            credentials = {"key": "test-key-id", "secret": SECRET, "region_name": "us-east-1"}
            store = S3Store("s3", {"endpoint_url": endpoint, **credentials, **options})
        elif kind == "http":
            store = HTTPStore("http", options)
        else:
            store = FsspecStore(kind, options)
        made.append(store)
        return store

    yield make
    for store in made:
        run_sync(store._close_on_loop())


@pytest.fixture(params=servers(*S3_KINDS, *HTTP_KINDS))
def remote(request, s3_servers, http_servers, s3_uploaded, make_store):  # type: ignore[no-untyped-def]
    """(open a dataset by name, server) for each remote backend, S3 through each
    implementation, HTTP through each file server; stats start at zero."""
    kind = request.param
    server = s3_servers(kind) if kind in S3_KINDS else http_servers(kind)
    server.reset()

    def open_remote(name: str, **options) -> Dataset:  # type: ignore[no-untyped-def]
        if kind in S3_KINDS:
            store = make_store("s3", server.url, **options)
            dataset = Dataset(f"{s3_uploaded}/{name}", store=store)
        else:
            dataset = Dataset(f"{server.url}/{name}", store=make_store("http", **options))
        dataset.store.stats.reset()
        server.reset()
        return dataset

    yield open_remote, server
    server.reset()


@pytest.fixture(params=servers(*S3_KINDS, *HTTP_KINDS))
def remote_folder(request, s3_servers, http_published, s3_uploaded, make_store, tmp_path):  # type: ignore[no-untyped-def]
    """(publish, server) for each remote backend: ``publish(folder)`` serves a
    dataset folder of this test alone, uploaded under a fresh prefix of the S3
    server (``upload_tree``) or copied under a fresh folder of the HTTP file
    server's, and opens it (stats at zero). The session's ``storage_root``
    stays as it is."""
    kind = request.param
    published, http_servers = http_published
    server = s3_servers(kind) if kind in S3_KINDS else http_servers(kind)
    server.reset()

    def publish(folder: Path) -> Dataset:
        name = f"{tmp_path.name}/{folder.name}"
        if kind in S3_KINDS:
            upstream = server.handler.upstream
            upload_tree(upstream, folder, BUCKET, name, "test-key-id", SECRET)
            dataset = Dataset(f"{s3_uploaded}/{name}", store=make_store("s3", server.url))
        else:
            shutil.copytree(folder, published / name)
            dataset = Dataset(f"{server.url}/{name}", store=make_store("http"))
        dataset.store.stats.reset()
        server.reset()
        return dataset

    yield publish, server
    server.reset()
