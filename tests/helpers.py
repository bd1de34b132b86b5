"""Helpers the test modules import (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import shutil
import traceback
from pathlib import Path

import pyarrow as pa
import pytest

from streamer import Streamer, open_dataset
from streamer.dataset import Dataset
from streamer.synth import CODECS, encode, signal
from streamer.write.pack import pack
from testkit import httpservers, s3servers

#: (codec, sample rate, channels) of the small fixture files, one per codec.
FIXTURE_FILES = (
    ("mp3", 44100, 2),
    ("vorbis", 44100, 2),
    ("opus", 48000, 1),
    ("flac", 22050, 1),
    ("aac", 44100, 2),
    ("alac", 44100, 1),
    ("wav", 16000, 2),
)


#: A credential the storage tests hunt for in logs, reprs and error text.
SECRET = "sekrit-0xC0FFEE-never-log-me"
BUCKET = "data"
#: The S3 implementations the storage tests run against, all on loopback:
#: moto in this process, the others as child processes (``testkit.s3servers``).
S3_KINDS = ("moto", *s3servers.KINDS)
#: The HTTP file servers the storage tests run against: the tests' own, then real ones.
HTTP_KINDS = ("http", *httpservers.KINDS)
#: Servers that the tests parametrized over many servers meet only in the slow
#: run (``servers``); the protocol tests (storage/test_s3_servers.py,
#: test_http_servers.py) and the server crash tests run on all of them by
#: default. The default run keeps moto, SeaweedFS, the tests' HTTP server and
#: nginx: one in-process and one real server per protocol.
SLOW_SERVERS = frozenset({"rclone", "juicefs", "caddy"})


def slow(*values: object) -> list:
    """``values`` as pytest parameters that only the slow run takes."""
    return [pytest.param(value, marks=pytest.mark.slow) for value in values]


def servers(*kinds: str) -> list:
    """``kinds`` as pytest parameters, those of ``SLOW_SERVERS`` marked slow."""
    return [slow(kind)[0] if kind in SLOW_SERVERS else kind for kind in kinds]


def write_audio(
    folder: Path, relpath: str, codec: str, rate: int, channels: int, seconds: float, seed: int = 0
) -> Path:
    """Encode a test signal into ``folder/relpath.<ext>`` and return the path."""
    path = folder / f"{relpath}.{CODECS[codec].extension}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(signal(seconds, rate, channels, seed=seed), rate, codec))
    return path


def pack_audio(
    root: Path, files: dict[str, tuple[str, int, int]], seconds: float, *, index: bool = True
) -> Dataset:
    """``files`` (key -> codec, rate, channels) encoded under ``root/src``, each
    with the key's length as its signal's seed, packed and (unless not
    ``index``) indexed into ``root/dataset`` (one seek point a second), opened."""
    for key, (codec, rate, channels) in files.items():
        write_audio(root / "src", key, codec, rate, channels, seconds, seed=len(key))
    pack(root / "src", root / "dataset", progress=False, index=index)
    return open_dataset(root / "dataset")


def copy_dataset(dataset: Dataset, folder: Path) -> Path:
    """A copy of ``dataset``'s folder as ``folder/dataset`` (to damage or
    rewrite without touching the module's clean one)."""
    root = folder / "dataset"
    shutil.copytree(Path(dataset.root), root)
    return root


def rss_kib() -> int:
    """Resident memory (anonymous + file-backed) of this process, in KiB (Linux)."""
    fields = {}
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value
    return int(fields["RssAnon"].split()[0]) + int(fields["RssFile"].split()[0])


def write_blob_dataset(root: Path, blob_sizes: tuple[int, ...], batches: int) -> list[bytes]:
    """A dataset of one ``audio/`` shard of random blobs (not audio) split in ``batches``.

    Returns the blobs. Keys are ``k0``, ``k1``, ...; shard is ``audio/s.wsds``.
    """
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(len(blob_sizes))
    blobs = [rng.bytes(size) for size in blob_sizes]
    table = pa.table(
        {
            "__key__": [f"k{i}" for i in range(len(blobs))],
            "audio": pa.array(blobs, pa.large_binary()),
        }
    )
    (root / "audio").mkdir(parents=True)
    per_batch = -(-len(blobs) // batches)
    with pa.ipc.new_file(str(root / "audio" / "s.wsds"), table.schema) as writer:
        writer.write_table(table, max_chunksize=per_batch)
    return blobs


def everything_said(caplog: pytest.LogCaptureFixture, *objects: object, errors=()) -> str:  # type: ignore[no-untyped-def]
    said = [caplog.text, *map(repr, objects), *map(str, objects)]
    for error in errors:
        said += [str(error), "".join(traceback.format_exception(error))]
    return "\n".join(said)


def signature(crops: list) -> list[tuple[str, float, float]]:
    return [(c.key, c.start, c.end) for c in crops]


def plan_rows(s: Streamer) -> list[tuple[int, int, float]]:
    plan = s.plan()
    return list(zip(plan.source.tolist(), plan.episode.tolist(), plan.start.tolist(), strict=True))


def gone(pid: int) -> bool:
    """True when ``pid`` neither runs nor lingers as a zombie."""
    return not os.path.exists(f"/proc/{pid}")


def rewrite_index_shard(path: Path, rows: dict) -> None:  # type: ignore[type-arg]
    """Rewrite the ``seek_index/`` shard at ``path`` with ``rows`` (key ->
    ``SeekIndex``, in its order), keeping the blob lengths it records; no
    content, span or row CRCs (hand-made rows are not checked against the
    bytes, nor against a checksum of their own)."""
    import pyarrow as pa

    from streamer.index.table import BLOB_BYTES_COLUMN, CONTENT_TYPE, to_struct_array
    from streamer.shard import Shard
    from streamer.write.index import SCHEMA

    lengths = Shard(str(path)).column(BLOB_BYTES_COLUMN).combine_chunks()
    indexes = to_struct_array(list(rows.values()))
    crcs = pa.nulls(len(rows), CONTENT_TYPE)
    sizes = pa.nulls(len(rows), pa.int64())
    columns = [
        pa.array(list(rows)),
        indexes,
        lengths,
        crcs,
        sizes,
        crcs,
        pa.nulls(len(rows), pa.uint32()),
    ]
    batch = pa.record_batch(columns, schema=SCHEMA)
    temp = path.with_suffix(".tmp")
    with pa.ipc.new_file(str(temp), SCHEMA) as writer:
        writer.write_batch(batch)
    os.replace(temp, path)


def write_wsds_info(root: Path, duration: pa.Array, key_type: pa.DataType | None = None) -> None:
    """Replace ``root``'s audio_info/ shards with one as wsds writes it: no
    codec, rate or size columns, its own columns, ``duration`` as given
    (the header's rounded), zstd, in batches of two rows."""
    [path] = sorted((root / "audio_info").iterdir())
    keys = pa.ipc.open_file(path).read_all().column("__key__").to_pylist()
    n = len(keys)
    table = pa.table(
        {
            "__key__": pa.array(keys, key_type or pa.string()),
            "title": pa.array([f"Title {k}".encode() for k in keys], pa.binary()),
            "duration": duration,
            "language": ["en"] * n,
            "tags": pa.array([["a", "b"]] * n, pa.list_(pa.string())),
        }
    ).replace_schema_metadata({"batch_size": "2"})
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(path, table.schema, options=options) as writer:
        for batch in table.to_batches(max_chunksize=2):
            writer.write_batch(batch)


def record_sha256(root: Path, key: str, blob: bytes) -> None:
    """Record ``blob``'s sha256 as ``key``'s in the ``audio_info/`` shards of
    the dataset at ``root`` (what packing the rewritten blob records)."""
    import hashlib

    for path in sorted((root / "audio_info").iterdir()):
        table = pa.ipc.open_file(str(path)).read_all()
        keys = table.column("__key__").to_pylist()
        if key not in keys:
            continue
        digests = table.column("sha256").to_pylist()
        digests[keys.index(key)] = hashlib.sha256(blob).hexdigest()
        column = pa.array(digests, table.schema.field("sha256").type)
        table = table.set_column(table.schema.get_field_index("sha256"), "sha256", column)
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)
