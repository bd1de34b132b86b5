"""Datasets over HTTP file servers people run (nginx, Caddy) besides the tests'
own: listed from their index pages, read by range, through the CLI as well.
The rest of the storage suite runs against them through ``remote``."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from helpers import HTTP_KINDS

from streamer import open_dataset
from streamer.cli import main
from streamer.dataset.dataset import Dataset
from streamer.dataset.manifest import MANIFEST_NAME

#: Folder names that HTML listings and URLs must both escape.
AWKWARD = ["my data", "ü#1 [x]", "q?x=1&y", "50%+plus"]


@pytest.fixture(scope="module")
def unlisted(packed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``packed`` without its manifest: a reader must list the server's pages."""
    folder = tmp_path_factory.mktemp("unlisted") / "dataset"
    shutil.copytree(packed, folder, ignore=shutil.ignore_patterns(MANIFEST_NAME))
    return folder


@pytest.mark.parametrize("kind", HTTP_KINDS)
@pytest.mark.parametrize("name", AWKWARD)
def test_a_dataset_without_manifest_is_listed_and_read_as_locally(  # type: ignore[no-untyped-def]
    kind, name, unlisted, http_published, make_store
) -> None:
    """Each server's index pages (autoindex, browse) list every shard of a
    folder whatever its name, and every episode's crop equals the local one."""
    published, servers = http_published
    folder = published / f"listed-{kind}" / name
    shutil.copytree(unlisted, folder)
    server = servers(kind)
    url = f"{server.url}/listed-{kind}/{quote(name)}"
    remote, local = Dataset(url, store=make_store("http")), open_dataset(unlisted)
    assert remote.manifest is None and remote.shard_names == local.shard_names
    assert list(remote) == list(local)
    for key in local:
        np.testing.assert_array_equal(
            remote.read_crop(key, 0.5, 1.5), local.read_crop(key, 0.5, 1.5)
        )


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_cli_crop_from_each_server_equals_the_local_one(  # type: ignore[no-untyped-def]
    kind, http_servers, storage_root, tmp_path
) -> None:
    server = http_servers(kind)
    server.reset()
    local = open_dataset(storage_root / "packed")
    key = next(iter(local))
    out = tmp_path / "crop.npy"
    assert main(["crop", f"{server.url}/packed", key, "0.5", "1.5", "-o", str(out)]) == 0
    np.testing.assert_array_equal(np.load(out), local.read_crop(key, 0.5, 1.5))
    assert server.ranged()  # read by range, through the proxy in front of the server
