"""URLs of other fsspec file systems, as a user writes them: wrappers over a
sync file system (``dir://``), datasets inside archives, chained URLs
(``zip://ds::file:///x.zip``, ``simplecache::...``), hosts and credentials in
the URL (``ftp://user:password@host:port/ds`` against a real FTP server), and
schemes that cannot be served. Every crop equals the local dataset's."""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

import streamer
from streamer import open_dataset


def assert_same_crops(dataset: streamer.Dataset, local: streamer.Dataset) -> None:
    """Every episode's blob and a crop of it equal the local dataset's."""
    assert list(dataset.keys()) == list(local.keys())
    for key in local:
        assert bytes(dataset.blob(key).view()) == bytes(local.blob(key).view())
        want = local.read_crop(key, 0.5, 1.7)
        got = dataset.read_crop(key, 0.5, 1.7)
        assert got.dtype == want.dtype and np.array_equal(got, want), key


def streamed(data: streamer.Dataset, workers: int) -> list[tuple[str, float, bytes]]:
    sampler = streamer.RandomCrops(0.5)
    return [
        (c.key, c.start, np.asarray(c.audio).tobytes())
        for c in streamer.Streamer(data, sampler, seed=3, workers=workers)
    ]


@pytest.fixture(scope="module")
def archives(packed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``packed`` as ``folder/dataset``, ``ds.zip`` (stored) and ``ds.tar``, each with
    the dataset under ``dataset/``."""
    root = tmp_path_factory.mktemp("fsspec-urls")
    shutil.copytree(packed, root / "folder" / "dataset")
    with zipfile.ZipFile(root / "ds.zip", "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(packed.rglob("*")):
            if path.is_file():
                archive.write(path, "dataset/" + path.relative_to(packed).as_posix())
    with tarfile.open(root / "ds.tar", "w") as archive:
        archive.add(packed, "dataset")
    return root


def test_a_dir_url_over_a_sync_file_system_serves_crops(packed: Path, archives: Path) -> None:
    """``dir://`` wraps another file system; over the local one (not async)
    every read failed with "can't use asynchronous with non-async fs"."""
    local = open_dataset(packed)
    folder = archives / "folder"
    dataset = open_dataset("dir://dataset", path=str(folder), target_protocol="file")
    assert_same_crops(dataset, local)
    # The reader pickled to decode workers rebuilds the same store.
    assert streamed(dataset, workers=2) == streamed(local, workers=0)
