"""What ``pack`` refuses or corrects (issue 17): files that are not audio, a
header duration the seek index contradicts."""

from __future__ import annotations

import struct
import wave
from pathlib import Path

import numpy as np
import pytest
from _index_support import empty_first_track, encoded

from streamer import open_dataset
from streamer.cli import main
from streamer.errors import PackError
from streamer.synth import encode, signal
from streamer.write.pack import pack
from streamer.write.probe import ProbeError, probe


def test_random_bytes_named_mp3_are_skipped_with_the_reason(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.mp3").write_bytes(encode(signal(1.0, 44100, 1, seed=0), 44100, "mp3"))
    # Probed by its bytes alone, as crops open it (by its name, FFmpeg's
    # probe took it for an mp3 stream of sample rate 0).
    (src / "noise.mp3").write_bytes(np.random.default_rng(0).bytes(200_000))
    report = pack(src, tmp_path / "out", progress=False)
    assert report.files == 1
    assert report.skipped == [
        ("noise.mp3", "not audio PyAV can open (Invalid data found when processing input)")
    ]
    assert list(open_dataset(tmp_path / "out").keys()) == ["good"]


def test_a_file_whose_first_audio_stream_is_empty_is_skipped_with_the_reason(
    tmp_path: Path,
) -> None:
    """An m4a whose first audio track has empty sample tables, the audio in
    a second: FFmpeg's first audio stream, the one streamer serves, decodes
    to nothing. It was packed with its header's 3.0 s in ``audio_info``,
    and every crop planned over it failed as past the end; so was a WAV
    of no samples, of unknown duration, which the samplers left out
    without a word. Both are skipped now, each with its reason."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.mp3").write_bytes(encode(signal(1.0, 44100, 1, seed=0), 44100, "mp3"))
    (src / "two.m4a").write_bytes(empty_first_track())
    with wave.open(str(src / "none.wav"), "wb") as header_only:
        header_only.setparams((1, 2, 16000, 0, "NONE", ""))
    report = pack(src, tmp_path / "out", progress=False)
    assert report.skipped == [
        ("none.wav", "its audio stream is empty (no packets)"),
        (
            "two.m4a",
            "its first audio stream is empty (no packets): streamer serves the first "
            "audio stream, as FFmpeg picks it, of the 2 the file has",
        ),
    ]
    assert list(open_dataset(tmp_path / "out").keys()) == ["good"]


def test_an_mp4_whose_sample_table_overclaims_is_skipped_naming_the_table(
    tmp_path: Path,
) -> None:
    """An m4a whose stts claims 2^28 entries in a box of 2: FFmpeg refuses
    it as "Cannot allocate memory", and the file was skipped in those words,
    which read like the machine running out of memory."""
    data = bytearray(encoded("aac", 44100, 1, seconds=1.0))
    struct.pack_into(">I", data, data.find(b"stts") + 8, 1 << 28)
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.mp3").write_bytes(encode(signal(1.0, 44100, 1, seed=0), 44100, "mp3"))
    (src / "lying.m4a").write_bytes(data)
    reason = (
        "damaged MP4 header: its stts box claims 268435456 entries but holds 2; "
        "re-encode or remux the file (FFmpeg refused it: Cannot allocate memory)"
    )
    report = pack(src, tmp_path / "out", progress=False)
    assert report.skipped == [("lying.m4a", reason)]
    with pytest.raises(ProbeError) as refused:  # a path, as ``streamer probe`` passes it
        probe(src / "lying.m4a")
    assert str(refused.value) == reason


@pytest.mark.parametrize("ext", ["mp3", "flac", "aac", "ac3"])
def test_an_empty_file_is_skipped_in_one_line(tmp_path: Path, capfd, ext: str) -> None:  # type: ignore[no-untyped-def]
    """FFmpeg's raw-stream demuxers, picked for an empty file by its name,
    seek to -1: the file object's ``ValueError`` came through PyAV as a
    traceback on stderr ("PyAV library exception being dropped"), and the
    file was skipped as "not audio PyAV can open (negative seek position -1)"."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.mp3").write_bytes(encode(signal(1.0, 44100, 1, seed=0), 44100, "mp3"))
    (src / f"aborted.{ext}").write_bytes(b"")
    report = pack(src, tmp_path / "out", progress=False)
    assert report.skipped == [(f"aborted.{ext}", "empty file")]
    assert "Traceback" not in capfd.readouterr().err


def test_an_empty_source_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    with pytest.raises(PackError, match="holds no files"):
        pack(tmp_path / "src", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_truncated_mp3_gets_its_index_duration(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The Xing header still says the whole file (60 s); a tenth is left."""
    src = tmp_path / "src"
    src.mkdir()
    whole = encode(signal(60.0, 44100, 1, seed=1), 44100, "mp3")
    (src / "cut.mp3").write_bytes(whole[: len(whole) // 10])
    out = tmp_path / "out"
    assert main(["pack", str(src), str(out), "--no-progress"]) == 0
    warning = capsys.readouterr().err
    assert "warning: cut: the header says 60.0 s, the seek index " in warning
    duration = open_dataset(out).info("cut")["duration"]
    assert 5.5 < duration < 6.5


def test_indexing_a_pack_without_index_corrects_the_duration_too(tmp_path: Path) -> None:
    """``pack --no-index`` keeps the header's 60 s; ``streamer index`` then
    gives ``audio_info`` the index's 6 s, as ``pack`` would have. It kept
    the 60 s: the samplers drew crops over 54 s of nothing, and the
    open-time check refused the index (``index disagrees with audio_info:
    duration``), so every crop decoded the file from its start."""
    src = tmp_path / "src"
    src.mkdir()
    whole = encode(signal(60.0, 44100, 1, seed=1), 44100, "mp3")
    (src / "cut.mp3").write_bytes(whole[: len(whole) // 10])
    out = tmp_path / "out"
    pack(src, out, progress=False, index=False)
    assert open_dataset(out).info("cut")["duration"] == pytest.approx(60.0, abs=0.1)
    assert main(["index", str(out), "--no-progress"]) == 0
    dataset = open_dataset(out)
    assert 5.5 < dataset.info("cut")["duration"] < 6.5
    assert dataset.episode("cut").index.ok
    dataset.read_crop("cut", 3.0, 3.5)
    assert dataset.decode_stats.paths == {"index": 1}
