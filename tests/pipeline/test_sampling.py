"""Sampling that fits real datasets: crops per hour of audio, a fixed epoch
length, explicit crop lists and manifests (Lhotse-style cuts too)."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import plan_rows, write_audio

import streamer
from streamer import ListCrops, RandomCrops, SequentialCrops, Streamer
from streamer.errors import LayoutError
from streamer.pipeline.episodes import Episodes
from streamer.write.pack import pack


def test_per_hour_is_proportional_to_duration(packed: Path) -> None:
    """A 2-minute clip and a 40-hour audiobook at 90 crops per hour: 3 and 3600."""
    real = Episodes.of(streamer.open_dataset(packed))
    episodes = dataclasses.replace(real, keys=real.keys[:3], shard=real.shard[:3], row=real.row[:3])
    episodes = dataclasses.replace(episodes, duration=np.array([120.0, 40 * 3600.0, 100.0]))
    sampler = RandomCrops(2.0, per_hour=90)
    counts = np.zeros(3)
    for seed in range(200):
        crops = sampler.crops(episodes, np.random.default_rng(seed))
        found = np.bincount(crops.episode, minlength=3)
        assert found[0] == 3 and found[1] == 3600 and found[2] in (2, 3)  # 2.5: 2 or 3
        assert (crops.end <= episodes.duration[crops.episode]).all() and (crops.start >= 0).all()
        counts += found
    assert counts[2] / 200 == pytest.approx(2.5, abs=0.15)  # rounded at random, fairly
    with pytest.raises(ValueError, match="not both"):
        RandomCrops(2.0, per_episode=2, per_hour=90)
    with pytest.raises(ValueError, match="per_hour must be a finite number > 0"):
        RandomCrops(2.0, per_hour=0)


def test_crops_per_epoch_fixes_the_length(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=2)  # 14 crops
    usual = plan_rows(Streamer(dataset, sampler, seed=2))
    assert plan_rows(Streamer(dataset, sampler, seed=2, crops_per_epoch=5)) == usual[:5]
    longer = plan_rows(Streamer(dataset, sampler, seed=2, crops_per_epoch=40))
    assert len(longer) == 40 and longer[:14] == usual
    assert len(set(longer)) == 40  # further rounds draw new random crops
    windows = plan_rows(Streamer(dataset, SequentialCrops(1.0)))
    repeated = plan_rows(Streamer(dataset, SequentialCrops(1.0), crops_per_epoch=50))
    assert len(repeated) == 50 and set(repeated) == set(windows)  # the same windows again
    assert len(windows) < 25 and repeated[: len(windows)] == windows
    with pytest.raises(ValueError, match="not both"):
        Streamer(dataset, sampler, crops_per_epoch=5, max_crops=3)


def test_crops_per_epoch_goes_on_past_a_round_that_drew_nothing(
    packed: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """21 s of audio at 100 crops an hour: 0.6 crops a round, and many rounds
    draw none. Such a round is not the end of the sampler's crops; one that
    can never draw any (every episode shorter than the crop) is, with a
    warning."""
    dataset = streamer.open_dataset(packed)
    sparse = RandomCrops(0.5, per_hour=100)
    totals = [Streamer(dataset, sparse, seed=s, crops_per_epoch=30).total() for s in range(8)]
    assert totals == [30] * 8
    assert Streamer(dataset, RandomCrops(10.0), crops_per_epoch=5).total() == 0
    assert "crops_per_epoch=5" in caplog.text


def test_list_crops_yields_exactly_the_list(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    keys = sorted(dataset.keys())
    wanted = [(keys[0], 0.25, 1.0), (keys[3], 1.5, 2.0), (keys[0], 2.0, 2.5)]
    crops = list(Streamer(dataset, ListCrops(wanted), workers=0))
    assert sorted((c.key, c.start, c.end) for c in crops) == sorted(wanted)
    labelled = ListCrops([{"key": keys[1], "start": 0, "end": 1, "label": 7}])
    assert [c.fields for c in Streamer(dataset, labelled, workers=0)] == [{"label": 7}]


def test_list_crops_refuses_what_it_cannot_do(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    with pytest.raises(LayoutError, match=r"key 'nope' \(row 1\) is not in"):
        list(Streamer(dataset, ListCrops([(next(dataset.keys()), 0, 1), ("nope", 0, 1)])))
    with pytest.raises(ValueError, match=r"row 0 \('a'\): need 0 <= start < end"):
        ListCrops([("a", 2.0, 1.0)])


def test_a_csv_manifest_keys_are_read_as_written(tmp_path: Path) -> None:
    """pyarrow inferred a CSV's key column as numbers: ``001`` became ``1``,
    and the crop was served from episode ``1`` without a word."""
    for key, seed in (("001", 1), ("1", 2)):
        write_audio(tmp_path / "src", key, "wav", 8000, 1, 2.0, seed=seed)
    pack(tmp_path / "src", tmp_path / "ds", progress=False)
    dataset = streamer.open_dataset(tmp_path / "ds")
    (tmp_path / "crops.csv").write_text("key,start,end\n001,0.5,1.5\n")
    crops = ListCrops.read(tmp_path / "crops.csv")
    assert crops.keys == ["001"]
    [crop] = Streamer(dataset, crops, workers=0, on_error="raise")
    assert crop.key == "001"
    np.testing.assert_array_equal(crop.audio, dataset.read_crop("001", 0.5, 1.5))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name,start,end\na,0,1\n", "has no 'key' column: a manifest has key, start and end"),
        ("key,start\na,0\n", "has no 'end' column"),
        ("key,start,end\na,0,1\nb,,1\n", ": ListCrops row 1 ('b'): 'start' is None, not a number"),
        ("key,start,end\na,0,x\n", ": ListCrops row 0 ('a'): 'end' is 'x', not a number"),
        ("key,start,end\na,0,inf\n", ": ListCrops row 0 ('a'): need 0 <= start < end, both finite"),
        ("id,start,duration\nc,0,1\n", "has no 'recording_id' column"),
        ("recording_id,start,duration\nr,0,\n", "row 0 ('r'): 'duration' is None, not a number"),
    ],
)
def test_a_manifest_that_is_no_list_of_crops_is_named(tmp_path: Path, text: str, said: str) -> None:
    """A CSV without ``key`` was a bare ``KeyError: 'key'``, an empty time
    cell a ``TypeError`` naming no row: each is one line naming the file,
    the column and the row."""
    path = tmp_path / "crops.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as raised:
        ListCrops.read(path)
    message = str(raised.value)
    assert message.startswith(f"ListCrops.read: {path}") and said in message, message
    assert "\n" not in message


def test_manifests_csv_jsonl_and_cuts(packed: Path, tmp_path: Path) -> None:
    dataset = streamer.open_dataset(packed)
    keys = sorted(dataset.keys())
    (tmp_path / "crops.csv").write_text(f"key,start,end,label\n{keys[0]},0.5,1.5,3\n")
    (tmp_path / "crops.jsonl").write_text(
        json.dumps({"key": keys[1], "start": 1, "end": 2, "speaker": "x"}) + "\n"
    )
    cuts = [
        {"id": "cut-a", "start": 0.5, "duration": 1.0, "recording_id": keys[2]},
        {
            "id": "cut-b",
            "start": 1.0,
            "duration": 0.5,
            "recording": {"id": keys[4]},
            "custom": {"lang": "de"},
        },
    ]
    with gzip.open(tmp_path / "cuts.jsonl.gz", "wt") as out:
        out.writelines(json.dumps(cut) + "\n" for cut in cuts)
    got = {
        name: [
            (c.key, c.start, c.end, c.fields)
            for c in Streamer(dataset, ListCrops.read(tmp_path / name), workers=0)
        ]
        for name in ("crops.csv", "crops.jsonl", "cuts.jsonl.gz")
    }
    assert got["crops.csv"] == [(keys[0], 0.5, 1.5, {"label": 3})]
    assert got["crops.jsonl"] == [(keys[1], 1.0, 2.0, {"speaker": "x"})]
    assert sorted(got["cuts.jsonl.gz"], key=lambda c: c[1]) == [
        (keys[2], 0.5, 1.5, {"id": "cut-a"}),
        (keys[4], 1.0, 1.5, {"id": "cut-b", "lang": "de"}),
    ]
