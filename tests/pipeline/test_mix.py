"""Mixing datasets: each takes its share of the crops by weight, spread evenly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import pack_audio

import streamer
from streamer import Mix, RandomCrops, Streamer


def test_mix_takes_shares_by_weight(packed: Path, audio_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    streamer.pack(audio_dir, other, progress=False)
    mix = Mix([(str(packed), 3.0), (str(other), 1.0)])
    s = Streamer(mix, RandomCrops(0.5, per_episode=4), workers=0)
    sources = s.plan().source
    assert len(sources) == 56 and (sources == 0).sum() == 42
    assert abs(np.flatnonzero(sources == 1).mean() - len(sources) / 2) < 6  # spread evenly
    crops = list(s)
    assert len(crops) == 56 and s.stats.yielded == 56


def test_a_source_without_crops_is_named_and_takes_no_share(
    packed: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A mix item whose episodes are all shorter than the crops has nothing
    to give: its share must not silently cut the others' (half of the
    epoch gone at 1:1), and the mix it cannot make is named."""
    short = pack_audio(tmp_path, {"a": ("flac", 16000, 1), "bb": ("wav", 16000, 1)}, 0.3)
    sampler = RandomCrops(0.5, per_episode=4)  # 28 crops of packed, none of short
    with caplog.at_level("WARNING", logger="streamer.pipeline.order"):
        s = Streamer(Mix([(str(packed), 1.0, "long"), (short, 1.0, "short")]), sampler, workers=0)
        crops = list(s)
    assert len(crops) == s.total(0) == 28 and {c.source for c in crops} == {"long"}
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and f"Mix: {short.url} (weight 1, 2 episodes) has no crop" in said[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamer.pipeline.order"):
        for rank, worker in [(0, 1), (1, 0), (1, 1), (0, 0)]:  # every process plans the epoch
            mix = Mix([(str(packed), 1.0, "long"), (short, 1.0, "short")])
            s = Streamer(mix, sampler, rank=rank, world_size=2, worker=worker, num_workers=2)
            assert s.total() == 28
            assert len(caplog.records) == int((rank, worker) == (0, 0))  # once, by the first
