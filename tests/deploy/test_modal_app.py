"""deploy/modal_app.py: the module imports with modal installed, and its
functions' bodies and its entry point's fan-out run here (``.local()``)
against the S3 test server on loopback. Nothing contacts Modal. Needs the
``modal`` extra (``tox -e deploy``); skipped without it."""

from __future__ import annotations

import importlib.util
import re
import shutil
import uuid
import warnings
from pathlib import Path
from types import ModuleType

import pytest
from helpers import SECRET

import streamer
from streamer import RandomCrops, Streamer, jobs
from streamer.storage import open_url
from streamer.write.verify import verify_dataset

modal = pytest.importorskip("modal", reason="needs the modal extra (tox -e deploy)")

APP = Path(__file__).resolve().parents[2] / "deploy" / "modal_app.py"


@pytest.fixture(scope="module")
def app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("modal_app", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _no_volume_warning():  # type: ignore[no-untyped-def]
    """``.local()`` warns that a Volume is not mounted here: the tests pass a temp dir."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The .* function is executing locally")
        yield


def test_the_app_defines_the_jobs_and_keeps_no_secret(app: ModuleType) -> None:
    for name in ("plan", "pack", "index", "warmup", "finish", "stream_example"):
        assert isinstance(getattr(app, name), modal.Function), name
    assert app.app.name == "streamer"
    assert app.part_options["secrets"] == [app.aws]
    source = APP.read_text()
    # Credentials only by name: no key or token values, no user:password@ URLs.
    assert not re.search(r"AWS_SECRET_ACCESS_KEY\s*=\s*['\"]", source)
    assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", source)
    assert "modal secret create streamer-aws" in source


def test_the_image_installs_the_package_files_only(app: ModuleType) -> None:
    root = app.REPOSITORY
    kept = [
        p.relative_to(root)
        for p in root.rglob("*")
        if p.is_file() and not app.not_packaged(p.relative_to(root))
    ]
    assert Path("pyproject.toml") in kept and Path("streamer/jobs.py") in kept
    assert not [p for p in kept if p.parts[0] in ("tests", "benchmarks", ".git")]
    assert not [p for p in kept if "__pycache__" in p.parts]


def test_index_job_fans_out_finishes_and_verifies(app, remote_unindexed, unindexed) -> None:  # type: ignore[no-untyped-def]
    shards = len(list((unindexed / "audio").iterdir()))
    summary = app.run_job("index", remote_unindexed, parts=3, local=True)
    assert summary.ok, (summary.failed, summary.problems)
    assert summary.parts == 3 and summary.counts["shards indexed"] == shards
    assert verify_dataset(remote_unindexed).ok
    again = app.run_job("index", remote_unindexed, parts=3, local=True)
    assert again.ok and again.counts["shards already indexed"] == shards
    assert again.counts["shards indexed"] == 0 and again.bytes_stored < summary.bytes_stored


def test_pack_job_from_local_files_into_s3(app, s3_uploaded, aws_env, audio_dir) -> None:  # type: ignore[no-untyped-def]
    out = f"s3://{s3_uploaded}/modal-pack-{uuid.uuid4().hex[:8]}"
    files = [p for p in audio_dir.rglob("*") if p.is_file()]
    summary = app.run_job("pack", out, src=str(audio_dir), parts=2, shard_size=300_000, local=True)
    assert summary.ok, (summary.failed, summary.problems)
    assert summary.counts["files packed"] == len(files)
    assert len(streamer.open_dataset(out)) == len(files)
    # A shard that is not of the plan appears: verification names it, and a
    # re-run refuses to pack into that dataset, every part saying why.
    store, root = open_url(out)
    store.put_sync(store.join(root, "audio", "zz-stray.wsds"), b"not an arrow file")
    assert any("zz-stray" in line for line in app.finish.local("pack", out))
    again = app.run_job("pack", out, src=str(audio_dir), parts=2, shard_size=300_000, local=True)
    assert set(again.failed) == {"0/2", "1/2"}
    assert all("zz-stray" in why for why in again.failed.values())
    assert again.counts["files packed"] == 0


def test_warmup_job_and_stream_example(app, s3_uploaded, aws_env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"s3://{s3_uploaded}/packed"
    summary = app.run_job(
        "warmup", url, parts=2, duration=1.0, per_episode=1, local=True, cache_dir=str(tmp_path)
    )
    # 7 crops over 2 ranks: equal runs of 3, as a 2-rank training run reads them.
    assert summary.ok and summary.counts["crops warmed"] == 6
    assert any(tmp_path.rglob("*"))
    line = app.stream_example.local(
        url, crops=6, duration=1.0, cached=True, cache_dir=str(tmp_path)
    )
    assert line.startswith("6 crops in ") and "crops/s" in line


def test_warmup_parts_in_parallel_containers_leave_every_rank_warm(  # type: ignore[no-untyped-def]
    app, s3, s3_uploaded, aws_env, tmp_path
) -> None:
    """A Modal Volume shows each container its files as they were when it was
    mounted, and keeps, of a file two containers wrote, the last commit's.
    Warmup parts run in parallel containers and committed one after another
    leave each training rank every block it reads (parts that shared one
    directory each took their own stamp of every shard: after a job whose
    every part was done, ranks 0 and 2 of 4 read from the store)."""
    url = f"s3://{s3_uploaded}/packed"
    volume = tmp_path / "volume"
    volume.mkdir()
    parts = jobs.partitions(4)
    containers = [tmp_path / f"container-{n}" for n in range(len(parts))]
    for container in containers:  # mounted before any part commits
        shutil.copytree(volume, container)
    options = {"duration": 1.0, "per_episode": 1}
    reports = [
        app.warmup.local(part, url, cache_dir=str(container), **options)
        for part, container in zip(parts, containers, strict=True)
    ]
    assert jobs.merge("warmup", parts, reports).ok
    for container in containers:  # the commits: per file, the last one's
        shutil.copytree(container, volume, dirs_exist_ok=True)
    for rank, part in enumerate(parts):
        cache_dir = jobs.part_cache_dir(volume, part)
        training = Streamer(
            url,
            RandomCrops(1.0, per_episode=1),
            rank=rank,
            world_size=len(parts),
            workers=0,
            storage_options={"cache_dir": cache_dir},
        )
        s3.reset()
        assert len(list(training)) == reports[rank].counts["crops warmed"] == 1
        assert s3.requests == [], f"rank {rank} read from the store"


def test_a_failing_part_is_named_by_the_summary(app, s3, remote_unindexed) -> None:  # type: ignore[no-untyped-def]
    results = app._fan_out(app.index, ["0/2", "7/2"], {"url": remote_unindexed}, True)
    nowhere = {"endpoint_url": "http://127.0.0.1:9", "give_up_after": 2.0, "backoff": 0.05}
    results += app._fan_out(
        app.index, ["1/2"], {"url": remote_unindexed, "storage_options": nowhere}, True
    )
    summary = jobs.merge("index", ["0/2", "7/2", "1/2"], results)
    assert set(summary.failed) == {"7/2", "1/2"}
    assert "0 <= i < n" in summary.failed["7/2"] and "127.0.0.1:9" in summary.failed["1/2"]
    assert SECRET not in "\n".join(summary.lines())


def test_a_bad_job_name_is_refused(app) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="unknown job 'indx'"):
        app.run_job("indx", "s3://b/ds", local=True)


def test_warmup_and_stream_take_allow_incomplete(app, remote_incomplete, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A dataset whose pack left a shard missing: the warmup job fails every
    part naming it, and serves the shards present with ``allow_incomplete``
    (the entry point's ``--allow-incomplete``), as the stream consumer does."""
    options = {"parts": 2, "duration": 0.25, "per_episode": 1, "local": True}
    refused = app.run_job("warmup", remote_incomplete, cache_dir=str(tmp_path), **options)
    assert set(refused.failed) == {"0/2", "1/2"}
    assert all("incomplete dataset" in why for why in refused.failed.values())
    allowed = app.run_job(
        "warmup", remote_incomplete, cache_dir=str(tmp_path), allow_incomplete=True, **options
    )
    assert not allowed.failed and allowed.counts["crops warmed"] > 0
    # What verification finds is said still: the dataset is incomplete.
    assert any("shard-000001" in line for line in allowed.problems.values())
    with pytest.raises(streamer.IncompleteDatasetError):
        app.stream_example.local(remote_incomplete, crops=2, duration=0.25)
    line = app.stream_example.local(
        remote_incomplete, crops=2, duration=0.25, allow_incomplete=True
    )
    assert line.startswith("2 crops in "), line
