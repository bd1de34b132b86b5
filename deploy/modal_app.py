"""streamer's cloud jobs on Modal: pack, index and warm up a dataset in object
storage, fanned out over containers, and a training consumer streaming from it.

One-time setup (the credentials live in Modal, never in this file)::

    pip install 'streamer-audio[modal]'
    modal secret create streamer-aws AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... \\
        AWS_DEFAULT_REGION=us-east-1        # + AWS_ENDPOINT_URL=https://... for B2, R2, MinIO

Then, from a checkout of the repository (the image installs this checkout)::

    modal run deploy/modal_app.py --job pack --src s3://bucket/raw --url s3://bucket/ds --parts 32
    modal run deploy/modal_app.py --job index --url s3://bucket/ds --parts 16
    modal run deploy/modal_app.py --job warmup --url s3://bucket/ds --parts 4
    modal run deploy/modal_app.py --job stream --url s3://bucket/ds --crops 2000

``--allow-incomplete`` (warmup, stream) serves the shards present of a
dataset whose pack left planned shards missing, as ``streamer warmup
--allow-incomplete`` does; without it those jobs fail, naming the missing
shards, and an index job's summary names them as a problem of every part.

The entry point lists the work into parts, fans them out with ``.map``,
merges the parts' reports and prints the counts per reason, every failed part
with its reason, and what the job cost in requests and bytes; it exits 1 when
anything failed. Re-running a job redoes only what is missing.

The Modal layer is thin on purpose: every function body is one call into
``streamer.jobs`` (plain Python, the same calls a Kubernetes or Slurm job
makes through the CLI), so ``run_job(..., local=True)`` runs the same job in
this process (the tests do that, against S3 servers on loopback).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import modal

from streamer import jobs
from streamer.write.verify import verify_dataset

APP_NAME = os.environ.get("STREAMER_MODAL_APP", "streamer")
#: A ``modal.Secret`` holding AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
#: AWS_DEFAULT_REGION and, off AWS (B2, R2, MinIO), AWS_ENDPOINT_URL.
SECRET_NAME = os.environ.get("STREAMER_MODAL_SECRET", "streamer-aws")
#: The Modal Volume that holds the disk cache ``warmup`` fills.
VOLUME_NAME = os.environ.get("STREAMER_MODAL_VOLUME", "streamer-cache")
CACHE_DIR = "/cache"
#: A part may take hours on a big partition; Modal's limit is 24 h.
PART_TIMEOUT = 6 * 3600

REPOSITORY = Path(__file__).resolve().parent.parent
#: What installing the package needs from the checkout (as in deploy/Dockerfile).
PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE", "streamer")


def not_packaged(path: Path) -> bool:
    """Whether a path of the checkout (relative to it) stays out of the image."""
    return path.parts[0] not in PACKAGE_FILES or "__pycache__" in path.parts


image = (
    modal.Image.debian_slim(python_version="3.12")
    .add_local_dir(REPOSITORY, "/opt/streamer", copy=True, ignore=not_packaged)
    .run_commands("pip install --no-cache-dir /opt/streamer")
)
app = modal.App(APP_NAME, image=image)
aws = modal.Secret.from_name(SECRET_NAME)
cache = modal.Volume.from_name(VOLUME_NAME, create_if_missing=True)
part_options: dict[str, Any] = {
    "secrets": [aws],
    "cpu": 2.0,
    "memory": 4096,
    "timeout": PART_TIMEOUT,
    "retries": 1,  # a lost container's part runs again; parts are idempotent
}


@app.function(secrets=[aws], timeout=600)
def plan(job: str, url: str, parts: int, src: str = "") -> list[str]:
    """The job's parts (``i/n`` specs), listed where the credentials are."""
    if job == "pack":
        return jobs.pack_parts(src, parts)
    if job == "index":
        return jobs.index_parts(url, parts)
    return jobs.partitions(parts)


@app.function(**part_options)
def pack(
    part: str,
    src: str,
    url: str,
    shard_size: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> jobs.PartReport:
    """Pack files partition ``part`` of ``src`` into the dataset at ``url``,
    indexed. ``storage_options`` tune the store (``max_rps``, retries, ...);
    credentials come from the Secret, never from arguments."""
    return jobs.pack_part(src, url, part, shard_size=shard_size, storage_options=storage_options)


@app.function(**part_options)
def index(part: str, url: str, storage_options: dict[str, Any] | None = None) -> jobs.PartReport:
    """Index shards partition ``part`` of the dataset at ``url`` (one process
    per container: Modal scales by containers, and the store's request counts
    stay whole)."""
    return jobs.index_part(url, part, workers=1, storage_options=storage_options)


@app.function(**part_options, volumes={CACHE_DIR: cache})
def warmup(
    part: str,
    url: str,
    duration: float = 8.0,
    per_episode: int = 4,
    seed: int = 0,
    cache_dir: str = CACHE_DIR,
    allow_incomplete: bool = False,
) -> jobs.PartReport:
    """Fill the directory of rank ``part`` of an epoch in the cache Volume
    (``jobs.part_cache_dir``) with what that rank reads (``allow_incomplete``:
    of the shards present of an incomplete dataset). Parallel containers do
    not see each other's files on a Volume: each part has a directory of its own."""
    report = jobs.warmup_part(
        url,
        part,
        cache_dir=jobs.part_cache_dir(cache_dir, part),
        duration=duration,
        per_episode=per_episode,
        seed=seed,
        allow_incomplete=allow_incomplete,
    )
    if not modal.is_local():
        cache.commit()  # visible to the training containers that mount the Volume
    return report


@app.function(secrets=[aws], timeout=3600)
def finish(job: str, url: str) -> list[str]:
    """After every part: the index job writes the dataset manifest (once, not
    racing the parts); then the dataset is checked as ``streamer verify``
    checks it. Returns the problems found, one line each."""
    if job == "index":
        jobs.finish_index(url)
    return verify_dataset(url).problems


@app.function(**part_options, volumes={CACHE_DIR: cache})
def stream_example(
    url: str,
    crops: int = 200,
    duration: float = 8.0,
    cached: bool = False,
    cache_dir: str = CACHE_DIR,
    allow_incomplete: bool = False,
) -> str:
    """A minimal training consumer: crops/s and bytes per crop from the store
    (``cached``: through the directory of the Volume that a one-part
    ``warmup`` fills, ``jobs.part_cache_dir(cache_dir, "0/1")``;
    ``allow_incomplete``: of the shards present of an incomplete dataset)."""
    options = {"cache_dir": jobs.part_cache_dir(cache_dir, "0/1")} if cached else None
    report = jobs.stream_example(
        url,
        crops=crops,
        duration=duration,
        allow_incomplete=allow_incomplete,
        storage_options=options,
    )
    return report.line()


def run_job(
    job: str,
    url: str,
    *,
    src: str = "",
    parts: int = 8,
    shard_size: int | None = None,
    duration: float = 8.0,
    per_episode: int = 4,
    local: bool = False,
    cache_dir: str = CACHE_DIR,
    allow_incomplete: bool = False,
) -> jobs.JobSummary:
    """List, fan out, finish and merge one job (``pack``, ``index`` or
    ``warmup``): on Modal, or with ``local`` in this process, part by part.
    ``allow_incomplete``: warm up the shards present of a dataset whose pack
    left planned shards missing (every part fails on it otherwise)."""
    if job not in ("pack", "index", "warmup"):
        raise ValueError(f"unknown job {job!r}: pack, index, warmup or stream")
    call = _local if local else _remote
    specs = call(plan, job, url, parts, src)
    if job == "pack":
        results = _fan_out(pack, specs, {"src": src, "url": url, "shard_size": shard_size}, local)
    elif job == "index":
        results = _fan_out(index, specs, {"url": url}, local)
    else:
        options = {"url": url, "duration": duration, "per_episode": per_episode}
        options |= {"cache_dir": cache_dir, "allow_incomplete": allow_incomplete}
        results = _fan_out(warmup, specs, options, local)
    summary = jobs.merge(job, specs, results, urls=[src, url] if job == "pack" else [url])
    if summary.failed:
        return summary  # the dataset is not whole yet: re-run the job
    try:
        problems = call(finish, job, url)
    except Exception as exc:
        problems = [f"finishing: {jobs.describe(exc)}"]
    summary.problems.update({f"verify {n}": line for n, line in enumerate(problems, 1)})
    return summary


def _fan_out(
    function: modal.Function, specs: list[str], kwargs: dict[str, Any], local: bool
) -> list[jobs.PartReport | BaseException]:
    """One result per part, in order: a report, or the exception that ended
    the part's call (the merge names it)."""
    if not local:
        return list(function.map(specs, kwargs=kwargs, return_exceptions=True))
    results: list[jobs.PartReport | BaseException] = []
    for spec in specs:
        try:
            results.append(function.local(spec, **kwargs))
        except Exception as exc:
            results.append(exc)
    return results


def _remote(function: modal.Function, *args: Any) -> Any:
    return function.remote(*args)


def _local(function: modal.Function, *args: Any) -> Any:
    return function.local(*args)


@app.local_entrypoint()
def main(
    job: str,
    url: str,
    src: str = "",
    parts: int = 8,
    shard_size: int = 0,
    crops: int = 200,
    duration: float = 8.0,
    per_episode: int = 4,
    cached: bool = False,
    allow_incomplete: bool = False,
) -> None:
    if job == "stream":
        line = stream_example.remote(
            url, crops=crops, duration=duration, cached=cached, allow_incomplete=allow_incomplete
        )
        print(line)
        return
    try:
        summary = run_job(
            job,
            url,
            src=src,
            parts=parts,
            shard_size=shard_size or None,
            duration=duration,
            per_episode=per_episode,
            allow_incomplete=allow_incomplete,
        )
    except Exception as exc:  # listing the work failed: nothing ran
        print(f"{job}: error: {jobs.describe(exc)}")
        raise SystemExit(1) from None
    for line in summary.lines():
        print(line)
    if job == "warmup":
        first = jobs.part_cache_dir(CACHE_DIR, f"0/{parts}")
        print(
            f"training rank i of {parts} reads the Volume {VOLUME_NAME} (mounted at "
            f"{CACHE_DIR}) through cache_dir=jobs.part_cache_dir({CACHE_DIR!r}, 'i/{parts}'): "
            f"rank 0, {first}"
        )
    if not summary.ok:
        raise SystemExit(1)
