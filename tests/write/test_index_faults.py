"""``pack`` and ``streamer index`` never stop for one bad file, cell or shard:
hostile cells become counted "no index" rows, an unreadable audio shard is
reported (exit 1) while the others are indexed, and memory stays flat (peak
RSS of the whole command, measured in a child process)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from _index_support import encoded

import streamer
from streamer.cli import main
from streamer.formats.ogg import pages
from streamer.index import INDEX_DIR, IndexReader
from streamer.shard import Shard
from streamer.write.index import build_index
from streamer.write.pack import pack

#: Peak resident memory of a whole `streamer pack` / `streamer index` run on
#: a few small files: the interpreter, numpy, pyarrow and PyAV are about
#: 150 MB of it. Hostile tables once took 2.2 GB, or died on a 16-32 GiB numpy
#: allocation.
RSS_LIMIT_MB = 400


def hostile_m4a(box: bytes, offset: int, value: int) -> bytes:
    data = bytearray(encoded("aac", 44100, 2, seconds=20.0))
    struct.pack_into(">I", data, data.find(box) + offset, value)
    return bytes(data)


def opus_with_granule(granule: int) -> bytes:
    """An Opus file whose page before the last claims ``granule`` (on the
    last page FFmpeg, and so the index, ignores a granule past the packets)."""
    data = bytearray(encoded("opus", 48000, 1, seconds=1.0))
    end = data.rfind(b"OggS")
    at = data.rfind(b"OggS", 0, end)
    struct.pack_into("<q", data, at + 6, granule)
    struct.pack_into("<I", data, at + 22, 0)
    struct.pack_into("<I", data, at + 22, pages.ogg_crc(bytes(data[at:end])))
    return bytes(data)


def cells() -> dict[str, bytes | None]:
    """Good episodes and the hostile ones of issue #13, keyed by what they are."""
    return {
        "good-mp3": encoded("mp3", 44100, 1, seconds=1.0),
        "stts-delta": hostile_m4a(b"stts", 16, 0xFFFFFFFF),
        "stts-run": hostile_m4a(b"stts", 12, 0xFFFFFFFF),
        "stsc-per-chunk": hostile_m4a(b"stsc", 16, 0xFFFFFFFF),
        "granule-2^60": opus_with_granule(1 << 60),
        "empty": b"",
        "null": None,
        "good-flac": encoded("flac", 22050, 1, seconds=1.0),
    }


def write_audio_shard(folder: Path, name: str, blobs: dict[str, bytes | None]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {"__key__": list(blobs), "audio": pa.array(list(blobs.values()), pa.large_binary())}
    )
    with pa.ipc.new_file(str(folder / f"{name}.wsds"), table.schema) as writer:
        writer.write_table(table, max_chunksize=3)


def peak_rss_mb(*argv: str) -> tuple[int, int, str]:
    """(exit code, peak RSS in MB, stdout) of ``streamer *argv`` run in a child process."""
    # VmHWM, not ru_maxrss: the latter keeps the high-water mark of the
    # forked copy of this (big) test process from before the exec.
    code = (
        "import json, sys\n"
        "from streamer.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
        "print(json.dumps([rc, int(status.split()[0]) // 1024]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[2],  # this checkout's streamer
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rc, peak = json.loads(done.stdout.strip().splitlines()[-1])
    return rc, peak, done.stdout


def test_index_force_counts_every_bad_cell(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    blobs = cells()
    write_audio_shard(root / "audio", "s", blobs)
    assert main(["index", str(root), "--no-progress", "--workers", "1"]) == 0
    rc, peak, out = peak_rss_mb("index", str(root), "--force", "--no-progress", "--workers", "1")
    assert rc == 0 and peak < RSS_LIMIT_MB, out
    assert "8 episodes: 4 ok, 4 without index" in out
    index = IndexReader(Shard(root / INDEX_DIR / "s.wsds"))
    rows = {key: index.read(row) for row, key in enumerate(blobs)}
    assert all(rows[key].ok for key in ("good-mp3", "stts-run", "good-flac"))
    # The Ogg parser refuses the absurd granule; FFmpeg's packet index (the
    # next candidate) serves the episode, having passed its check.
    assert (
        rows["granule-2^60"].container == "ffmpeg:ogg"
        and rows["granule-2^60"].verdict == "verified"
    )
    assert {key: rows[key].reason for key in blobs if not rows[key].ok} == {
        "stts-delta": "implausible index: more samples than the audio bytes can hold",
        # It parses, but FFmpeg's own decode is empty: its check demotes it.
        "stsc-per-chunk": "failed its check: FFmpeg decodes nothing",
        "empty": "empty blob",
        "null": "'audio' is null",
    }
    # --verify re-checks the same rows: a cell that cannot be read stays "no index".
    rc, _, out = peak_rss_mb("index", str(root), "--verify", "--no-progress", "--workers", "1")
    assert rc == 0 and "8 episodes: 4 ok, 4 without index" in out, out


def test_an_unreadable_shard_is_reported_and_the_rest_indexed(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "ds"
    write_audio_shard(root / "audio", "a", {"one": encoded("mp3", 44100, 1, seconds=1.0)})
    (root / "audio" / "b.wsds").write_bytes(b"ARROW1\0\0" + bytes(100) + b"ARROW1")
    report = build_index(root, progress=False)
    assert report.indexed == ["a"] and report.ok == 1
    assert list(report.failed) == ["b"]
    assert "cannot open as an Arrow IPC file" in report.failed["b"]
    assert main(["index", str(root), "--force", "--no-progress", "--workers", "2"]) == 1
    out = capsys.readouterr().out
    assert "1 failed" in out and "failed shard b: " in out
    assert sorted(p.name for p in (root / INDEX_DIR).iterdir()) == ["a.wsds"]


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def other_keys(path: Path) -> None:
    table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    keys = pa.array([f"other-{key}" for key in table.column("__key__").to_pylist()])
    with pa.ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table.set_column(0, "__key__", keys))


def corrupt_batch(path: Path) -> None:
    """Rewritten zstd-compressed (as wsds writes), its last column's data
    not zstd: the footer and the keys still read."""
    table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(str(path), table.schema, options=options) as writer:
        writer.write_table(table)
    data = bytearray(path.read_bytes())
    at = data.rfind(b"\x28\xb5\x2f\xfd")  # the last zstd frame's magic number
    data[at : at + 4] = bytes(4)
    path.write_bytes(data)


@pytest.fixture
def three_shards(tmp_path: Path) -> Path:
    """A dataset of one mp3 episode per shard, shard-000000 to shard-000002."""
    src = tmp_path / "src"
    src.mkdir()
    for key in ("a", "b", "c"):
        (src / f"{key}.mp3").write_bytes(encoded("mp3", 44100, 1, seconds=1.0))
    root = tmp_path / "ds"
    pack(src, root, shard_size=1, batch_size=1, progress=False, index=False)
    return root


@pytest.mark.parametrize("damage", [truncate, Path.unlink, other_keys, corrupt_batch])
@pytest.mark.parametrize("verify", [False, True])
def test_a_shard_whose_audio_info_is_bad_is_reported_and_the_rest_indexed(
    three_shards: Path,
    damage: Callable[[Path], object],
    verify: bool,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The dataset leaves such a shard out: it is a failed shard, not an
    error that stops the run (nor an index counted ok), named once (not
    warned about again by every other shard's job)."""
    if verify:
        assert main(["index", str(three_shards), "--no-progress", "--workers", "1"]) == 0
        capsys.readouterr()
    damage(three_shards / "audio_info" / "shard-000001.wsds")
    flags = ["--verify"] if verify else ["--force"]
    assert main(["index", str(three_shards), *flags, "--no-progress", "--workers", "1"]) == 1
    out, err = capsys.readouterr()
    assert "2 shards (0 already indexed, 1 failed), 2 episodes: 2 ok" in out, out
    assert "failed shard shard-000001: " in out and "error" not in err
    assert len([r for r in caplog.records if "shard-000001" in r.getMessage()]) <= 1
    indexed = sorted(p.stem for p in (three_shards / INDEX_DIR).iterdir())
    assert indexed == ["shard-000000", "shard-000001", "shard-000002"][:: 1 if verify else 2]


@pytest.mark.timeout(300)
def test_pack_of_hostile_files_finishes_in_flat_memory(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for key, data in cells().items():
        if data:
            (src / f"{key}.bin").write_bytes(data)
    rc, peak, out = peak_rss_mb("pack", str(src), str(tmp_path / "ds"), "--no-progress")
    assert rc == 0 and peak < RSS_LIMIT_MB, out
    dataset = streamer.open_dataset(tmp_path / "ds")
    assert sorted(dataset.keys()) == sorted(k for k, v in cells().items() if v)
    assert dataset.seek_index("good-flac").ok
    assert not dataset.seek_index("stts-delta").ok
