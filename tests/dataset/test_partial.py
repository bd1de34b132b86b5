"""Partial datasets: one bad shard is reported and skipped, the others served.

Real damaged files: a shard cut short, its footer overwritten, a shard that
cannot be read at all, an ``audio_info/`` shard cut short; a ``seek_index/``
shard cut short or with its rows reordered (rewritten with pyarrow), which
must cost only the index (fallback), never the crops.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from streamer import RandomCrops, Streamer, open_dataset
from streamer.cli import main
from streamer.dataset import Dataset
from streamer.dataset.dataset import INDEX_UNREADABLE, KEYS_DIFFER
from streamer.errors import IncompleteDatasetError, ShardError, StorageError
from streamer.pipeline.episodes import Episodes
from streamer.synth import encode, signal
from streamer.write.pack import pack
from testkit.servers import LoopbackServer, file_handler

#: Three shards of two one-second episodes each (packed one batch per shard).
EPISODES = [f"e{i}" for i in range(6)]
VICTIM = "shard-000001"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("partial-src")
    for number, key in enumerate(EPISODES):
        codec = "flac" if number % 2 else "mp3"
        data = encode(signal(1.0, 22050, 1, seed=number), 22050, codec)
        (src / f"{key}.{codec}").write_bytes(data)
    out = tmp_path_factory.mktemp("partial") / "dataset"
    pack(src, out, batch_size=2, shard_size=1, progress=False)
    names = sorted(p.stem for p in (out / "audio").iterdir())
    assert names == ["shard-000000", "shard-000001", "shard-000002"]
    return out


def _copy(
    clean: Path, tmp_path: Path, path: str, damage: Callable[[Path], None], **options: Any
) -> Dataset:
    copy = tmp_path / "copy"
    shutil.copytree(clean, copy)
    damage(copy / path)
    return open_dataset(copy, **options)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _overwrite_footer(path: Path) -> None:
    """The footer flatbuffer overwritten with other bytes, whatever its
    length (the int32 before the trailing magic); its length and magic kept."""
    data = path.read_bytes()
    size = int.from_bytes(data[-10:-6], "little")
    junk = (bytes(range(256)) * (size // 256 + 1))[:size]
    path.write_bytes(data[: -10 - size] + junk + data[-10:])


def _unreadable(path: Path) -> None:
    """A shard the store lists but cannot read: a socket where the file was
    (root reads through permission bits, so chmod would not do; a socket
    path must be short, so it is made elsewhere and moved)."""
    import socket
    import tempfile

    path.unlink()
    with tempfile.TemporaryDirectory() as folder:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(os.path.join(folder, "s"))
        os.rename(os.path.join(folder, "s"), path)


def _null_key(path: Path) -> None:
    """A null ``__key__`` in row 1 of the shard and of its twins alike, so
    that the twins agree with it (a Streamer ended on a bare
    ``AttributeError`` and ``read_crop(None)`` was asked for)."""
    for column_dir in ("audio", "audio_info", "seek_index"):
        twin = path.parent.parent / column_dir / path.name
        table = pa.ipc.open_file(pa.py_buffer(twin.read_bytes())).read_all()
        keys = table.column("__key__").to_pylist()
        keys[1] = None
        table = table.set_column(0, table.schema.field(0), pa.array(keys, pa.string()))
        with pa.ipc.new_file(twin, table.schema) as writer:
            writer.write_table(table)


DAMAGES = {
    "truncated": _truncate,
    "footer": _overwrite_footer,
    "unreadable": _unreadable,
    "null key": _null_key,
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_bad_audio_shard_is_reported_and_its_rows_skipped(
    clean: Path, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    dataset = _copy(clean, tmp_path, f"audio/{VICTIM}.wsds", DAMAGES[damage])
    victims = open_dataset(clean).shard(VICTIM).keys.to_pylist()
    with caplog.at_level(logging.WARNING, logger="streamer.dataset"):
        served = list(dataset)
    assert served == [key for key in EPISODES if key not in victims]
    assert len(dataset) == len(served) == 4 and dataset.num_rows == 4
    assert dataset.shard_names == ["shard-000000", "shard-000002"]
    assert dataset.listed_shards == ["shard-000000", VICTIM, "shard-000002"]
    (reason,) = dataset.bad_shards.values()
    assert f"audio/{VICTIM}.wsds" in reason
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(dataset.url)]
    warnings = [message for message in said if "skipped" in message]
    assert len(warnings) == 1 and VICTIM in warnings[0] and reason in warnings[0]
    # The samplers' episodes and a whole epoch: only the served rows.
    assert Episodes.of(dataset).keys == served
    streamer = Streamer(dataset, RandomCrops(0.25, per_episode=2), workers=0)
    crops = list(streamer)
    assert sorted({crop.key for crop in crops}) == served and len(crops) == 8
    # The training loop's counters say so too, not only the log.
    assert streamer.stats.skipped_shards == {dataset.url: {VICTIM: reason}}
    assert streamer.stats.as_dict()["skipped_shards"] == {dataset.url: {VICTIM: reason}}
    for key in served:
        assert dataset.read_crop(key, 0.1, 0.6).shape == (1, 11025)
    with pytest.raises(KeyError, match=f"skipped shards: {VICTIM}"):
        dataset.read_crop(victims[0], 0.1, 0.6)
    with pytest.raises(ShardError):
        dataset.shard(VICTIM)  # asked for by name, it still says what is wrong


def test_a_bad_audio_info_shard_skips_its_rows_too(clean: Path, tmp_path: Path) -> None:
    dataset = _copy(clean, tmp_path, f"audio_info/{VICTIM}.wsds", _truncate)
    assert dataset.shard_names == ["shard-000000", "shard-000002"]
    assert f"audio_info/{VICTIM}.wsds" in dataset.bad_shards[VICTIM]
    assert len(Episodes.of(dataset)) == 4
    assert len(dataset.info_table()) == 4


def test_a_missing_audio_shard_is_reported_not_silently_left_out(
    clean: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``audio/shard-000001.wsds`` deleted (or never uploaded), its
    ``audio_info/`` and ``seek_index/`` shards still there: the dataset served
    the other shards without a word, a third of its episodes gone (in a
    ``Mix``, its share then filled by cycling the rest). A shard its pack
    planned is missing: the dataset does not open unless allowed to be
    incomplete, and then says which shard it skips, and why."""
    with pytest.raises(IncompleteDatasetError, match=VICTIM):
        _copy(clean, tmp_path / "refused", f"audio/{VICTIM}.wsds", Path.unlink).shard_names  # noqa: B018
    with caplog.at_level(logging.WARNING, logger="streamer.dataset"):
        dataset = _copy(clean, tmp_path, f"audio/{VICTIM}.wsds", Path.unlink, allow_incomplete=True)
        assert dataset.shard_names == ["shard-000000", "shard-000002"]
    reason = dataset.bad_shards[VICTIM]
    assert reason == f"no audio/{VICTIM} shard, but audio_info/ has one (deleted, or not copied?)"
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(dataset.url)]
    warnings = [message for message in said if "skipped" in message]
    assert len(warnings) == 1 and reason in warnings[0]
    assert len(Episodes.of(dataset)) == 4


def _reorder_rows(path: Path) -> None:
    """The index shard rewritten by pyarrow with its rows reversed: the same
    keys and indexes, each still with its own key, in the wrong order."""
    table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    reversed_rows = table.take(list(range(table.num_rows))[::-1])
    with pa.ipc.new_file(str(path), reversed_rows.schema) as writer:
        writer.write_table(reversed_rows)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_truncate, INDEX_UNREADABLE),
        (_overwrite_footer, INDEX_UNREADABLE),
        (_reorder_rows, KEYS_DIFFER),
    ],
    ids=["truncated", "footer", "reordered"],
)
def test_a_bad_seek_index_shard_means_fallback_not_skips(
    clean: Path,
    tmp_path: Path,
    damage: Callable[[Path], None],
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    dataset = _copy(clean, tmp_path, f"seek_index/{VICTIM}.wsds", damage)
    reference = open_dataset(clean)
    victims = reference.shard(VICTIM).keys.to_pylist()
    assert list(dataset) == EPISODES and dataset.bad_shards == {}
    with caplog.at_level(logging.WARNING, logger="streamer.dataset"):
        crops = list(Streamer(dataset, RandomCrops(0.25, per_episode=3), workers=0, seed=4))
    assert len(crops) == 18  # every crop yielded
    said = [(r.name, r.getMessage()) for r in caplog.records if reason in r.getMessage()]
    # Once by the dataset, naming the index shard and why; once by the fallback.
    assert [name for name, _ in said] == ["streamer.dataset.dataset", "streamer.decode.crop"]
    assert f"seek_index/{VICTIM}.wsds" in said[0][1]
    for key in EPISODES:
        got = dataset.read_crop(key, 0.2, 0.7)
        want = reference.read_crop(key, 0.2, 0.7)
        assert got.shape == want.shape == (1, 11025)
        if int(key[1:]) % 2:  # FLAC: bit for bit through the fallback too
            np.testing.assert_array_equal(got, want)
        else:
            assert np.abs(got - want).max() <= 1e-4, key
    stats = dataset.decode_stats
    assert stats.fallback_reasons == {reason: len(victims)}
    assert dataset.index_problems().keys() == {VICTIM}
    with pytest.raises(ShardError):
        dataset.seek_index(victims[0])  # asked for directly, it still raises


def test_inspect_lists_what_cannot_be_read(
    clean: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(clean, copy)
    _truncate(copy / "audio" / "shard-000002.wsds")
    _reorder_rows(copy / "seek_index" / "shard-000000.wsds")
    assert main(["inspect", str(copy)]) == 0
    report = capsys.readouterr().out
    assert "shards    2 (1 skipped)" in report and "rows      4" in report
    assert "skipped   audio/shard-000002: cannot open as an Arrow IPC file" in report
    assert "no index  seek_index/shard-000000 (its episodes fall back): __key__ mismatch" in report


@pytest.mark.parametrize("column_dir", ["audio", "audio_info", "seek_index"])
def test_a_named_pipe_for_a_shard_is_skipped_not_waited_on(
    clean: Path, tmp_path: Path, column_dir: str
) -> None:
    """A FIFO where a shard's file was: opening it to read waits for a
    writer that never comes, and Arrow retries the wait through signals, so
    ``inspect`` (and every open of the dataset) hung for good. Run in a
    child process, so that the old hang fails the test instead of the run."""
    copy = tmp_path / "copy"
    shutil.copytree(clean, copy)
    fifo = copy / column_dir / f"{VICTIM}.wsds"
    fifo.unlink()
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "streamer", "inspect", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if column_dir == "seek_index":  # costs the index, not the rows
        assert "rows      6" in done.stdout
        assert f"no index  seek_index/{VICTIM} (its episodes fall back)" in done.stdout
    else:
        assert "shards    2 (1 skipped)" in done.stdout and "rows      4" in done.stdout
        assert f"skipped   audio/{VICTIM}: " in done.stdout
    assert "not a regular file" in done.stdout


def test_inspect_of_a_dataset_whose_every_shard_is_skipped(
    clean: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Every ``audio_info/`` shard cut short (or left from another pack of
    the audio): every shard skipped, and inspect (``Dataset.info_table`` of
    no shard) ended with ``IndexError: list index out of range``."""
    copy = tmp_path / "copy"
    shutil.copytree(clean, copy)
    for info in (copy / "audio_info").iterdir():
        _truncate(info)
    dataset = open_dataset(copy)
    assert dataset.shard_names == [] and len(dataset.bad_shards) == 3
    assert dataset.info_table().num_rows == 0
    assert main(["inspect", str(copy), "--json"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(copy)]) == 0
    report = capsys.readouterr().out
    assert (
        "shards    0 (3 skipped)" in report
        and "hours     unknown (every shard is skipped)" in report
    )


@contextlib.contextmanager
def _served(folder: Path) -> Iterator[LoopbackServer]:
    """An HTTP file server of this test's own over ``folder`` (the shared
    one serves the session's storage root, which tests must not add to)."""
    server = LoopbackServer(file_handler(folder)).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_truncated_remote_shard_is_skipped(
    tmp_path: Path, make_store: Callable[..., Any], clean: Path
) -> None:
    """Over HTTP too: a shard cut short is the shard's fault, not the store's."""
    shutil.copytree(clean, tmp_path / "partial")
    _truncate(tmp_path / "partial" / "audio" / f"{VICTIM}.wsds")
    with _served(tmp_path) as http:
        dataset = Dataset(f"{http.url}/partial", store=make_store("http"))
        assert dataset.shard_names == ["shard-000000", "shard-000002"]
        assert len(dataset) == 4
        key = next(iter(dataset))
        assert dataset.read_crop(key, 0.1, 0.6).shape == (1, 11025)


def test_a_failing_store_is_not_a_bad_shard(
    tmp_path: Path, make_store: Callable[..., Any], clean: Path
) -> None:
    """A store that answers 503 past its retries raises: its shards are not
    quietly dropped from the dataset (a local file that cannot be read is)."""
    shutil.copytree(clean, tmp_path / "partial")
    with _served(tmp_path) as http:
        store = make_store("http", attempts=2, backoff=0.01)
        dataset = Dataset(f"{http.url}/partial", store=store)
        http.faults.errors = 1000
        with pytest.raises((ShardError, StorageError), match="503"):
            dataset.shard_names  # noqa: B018
        assert dataset._bad_shards == {}
