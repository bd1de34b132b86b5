"""A local shard truncated in place while it is open (``truncate``, ``rsync
--inplace`` writing a shorter file): its memory map loses the pages past the
new end, and touching one is SIGBUS, which kills the process with no
exception. A decode worker dying so is replaced by the pool; a process that
decodes for itself (``workers=0``, ``Dataset.crop``) must never touch them:
each crop's bytes are checked against the file's current size and copied
out of the map before the decode.

Each case runs in a child process, so that a fault kills the child, not the
test run, and shows as its exit status.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from helpers import pack_audio

from streamer.errors import StorageError
from streamer.storage.local import LocalFileReader

FILES = {f"episode{i}": ("flac", 44100, 2) for i in range(4)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("truncated")
    pack_audio(root, FILES, 6.0)
    return root / "dataset"


def _child(dataset: Path, tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter over a copy of ``dataset`` (as
    ``root``, with its one audio shard as ``shard``)."""
    copy = tmp_path / "dataset"
    subprocess.run(["cp", "-r", str(dataset), str(copy)], check=True)
    script = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        import streamer
        from streamer.errors import StorageError
        root = Path({str(copy)!r})
        (shard,) = sorted((root / "audio").iterdir())
        """
    ) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )


def _said_shrank(child: subprocess.CompletedProcess[str]) -> None:
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-2000:]}"
    assert "shrank from" in child.stdout and "truncated or rewritten in place" in child.stdout


def test_a_streamer_without_workers_raises_on_a_shard_truncated_under_it(
    dataset: Path, tmp_path: Path
) -> None:
    """Before, the training process died of SIGBUS (exit -7), no exception."""
    child = _child(
        dataset,
        tmp_path,
        """
        crops = streamer.Streamer(
            root, streamer.RandomCrops(1.0, per_episode=50), workers=0, seed=1
        )
        got = 0
        try:
            for crop in crops:
                got += 1
                if got == 5:
                    os.truncate(shard, shard.stat().st_size // 4)
        except StorageError as exc:
            print(got, exc)
        """,
    )
    _said_shrank(child)
    assert int(child.stdout.split()[0]) >= 5
    assert str(tmp_path / "dataset" / "audio") in child.stdout


def test_dataset_crop_raises_on_a_shard_truncated_after_opening(
    dataset: Path, tmp_path: Path
) -> None:
    child = _child(
        dataset,
        tmp_path,
        """
        opened = streamer.open_dataset(root)
        key = sorted(opened.keys())[-1]
        os.truncate(shard, shard.stat().st_size // 4)
        try:
            opened.read_crop(key, 4.0, 5.0)
        except StorageError as exc:
            print(exc)
        """,
    )
    _said_shrank(child)


def test_an_in_process_decode_never_touches_the_map(dataset: Path, tmp_path: Path) -> None:
    """The file cut between the crop's read and its decode (the moment a
    check cannot cover): the decode works from copies, and the crop equals
    the same crop of the whole file."""
    child = _child(
        dataset,
        tmp_path,
        """
        import numpy as np
        from streamer.decode import crop as decoding
        from streamer.pipeline.tasks import Task, run
        from streamer.formats.job import DecodeStats

        opened = streamer.open_dataset(root)
        key = sorted(opened.keys())[-1]
        whole = opened.read_crop(key, 4.0, 5.0)
        request = decoding.CropRequest(key, 4.0, 5.0)
        real = decoding.decode_job

        def cut_first(job, fetched, *args, **kwargs):
            os.truncate(shard, shard.stat().st_size // 4)
            return real(job, fetched, *args, **kwargs)

        decoding.decode_job = cut_first
        import streamer.pipeline.tasks as tasks
        tasks.decode_job = cut_first
        job = decoding.prepare(opened.episode(key), request)
        got = run(Task(job), DecodeStats(), copy=True)
        print("equal", np.array_equal(got.audio, whole))
        """,
    )
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-2000:]}"
    assert child.stdout.strip() == "equal True"


def test_a_reader_checks_the_size_of_the_file_it_mapped(tmp_path: Path) -> None:
    """Renamed over (the way to replace a shard), the mapping stays whole and
    reads on; cut in place, a read past the new end is a ``StorageError``."""
    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 64)
    reader = LocalFileReader(path)
    fresh = tmp_path / "fresh"
    fresh.write_bytes(b"x" * 100)
    fresh.replace(path)
    assert bytes(reader.read_sync(16000, 10)) == bytes(range(128, 138))

    victim = tmp_path / "victim"
    victim.write_bytes(bytes(range(256)) * 64)
    mapped = LocalFileReader(victim)
    assert bytes(mapped.read_many_sync([(0, 4), (100, 4)])[1]) == bytes(range(100, 104))
    with open(victim, "r+b") as file:
        file.truncate(8192)
    assert bytes(mapped.read_sync(8190, 2)) == bytes([254, 255])
    with pytest.raises(StorageError, match=r"range \[8000, 8200\) is past the end of .*victim"):
        mapped.read_sync(8000, 200)
    with pytest.raises(StorageError, match="shrank from 16384 to 8192 bytes"):
        mapped.read_many_sync([(0, 4), (9000, 4)])


def test_a_dropped_reader_closes_its_file_without_a_warning(tmp_path: Path) -> None:
    """The descriptor the size checks use closes with the reader; a file
    object there was left to the garbage collector, which warned
    (``ResourceWarning: unclosed file``) for every shard of every pass."""
    path = tmp_path / "blob"
    path.write_bytes(b"x" * 4096)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            reader = LocalFileReader(path)
            assert bytes(reader.read_sync(0, 2)) == b"xx"
            del reader
            gc.collect()
    # (other tests' objects collected here may warn of themselves)
    assert [str(w.message) for w in caught if str(path) in str(w.message)] == []
    assert str(path) not in _open_files()


def _open_files() -> list[str]:
    """What this process's file descriptors name."""
    named = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own)
            named.append(os.readlink(f"/proc/self/fd/{fd}"))
    return named
