"""Ctrl-C and SIGTERM are never lost in PyAV's read callbacks: a probe or an
index check finishes its file, then the interrupt unwinds the run; a
`streamer index` interrupted mid-run stops, leaves whole index shards only,
and a re-run completes the job."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import slow, write_audio

from streamer.dataset import Dataset
from streamer.interrupts import interrupts_as_ctrl_c, interrupts_held
from streamer.write.probe import MemoryFile, probe

SHARDS = 8


def test_an_interrupt_during_a_probe_is_delivered_after_it(tmp_path: Path) -> None:
    """PyAV swallows an exception raised in its read callback: the interrupt
    is held while PyAV reads bytes in memory, and raised right after."""
    path = write_audio(tmp_path, "a", "flac", 16000, 1, 0.5)
    data = memoryview(path.read_bytes())
    probed = []
    with pytest.raises(KeyboardInterrupt), interrupts_held():
        signal.raise_signal(signal.SIGINT)
        probed.append(probe(MemoryFile(data, "a.flac")))  # not cut short
    assert probed[0].sample_rate == 16000
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class _Finalized:
    """An object whose finalizer is interrupted by SIGTERM: the
    ``KeyboardInterrupt`` raised there is one Python drops ("Exception
    ignored in ..."), as it does in the garbage collector's weakref callbacks."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGTERM)


def test_an_interrupt_python_drops_is_raised_at_the_next_file() -> None:
    before = signal.getsignal(signal.SIGTERM)
    went_on = []
    with interrupts_as_ctrl_c():
        _Finalized()
        went_on.append(True)  # Python's own handling: the run goes on
        with pytest.raises(KeyboardInterrupt), interrupts_held():
            pytest.fail("the next file was started")
        with interrupts_held():  # raised once, not again
            went_on.append(True)
    assert went_on == [True, True]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_dropped_interrupt_does_not_outlive_the_command() -> None:
    with interrupts_as_ctrl_c():
        _Finalized()
    with interrupts_held():  # a later command in the same process is not interrupted
        pass
    unraisable = sys.unraisablehook
    with interrupts_as_ctrl_c():
        assert sys.unraisablehook is not unraisable
    assert sys.unraisablehook is unraisable


@pytest.fixture(scope="module")
def unindexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight audio shards of eight 3-second mp3 episodes, without seek indexes."""
    src = tmp_path_factory.mktemp("interrupt-src")
    out = tmp_path_factory.mktemp("interrupt") / "dataset"
    (out / "audio").mkdir(parents=True)
    for shard in range(SHARDS):
        keys = [f"ep{shard}{i}" for i in range(8)]
        blobs = [
            write_audio(src, key, "mp3", 22050, 1, 3.0, seed=len(key) + int(key[2:])).read_bytes()
            for key in keys
        ]
        table = pa.table({"__key__": keys, "audio": pa.array(blobs, pa.large_binary())})
        with pa.ipc.new_file(str(out / "audio" / f"s{shard}.wsds"), table.schema) as writer:
            writer.write_table(table, max_chunksize=4)
    return out


def _index(dataset: Path, *extra: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "streamer.cli", "index", str(dataset), "--no-progress"]
    return subprocess.Popen(command + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _interrupt_mid_run(process: subprocess.Popen[bytes], folder: Path, signum: int) -> str:
    """Send ``signum`` once an index shard is being written in ``folder``;
    the process's stderr after it exits (within 30 s)."""
    deadline = time.monotonic() + 120
    while not any(p.name.startswith(".") for p in _listing(folder)):
        assert process.poll() is None and time.monotonic() < deadline, "never started a shard"
        time.sleep(0.005)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr.decode()
    return stderr.decode()


def _listing(folder: Path) -> list[Path]:
    return list(folder.iterdir()) if folder.is_dir() else []


def _check_whole(dataset: Path) -> int:
    """Index shards present in ``dataset`` (no temporary file left), each
    with every episode's index verified."""
    folder = dataset / "seek_index"
    names = sorted(p.name for p in _listing(folder))
    assert all(not name.startswith(".") for name in names), names
    opened = Dataset(dataset, manifest=False)
    for key in opened:
        index = opened.episode(key).index
        if index is not None:
            assert index.ok, (key, index.reason)
    return len(names)


@pytest.mark.parametrize("workers", ["1", *slow("2")])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_index_stops_and_a_rerun_completes(
    unindexed: Path, tmp_path: Path, signum: int, workers: str
) -> None:
    dataset = tmp_path / "dataset"
    subprocess.run(["cp", "-r", str(unindexed), str(dataset)], check=True)
    stderr = _interrupt_mid_run(
        _index(dataset, "--workers", workers), dataset / "seek_index", signum
    )
    assert stderr.strip().splitlines() == ["streamer index: interrupted"]
    assert _check_whole(dataset) < SHARDS, "the run went on to the end"
    rerun = _index(dataset, "--workers", workers)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()
    assert _check_whole(dataset) == SHARDS
    assert b"64 episodes: " in out or b"already indexed" in out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_index_check_stops_and_a_rerun_completes(
    unindexed: Path, tmp_path: Path, signum: int
) -> None:
    dataset = tmp_path / "dataset"
    subprocess.run(["cp", "-r", str(unindexed), str(dataset)], check=True)
    built = _index(dataset, "--workers", "2")
    assert built.wait(timeout=300) == 0
    before = {p.name: p.stat().st_mtime_ns for p in (dataset / "seek_index").iterdir()}
    stderr = _interrupt_mid_run(_index(dataset, "--verify"), dataset / "seek_index", signum)
    assert stderr.strip().splitlines() == ["streamer index: interrupted"]
    assert _check_whole(dataset) == SHARDS
    after = {p.name: p.stat().st_mtime_ns for p in (dataset / "seek_index").iterdir()}
    assert sum(after[name] != before[name] for name in before) < SHARDS, "the check ran to the end"
    rerun = _index(dataset, "--verify")
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()
    assert b"checked 8 shards" in out
    assert _check_whole(dataset) == SHARDS
