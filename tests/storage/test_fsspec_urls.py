"""URLs of other fsspec file systems, as a user writes them: wrappers over a
sync file system (``dir://``), datasets inside archives, chained URLs
(``zip://ds::file:///x.zip``, ``simplecache::...``), hosts and credentials in
the URL (``ftp://user:password@host:port/ds`` against a real FTP server), and
schemes that cannot be served. Every crop equals the local dataset's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

import streamer
from streamer import open_dataset
from streamer.errors import StorageError


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


@pytest.mark.parametrize(
    "template",
    [
        "zip://dataset::file://{root}/ds.zip",
        "tar://dataset::file://{root}/ds.tar",
        "dir://dataset::file://{root}/folder",
        "simplecache::file://{root}/folder/dataset",
        "zip://dataset::simplecache::file://{root}/ds.zip",
    ],
)
def test_chained_urls_serve_the_crops_of_the_local_dataset(
    template: str, packed: Path, archives: Path
) -> None:
    """fsspec's URL chains (``A::B``) open the inner file system as the
    outer one's target; the first part was read as the path of the whole
    URL (``Is a directory``, ``unsupported URL scheme simplecache::file://``)."""
    url = template.format(root=archives)
    dataset = open_dataset(url)
    assert_same_crops(dataset, open_dataset(packed))


def test_an_archive_cannot_be_written_and_says_so(archives: Path) -> None:
    dataset = open_dataset(f"zip://dataset::file://{archives}/ds.zip")
    with pytest.raises(StorageError, match="zip://"):
        dataset.store.put_sync("dataset/new.bin", b"x")


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamer.cli", *argv], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("foo://bucket/ds", "unknown"),
        ("gcs://bucket/ds", "gcsfs"),
        ("webdav://host/ds", "webdav4"),
        ("zip://ds::foo://x.zip", "unknown"),
    ],
)
def test_a_scheme_that_cannot_be_served_is_a_usage_error(url: str, says: str) -> None:
    """Exit code 2 and one line naming the URL (and the package to install),
    as for any command line that cannot mean anything; it was 1."""
    done = run_cli("inspect", url)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert url in lines[0] and says in lines[0], lines[0]
