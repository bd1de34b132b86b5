"""``streamer index`` checks every index before storing it; ``--no-verify``
skips that, ``--verify`` re-checks a dataset's stored indexes and demotes
exactly the rows that fail; ``streamer inspect`` counts the verdicts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from _index_support import cli_encode, encoded, packed_dataset
from helpers import rewrite_index_shard

from streamer import open_dataset, synth
from streamer.cli import main
from streamer.cli.index import print_index_report
from streamer.formats.mp3 import decode as mp3_decode
from streamer.index.table import (
    ENDS_EARLY,
    INDEX_DIR,
    NO_INDEX,
    UNVERIFIED,
    VERIFIED,
    IndexReader,
    SeekIndex,
)
from streamer.jobs import _index_counts
from streamer.shard.ipc import Shard
from streamer.write.index import build_index
from streamer.write.pack import pack

FILES = {
    "a-mp3": ("mp3", 44100, 1),
    "b-mp3": ("mp3", 44100, 2),
    "c-flac": ("flac", 22050, 1),
    "d-opus": ("opus", 48000, 1),
    "e-wav": ("wav", 16000, 1),
}
BAD = "b-mp3"


@pytest.fixture
def unverified(tmp_path: Path) -> Path:
    """A dataset of ``FILES`` indexed with ``--no-verify``."""
    root = packed_dataset(tmp_path, FILES, index=False)
    assert main(["index", str(root), "--no-verify", "--no-progress", "--workers", "1"]) == 0
    return root


def stored(root: Path) -> dict[str, SeekIndex]:
    (path,) = (root / INDEX_DIR).iterdir()
    reader = IndexReader(Shard(path))
    keys = reader.shard.keys.to_pylist()
    return {key: reader.read(row) for row, key in enumerate(keys)}


def plant(root: Path, key: str, change: dict[str, object]) -> None:
    """Rewrite the index shard with one row changed (still plausible: the
    open-time checks pass it)."""
    rows = stored(root)
    rows[key] = dataclasses.replace(rows[key], **change)
    (path,) = (root / INDEX_DIR).iterdir()
    rewrite_index_shard(path, rows)


def test_index_verifies_by_default_and_no_verify_does_not(
    unverified: Path, capsys: pytest.CaptureFixture
) -> None:
    assert {i.verdict for i in stored(unverified).values()} == {UNVERIFIED}
    capsys.readouterr()
    assert main(["index", str(unverified), "--force", "--no-progress", "--workers", "1"]) == 0
    assert "  verified: 5" in capsys.readouterr().out
    assert {i.verdict for i in stored(unverified).values()} == {VERIFIED}


def test_verify_demotes_exactly_the_planted_row(
    unverified: Path, capsys: pytest.CaptureFixture
) -> None:
    index = stored(unverified)[BAD]
    plant(unverified, BAD, {"first_sample": index.first_sample + 1152})
    ds = open_dataset(unverified)
    assert ds.episode(BAD).index.ok  # the open-time checks cannot tell
    capsys.readouterr()
    assert main(["index", str(unverified), "--verify", "--no-progress", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "5 episodes: 4 ok, 1 without index" in out
    assert "  verified: 4" in out
    assert "  no index (1): failed its check: the " in out
    rows = stored(unverified)
    assert rows[BAD].status == NO_INDEX and rows[BAD].reason.startswith("failed its check: ")
    assert all(rows[k].verdict == VERIFIED for k in FILES if k != BAD)

    # A crop of the demoted row goes through the fallback, counted with its reason.
    ds = open_dataset(unverified)
    ds.read_crop(BAD, 0.5, 1.0)
    ds.read_crop("a-mp3", 0.5, 1.0)
    assert ds.decode_stats.fallback == 1
    (reason,) = ds.decode_stats.fallback_reasons
    assert reason == rows[BAD].reason

    assert main(["inspect", str(unverified)]) == 0
    out = capsys.readouterr().out
    assert "indexes   no index 1, verified 4" in out
    assert "no index  1: failed its check: the " in out


def test_verify_builds_anew_a_row_the_open_time_checks_reject(
    unverified: Path, capsys: pytest.CaptureFixture
) -> None:
    """A row the dataset would not serve (another episode's index: the
    audio_info duration disagrees) is not what the builder makes of the
    audio, which hashes as audio_info says: the row is built anew, and
    audio_info, which was right, not reported."""
    right = stored(unverified)["a-mp3"].num_samples
    plant(unverified, "a-mp3", {"num_samples": 4410})  # 0.1 s of 2 s
    assert open_dataset(unverified).episode("a-mp3").index.reason.startswith("index disagrees")
    assert main(["index", str(unverified), "--verify", "--no-progress", "--workers", "1"]) == 0
    assert "is wrong" not in capsys.readouterr().out
    after = stored(unverified)["a-mp3"]
    assert after.ok and after.num_samples == right != 4410
    assert open_dataset(unverified).episode("a-mp3").index.ok
    assert main(["inspect", str(unverified)]) == 0
    assert "verified 5" in capsys.readouterr().out


def test_verify_counts_unverified_and_generic_in_inspect(
    unverified: Path, capsys: pytest.CaptureFixture
) -> None:
    rows = stored(unverified)
    plant(unverified, "e-wav", {"container": "ffmpeg:wav"})
    assert rows["e-wav"].ok
    capsys.readouterr()
    assert main(["inspect", str(unverified)]) == 0
    assert "indexes   generic 1, unverified 5" in capsys.readouterr().out


def test_only_a_pre_roll_the_check_raised_is_counted_as_larger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """An index may carry a pre-roll from the parse (Vorbis below 20 kHz: its
    longest packet); only the check raising it counts as "a larger pre-roll"
    (a lame -V 5 mp3 whose format pre-roll is one frame, too little for its
    bit reservoir). Before, every stored pre-roll counted, the Vorbis one
    among them."""
    src = tmp_path / "src"
    src.mkdir()
    lame = ["lame", "--quiet", "-V", "5", "-", "{out}"]
    (src / "reservoir.mp3").write_bytes(cli_encode(lame, 44100, 2, seconds=10.0))
    (src / "vorbis.ogg").write_bytes(encoded("vorbis", 16000, 2, seconds=10.0))
    pack(src, tmp_path / "ds", progress=False, index=False)
    monkeypatch.setattr(mp3_decode, "PREROLL_FRAMES", 1)
    report = build_index(tmp_path / "ds", progress=False)
    rows = stored(tmp_path / "ds")
    assert rows["vorbis"].preroll > 0 and rows["reservoir"].preroll > 0
    assert report.labels == {"verified": 2} and report.larger_preroll == 1
    print_index_report(report)
    out = capsys.readouterr().out
    assert "  verified: 2\n  of them verified with a larger pre-roll: 1\n" in out


def test_episodes_whose_decode_ends_early_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Files cut short inside a packet are indexed up to where FFmpeg's decode
    ends (docs/seek-index.md): ``streamer index`` names each, with where and
    why, ``inspect`` counts them, a job counts them. (Before, such an ADTS
    file was counted "no index", a FLAC file reported damaged.)"""
    src = tmp_path / "src"
    src.mkdir()
    for name, codec, container in (("adts.aac", "aac", "adts"), ("native.flac", "flac", None)):
        whole = synth.encode(synth.signal(4.0, 44100, 2, seed=1), 44100, codec, container=container)
        (src / name).write_bytes(whole[: len(whole) * 2 // 3])
    (src / "whole.flac").write_bytes(encoded("flac", 22050, 1, seconds=2.0))
    pack(src, tmp_path / "ds", progress=False, index=False)
    capsys.readouterr()
    assert main(["index", str(tmp_path / "ds"), "--no-progress", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "3 episodes: 3 ok, 0 without index" in out
    lines = [line for line in out.splitlines() if ENDS_EARLY in line]
    assert len(lines) == 2, out
    assert any(
        "key 'adts': " in line and "decoder rejects the packet at byte" in line for line in lines
    )
    assert any(
        "key 'native': " in line and "the last flac frame, at byte" in line for line in lines
    )
    assert main(["inspect", str(tmp_path / "ds")]) == 0
    assert "indexes   decode ends early 2, generic 1, verified 3" in capsys.readouterr().out
    report = build_index(tmp_path / "ds", progress=False, force=True)
    assert sum(len(keys) for keys in report.ends_early.values()) == 2
    assert _index_counts(report)["decode ends early"] == 2
