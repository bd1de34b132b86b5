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
from streamer.errors import LayoutError, StorageError

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


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_a_store_down_at_open_is_a_storage_error_not_a_missing_dataset(  # type: ignore[no-untyped-def]
    kind, unlisted, http_published, make_store
) -> None:
    """Listing a dataset without a manifest while its server answers 503
    past the budget: the store's ``StorageError`` (retryable by a script
    that catches it), not a ``LayoutError`` saying the directory does not
    exist; a folder that is not there stays a ``LayoutError``."""
    published, servers = http_published
    shutil.copytree(unlisted, published / f"down-{kind}")
    server = servers(kind)
    options = {"give_up_after": 0.5, "backoff": 0.05, "max_backoff": 0.1}
    server.go_down(3600)
    try:
        with pytest.raises(StorageError) as down:
            Dataset(f"{server.url}/down-{kind}", store=make_store("http", **options))
    finally:
        server.reset()
    assert "503" in str(down.value) and "does not exist" not in str(down.value)
    with pytest.raises(LayoutError, match="does not exist"):
        Dataset(f"{server.url}/no-such-{kind}", store=make_store("http", **options))
