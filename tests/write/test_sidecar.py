"""``pack --columns``: extra columns from a CSV or JSON-lines sidecar keyed by file path."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import write_audio

import streamer
from streamer import RandomCrops, Streamer
from streamer.cli import main
from streamer.dataset import Dataset
from streamer.errors import PackError
from streamer.write.pack import pack

FILES = [
    "set0/mp3.mp3",
    "set1/vorbis.ogg",
    "set0/opus.opus",
    "set1/flac.flac",
    "set0/aac.m4a",
    "set1/alac.m4a",
    "set0/wav.wav",
]


def test_csv_columns_join_the_crops(audio_dir: Path, tmp_path: Path) -> None:
    sidecar = tmp_path / "labels.csv"
    rows = [f"{path},spk{n % 3},{n}" for n, path in enumerate(FILES[:-1])]  # wav: not listed
    sidecar.write_text("path,speaker,label\n" + "\n".join([*rows, "gone/x.mp3,spk9,99"]) + "\n")
    report = pack(
        audio_dir,
        tmp_path / "ds",
        shard_size=600_000,
        batch_size=2,
        progress=False,
        columns=sidecar,
    )
    assert report.unmatched == ["gone/x.mp3"] and len(report.shards) > 1
    crops = list(
        Streamer(tmp_path / "ds", RandomCrops(0.5), columns=["speaker", "labels/label"], workers=0)
    )
    assert len(crops) == 7
    for crop in crops:
        source = streamer.open_dataset(tmp_path / "ds").info(crop.key)["source"]
        if source == "set0/wav.wav":
            assert crop.fields == {"speaker": None, "labels/label": None}
        else:
            n = FILES.index(source)
            assert crop.fields == {"speaker": f"spk{n % 3}", "labels/label": n}


def test_jsonl_lists_become_supervisions(audio_dir: Path, tmp_path: Path) -> None:
    sidecar = tmp_path / "transcripts.jsonl"
    segments = [
        {"start": 0.0, "end": 1.5, "text": "one"},
        {"start": 1.5, "end": 3.0, "text": "two"},
    ]
    sidecar.write_text(
        "\n".join(json.dumps({"path": p, "transcript": segments}) for p in FILES) + "\n"
    )
    out = tmp_path / "ds"
    args = ["pack", str(audio_dir), str(out), "--no-progress", "--columns", str(sidecar)]
    assert main([*args, "--columns-dir", "text"]) == 0
    manifest = Dataset(out, manifest=True)  # written after the sidecar's column directory
    assert manifest.manifest is not None and "text" in manifest.manifest.column_dirs
    crops = list(Streamer(out, RandomCrops(1.0), supervisions="text/transcript", workers=0))
    assert len(crops) == 7
    for crop in crops:
        expected = [s["text"] for s in segments if s["start"] < crop.end and s["end"] > crop.start]
        assert [s["text"] for s in crop.supervisions] == expected


def test_csv_paths_are_text_as_written(tmp_path: Path) -> None:
    """Files without an extension named by numbers: pyarrow inferred the
    ``path`` column as integers, ``001`` became ``'1'``, and every row of
    the sidecar matched no file (its labels lost, nulls written)."""
    src = tmp_path / "src"
    write_audio(src, "001", "wav", 8000, 1, 0.2).rename(src / "001")
    write_audio(src, "010", "wav", 8000, 1, 0.2, seed=1).rename(src / "010")
    sidecar = tmp_path / "labels.csv"
    sidecar.write_text("path,speaker\n001,a\n010,b\n")
    report = pack(src, tmp_path / "ds", progress=False, columns=sidecar)
    assert report.files == 2 and report.unmatched == []
    labels = pa.ipc.open_file(tmp_path / "ds" / "labels" / "shard-000000.wsds").read_all()
    assert labels.to_pylist() == [
        {"__key__": "001", "speaker": "a"},
        {"__key__": "010", "speaker": "b"},
    ]


def test_a_bad_sidecar_is_refused_before_packing(audio_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "nopath.csv").write_text("file,speaker\na.mp3,x\n")
    with pytest.raises(PackError, match="has no 'path' column"):
        pack(audio_dir, tmp_path / "a", progress=False, columns=tmp_path / "nopath.csv")
    assert not (tmp_path / "a").exists()
    (tmp_path / "twice.csv").write_text("path,speaker\na.mp3,x\na.mp3,y\n")
    with pytest.raises(PackError, match=r"lists 'a\.mp3' twice"):
        pack(audio_dir, tmp_path / "b", progress=False, columns=tmp_path / "twice.csv")
    with pytest.raises(PackError, match="cannot read the sidecar"):
        pack(audio_dir, tmp_path / "c", progress=False, columns=tmp_path / "missing.jsonl")
    (tmp_path / "null.jsonl").write_text('{"path": "a.mp3"}\n{"path": null}\n')
    with pytest.raises(PackError, match="has no 'path' in row 1"):  # was: lists None twice
        pack(audio_dir, tmp_path / "d", progress=False, columns=tmp_path / "null.jsonl")
