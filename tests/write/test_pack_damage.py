"""Damaged audio found while packing or by a job's part is a problem, not a count.

A FLAC file whose bytes were flipped inside a frame (bit rot in the source)
packs as it is, and the seek index check, failing on that frame, names it
(docs/seek-index.md, "Damaged audio, not a wrong index"). `streamer index`
then exits 1; `streamer pack`, which builds the same indexes, printed the
same line and exited 0, and the pack and index parts of a cloud job left
it out of their problems: the job's summary read "ok".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import pack_audio

from streamer import jobs
from streamer.cli import main
from streamer.dataset import Dataset

FILES = {"tone": ("flac", 44100, 2), "other": ("flac", 44100, 1)}
#: Bytes past the middle seek point: inside that frame, in a probe's window.
INTO = 300


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return pack_audio(tmp_path_factory.mktemp("pack-damage"), FILES, 6.0)


def _damaged_source(clean: Dataset, folder: Path) -> tuple[Path, int]:
    """A copy of the packed source files with one bit of ``tone`` flipped
    inside the frame at its middle seek point, and that point's offset."""
    src = folder / "src"
    shutil.copytree(Path(clean.root).parent / "src", src)
    index = clean.seek_index("tone")
    offset = int(index.byte_pos[len(index.byte_pos) // 2])
    path = src / "tone.flac"
    data = bytearray(path.read_bytes())
    data[offset + INTO] ^= 0x10
    path.write_bytes(bytes(data))
    return src, offset


def _named(text: str, offset: int) -> bool:
    return f"key 'tone': bytes [{offset}, " in text


def test_pack_exits_1_naming_damaged_audio_and_0_without(
    clean: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, offset = _damaged_source(clean, tmp_path)
    capsys.readouterr()
    assert main(["pack", str(src), str(tmp_path / "out"), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "damaged audio data in shard shard-000000, key 'tone'" in out, out
    assert _named(out, offset), out

    clean_src = Path(clean.root).parent / "src"
    assert main(["pack", str(clean_src), str(tmp_path / "clean"), "--no-progress"]) == 0
    assert "damaged" not in capsys.readouterr().out


def test_job_parts_list_damaged_audio_as_problems(clean: Dataset, tmp_path: Path) -> None:
    src, offset = _damaged_source(clean, tmp_path)
    packed = jobs.pack_part(str(src), str(tmp_path / "packed"), "0/1")
    ((item, why),) = packed.problems.items()  # a --files part names its shards apart
    assert packed.ok and item == "shard shard-0of1-000000, key 'tone'", item
    assert _named(f"key 'tone': {why.removeprefix('damaged audio data: ')}", offset), why
    summary = jobs.merge("pack", ["0/1"], [packed])
    assert not summary.ok
    assert any("key 'tone'" in line and "damaged audio data" in line for line in summary.lines())

    out = str(tmp_path / "unindexed")
    assert jobs.pack_part(str(src), out, "0/1", index=False).problems == {}
    indexed = jobs.index_part(out, "0/1")
    assert list(indexed.problems) == ["shard shard-0of1-000000, key 'tone'"]
    assert not jobs.merge("index", ["0/1"], [indexed]).ok
