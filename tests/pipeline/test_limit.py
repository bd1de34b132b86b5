"""The limit ``streamer bench`` divides by: each crop's own packets, decoded."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from streamer import open_dataset
from streamer.pipeline.limit import PureDecode, limit_seconds
from testkit.reference import full_decode


@pytest.mark.parametrize("codec", ["flac", "wav", "mp3", "opus", "aac"])
def test_the_pure_decode_covers_the_crop_and_little_more(packed: Path, codec: str) -> None:
    """The packets overlapping the crop hold at least its samples and at most
    a packet more on each side; for a lossless codec they are the full
    decode's samples."""
    dataset = open_dataset(packed)
    key = next(
        k
        for k in sorted(dataset.keys())
        if dataset.info(k)["codec"].startswith("pcm" if codec == "wav" else codec)
    )
    data = bytes(dataset.blob(key).view())
    pure = PureDecode(data)
    full, rate = full_decode(data)
    assert pure.rate == rate
    longest = int((pure.ends - pure.starts).max())
    for start, end in [(0.1, 0.6), (0.25, 0.3)]:
        audio = pure(start, end)
        want = round(end * rate) - round(start * rate)
        assert audio.dtype == np.float32 and audio.shape[0] == full.shape[0]
        assert want <= audio.shape[1] <= want + 2 * longest + 1
        if codec in ("flac", "wav"):
            first = int(pure.starts[np.searchsorted(pure.ends, start * rate, side="right")])
            np.testing.assert_array_equal(audio, full[:, first : first + audio.shape[1]])


def test_limit_seconds_is_cpu_time_of_the_decodes_alone(packed: Path) -> None:
    dataset = open_dataset(packed)
    key = sorted(dataset.keys())[0]
    data = bytes(dataset.blob(key).view())
    crops = [(0.0, 0.5)] * 20
    began = time.process_time()
    spent = limit_seconds([(data, crops)])
    assert 0 < spent <= time.process_time() - began
    assert limit_seconds([(data, [])]) == 0
