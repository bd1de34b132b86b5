"""Mixing datasets: each takes its share of the crops by weight, spread evenly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
