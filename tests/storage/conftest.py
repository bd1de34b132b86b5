"""Fixtures of the storage tests: one object read through a new store of each kind."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import S3_KINDS, servers

Opener = Callable[..., Any]


def _opener(kind: str, request: pytest.FixtureRequest) -> tuple[Opener, Any]:
    """(open a reader of random.bin with options, its server) for ``kind``;
    each reader comes from a new store (own pool, cache, stats and health),
    with the server's log and faults and the store's stats cleared."""
    make_store = request.getfixturevalue("make_store")
    if kind in S3_KINDS:
        server = request.getfixturevalue("s3_servers")(kind)
        server.reset()
    else:
        server = request.getfixturevalue(kind)

    def open_reader(**options: Any) -> Any:
        if kind in S3_KINDS:
            bucket = request.getfixturevalue("s3_uploaded")
            reader = make_store("s3", server.url, **options).reader(f"{bucket}/random.bin")
        else:
            reader = make_store("http", **options).reader(f"{server.url}/random.bin")
        reader.size_sync()
        server.reset()
        reader.store.stats.reset()
        return reader

    return open_reader, server


@pytest.fixture(params=servers(*S3_KINDS, "http"))
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Opener, Any]]:
    """For behaviour that depends on the backend: S3 (each implementation) and HTTP."""
    opener, server = _opener(request.param, request)
    yield opener, server
    server.reset()


@pytest.fixture(params=["moto", "http"])
def served_moto(request: pytest.FixtureRequest) -> Iterator[tuple[Opener, Any]]:
    """For behaviour of the store above its protocol: S3 (moto alone) and HTTP."""
    opener, server = _opener(request.param, request)
    yield opener, server
    server.reset()


@pytest.fixture
def served_http(request: pytest.FixtureRequest) -> tuple[Opener, Any]:
    """For behaviour above the backends (gate, cache, cancellation): HTTP only."""
    return _opener("http", request)


@pytest.fixture
def data(storage_root: Any) -> bytes:
    """The bytes of random.bin."""
    return (storage_root / "random.bin").read_bytes()


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    """(certificate file, server context) of a self-signed certificate for 127.0.0.1."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return cert, context
