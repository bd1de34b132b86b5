"""IPC-compressed audio shards (wsds writes zstd by default) through the pipeline and the CLI.

Their cells have no byte range in the file: a record batch's audio is
decompressed in memory. A decode job still carries its blob handle to a
worker process, and every crop used to be lost there ("cannot pickle
memoryview objects", counted, skipped: an epoch of nothing).
"""

from __future__ import annotations

import asyncio
import pickle
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from _index_support import encoded
from helpers import BUCKET, SECRET

from streamer import RandomCrops, Streamer, open_dataset
from streamer.dataset.dataset import Dataset
from streamer.errors import CompressedShardWarning, StorageError
from streamer.pipeline.bench import BenchConfig, bench_streamer
from streamer.pipeline.warmup import WarmupReport, warmup
from streamer.shard import decompressed
from streamer.shard.blob import BlobHandle
from streamer.write.index import build_index
from streamer.write.pack import pack
from testkit.servers import upload_tree


def _compress(root: Path) -> None:
    """Rewrite every audio shard zstd-compressed, as wsds writes them."""
    for path in sorted((root / "audio").glob("*.wsds")):
        table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
        options = pa.ipc.IpcWriteOptions(compression="zstd")
        with pa.ipc.new_file(str(path), table.schema, options=options) as writer:
            for batch in table.to_batches(max_chunksize=2):
                writer.write_batch(batch)


@pytest.fixture(scope="module")
def compressed(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """The same six episodes, zstd-compressed, without and with an index."""
    src = tmp_path_factory.mktemp("src")
    for n, codec in enumerate(("flac", "mp3", "opus", "flac", "wav", "aac")):
        (src / f"{codec}{n}.bin").write_bytes(encoded(codec, 48000, 1 + n % 2, seconds=2.0))
    made = {}
    for indexed in (False, True):
        root = tmp_path_factory.mktemp("ds") / "dataset"
        pack(src, root, batch_size=2, shard_size=100_000, progress=False, index=False)
        _compress(root)
        if indexed:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CompressedShardWarning)
                build_index(root, progress=False)
        made[indexed] = root
    return made


def _quiet_blob(root: Path) -> BlobHandle:
    """The first episode's handle, without the dataset's compression warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompressedShardWarning)
        dataset = open_dataset(root)
        return dataset.blob(next(iter(dataset.keys())))


def _crops(root: Path | Dataset, workers: int) -> tuple[dict[tuple[str, float], np.ndarray], dict]:
    async def run() -> tuple[dict[tuple[str, float], np.ndarray], dict]:
        sampler = RandomCrops(0.5, per_episode=4)
        streamer = Streamer(root, sampler, workers=workers, seed=3, on_error="skip")
        got = {}
        async with streamer:
            async for crop in streamer:
                got[crop.key, crop.start] = crop.audio
        return got, streamer.stats.skipped

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompressedShardWarning)
        return asyncio.run(run())


@pytest.mark.parametrize("indexed", [False, True], ids=["fallback", "indexed"])
def test_worker_processes_serve_every_crop_as_in_process(
    compressed: dict[bool, Path], indexed: bool
) -> None:
    root = compressed[indexed]
    here, failed_here = _crops(root, workers=0)
    there, failed_there = _crops(root, workers=2)
    assert (failed_here, failed_there) == ({}, {})
    assert len(here) == 24 and here.keys() == there.keys()
    for where, audio in here.items():
        np.testing.assert_array_equal(there[where], audio)


@pytest.mark.parametrize("indexed", [False, True], ids=["fallback", "indexed"])
def test_remote_compressed_shards_serve_every_crop_in_workers(  # type: ignore[no-untyped-def]
    compressed: dict[bool, Path], indexed: bool, moto_endpoint: str, make_store
) -> None:
    """Over S3 the parent decompresses a batch fetched whole and ships the
    planned bytes; a worker reading without an index fetches and
    decompresses the batch itself, through its own store."""
    prefix = f"compressed-{indexed}"
    upload_tree(moto_endpoint, compressed[indexed], BUCKET, prefix, "test-key-id", SECRET)
    remote = Dataset(f"{BUCKET}/{prefix}", store=make_store("s3", moto_endpoint))
    here, _ = _crops(compressed[indexed], workers=0)
    there, skipped = _crops(remote, workers=2)
    assert skipped == {} and here.keys() == there.keys()
    for where, audio in here.items():
        np.testing.assert_array_equal(there[where], audio)


def test_a_compressed_blob_travels_as_its_address(compressed: dict[bool, Path]) -> None:
    """Pickled, a compressed cell's handle is a few hundred bytes (not its
    record batch), and reads the same bytes once unpickled."""
    blob = _quiet_blob(compressed[True])
    sent = pickle.dumps(blob)
    assert len(sent) < 1000 < blob.length
    assert bytes(pickle.loads(sent).view()) == bytes(blob.view())


def test_a_corrupt_compressed_batch_read_in_a_worker_names_the_shard(
    compressed: dict[bool, Path], tmp_path: Path
) -> None:
    root = tmp_path / "dataset"
    shutil.copytree(compressed[False], root)
    blob = _quiet_blob(root)
    sent = pickle.dumps(blob)
    shard = Path(blob.shard)
    data = bytearray(shard.read_bytes())
    at = data.find(b"\x28\xb5\x2f\xfd", blob.reader.offset)  # the values buffer's zstd frame
    data[at : at + 4] = bytes(4)
    shard.write_bytes(bytes(data))
    # Another process, as a decode worker is: this one keeps the batch it read.
    worker = "import pickle, sys; pickle.loads(sys.stdin.buffer.read()).reader.size_sync()"
    done = subprocess.run(
        [sys.executable, "-c", worker], input=sent, capture_output=True, timeout=120
    )
    assert done.returncode != 0
    last = done.stderr.decode().strip().splitlines()[-1]
    assert re.fullmatch(r"streamer\.errors\.ShardError: corrupt compressed buffer.*offset.*", last)


def test_the_index_command_warns_once_in_one_line(
    compressed: dict[bool, Path], tmp_path: Path
) -> None:
    """Once per run, not once per shard (each shard's job opened its own
    dataset and warned again), and as one line, not Python's two with the
    library's file and line of code."""
    root = tmp_path / "dataset"
    shutil.copytree(compressed[False], root)
    assert len(list((root / "audio").glob("*.wsds"))) >= 3
    for workers in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "streamer", "index", str(root), "--force", "--workers", workers],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("streamer index: warning: ") and "IPC-compressed" in lines[0]


def test_what_a_process_keeps_decompressed_is_bounded(
    compressed: dict[bool, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every batch's reader kept its bytes for good: planning a pass over a
    zstd dataset grew the process to the dataset's decompressed size. Now
    only the newest buffers are kept, within ``KEPT_BYTES``; a dropped one
    is decompressed again, to the same bytes."""
    dataset = open_dataset(compressed[True])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompressedShardWarning)
        blobs = {key: dataset.blob(key) for key in list(dataset.keys())}
    first = {key: bytes(blob.view()) for key, blob in blobs.items()}
    sizes = {blob.reader.size_sync() for blob in blobs.values()}
    assert len(sizes) > 1  # more than one batch
    monkeypatch.setattr(decompressed, "KEPT_BYTES", max(sizes))
    for key, blob in blobs.items():
        assert bytes(blob.view()) == first[key]
        assert decompressed.kept_bytes() <= max(sizes)


def _remote(  # type: ignore[no-untyped-def]
    compressed: dict[bool, Path], moto_endpoint: str, make_store, prefix: str, **options
) -> Dataset:
    """The unindexed compressed dataset over S3 under ``prefix``, through a
    new store (a prefix of its own: no batch this process keeps decompressed)."""
    upload_tree(moto_endpoint, compressed[False], BUCKET, prefix, "test-key-id", SECRET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompressedShardWarning)
        return Dataset(f"{BUCKET}/{prefix}", store=make_store("s3", moto_endpoint, **options))


def _warm(dataset: Dataset, **options: int) -> WarmupReport:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompressedShardWarning)
        return warmup(bench_streamer(dataset, _WARM, workers=0), **options)


_WARM = BenchConfig(duration=0.5, crops=24, seed=2)


def test_a_warmup_of_compressed_shards_counts_and_checks_their_blocks(  # type: ignore[no-untyped-def]
    compressed: dict[bool, Path], moto_endpoint: str, make_store, tmp_path: Path
) -> None:
    """A crop of an IPC-compressed shard reads its batch's compressed buffer
    whole: the warmup counts those blocks (it said "0.0 MB of blocks"), the
    room they need and whether the directory kept them (both checks were
    skipped), and the run after it is served by the directory alone."""
    cache = str(tmp_path / "cache")
    first = _warm(_remote(compressed, moto_endpoint, make_store, "warm", cache_dir=cache))
    # cached may pass fetched: the blocks of the shards' tails came with opening them
    assert first.crops == 24 and first.fetched > 0 and first.cached > 0
    again = _remote(compressed, moto_endpoint, make_store, "warm", cache_dir=cache)
    second = _warm(again)
    assert (second.fetched, second.cached) == (0, first.cached)
    small = {"cache_dir": str(tmp_path / "tiny"), "cache_dir_bytes": first.cached - 1}
    tiny = _remote(compressed, moto_endpoint, make_store, "tiny", **small)
    with pytest.raises(StorageError, match=r"warmup needs at least \d+ bytes of disk cache"):
        _warm(tiny)


def test_a_compressed_batch_is_fetched_once_by_its_concurrent_readers(  # type: ignore[no-untyped-def]
    compressed: dict[bool, Path], moto_endpoint: str, make_store
) -> None:
    """The warmup's planning threads and its prefetches read the same batch
    at once: each missed the kept batch and fetched its compressed buffer
    whole again (a warmup fetched a dataset up to 5 times over). One reader
    fetches and decompresses it; the others wait for it."""
    dataset = _remote(compressed, moto_endpoint, make_store, "once")
    shards = sum(p.stat().st_size for p in (compressed[False] / "audio").glob("*.wsds"))
    report = _warm(dataset, concurrency=16)
    assert report.crops == 24
    assert report.fetched < shards


def test_a_blocking_read_on_an_event_loop_does_not_wait_for_a_task_on_it(  # type: ignore[no-untyped-def]
    compressed: dict[bool, Path], moto_endpoint: str, make_store
) -> None:
    """A task on a loop fetches a batch; a blocking read of it on that same
    loop cannot wait for the task (it would block the loop the task needs):
    it reads the batch itself."""
    import threading

    dataset = _remote(compressed, moto_endpoint, make_store, "loop")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompressedShardWarning)
        reader = dataset.blob(sorted(dataset.keys())[-1]).reader
    assert isinstance(reader, decompressed.DecompressedValues)
    got: list[bool] = []

    async def both() -> None:
        task = asyncio.ensure_future(reader.read(0, 10))
        await asyncio.sleep(0)  # the task leads the batch's fetch
        assert decompressed._inflight
        got.append(bytes(reader.read_sync(0, 10)) == bytes(await task))

    with decompressed._lock:
        decompressed._kept.clear()
        decompressed._total = 0
    thread = threading.Thread(target=asyncio.run, args=(both(),), daemon=True)
    thread.start()
    thread.join(60)
    assert got == [True]
