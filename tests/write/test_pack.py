"""`streamer pack`: round trip, layout, skipping, strictness, bounded memory, interruption."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import tracemalloc
import unicodedata
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import FIXTURE_FILES, write_audio

from streamer import open_dataset
from streamer.errors import IncompleteDatasetError, PackError
from streamer.synth import CODECS
from streamer.write import pack as pack_module
from streamer.write.pack import pack


def test_blobs_are_the_source_files_byte_for_byte(audio_dir: Path, packed: Path) -> None:
    dataset = open_dataset(packed)
    sources = sorted(p for p in audio_dir.rglob("*") if p.is_file())
    assert len(dataset) == len(sources) == len(FIXTURE_FILES)
    for path in sources:
        key = str(path.relative_to(audio_dir).with_suffix(""))
        assert bytes(dataset.blob(key).view()) == path.read_bytes()


def test_audio_info_describes_each_file(audio_dir: Path, packed: Path) -> None:
    dataset = open_dataset(packed)
    expected_codec = {"wav": "pcm_s16le"}
    for index, (codec, rate, channels) in enumerate(FIXTURE_FILES):
        key = f"set{index % 2}/{codec}"
        info = dataset.info(key)
        source = audio_dir / f"{key}.{CODECS[codec].extension}"
        assert info["codec"] == expected_codec.get(codec, codec)
        assert info["sample_rate"] == rate
        assert info["channels"] == channels
        assert info["duration"] == pytest.approx(3.0, abs=0.1)
        assert info["num_bytes"] == source.stat().st_size
        assert info["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
        assert info["source"] == f"{key}.{CODECS[codec].extension}"


def test_shards_follow_the_wsds_layout(packed: Path) -> None:
    audio = sorted((packed / "audio").iterdir())
    info = sorted((packed / "audio_info").iterdir())
    assert [p.name for p in audio] == [p.name for p in info]
    assert len(audio) > 1, "a 600 kB shard size must cut several shards"
    for path in audio:
        reader = pa.ipc.open_file(pa.memory_map(str(path)))
        batch_size = int(reader.schema.metadata[b"batch_size"])
        assert batch_size == 2
        rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        assert all(r == batch_size for r in rows[:-1]) and 0 < rows[-1] <= batch_size
        assert reader.schema.field("audio").type == pa.large_binary()
        assert reader.schema.field("__key__").type == pa.string()
        assert open_dataset(packed).shard(path.stem).is_addressable("audio")


def test_files_pyav_cannot_probe_are_skipped_with_a_reason(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_audio(src, "good", "flac", 16000, 1, 0.5)
    (src / "notes.txt").write_text("not audio")
    (src / "empty.mp3").write_bytes(b"")
    report = pack(src, tmp_path / "out", progress=False)
    assert report.files == 1
    reasons = dict(report.skipped)
    assert set(reasons) == {"notes.txt", "empty.mp3"}
    assert "PyAV" in reasons["notes.txt"] and reasons["empty.mp3"] == "empty file"
    assert list(open_dataset(tmp_path / "out").keys()) == ["good"]


def test_a_file_ffmpeg_has_no_decoder_for_is_skipped_with_a_reason(tmp_path: Path) -> None:
    """36-bit PCM in WAV (as scipy's test data has it): FFmpeg opens the
    file and finds the stream, but has no decoder (PyAV's codec context is
    None); pack used to crash on it."""
    src = tmp_path / "src"
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 8000 * 5, 5, 36)
    body = b"WAVEfmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", 10)
    src.mkdir()
    (src / "pcm36.wav").write_bytes(b"RIFF" + struct.pack("<I", len(body) + 10) + body + bytes(10))
    write_audio(src, "good", "flac", 16000, 1, 0.5)
    report = pack(src, tmp_path / "out", progress=False)
    assert report.skipped == [("pcm36.wav", "no decoder for its audio stream")]
    assert list(open_dataset(tmp_path / "out").keys()) == ["good"]


def test_a_file_ffmpeg_opens_only_by_its_name_is_skipped_with_a_reason(tmp_path: Path) -> None:
    """An Ogg file behind 1000 bytes of junk: FFmpeg opens it when the name
    says ``.ogg``, not from the bytes alone, which is all a crop has (a blob
    has no name). pack probed it with its name and packed it, and every
    crop of it then failed ("FFmpeg cannot decode it")."""
    src = tmp_path / "src"
    write_audio(src, "good", "flac", 16000, 1, 0.5)
    write_audio(src, "late", "vorbis", 44100, 2, 0.5)
    ogg = src / f"late.{CODECS['vorbis'].extension}"
    ogg.write_bytes(bytes(range(200)).replace(b"O", b"o") * 5 + ogg.read_bytes())
    report = pack(src, tmp_path / "out", progress=False)
    assert [source for source, _ in report.skipped] == [ogg.name]
    assert "PyAV" in report.skipped[0][1]
    assert list(open_dataset(tmp_path / "out").keys()) == ["good"]


def test_two_files_with_one_key_keep_the_first(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_audio(src, "a/b", "flac", 16000, 1, 0.5)
    write_audio(src, "a/b", "wav", 16000, 1, 0.5)
    report = pack(src, tmp_path / "out", progress=False)
    assert report.files == 1
    assert report.skipped == [("a/b.wav", "key 'a/b' is already taken by a/b.flac")]


@pytest.mark.parametrize("files", ["1/2", None])
def test_a_readable_file_takes_the_key_its_unreadable_twin_held(
    tmp_path: Path, files: str | None
) -> None:
    """``a.flac`` wins ``a`` over ``a.mp3`` by name, but is not audio: it was
    skipped, and ``a.mp3`` had been left out as a duplicate, so neither was
    packed. The unreadable one is skipped with its reason, the next takes the
    key (in any partition), and the one after is the duplicate."""
    src = tmp_path / "src"
    src.mkdir()
    for key in ("a", "b"):
        (src / f"{key}.flac").write_bytes(b"fLaC" + bytes(200))  # not a FLAC stream
        write_audio(src, key, "mp3", 16000, 1, 0.5)
        write_audio(src, key, "wav", 16000, 1, 0.5, seed=1)
    write_audio(src, "c", "wav", 16000, 1, 0.5)
    out = tmp_path / "out"
    reports = [pack(src, out, progress=False, files=f"{i}/2" if files else None) for i in (0, 1)]
    if not files:
        reports = reports[:1]
    skipped = sorted(item for r in reports for item in r.skipped)
    assert [source for source, _ in skipped] == ["a.flac", "a.wav", "b.flac", "b.wav"]
    assert skipped[1][1] == "key 'a' is already taken by a.mp3"
    assert "already taken" not in skipped[0][1]
    dataset = open_dataset(out)
    assert sorted(dataset.keys()) == ["a", "b", "c"]
    assert dataset.info("a")["source"] == "a.mp3" and dataset.info("b")["source"] == "b.mp3"
    assert dataset.read_crop("a", 0.0, 0.25).shape[1] > 0


def test_a_key_whose_files_are_all_unreadable_reports_each(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.flac").write_bytes(b"fLaC" + bytes(200))
    (src / "a.wav").write_bytes(b"RIFF" + bytes(200))
    write_audio(src, "c", "wav", 16000, 1, 0.5)
    report = pack(src, tmp_path / "out", progress=False)
    assert [source for source, _ in report.skipped] == ["a.flac", "a.wav"]
    assert not any("already taken" in reason for _, reason in report.skipped)
    assert list(open_dataset(tmp_path / "out").keys()) == ["c"]


def test_a_transcript_beside_its_audio_never_takes_its_key(tmp_path: Path) -> None:
    """``utt1.txt`` sorts before ``utt1.wav``: it took the key, the wav was
    left out as a duplicate and the text skipped as not audio, so the audio
    was lost. The audio extension keeps the key now, whatever the order."""
    src = tmp_path / "src"
    write_audio(src, "utt1", "wav", 16000, 1, 0.5)
    (src / "utt1.txt").write_text("hello")
    (src / "utt2.json").write_text("{}")
    write_audio(src, "utt2", "mp3", 16000, 1, 0.5)
    report = pack(src, tmp_path / "out", progress=False)
    assert report.files == 2
    assert report.skipped == [
        ("utt1.txt", "key 'utt1' is already taken by utt1.wav"),
        ("utt2.json", "key 'utt2' is already taken by utt2.mp3"),
    ]
    dataset = open_dataset(tmp_path / "out")
    assert list(dataset.keys()) == ["utt1", "utt2"]
    assert [dataset.info(k)["source"] for k in ("utt1", "utt2")] == ["utt1.wav", "utt2.mp3"]


def test_keys_that_are_one_text_in_two_unicode_forms_are_one_key(tmp_path: Path) -> None:
    """``café`` composed (NFC, as Linux keeps it) and decomposed (NFD, as
    macOS writes it) are two file names but one key to whoever asks for it."""
    src = tmp_path / "src"
    first = write_audio(src, "x", "flac", 16000, 1, 0.5)
    composed, decomposed = (unicodedata.normalize(f, "café") for f in ("NFC", "NFD"))
    first.rename(src / f"{composed}.flac")
    write_audio(src, decomposed, "flac", 16000, 1, 0.5, seed=1)
    report = pack(src, tmp_path / "out", progress=False)
    assert report.files == 1
    (skipped, reason), *rest = report.skipped
    assert not rest and skipped == f"{composed}.flac"  # the decomposed name sorts first
    assert reason.endswith("(the same text in another Unicode normalisation)")
    assert list(open_dataset(tmp_path / "out").keys()) == [decomposed]


def test_files_that_cannot_be_read_are_skipped_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dangling symlink failed the whole listing (`cannot list SRC: No such
    file`, naming no file); a file deleted after the listing escaped as a
    bare FileNotFoundError. Both are skipped and reported, like not-audio."""
    src = tmp_path / "src"
    write_audio(src, "a", "flac", 16000, 1, 0.5)
    write_audio(src, "gone", "flac", 16000, 1, 0.5)
    (src / "dangling.wav").symlink_to(src / "nowhere.wav")
    listed = pack_module.list_sources

    def list_then_delete(*args: object, **kwargs: object) -> list:
        files = listed(*args, **kwargs)
        (src / "gone.flac").unlink(missing_ok=True)
        return files

    monkeypatch.setattr(pack_module, "list_sources", list_then_delete)
    report = pack(src, tmp_path / "out", progress=False)
    assert report.files == 1
    assert report.skipped == [
        ("dangling.wav", "cannot read it (No such file or directory)"),
        ("gone.flac", "cannot read it (No such file or directory)"),
    ]
    assert list(open_dataset(tmp_path / "out").keys()) == ["a"]
    with pytest.raises(PackError, match=r"^dangling\.wav: cannot read it"):
        pack(src, tmp_path / "strict", strict=True, progress=False)


@pytest.mark.timeout(30)  # without the fix the pipe's open waits for a writer for ever
def test_files_that_are_not_regular_files_are_skipped_never_opened_to_wait(
    tmp_path: Path,
) -> None:
    """A named pipe in SRC hung the pack in its open(), whatever its name;
    a socket was `cannot read it (No such device or address)`."""
    src = tmp_path / "src"
    write_audio(src, "x", "flac", 16000, 1, 0.5)
    os.mkfifo(src / "pipe.flac")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(src / "sock.wav"))
    (src / "null.wav").symlink_to(os.devnull)
    report = pack(src, tmp_path / "out", progress=False)
    assert report.files == 1
    assert report.skipped == [
        ("null.wav", "not a regular file (a device)"),
        ("pipe.flac", "not a regular file (a named pipe)"),
        ("sock.wav", "not a regular file (a socket)"),
    ]
    with pytest.raises(PackError, match=r"^null\.wav: not a regular file \(a device\)$"):
        pack(src, tmp_path / "strict", strict=True, progress=False)
    assert not (tmp_path / "strict").exists()


def test_a_loop_of_file_symlinks_is_skipped_like_a_dangling_one(tmp_path: Path) -> None:
    """``a.flac -> b.flac -> a.flac`` failed the whole listing (`cannot list
    the source: ... Too many levels of symbolic links`, naming no file)."""
    src = tmp_path / "src"
    write_audio(src, "x", "flac", 16000, 1, 0.5)
    (src / "a.flac").symlink_to("b.flac")
    (src / "b.flac").symlink_to("a.flac")
    report = pack(src, tmp_path / "out", progress=False)
    assert report.files == 1
    assert report.skipped == [
        ("a.flac", "cannot read it (Too many levels of symbolic links)"),
        ("b.flac", "cannot read it (Too many levels of symbolic links)"),
    ]
    with pytest.raises(PackError, match=r"^a\.flac: cannot read it \(Too many levels"):
        pack(src, tmp_path / "strict", strict=True, progress=False)


def test_a_symlink_loop_is_one_line_naming_it(tmp_path: Path) -> None:
    """``d/up -> ..`` was walked until the OS refused the path (40 links
    deep), and the error was that path, ``d/up/d/up/...``, naming no link."""
    src = tmp_path / "src"
    write_audio(src, "d/a", "flac", 16000, 1, 0.5)
    (src / "d" / "up").symlink_to("..")
    (src / "d" / "up2").symlink_to("..")
    with pytest.raises(
        PackError, match=r"^'d/up' under the source is a symlink to .*a folder it is in"
    ):
        pack(src, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_an_out_inside_src_is_not_packed_by_its_rerun(tmp_path: Path) -> None:
    """``pack src src/ds`` twice (a re-run finishing a crashed pack): the
    re-run listed the dataset's own shards and manifest as sources, skipped
    them as not audio, and stored empty shards for them into the dataset."""
    src = tmp_path / "src"
    write_audio(src, "a", "flac", 16000, 1, 0.5)
    write_audio(src, "b", "flac", 16000, 1, 0.5, seed=1)
    first = pack(src, src / "ds", shard_size=1, batch_size=1, progress=False)
    again = pack(src, src / "ds", shard_size=1, batch_size=1, progress=False)
    assert first.shards == again.already_complete == ["shard-000000", "shard-000001"]
    assert again.shards == [] and again.skipped == []
    assert sorted(p.name for p in (src / "ds" / "audio").iterdir()) == [
        "shard-000000.wsds",
        "shard-000001.wsds",
    ]
    with pytest.raises(PackError, match="is SRC: pick another OUT"):
        pack(src, src, progress=False)


def test_hidden_files_are_reported_once_as_skipped(tmp_path: Path) -> None:
    """Hidden names (``.a.flac``, ``.git/``) were left out without a word:
    an episode missing from the dataset that no count or line mentioned.
    They are listed as skipped (folders once, not walked), by one partition
    only, and never fail a strict run."""
    src = tmp_path / "src"
    write_audio(src, "a", "flac", 16000, 1, 0.5)
    write_audio(src, "d/.b", "flac", 16000, 1, 0.5)
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref")
    report = pack(src, tmp_path / "out", strict=True, progress=False)
    hidden = "hidden: its name starts with '.'"
    assert report.files == 1
    assert report.skipped == [(".git/", hidden), ("d/.b.flac", hidden)]
    parts = [pack(src, tmp_path / "parts", files=f"{i}/2", progress=False) for i in range(2)]
    assert [p.skipped for p in parts] == [report.skipped, []]


def test_strict_fails_and_leaves_no_shard(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_audio(src, "a", "flac", 16000, 1, 0.5)
    (src / "z.txt").write_text("not audio")
    with pytest.raises(PackError, match=r"z\.txt"):
        pack(src, tmp_path / "out", strict=True, progress=False)
    assert _all_files(tmp_path / "out") == []


def test_refuses_to_pack_over_an_existing_dataset(tmp_path: Path, packed: Path) -> None:
    """Another source's shards (same names, another plan) are not a run to resume."""
    write_audio(tmp_path / "src", "other", "flac", 16000, 1, 0.5)
    before = sorted(p.stat().st_mtime_ns for p in packed.rglob("*.wsds"))
    with pytest.raises(PackError, match="already holds a dataset"):
        pack(tmp_path / "src", packed, progress=False)
    with pytest.raises(PackError, match="already holds a dataset"):  # same source, other shards
        pack(tmp_path / "src", packed, shard_size=123, progress=False)
    assert sorted(p.stat().st_mtime_ns for p in packed.rglob("*.wsds")) == before


def test_a_failure_mid_run_removes_the_shard_being_written(tmp_path: Path, monkeypatch) -> None:
    src = tmp_path / "src"
    for i in range(6):
        write_audio(src, f"ep{i}", "wav", 8000, 1, 0.5, seed=i)
    import streamer.write.pack as pack_module

    real = pack_module._read_into
    calls = []

    def failing_read(entry, target):  # the 5th file "changes size" while packing
        calls.append(entry.key)
        if len(calls) == 5:
            raise PackError(f"{entry.source}: file changed size while packing")
        return real(entry, target)

    monkeypatch.setattr(pack_module, "_read_into", failing_read)
    with pytest.raises(PackError, match="changed size"):
        pack(src, tmp_path / "out", batch_size=1, shard_size=10_000, progress=False)
    # Two complete shards (two files each) survive; nothing else is left behind.
    assert [p.name for p in sorted((tmp_path / "out" / "audio").iterdir())] == [
        "shard-000000.wsds",
        "shard-000001.wsds",
    ]
    assert _hidden_files(tmp_path / "out") == []
    with pytest.raises(IncompleteDatasetError, match="missing: shard-000002"):
        list(open_dataset(tmp_path / "out").keys())
    served = open_dataset(tmp_path / "out", allow_incomplete=True)
    assert list(served.keys()) == ["ep0", "ep1", "ep2", "ep3"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_pack_leaves_only_complete_shards(tmp_path: Path, signum: int) -> None:
    src = tmp_path / "src"
    for i in range(150):
        write_audio(src, f"ep{i:03d}", "wav", 8000, 1, 0.2, seed=i)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "streamer.cli", "pack", str(src), str(out)]
    command += ["--batch-size", "1", "--shard-size", "1", "--no-progress"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list((out / "audio").glob("shard-000002.wsds")) and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr.decode()
    assert b"interrupted" in stderr
    assert _hidden_files(out) == []
    with pytest.raises(IncompleteDatasetError, match="shards its pack planned are present"):
        len(open_dataset(out))
    dataset = open_dataset(out, allow_incomplete=True)
    assert 3 <= len(dataset) < 150
    for key in dataset:
        assert dataset.info(key)["num_bytes"] == len(dataset.blob(key))


def test_memory_is_bounded_by_the_batch_not_the_dataset(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i in range(12):
        write_audio(src, f"ep{i:02d}", "wav", 48000, 2, 5.0, seed=i)  # ~0.96 MB each
    total = sum(p.stat().st_size for p in src.iterdir())
    tracemalloc.start()
    try:
        pack(src, tmp_path / "out", batch_size=2, progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total > 11e6
    assert peak < 3.5e6, f"peak {peak / 1e6:.1f} MB for a {total / 1e6:.1f} MB source"


def _all_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _hidden_files(folder: Path) -> list[str]:
    return [name for name in _all_files(folder) if os.path.basename(name).startswith(".")]
