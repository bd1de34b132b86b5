"""Crops that carry their labels: columns joined from other column directories,
overlapping supervisions with times relative to the crop, a segment's own
fields, the source of a Mix crop."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import streamer
from streamer import Mix, RandomCrops, SegmentCrops, Streamer
from streamer.errors import LayoutError

WORD = pa.struct([("start", pa.float64()), ("end", pa.float64()), ("word", pa.string())])
SEGMENT = pa.struct(
    [
        ("start", pa.float64()),
        ("end", pa.float64()),
        ("text", pa.string()),
        ("words", pa.list_(WORD)),
    ]
)


def transcript(key: str) -> list[dict[str, Any]]:
    """Three segments over an episode's 3 s, two words each."""
    out = []
    for number, (start, end) in enumerate([(0.0, 1.0), (1.0, 2.5), (2.5, 3.0)]):
        middle = (start + end) / 2
        words = [
            {"start": start, "end": middle, "word": f"{key}-{number}a"},
            {"start": middle, "end": end, "word": f"{key}-{number}b"},
        ]
        out.append({"start": start, "end": end, "text": f"{key} {number}", "words": words})
    return out


@pytest.fixture(scope="module")
def labelled(packed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``packed`` plus a ``labels/`` column directory: speaker, label,
    transcript (segments with words), and a broken transcript for one key."""
    root = tmp_path_factory.mktemp("labelled") / "dataset"
    shutil.copytree(packed, root)
    dataset = streamer.open_dataset(root)
    (root / "labels").mkdir()
    for name in dataset.shard_names:
        keys = dataset.shard(name).keys.to_pylist()
        table = pa.table(
            {
                "__key__": pa.array(keys, pa.string()),
                "speaker": pa.array([f"spk-{k[-3:]}" for k in keys]),
                "label": pa.array([len(k) for k in keys], pa.int64()),
                "transcript": pa.array([transcript(k) for k in keys], pa.list_(SEGMENT)),
                "broken": pa.array(["[1, 2]" if "flac" in k else "[]" for k in keys]),
            }
        )
        with pa.ipc.new_file(root / "labels" / f"{name}.wsds", table.schema) as writer:
            writer.write_table(table)
    return root


def test_crops_carry_columns_and_supervisions(labelled: Path) -> None:
    s = Streamer(
        labelled,
        RandomCrops(0.7, per_episode=3),
        columns=["speaker", "labels/label"],
        supervisions="transcript",
        workers=0,
    )
    crops = list(s)
    assert len(crops) == 21 and s.stats.skipped == {}
    for crop in crops:
        assert crop.fields == {"speaker": f"spk-{crop.key[-3:]}", "labels/label": len(crop.key)}
        expected = [
            seg
            for seg in transcript(crop.key)
            if seg["start"] < crop.end and seg["end"] > crop.start
        ]
        assert [seg["text"] for seg in crop.supervisions] == [seg["text"] for seg in expected]
        for got, seg in zip(crop.supervisions, expected, strict=True):
            assert got["start"] == pytest.approx(seg["start"] - crop.start)
            assert got["end"] == pytest.approx(seg["end"] - crop.start)
            assert all(w["end"] > 0 and w["start"] < crop.end - crop.start for w in got["words"])
            assert {w["word"] for w in got["words"]} <= {w["word"] for w in seg["words"]}
        assert crop.source == s.source_names[0]


def test_segment_crops_pass_their_segment_fields(labelled: Path) -> None:
    crops = list(Streamer(labelled, SegmentCrops("transcript", max_duration=1.0), workers=0))
    assert len(crops) == 7 * 4  # [0, 1), [1, 2), [2, 2.5), [2.5, 3) per episode
    for crop in crops:
        segment = next(s for s in transcript(crop.key) if s["start"] <= crop.start < s["end"])
        assert crop.fields["text"] == segment["text"]
        assert [w["word"] for w in crop.fields["words"]] == [w["word"] for w in segment["words"]]


def test_mix_crops_name_their_source(labelled: Path, packed: Path) -> None:
    mix = Mix([(str(labelled), 1, "speech"), (str(packed), 1)])
    crops = list(Streamer(mix, RandomCrops(0.5), workers=0))
    assert {c.source for c in crops} == {"speech", streamer.open_dataset(packed).url}


def test_bad_labels_fail_their_crops_or_the_start(labelled: Path) -> None:
    with pytest.raises(LayoutError, match="no column directory has a 'nope' column"):
        list(Streamer(labelled, RandomCrops(0.5), columns=["nope"], workers=0))
    with pytest.raises(TypeError, match="list of names"):
        Streamer(labelled, RandomCrops(0.5), columns="speaker")
    s = Streamer(labelled, RandomCrops(0.5), supervisions="broken", workers=0)
    crops = list(s)
    assert s.stats.skipped == {"LayoutError": 1} and len(crops) == 6
    assert all("flac" not in c.key and c.supervisions == [] for c in crops)


def test_collate_makes_tensors_of_numeric_fields(labelled: Path) -> None:
    torch = pytest.importorskip("torch")
    from streamer.torch import collate

    crops = list(
        Streamer(
            labelled,
            RandomCrops(0.5),
            columns=["speaker", "label"],
            supervisions="transcript",
            sample_rate=16000,
            mono=True,
            workers=0,
        )
    )
    batch = collate(crops)
    assert batch["label"].dtype == torch.int64 and batch["label"].tolist() == [
        len(c.key) for c in crops
    ]
    assert batch["speaker"] == [c.fields["speaker"] for c in crops]
    assert batch["supervisions"] == [c.supervisions for c in crops]
    crops[0].fields["start"] = 1.0
    with pytest.raises(ValueError, match="'start' would replace"):
        collate(crops)
