"""The dataset manifest: written last by pack and index, used to open a dataset
without listing it, and never trusted against what the store holds.

Real files throughout: datasets packed from encoded audio, shards rewritten,
removed or added behind the manifest's back, manifests corrupted by hand; a
real S3 server (moto) for the request count of a cold one-crop run.
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import BUCKET, SECRET

from streamer.cli import main
from streamer.cli._options import ONE_SHOT_GIVE_UP
from streamer.dataset import Dataset, write_manifest
from streamer.dataset.manifest import FORMAT, MANIFEST_NAME, VERSION
from streamer.errors import IncompleteDatasetError
from streamer.index.table import INDEX_DIR
from streamer.shard.footer import read_layout
from streamer.storage import open_url
from streamer.storage.local import LocalFileReader, LocalStore
from streamer.synth import encode, signal
from streamer.write.pack import pack

EPISODES = [f"e{i}" for i in range(6)]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three shards of two two-second episodes (mp3 and flac), indexed."""
    src = tmp_path_factory.mktemp("manifest-src")
    for number, key in enumerate(EPISODES):
        codec = "flac" if number % 2 else "mp3"
        (src / f"{key}.{codec}").write_bytes(
            encode(signal(2.0, 22050, 1, seed=number), 22050, codec)
        )
    out = tmp_path_factory.mktemp("manifest") / "ds"
    pack(src, out, batch_size=2, shard_size=1, progress=False)
    return out


@pytest.fixture
def copy(clean: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ds"
    shutil.copytree(clean, target)
    return target


def listings(server) -> list:  # type: ignore[no-untyped-def]
    """The listing requests a server saw: S3 ``ListObjectsV2``, HTTP directory pages."""
    return [r for r in server.requests if "list-type=" in r.path or r.path.endswith("/")]


def upload(server, make_store, folder: Path, prefix: str) -> None:  # type: ignore[no-untyped-def]
    """``folder`` to ``s3://data/<prefix>`` of the S3 server behind ``server``,
    straight to it (an HTTP file server already serves it)."""
    upstream = getattr(server.handler, "upstream", None)
    if upstream is None:
        return
    store = make_store("s3", upstream)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            store.put_sync(f"{BUCKET}/{prefix}/{path.relative_to(folder).as_posix()}", path)


def manifest_of(root: Path) -> dict:
    return json.loads((root / MANIFEST_NAME).read_text())


def crops(dataset: Dataset) -> list[np.ndarray]:
    return [dataset.read_crop(key, 0.5, 1.25) for key in EPISODES]


def test_pack_writes_a_manifest_that_describes_every_shard(clean: Path) -> None:
    document = manifest_of(clean)
    assert (document["format"], document["version"]) == (FORMAT, VERSION)
    assert sorted(document["columns"]) == ["audio", "audio_info", INDEX_DIR]
    for column_dir, column in document["columns"].items():
        files = sorted(p.name for p in (clean / column_dir).iterdir())
        assert sorted(e["file"] for e in column["shards"].values()) == files
        for entry in column["shards"].values():
            path = clean / column_dir / entry["file"]
            layout, _ = read_layout(LocalFileReader(path), str(path))
            assert entry["size"] == path.stat().st_size == layout.size
            assert entry["footer"] == list(layout.footer)
            assert entry["rows"] == 2
            assert column["fields"] == layout.schema.names
    newest_shard = max(p.stat().st_mtime_ns for p in clean.rglob("*.wsds"))
    assert (clean / MANIFEST_NAME).stat().st_mtime_ns >= newest_shard  # written last


def test_round_trip_opens_the_same_dataset(clean: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    listed = Dataset(clean)
    described = Dataset(clean, manifest=True)
    assert described.manifest is not None and described.manifest_problem is None
    assert listed.manifest is None and listed.manifest_problem == "not used"
    assert described.column_dirs == listed.column_dirs
    assert described.listed_shards == listed.listed_shards
    assert list(described) == list(listed) == EPISODES
    for ours, theirs in zip(crops(described), crops(listed), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert described.decode_stats.paths == {"index": len(EPISODES)}
    assert described.manifest is not None  # nothing contradicted it
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_rewritten_shard_is_detected_and_the_store_listed(copy: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    path = copy / "audio_info" / "shard-000001.wsds"
    table = pa.ipc.open_file(str(path)).read_all()
    changed = table.set_column(
        table.schema.get_field_index("duration"), "duration", pa.array([9.5, 9.5])
    )
    with pa.ipc.new_file(str(path), changed.schema.with_metadata({b"note": b"rewritten"})) as w:
        w.write_table(changed)
    dataset = Dataset(copy, manifest=True)
    assert dataset.shard_names == ["shard-000000", "shard-000001", "shard-000002"]
    assert dataset.info("e2")["duration"] == 9.5  # the bytes in the store, not the manifest's
    assert dataset.manifest is None
    assert dataset.manifest_problem is not None
    assert dataset.manifest_problem.startswith("stale: audio_info/shard-000001.wsds has ")
    stale = [r.getMessage() for r in caplog.records if "manifest is stale" in r.getMessage()]
    assert len(stale) == 1 and "audio_info/shard-000001.wsds" in stale[0]


def test_same_size_rewrite_with_other_rows_is_detected(copy: Path) -> None:
    entry = manifest_of(copy)["columns"]["audio"]["shards"]["shard-000002"]
    document = manifest_of(copy)
    document["columns"]["audio"]["shards"]["shard-000002"] = {**entry, "rows": 3}
    (copy / MANIFEST_NAME).write_text(json.dumps(document))
    dataset = Dataset(copy, manifest=True)
    assert list(dataset) == EPISODES
    assert (
        dataset.manifest_problem == "stale: audio/shard-000002.wsds has 2 rows, the manifest says 3"
    )


def test_inspect_says_stale_for_rows_the_manifest_miscounts(copy: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A manifest whose names and sizes agree with the listing but whose
    rows do not: ``inspect`` said "manifest ok" (the run that opened the
    shards warned it stale)."""
    document = manifest_of(copy)
    document["columns"]["audio"]["shards"]["shard-000002"]["rows"] = 3
    (copy / MANIFEST_NAME).write_text(json.dumps(document))
    assert main(["inspect", "--json", str(copy)]) == 0
    state = json.loads(capsys.readouterr().out)["manifest"]
    assert state == "stale: audio/shard-000002.wsds has 2 rows, the manifest says 3"


def test_missing_shard_is_detected_and_served_as_the_listing_says(copy: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    (copy / INDEX_DIR / "shard-000000.wsds").unlink()
    (copy / "audio" / "shard-000002.wsds").unlink()
    (copy / "audio_info" / "shard-000002.wsds").unlink()
    with pytest.raises(IncompleteDatasetError, match="missing: shard-000002"):
        list(Dataset(copy, manifest=True))  # a shard its pack planned is gone
    listed = Dataset(copy, allow_incomplete=True)
    dataset = Dataset(copy, manifest=True, allow_incomplete=True)
    assert dataset.listed_shards == ["shard-000000", "shard-000001", "shard-000002"]
    assert list(dataset) == list(listed) == EPISODES[:4]  # as if it had been listed
    assert dataset.incomplete is not None and dataset.incomplete.missing == ["shard-000002"]
    assert dataset.bad_shards == listed.bad_shards == {}
    assert dataset.manifest_problem == "stale: audio/shard-000002.wsds is not in the store"
    assert dataset.listed_shards == ["shard-000000", "shard-000001"]
    dataset.read_crop("e0", 0.5, 1.0)  # no index shard any more: the fallback serves it
    assert dataset.decode_stats.paths == {"fallback from the start": 1}


def test_shard_missing_from_the_manifest_is_found(copy: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """A seek_index shard written after the manifest (an index run racing
    another): found by listing that directory, not taken as 'no index'."""
    document = manifest_of(copy)
    del document["columns"][INDEX_DIR]["shards"]["shard-000001"]
    (copy / MANIFEST_NAME).write_text(json.dumps(document))
    dataset = Dataset(copy, manifest=True)
    dataset.read_crop("e2", 0.5, 1.0)
    assert dataset.decode_stats.paths == {"index": 1}
    assert dataset.manifest_problem == (
        "stale: seek_index/shard-000001 is in the store, not in the manifest"
    )


def _copy_under_other_keys(source: Path, target: Path) -> None:
    """A copy of a shard whose keys are its own (the same keys twice would
    make the dataset ambiguous: ``index`` and ``inspect`` then exit 1)."""
    with pa.ipc.open_file(source) as reader:
        table = reader.read_all()
    keys = pa.array([f"{key}-copy" for key in table.column("__key__").to_pylist()])
    table = table.set_column(table.schema.get_field_index("__key__"), "__key__", keys)
    with pa.ipc.new_file(target, table.schema) as writer:
        writer.write_table(table)


def test_extra_audio_shard_is_refreshed_by_index(copy: Path, clean: Path) -> None:
    """An audio shard added behind the manifest's back cannot be seen without
    listing; ``streamer index`` (which lists) rewrites the manifest."""
    for column_dir in ("audio", "audio_info"):
        _copy_under_other_keys(
            clean / column_dir / "shard-000000.wsds", copy / column_dir / "shard-000003.wsds"
        )
    before = manifest_of(copy)
    assert Dataset(copy, manifest=True).listed_shards == sorted(
        before["columns"]["audio"]["shards"]
    )
    assert main(["index", str(copy), "--no-progress"]) == 0
    after = manifest_of(copy)
    assert "shard-000003" in after["columns"]["audio"]["shards"]
    assert "shard-000003" in after["columns"][INDEX_DIR]["shards"]
    assert Dataset(copy, manifest=True).listed_shards == Dataset(copy).listed_shards


def _set(document: dict, path: str, value: object) -> dict:
    target = document
    *parents, last = path.split(".")
    for name in parents:
        target = target[name]
    target[last] = value
    return document


AUDIO0 = "columns.audio.shards.shard-000000"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: b"{not json", "not JSON"),
        (lambda d: b"\xff\xfe", "not JSON"),
        (lambda d: json.dumps([1, 2]).encode(), f"not a {FORMAT}"),
        (lambda d: _set(d, "version", 2), "version 2; this streamer reads version 1"),
        (lambda d: _set(d, "columns", {}), "no column directories"),
        (lambda d: _set(d, f"{AUDIO0}.size", -5), "size -5 is not a size"),
        (lambda d: _set(d, f"{AUDIO0}.size", 10**30), "is not a size"),
        (lambda d: _set(d, f"{AUDIO0}.size", True), "size True is not a size"),
        (lambda d: _set(d, f"{AUDIO0}.size", "12"), "size '12' is not a size"),
        (lambda d: _set(d, f"{AUDIO0}.footer", [0, 10**12]), "does not end a file"),
        (lambda d: _set(d, f"{AUDIO0}.footer", [5]), "footer is not [offset, length]"),
        (lambda d: _set(d, f"{AUDIO0}.file", "../../etc/passwd"), "is not the shard's file name"),
        (lambda d: _set(d, "columns.audio.shards", {"../x": {}}), "'../x' is not a plain name"),
        (lambda d: {**d, "columns": {".hidden": {}}}, "'.hidden' is not a plain name"),
        (lambda d: _set(d, "columns.audio.fields", "audio"), "fields is not a list"),
    ],
)
def test_corrupt_manifest_is_refused_and_the_store_listed(copy, caplog, change, reason) -> None:  # type: ignore[no-untyped-def]
    changed = change(manifest_of(copy))
    body = changed if isinstance(changed, bytes) else json.dumps(changed).encode()
    (copy / MANIFEST_NAME).write_bytes(body)
    dataset = Dataset(copy, manifest=True)
    assert dataset.manifest is None
    assert dataset.manifest_problem is not None and reason in dataset.manifest_problem
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "manifest is not used" in warned[0] and reason in warned[0]
    assert list(dataset) == EPISODES
    np.testing.assert_array_equal(
        dataset.read_crop("e3", 0.5, 1.0), Dataset(copy).read_crop("e3", 0.5, 1.0)
    )


def test_huge_manifest_is_refused(copy: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import streamer.dataset.manifest as manifest

    monkeypatch.setattr(manifest, "MAX_MANIFEST_BYTES", 100)
    dataset = Dataset(copy, manifest=True)
    assert dataset.manifest is None and dataset.manifest_problem == "larger than 100 bytes"


def test_dataset_without_manifest_is_listed(copy: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    (copy / MANIFEST_NAME).unlink()
    dataset = Dataset(copy, manifest=True)
    assert dataset.manifest is None and dataset.manifest_problem == "absent"
    assert list(dataset) == EPISODES
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # wsds: no noise


def test_manifest_that_cannot_be_read_is_warned_of(remote_folder, clean, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """A manifest the store refuses (403: a policy, a proxy's error page) is
    not an absent one: the store is listed, and a warning says why (it was
    dropped with a DEBUG line, as if the dataset had none)."""
    publish, server = remote_folder
    folder = tmp_path / "refused"
    shutil.copytree(clean, folder)
    server.faults.only_ranged = False
    server.faults.only_under = MANIFEST_NAME
    server.faults.error_status = 403
    server.faults.errors = 1
    with caplog.at_level(logging.WARNING):
        dataset = publish(folder)
    assert dataset.manifest is None
    assert (dataset.manifest_problem or "").startswith("cannot be read (")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("manifest is not used" in w and "403" in w for w in warned), warned
    assert list(dataset) == EPISODES


def test_pack_without_index_and_write_manifest(copy: Path) -> None:
    shutil.rmtree(copy / INDEX_DIR)
    assert INDEX_DIR in manifest_of(copy)["columns"]  # stale now
    write_manifest(LocalStore(), str(copy))
    assert sorted(manifest_of(copy)["columns"]) == ["audio", "audio_info"]
    assert Dataset(copy, manifest=True).manifest_problem is None


def test_unreadable_shard_is_recorded_and_reported_as_bad(copy: Path) -> None:
    path = copy / "audio" / "shard-000001.wsds"
    path.write_bytes(path.read_bytes()[:-100])  # footer gone
    write_manifest(LocalStore(), str(copy))
    entry = manifest_of(copy)["columns"]["audio"]["shards"]["shard-000001"]
    assert entry == {"file": "shard-000001.wsds", "size": path.stat().st_size}
    dataset = Dataset(copy, manifest=True)
    assert list(dataset.bad_shards) == ["shard-000001"]
    assert dataset.bad_shards == Dataset(copy).bad_shards
    assert dataset.manifest_problem is None


# -- over S3: the cold one-crop run --------------------------------------------

BLOCK = 128 << 10  # the default block size


def packed_mp3(folder: Path, seconds: float) -> Path:
    """``seconds`` of 64 kbps mono mp3, packed (and indexed) at ``folder/ds``."""
    src = folder / "src"
    src.mkdir()
    data = encode(signal(seconds, 44100, 1, seed=3), 44100, "mp3", bit_rate=64_000)
    (src / "episode.mp3").write_bytes(data)
    pack(src, folder / "ds", progress=False)
    return folder / "ds"


def cold_crops(
    server, make_store, dataset: Path, starts, monkeypatch, tmp_path
) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """(requests, bytes) of ``streamer crop`` of 8 s at each start, each run
    cold (nothing cached); checks that the run lists nothing."""
    prefix = f"cold-{uuid.uuid4().hex[:8]}"
    upload(server, make_store, dataset, prefix)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    url = f"s3://{BUCKET}/{prefix}"
    # the store the CLI run gets: a one-shot command's options
    store, _ = open_url(url, endpoint_url=server.url, give_up_after=ONE_SHOT_GIVE_UP)
    costs = []
    for start in starts:
        store.clear_memory_cache()
        store.stats.reset()
        server.reset()
        out = str(tmp_path / "crop.npy")
        argv = ["crop", url, "episode", str(start), str(start + 8), "--endpoint-url", server.url]
        assert main([*argv, "-o", out]) == 0
        seen = [(r.method, r.path.split("?")[0], r.range) for r in server.requests]
        assert store.stats.requests == len(seen)
        assert seen[0][:2] == ("GET", f"/{BUCKET}/{prefix}/{MANIFEST_NAME}")
        assert listings(server) == [], seen
        assert np.load(out).shape == (1, 8 * 44100)
        costs.append((store.stats.requests, store.stats.bytes_fetched))
    return costs


def test_cold_one_crop_cli_run_over_s3(s3, s3_uploaded, make_store, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    dataset = packed_mp3(tmp_path, 180.0)
    # Inside one block, and across a block boundary (the most a crop reads).
    costs = cold_crops(s3, make_store, dataset, (60.0, 95.0, 130.0), monkeypatch, tmp_path)
    for requests, fetched in costs:
        assert requests <= 6  # manifest, audio footer + head, audio_info, seek_index, crop
        # metadata is footers and two small shards (the seek index with its
        # content CRCs, 4 bytes a seek point)
        assert fetched <= 2 * BLOCK + 20_000


@pytest.mark.slow
def test_cold_one_crop_of_a_long_mp3_reads_under_5_percent(
    s3, s3_uploaded, make_store, monkeypatch, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """The 23-minute 64 kbps episode: at most 6 requests and 5 % of the blob
    wherever the 8 s crop falls."""
    dataset = packed_mp3(tmp_path, 23 * 60.0)
    blob = (tmp_path / "src" / "episode.mp3").stat().st_size
    starts = np.linspace(5, 1370, 12).round(2)
    costs = cold_crops(s3, make_store, dataset, starts, monkeypatch, tmp_path)
    assert max(requests for requests, _ in costs) <= 6
    assert max(fetched for _, fetched in costs) <= 0.05 * blob


def test_inspect_checks_the_manifest_against_a_listing(copy: Path, clean: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["inspect", str(copy)]) == 0
    assert "manifest  ok\n" in capsys.readouterr().out
    _copy_under_other_keys(
        clean / "audio" / "shard-000000.wsds", copy / "audio" / "shard-000003.wsds"
    )
    (copy / INDEX_DIR / "shard-000001.wsds").unlink()
    assert main(["inspect", str(copy)]) == 0
    out = capsys.readouterr().out
    assert (
        "manifest  stale: audio/shard-000003 is not in the manifest; "
        "seek_index/shard-000001 is not in the store\n"
    ) in out
    (copy / MANIFEST_NAME).write_text("{")
    assert main(["inspect", str(copy)]) == 0
    assert "manifest  not JSON" in capsys.readouterr().out
    (copy / MANIFEST_NAME).unlink()
    assert main(["inspect", str(copy)]) == 0
    assert "manifest  absent\n" in capsys.readouterr().out
    for column_dir in ("audio", "audio_info"):  # the same keys twice
        shutil.copy(
            clean / column_dir / "shard-000000.wsds", copy / column_dir / "shard-000004.wsds"
        )
    assert main(["inspect", str(copy)]) == 1
    assert "\nkeys      duplicate key: " in capsys.readouterr().out


def test_remote_datasets_open_from_the_manifest(remote, packed) -> None:  # type: ignore[no-untyped-def]
    """Over S3 and HTTP alike: no listing at all (HTTP needs no directory
    indexes then), the same keys and crops as the local dataset."""
    open_remote, server = remote
    dataset = open_remote("packed")
    local = Dataset(packed)
    assert dataset.manifest is not None
    assert list(dataset) == list(local)
    key = next(iter(local))
    np.testing.assert_array_equal(dataset.read_crop(key, 0.5, 1.5), local.read_crop(key, 0.5, 1.5))
    assert server.requests and listings(server) == []


def test_remote_unindexed_dataset_lists_a_missing_directory_once(
    remote_folder, clean, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A dataset without ``seek_index/`` (packed with ``--no-index``): its
    episodes fall back; the directory the manifest does not have is looked
    for once, not once per crop (over HTTP the 404 is no outage)."""
    publish, server = remote_folder
    folder = tmp_path / "unindexed"
    shutil.copytree(clean, folder, ignore=shutil.ignore_patterns(INDEX_DIR))
    write_manifest(LocalStore(), str(folder))
    dataset = publish(folder)
    assert dataset.manifest is not None and INDEX_DIR not in dataset.column_dirs
    for key in EPISODES:
        dataset.read_crop(key, 0.5, 1.0)
    assert dataset.decode_stats.paths == {"fallback from the start": len(EPISODES)}
    (listing,) = listings(server)  # the one look
    assert INDEX_DIR in listing.path
    assert dataset.manifest is not None  # nothing contradicted it


def test_remote_shards_renamed_to_another_suffix_behind_the_manifest(  # type: ignore[no-untyped-def]
    remote_folder, clean, tmp_path
) -> None:
    """Every shard renamed ``.wsds`` -> ``.arrow`` (both shard names) with
    the manifest left as it was: each 404 is the manifest's staleness, not
    a missing shard, although a shard of that name is listed (the dataset
    failed to open over HTTP: "not found (HTTP 404)")."""
    publish, _ = remote_folder
    folder = tmp_path / "renamed"
    shutil.copytree(clean, folder)
    for path in folder.glob("*/*.wsds"):
        path.rename(path.with_suffix(".arrow"))
    dataset = publish(folder)
    crop = dataset.read_crop("e2", 0.5, 1.0)
    assert crop.shape[1] > 0 and dataset.decode_stats.paths == {"index": 1}
    problem = dataset.manifest_problem or ""
    assert problem.startswith("stale: audio/shard-") and problem.endswith(
        ".wsds is not in the store"
    )
    assert list(dataset) == EPISODES


def test_remote_shard_missing_behind_the_manifest(remote_folder, clean, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Over S3 and HTTP: a shard the manifest has but the store has not (a 404)
    is told from an outage by a listing, and served as the listing says."""
    publish, _ = remote_folder
    folder = tmp_path / "missing"
    shutil.copytree(clean, folder)
    (folder / INDEX_DIR / "shard-000000.wsds").unlink()
    dataset = publish(folder)
    assert dataset.manifest is not None
    dataset.read_crop("e0", 0.5, 1.0)
    dataset.read_crop("e2", 0.5, 1.0)
    assert dataset.decode_stats.paths == {"fallback from the start": 1, "index": 1}
    assert dataset.manifest_problem == "stale: seek_index/shard-000000.wsds is not in the store"
