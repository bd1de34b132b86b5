"""Shared fixtures: small audio files made by real encoders, and packed datasets."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write_audio

from streamer.shard.pack import pack

#: (codec, sample rate, channels) of the small fixture files, one per codec.
FIXTURE_FILES = (
    ("mp3", 44100, 2),
    ("vorbis", 44100, 2),
    ("opus", 48000, 1),
    ("flac", 22050, 1),
    ("aac", 44100, 2),
    ("alac", 44100, 1),
    ("wav", 16000, 2),
)


@pytest.fixture(scope="session")
def audio_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of 3-second files, one per codec, under nested subfolders."""
    folder = tmp_path_factory.mktemp("audio")
    for index, (codec, rate, channels) in enumerate(FIXTURE_FILES):
        write_audio(folder, f"set{index % 2}/{codec}", codec, rate, channels, 3.0, seed=index)
    return folder


@pytest.fixture(scope="session")
def packed(audio_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``audio_dir`` packed into a dataset with small batches and shards."""
    out = tmp_path_factory.mktemp("packed") / "dataset"
    pack(audio_dir, out, batch_size=2, shard_size=600_000, progress=False)
    return out
