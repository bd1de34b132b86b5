"""The plan fingerprint tells a shard of this pack from one of another SRC
whose files have the same names and sizes, and from one packed before a
file was rewritten in place at its size: parts of two jobs never mix in one
OUT, and a job whose files changed between its parts writes no manifest.
Parts of one job, re-run or run through another spelling of SRC, still
agree. Locally and through a real S3 server (moto)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import SECRET, write_audio

from streamer import open_dataset
from streamer.dataset.manifest import MANIFEST_NAME
from streamer.errors import PackError
from streamer.write.pack import PLAN_KEY, PackReport, pack
from streamer.write.plan import make_plan, source_origin
from streamer.write.sources import list_sources
from streamer.write.verify import verify_dataset
from testkit.servers import LoopbackServer, file_handler, s3_client

SHARD_SIZE = 1
BATCH = 1
#: The run that completes a plan with a shard of another SRC or listing says so.
OTHER_LISTING = "packed from another source or another listing of it"
#: A run whose own part already holds a shard of another plan.
OTHER_DATASET = "already holds a dataset"


def _sources(root: Path) -> tuple[Path, Path]:
    """``a`` and ``b``: four WAVs each, of one name and size, other signals,
    and (so only where they are tells them apart) one mtime."""
    a, b = root / "a", root / "b"
    for i in range(4):
        write_audio(a, f"take{i}", "wav", 16000, 1, 0.5, seed=i)
        write_audio(b, f"take{i}", "wav", 16000, 1, 0.5, seed=100 + i)
    for path in a.iterdir():
        twin = b / path.name
        assert twin.stat().st_size == path.stat().st_size
        assert twin.read_bytes() != path.read_bytes()
        os.utime(twin, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
    return a, b


def _uploaded(endpoint: str, folder: Path) -> tuple[str, Any]:
    """A new bucket holding ``folder``'s files under ``raw/``, and its client."""
    bucket = f"fp-{uuid.uuid4().hex[:8]}"
    client = s3_client(endpoint, "test-key-id", SECRET)
    client.create_bucket(Bucket=bucket)
    for path in folder.iterdir():
        client.put_object(Bucket=bucket, Key=f"raw/{path.name}", Body=path.read_bytes())
    return bucket, client


def _pack(src: Path | str, out: Path | str, **options: Any) -> PackReport:
    return pack(src, out, shard_size=SHARD_SIZE, batch_size=BATCH, progress=False, **options)


@pytest.mark.parametrize("mode", ["files", "shards"])
def test_parts_of_another_source_of_the_same_names_and_sizes_do_not_mix(
    tmp_path: Path, mode: str
) -> None:
    """Part 0 of SRC a, then part 1 of SRC b: both exited 0, the second wrote
    the manifest, and the dataset held a's shards and b's."""
    a, b = _sources(tmp_path)
    out = tmp_path / "out"
    _pack(a, out, **{mode: "0/2"})
    with pytest.raises(PackError, match=OTHER_LISTING):
        _pack(b, out, **{mode: "1/2"})
    assert not (out / MANIFEST_NAME).exists()
    with pytest.raises(PackError, match=OTHER_DATASET):  # b's part 0 over a's
        _pack(b, out, **{mode: "0/2"})


def test_a_file_rewritten_at_its_size_between_parts_writes_no_manifest(tmp_path: Path) -> None:
    """A file of part 0 rewritten in place, same size, after part 0 packed
    it: the run of part 1 fails instead of completing the dataset; a re-run
    of part 0 finds its shard stale and refuses too."""
    a, b = _sources(tmp_path)
    out = tmp_path / "out"
    done = _pack(a, out, files="0/2")
    packed = sorted(f.source for f in list_sources(a))[0]  # file 0: partition 0
    target = a / packed
    before = target.stat().st_mtime_ns
    target.write_bytes((b / packed).read_bytes())
    os.utime(target, ns=(before + 10**9, before + 10**9))  # coarse clocks: a second on
    with pytest.raises(PackError, match="changed during the job"):
        _pack(a, out, files="1/2")
    assert not (out / MANIFEST_NAME).exists()
    with pytest.raises(PackError, match=OTHER_DATASET):
        _pack(a, out, files="0/2")
    assert done.shards


def test_parts_of_one_job_agree_rerun_or_through_another_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-running a part leaves its shards as they are; a part run through a
    symlink to SRC, or a relative path, is of the same job (the fingerprint
    names SRC by its resolved path, and holds nothing of the host or run)."""
    a, _ = _sources(tmp_path)
    out = tmp_path / "out"
    first = _pack(a, out, files="0/3")
    again = _pack(a, out, files="0/3")
    assert again.already_complete == first.shards and again.shards == []
    (tmp_path / "link").symlink_to(a, target_is_directory=True)
    _pack(tmp_path / "link", out, files="1/3")
    monkeypatch.chdir(tmp_path)
    last = _pack("a", "out", files="2/3")
    assert last.manifest_written
    assert verify_dataset(out).ok
    dataset = open_dataset(out)
    for i in range(4):
        assert bytes(dataset.blob(f"take{i}").view()) == (a / f"take{i}.wav").read_bytes()


def test_copies_of_a_list_file_are_one_job(tmp_path: Path) -> None:
    """A list file names its files: its own path is no part of the plan, so
    each machine may hold its own copy; a list of other files is another job."""
    a, b = _sources(tmp_path)
    lines = "".join(f"{p}\n" for p in sorted(a.iterdir()))
    (tmp_path / "one.txt").write_text(lines)
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "two.txt").write_text(lines)
    (tmp_path / "other.txt").write_text("".join(f"{p}\n" for p in sorted(b.iterdir())))
    out = tmp_path / "out"
    _pack(tmp_path / "one.txt", out, files="0/2")
    assert _pack(tmp_path / "copy" / "two.txt", out, files="1/2").manifest_written
    mixed = tmp_path / "mixed"
    _pack(tmp_path / "one.txt", mixed, files="0/2")
    with pytest.raises(PackError, match=OTHER_LISTING):
        _pack(tmp_path / "other.txt", mixed, files="1/2")


@pytest.mark.parametrize("version", [1, 2])
def test_a_shard_of_an_older_fingerprint_is_taken_on_what_it_says(
    tmp_path: Path, version: int
) -> None:
    """Shards packed before (fingerprint version 1: names, sizes and batch
    size only, no ``2:``; version 2: no remote file's version) are still
    this plan's when those agree: a job begun by an older streamer
    finishes; one of other sizes is refused."""
    a, _ = _sources(tmp_path)
    out = tmp_path / "out"
    _pack(a, out, files="0/2")
    listing = list_sources(a)
    plan = make_plan(
        listing,
        shard_size=SHARD_SIZE,
        batch_size=BATCH,
        by_files="0/2",
        origin=source_origin(str(a), listing),
    )
    for planned in plan.mine:
        older = planned.legacy[version - 1]
        assert planned.fingerprint.startswith("3:") and len(planned.legacy) == 2
        assert older.startswith("2:") if version == 2 else ":" not in older
        assert planned.packed_by(older) and not planned.packed_by(None)
        assert not planned.packed_by("3:" + older[-32:])
        _set_fingerprint(out / "audio" / f"{planned.name}.wsds", older)
    assert _pack(a, out, files="0/2").shards == []
    assert _pack(a, out, files="1/2").manifest_written
    assert verify_dataset(out).ok
    shard = out / "audio" / f"{plan.mine[0].name}.wsds"
    _set_fingerprint(shard, ("", "2:")[version - 1] + "0" * 32)  # that version, of other files
    with pytest.raises(PackError, match=OTHER_DATASET):
        _pack(a, out, files="0/2")


def _set_fingerprint(path: Path, fingerprint: str) -> None:
    """Rewrite an audio shard as a streamer of another fingerprint wrote it."""
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_file(source)
        metadata = {**(reader.schema.metadata or {}), PLAN_KEY.encode(): fingerprint.encode()}
        schema = reader.schema.with_metadata(metadata)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    temp = path.with_name(".rewritten")
    with pa.ipc.new_file(str(temp), schema) as writer:
        for batch in batches:
            writer.write_batch(batch.replace_schema_metadata(metadata))
    os.replace(temp, path)


# -- S3 -----------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def test_parts_of_two_s3_prefixes_do_not_mix_in_an_s3_out(
    moto_endpoint: str, aws: None, tmp_path: Path
) -> None:
    """The tester's case: ``s3://.../wavA --files 0/2`` then ``s3://.../wavB
    --files 1/2`` into one S3 OUT, same names and sizes: the second wrote the
    manifest and verify said ok. Now it fails, naming the shard; the job's
    own parts, re-run or not, make the dataset of wavA in a new OUT."""
    a, b = _sources(tmp_path)
    bucket = f"fp-{uuid.uuid4().hex[:8]}"
    client = s3_client(moto_endpoint, "test-key-id", SECRET)
    client.create_bucket(Bucket=bucket)
    for name, folder in (("wavA", a), ("wavB", b)):
        for path in folder.iterdir():
            client.put_object(Bucket=bucket, Key=f"{name}/{path.name}", Body=path.read_bytes())
    options = {"storage_options": {"endpoint_url": moto_endpoint}}
    out = f"s3://{bucket}/out"
    _pack(f"s3://{bucket}/wavA", out, files="0/2", **options)
    with pytest.raises(PackError, match=rf"{OTHER_LISTING}.*pack every part again") as info:
        _pack(f"s3://{bucket}/wavB/", out, files="1/2", **options)
    assert "audio/shard-0of2-000000.wsds" in str(info.value)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert "out/audio/shard-1of2-000000.wsds" in keys and f"out/{MANIFEST_NAME}" not in keys
    # OUT holds b's part 1 now: the job's own parts refuse it, pointing to a new OUT.
    with pytest.raises(PackError, match=OTHER_LISTING):
        _pack(f"s3://{bucket}/wavA", out, files="0/2", **options)
    with pytest.raises(PackError, match=OTHER_DATASET):
        _pack(f"s3://{bucket}/wavA", out, files="1/2", **options)
    fresh = f"s3://{bucket}/fresh"
    _pack(f"s3://{bucket}/wavA", fresh, files="0/2", **options)
    again = _pack(f"s3://{bucket}/wavA/", fresh, files="0/2", **options)  # a trailing / alike
    assert again.shards == [] and again.already_complete
    assert _pack(f"s3://{bucket}/wavA", fresh, files="1/2", **options).manifest_written
    assert verify_dataset(fresh, storage_options={"endpoint_url": moto_endpoint}).ok
    dataset = open_dataset(fresh, endpoint_url=moto_endpoint)
    for i in range(4):
        assert bytes(dataset.blob(f"take{i}").view()) == (a / f"take{i}.wav").read_bytes()


def test_an_s3_object_rewritten_at_its_size_between_parts_is_seen(
    moto_endpoint: str, aws: None, tmp_path: Path
) -> None:
    """``--shards 0/2`` of an S3 prefix, then one of its objects rewritten,
    same size, other bytes: the run of part 1 wrote the manifest of a
    dataset mixing old and new content, and a re-run of part 0 took its
    stale shard as complete (the listing's ETag was no part of the
    fingerprint). Both refuse now; shards of a version 2 fingerprint
    (none hashed a remote version) are still taken as they are."""
    a, b = _sources(tmp_path)
    bucket, client = _uploaded(moto_endpoint, a)
    options = {"storage_options": {"endpoint_url": moto_endpoint}}
    src, out = f"s3://{bucket}/raw", f"s3://{bucket}/out"
    first = _pack(src, out, shards="0/2", **options)
    assert first.shards == ["shard-000000", "shard-000002"]  # take0.wav, take2.wav
    client.put_object(Bucket=bucket, Key="raw/take0.wav", Body=(b / "take0.wav").read_bytes())
    with pytest.raises(PackError, match=rf"audio/shard-000000\.wsds .*{OTHER_LISTING}"):
        _pack(src, out, shards="1/2", **options)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="out/")["Contents"]]
    assert f"out/{MANIFEST_NAME}" not in keys
    with pytest.raises(PackError, match=OTHER_DATASET):
        _pack(src, out, shards="0/2", **options)
    # A shard of version 2 carries no version of its objects: taken as then.
    # (Another prefix: this process's store knows raw/take0.wav was rewritten
    # after it read it, and refuses to read it again.)
    for path in a.iterdir():
        client.put_object(Bucket=bucket, Key=f"copy/{path.name}", Body=path.read_bytes())
    src, fresh = f"s3://{bucket}/copy", f"s3://{bucket}/fresh"
    _pack(src, fresh, shards="0/2", **options)
    listing = list_sources(src, options["storage_options"])
    assert all(f.version for f in listing)  # each object's ETag
    origin = source_origin(src, listing, options["storage_options"])
    plan = make_plan(listing, shard_size=SHARD_SIZE, batch_size=BATCH, origin=origin)
    key = "fresh/audio/shard-000002.wsds"
    shard = tmp_path / "shard.wsds"
    shard.write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    _set_fingerprint(shard, plan.every[2].legacy[1])
    client.put_object(Bucket=bucket, Key=key, Body=shard.read_bytes())
    again = _pack(src, fresh, shards="0/2", **options)
    assert again.already_complete == ["shard-000000", "shard-000002"] and not again.shards
    assert _pack(src, fresh, shards="1/2", **options).manifest_written


@pytest.mark.parametrize("refuse_head", [0, 403], ids=["head", "head-refused"])
def test_an_object_of_a_list_file_rewritten_at_its_size_between_parts_is_seen(
    s3, moto_endpoint: str, aws: None, tmp_path: Path, refuse_head: int
) -> None:  # type: ignore[no-untyped-def]
    """A list file of ``s3://`` URLs, ``--shards 0/2``, then one of its
    objects rewritten, same size, other bytes: each URL was sized by a HEAD
    that kept no version, so the run of part 1 wrote the manifest over old
    and new content. The size request's ETag is the file's version now;
    a store refusing HEAD sizes by a one-byte GET, whose ETag it is."""
    a, b = _sources(tmp_path)
    bucket, client = _uploaded(moto_endpoint, a)
    listing = tmp_path / "urls.txt"
    listing.write_text("".join(f"s3://{bucket}/raw/take{i}.wav\n" for i in range(4)))
    s3.faults.refuse_head = refuse_head
    options = {"storage_options": {"endpoint_url": s3.url}}
    files = list_sources(str(listing), options["storage_options"])
    assert all(f.version and f.version.startswith("ETag ") for f in files)
    assert {r.method for r in s3.requests} == ({"HEAD", "GET"} if refuse_head else {"HEAD"})
    out = tmp_path / "out"
    assert _pack(listing, out, shards="0/2", **options).shards == ["shard-000000", "shard-000002"]
    client.put_object(Bucket=bucket, Key="raw/take0.wav", Body=(b / "take0.wav").read_bytes())
    with pytest.raises(PackError, match=rf"shard-000000\.wsds .*{OTHER_LISTING}"):
        _pack(listing, out, shards="1/2", **options)
    assert not (out / MANIFEST_NAME).exists()
    with pytest.raises(PackError, match=OTHER_DATASET):
        _pack(listing, out, shards="0/2", **options)


def test_a_file_of_a_list_file_of_http_urls_rewritten_at_its_size_is_seen(
    tmp_path: Path,
) -> None:
    """The same over HTTP: the one-byte GET that sizes a URL says its ETag."""
    a, b = _sources(tmp_path)
    server = LoopbackServer(file_handler(a)).start()
    try:
        listing = tmp_path / "urls.txt"
        listing.write_text("".join(f"{server.url}/take{i}.wav\n" for i in range(4)))
        out = tmp_path / "out"
        _pack(listing, out, shards="0/2")
        (a / "take0.wav").write_bytes((b / "take0.wav").read_bytes())
        with pytest.raises(PackError, match=OTHER_LISTING):
            _pack(listing, out, shards="1/2")
        assert not (out / MANIFEST_NAME).exists()
    finally:
        server.stop()
