"""Crop samplers: random, sequential and segment crops; crops past an episode's end are skipped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import streamer
from streamer import RandomCrops, SegmentCrops, SequentialCrops, Streamer
from streamer.errors import CropError
from streamer.pipeline.episodes import Episodes


def test_random_crops_lie_inside_their_episodes(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    episodes = Episodes.of(dataset)
    crops = RandomCrops(1.0, per_episode=4).crops(episodes, np.random.default_rng(0))
    assert len(crops) == 4 * len(episodes)
    assert np.allclose(crops.end - crops.start, 1.0)
    assert (crops.start >= 0).all() and (crops.end <= episodes.duration[crops.episode]).all()
    assert len(RandomCrops(5.0).crops(episodes, np.random.default_rng(0))) == 0
    short = RandomCrops(5.0, min_duration=2.0).crops(episodes, np.random.default_rng(0))
    assert len(short) == len(episodes) and (short.start == 0).all()


def test_sequential_crops_cover_each_episode(packed: Path) -> None:
    episodes = Episodes.of(streamer.open_dataset(packed))
    crops = SequentialCrops(1.25, hop=1.0).crops(episodes, np.random.default_rng(0))
    for episode, duration in enumerate(episodes.duration):
        # Exact durations (an M4A's 3.0186 s, not its header's 3.0): the
        # windows reach the last sample.
        mine = crops.episode == episode
        starts = np.arange(np.ceil(duration)).tolist()
        assert crops.start[mine].tolist() == starts
        ends = [min(s + 1.25, duration) for s in starts]
        assert crops.end[mine].tolist() == pytest.approx(ends)


@pytest.fixture
def with_segments(packed: Path, tmp_path: Path) -> Path:
    """``packed`` plus a ``vad/`` column: two segments per episode, one past its end."""
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(packed, root)
    dataset = streamer.open_dataset(root)
    (root / "vad").mkdir()
    for name in dataset.shard_names:
        keys = dataset.shard(name).keys.to_pylist()
        segments = [[[0.5, 1.25], [10.0, 11.0]] for _ in keys]
        table = pa.table({"__key__": keys, "vad": segments})
        with pa.ipc.new_file(str(root / "vad" / f"{name}.wsds"), table.schema) as writer:
            writer.write_table(table)
    return root


def test_segment_crops_and_skipped_failures(with_segments: Path) -> None:
    dataset = streamer.open_dataset(with_segments)
    episodes = Episodes.of(dataset)
    crops = SegmentCrops("vad", max_duration=0.5).crops(episodes, np.random.default_rng(0))
    assert crops.start[crops.episode == 0].tolist() == [0.5, 1.0, 10.0, 10.5]
    s = Streamer(dataset, SegmentCrops("vad"), workers=0)
    got = list(s)
    assert len(got) == len(episodes)
    assert all((c.start, c.end) == (0.5, 1.25) for c in got)
    assert s.stats.skipped == {"CropError": len(episodes)}  # the segments past the end
    with pytest.raises(CropError, match="past the end"):
        list(Streamer(dataset, SegmentCrops("vad"), workers=0, on_error="raise"))


def test_episodes_no_sampler_can_draw_from_are_named(packed: Path, tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """Without ``audio_info/`` and a seek index an episode's duration is
    unknown and no sampler plans a crop of it: that is said, not silent."""
    import shutil

    with caplog.at_level("WARNING", logger="streamer.pipeline.episodes"):
        Episodes.of(streamer.open_dataset(packed))
    assert not caplog.records
    root = tmp_path / "bare"
    shutil.copytree(packed, root)
    for column in ("audio_info", "seek_index"):
        shutil.rmtree(root / column)
    (root / "streamer-manifest.json").unlink(missing_ok=True)
    with caplog.at_level("WARNING", logger="streamer.pipeline.episodes"):
        episodes = Episodes.of(streamer.open_dataset(root))
    assert np.isnan(episodes.duration).all()
    [record] = caplog.records
    said = record.getMessage()
    assert f"{len(episodes)} of {len(episodes)} episodes have no known duration" in said
    assert repr(episodes.keys[0]) in said
