"""Fan-out jobs: a dataset job split into parts that machines run on their own,
and the merging of the parts' reports into one summary.

A cloud job (``deploy/``: Modal, Kubernetes Indexed Jobs, Slurm arrays) is
the same three steps wherever it runs: list the work into parts (``i/n``
partitions, deterministic, disjoint and complete), run every part anywhere
(each part is one call here, with plain arguments and a plain
``PartReport`` back), and merge what came back (``merge``). A part never
raises: whatever stops it becomes its report's ``error``, so a summary names
every part that failed and why, and a part that never reported (a crashed
container) is named too. Re-running a part is safe: indexing skips the shards
already indexed, and a warmup finds its blocks in the disk cache.

Each part counts what it did by reason (``PartReport.counts``) and what it
cost on the store (requests and bytes, from the store's stats in the part's
process), so a summary can be priced.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .dataset import Dataset, open_dataset, write_manifest
from .decode.verify import countable
from .errors import StreamerError
from .pipeline.bench import BenchConfig, bench_streamer
from .pipeline.samplers import RandomCrops
from .pipeline.streamer import Streamer
from .pipeline.warmup import warmup
from .storage import Store, open_url, redact, safe_url
from .write.index import IndexReport, build_index, parse_part, unindexed_shards
from .write.pack import PackReport, pack
from .write.sources import list_sources, open_store

__all__ = [
    "JobSummary",
    "PartReport",
    "StreamReport",
    "describe",
    "finish_index",
    "index_part",
    "index_parts",
    "merge",
    "pack_part",
    "pack_parts",
    "part_cache_dir",
    "partitions",
    "stream_example",
    "warmup_part",
]

#: Parts left out of a job that its summary names one by one; more are
#: counted in one line (an ``n`` of 10**12 from a typo would list them all).
MAX_LISTED_MISSING = 100


@dataclass
class PartReport:
    """What one part of a job did: counts by reason, its cost on the store,
    and, when the part failed as a whole, why (``error``, one line)."""

    job: str
    part: str
    error: str = ""
    #: The URLs the part worked on, credentials stripped (``src -> out`` for pack).
    target: str = ""
    counts: Counter[str] = field(default_factory=Counter)
    #: Items of the part that failed on their own (a shard: name -> reason).
    problems: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    bytes_fetched: int = 0
    bytes_stored: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class JobSummary:
    """The merged reports of a job's parts: summed counts and costs, every
    part that failed or never reported, and every item of a part that failed
    on its own, each with its reason."""

    job: str
    parts: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    bytes_fetched: int = 0
    bytes_stored: int = 0
    seconds: float = 0.0  # the slowest part's

    @property
    def ok(self) -> bool:
        return self.parts > 0 and not self.failed and not self.problems

    def lines(self) -> list[str]:
        """The summary as printed by a job's entry point."""
        done = self.parts - len(self.failed)
        out = [
            f"{self.job}: {done}/{self.parts} parts done"
            + (f", {len(self.failed)} failed" if self.failed else "")
            + f"; {self.requests} requests, {self.bytes_fetched / 1e6:.1f} MB read, "
            f"{self.bytes_stored / 1e6:.1f} MB written; slowest part {self.seconds:.1f} s"
        ]
        out += [f"  {reason}: {count}" for reason, count in sorted(self.counts.items())]
        out += [f"  failed: {item}: {why}" for item, why in sorted(self.problems.items())]
        out += [f"  failed part {part}: {why}" for part, why in sorted(self.failed.items())]
        return out


def partitions(count: int) -> list[str]:
    """The ``i/n`` specs of ``count`` parts (what ``--shards``/``--files`` take)."""
    if count < 1:
        raise StreamerError(f"a job needs at least 1 part, not {count}")
    return [f"{i}/{count}" for i in range(count)]


def index_parts(
    url: str, parts: int, *, storage_options: Mapping[str, Any] | None = None
) -> list[str]:
    """The parts of indexing the dataset at ``url``: ``parts`` partitions of
    its shards, fewer when it has fewer shards (no part is empty)."""
    store, root = open_url(url, **(storage_options or {}))
    shards = len(Dataset(root, store=store, manifest=False).listed_shards)
    if shards == 0:
        raise StreamerError(f"{safe_url(url)}: no shards to index")
    return partitions(max(1, min(parts, shards)))


def merge(
    job: str,
    parts: Sequence[str],
    results: Iterable[PartReport | BaseException],
    *,
    urls: Sequence[str] | None = None,
) -> JobSummary:
    """One summary of ``parts`` from their ``results``, in the same order (as
    a fan-out returns them; an exception stands for a part whose run failed
    outside the part itself, such as a lost container). A part with no
    result is failed "no report"; none is dropped. ``parts`` are every
    ``i`` of one ``n``, each once: a part listed twice counts once and is
    failed, a part left out is failed "not run". A report is the part's only
    when it names this job and this part: one of another part (a retried
    container's report landing twice), another ``n`` or another job is
    failed, its counts left out; so is one of another dataset: its
    ``target`` is not that of the job's ``urls`` (``[url]``, for pack
    ``[src, out]``) or, without ``urls``, not the one most reports name."""
    summary = JobSummary(job=job, parts=len(parts))
    results = list(results)
    if urls is None:
        named = Counter(r.target for r in results if isinstance(r, PartReport))
        target = named.most_common(1)[0][0] if named else ""
    else:
        target = _target(urls)
    seen: set[str] = set()
    spelled: set[object] = set()  # as parsed: "01/2" is "1/2"
    for position, part in enumerate(parts):
        result = results[position] if position < len(results) else None
        spelling = _spelling(part)
        if spelling in spelled:
            summary.failed[part] = "listed twice in the job's parts (counted once)"
            continue
        seen.add(part)
        spelled.add(spelling)
        if result is None:
            summary.failed[part] = "no report (the part never finished)"
        elif not isinstance(result, PartReport):  # an exception, or not a report at all
            summary.failed[part] = describe(result)
        elif (result.job, result.part) != (job, part):
            summary.failed[part] = (
                f"came back with the report of {result.job} part {result.part}, "
                "not its own (counted nowhere)"
            )
        elif result.target != target:
            summary.failed[part] = (
                f"came back with a report of another dataset ({result.target}, "
                f"not {target}; counted nowhere)"
            )
        else:
            # A report comes from another process, maybe another version:
            # what it says is redacted again before the summary repeats it.
            if result.error:
                summary.failed[part] = describe(StreamerError(result.error))
            summary.counts.update(result.counts)
            summary.problems.update(
                {item: describe(StreamerError(why)) for item, why in result.problems.items()}
            )
            summary.requests += result.requests
            summary.bytes_fetched += result.bytes_fetched
            summary.bytes_stored += result.bytes_stored
            summary.seconds = max(summary.seconds, result.seconds)
    for extra in results[len(parts) :]:
        summary.failed[f"unexpected result {len(summary.failed)}"] = describe(extra)
    _check_cover(summary, seen)
    if job == "pack" and not summary.failed and not summary.counts["manifest written"]:
        summary.problems["manifest"] = (
            "not written: no part found every planned shard in place "
            "(shards planned from another listing of the source?); run `streamer verify OUT`"
        )
    return summary


def _spelling(part: str) -> object:
    """What tells parts apart: ``(i, n)``, however written (``01/2``); a
    spec that is no ``i/n`` as it is (``_check_cover`` fails it)."""
    try:
        return parse_part(part, "part")
    except StreamerError:
        return part


def _check_cover(summary: JobSummary, parts: set[str]) -> None:
    """Fail the parts that make ``parts`` short of every ``i`` of one ``n``:
    a spec that is no ``i/n``, a mix of ``n``, an ``i`` left out."""
    if not parts:
        summary.failed["0/0"] = "a job of no parts did nothing"
        return
    specs: set[tuple[int, int]] = set()
    for part in parts:
        try:
            specs.add(parse_part(part, "part"))
        except StreamerError as exc:
            summary.failed.setdefault(part, str(exc))
    counts = sorted({count for _, count in specs})
    if len(counts) > 1:
        summary.failed["parts"] = f"parts of {len(counts)} different n: {counts}"
    for count in counts:
        ran = sorted(i for i, n in specs if n == count)
        missing = count - len(ran)
        if missing > MAX_LISTED_MISSING:  # n from a typo (10**12): counted, not listed
            summary.failed[f"?/{count}"] = f"{missing} parts not run (left out of the job's parts)"
            summary.parts += missing
            continue
        for i in sorted(set(range(count)) - set(ran)):
            summary.failed[f"{i}/{count}"] = "not run (left out of the job's parts)"
            summary.parts += 1


def describe(error: BaseException | object) -> str:
    """One line naming what went wrong: streamer's own message, anything
    else with its class; credentials redacted (a foreign message may quote a
    URL or a header)."""
    if isinstance(error, StreamerError):
        text = str(error)
    elif isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
    else:
        text = f"not a part report: {type(error).__name__}"
    return " ".join(redact(text).split()) or type(error).__name__


def pack_parts(
    src: str, parts: int, *, storage_options: Mapping[str, Any] | None = None
) -> list[str]:
    """The parts of packing the audio files at ``src`` (``--files i/n``):
    ``parts`` partitions of its files, fewer when it has fewer files."""
    files = len(list_sources(src, storage_options))
    if files == 0:
        raise StreamerError(f"{safe_url(src)}: no files to pack")
    return partitions(max(1, min(parts, files)))


def pack_part(
    src: str,
    out: str,
    part: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    shard_size: int | None = None,
    index: bool = True,
) -> PartReport:
    """Pack partition ``part`` (``i/n`` of the files) of ``src`` into the
    dataset at ``out``, with seek indexes unless not ``index``. Shards already
    complete are skipped; the part that completes the plan writes the
    manifest (``pack``)."""

    def work(part_report: PartReport) -> None:
        sizes = {} if shard_size is None else {"shard_size": shard_size}
        report = pack(
            src,
            out,
            files=part,
            storage_options=storage_options,
            index=index,
            progress=False,
            **sizes,
        )
        part_report.counts = _pack_counts(report)
        if report.index is not None:
            part_report.problems = report.index.problems()

    return _run("pack", part, [src, out], storage_options, work)


def _pack_counts(report: PackReport) -> Counter[str]:
    counts: Counter[str] = Counter(
        {
            "files packed": report.files,
            "bytes packed": report.bytes,
            "shards written": len(report.shards),
            "shards already complete": len(report.already_complete),
            "manifest written": int(report.manifest_written),
        }
    )
    counts.update(f"file skipped: {countable(reason)}" for _, reason in report.skipped)
    if report.index is not None:
        counts.update(_index_counts(report.index))
    return +counts


def index_part(
    url: str,
    part: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    workers: int = 1,
    verify: bool = True,
) -> PartReport:
    """Index the shards of partition ``part`` (``i/n``) of the dataset at
    ``url``, skipping those already indexed. The dataset manifest is left to
    ``finish_index``: parts writing it at once would race. A dataset whose
    pack left planned shards missing is a problem of every part (its shards
    are indexed all the same), so the merged summary says so before
    ``finish_index`` refuses."""

    def work(part_report: PartReport) -> None:
        report = build_index(
            url,
            storage_options=storage_options,
            shards=part,
            workers=workers,
            verify=verify,
            progress=False,
            manifest=False,
        )
        part_report.counts = _index_counts(report)
        part_report.problems = report.problems()

    return _run("index", part, [url], storage_options, work)


def finish_index(url: str, *, storage_options: Mapping[str, Any] | None = None) -> str:
    """The step after every index part: the dataset manifest, written once
    from a fresh listing. Returns its path. Refuses (``StreamerError``,
    nothing written) while any audio shard has no index shard: a part that
    crashed or has not run yet would leave a manifest of a half-indexed
    dataset. Re-run the missing parts, or ``streamer index URL`` (which
    indexes what is missing, then writes the manifest)."""
    store, root = open_url(url, **(storage_options or {}))
    listed, missing = unindexed_shards(store, root)
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise StreamerError(
            f"{safe_url(url)}: {len(missing)} of {len(listed.listed_shards)} shards not "
            f"indexed yet ({shown}): manifest not written; re-run the index parts that "
            "failed or never ran, or `streamer index URL`"
        )
    return write_manifest(store, root, listed.column_dirs)


def _index_counts(report: IndexReport) -> Counter[str]:
    counts: Counter[str] = Counter(
        {
            "shards indexed": len(report.indexed),
            "shards already indexed": len(report.skipped),
            "shards failed": len(report.failed),
            "episodes indexed": report.episodes,
            "episodes already indexed": report.skipped_episodes,
        }
    )
    counts.update({f"index {label}": n for label, n in report.labels.items()})
    counts["index verified with a larger pre-roll"] = report.larger_preroll
    counts["decode ends early"] = sum(len(keys) for keys in report.ends_early.values())
    counts.update({f"no index: {reason}": n for reason, n in report.reasons.items()})
    return +counts


def warmup_part(
    url: str,
    part: str,
    *,
    cache_dir: str | os.PathLike[str],
    duration: float = 8.0,
    per_episode: int = 4,
    seed: int = 0,
    epoch: int = 0,
    sample_rate: int | None = None,
    mono: bool = False,
    allow_incomplete: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> PartReport:
    """Fetch into the disk cache at ``cache_dir`` every byte that partition
    ``part`` (``i/n``: rank i of n) of an epoch of ``RandomCrops(duration,
    per_episode)`` reads, so a training run with the same plan and cache reads
    nothing from the store. No decoding. A dataset whose pack left planned
    shards missing fails the part (``IncompleteDatasetError``) unless
    ``allow_incomplete``, as the training run opening it would."""
    options = {**(storage_options or {}), "cache_dir": os.fspath(cache_dir)}

    def work(part_report: PartReport) -> None:
        rank, world = parse_part(part, "part")  # a bad spec is the part's error, as elsewhere
        streamer = Streamer(
            url,
            RandomCrops(duration, per_episode=per_episode),
            seed=seed,
            epoch=epoch,
            sample_rate=sample_rate,
            mono=mono,
            rank=rank,
            world_size=world,
            worker=0,
            num_workers=1,
            workers=0,
            storage_options=options,
            allow_incomplete=allow_incomplete,
        )
        report = warmup(streamer)
        counts = Counter({"crops warmed": report.crops})
        counts.update({f"crop skipped: {r}": n for r, n in report.skipped.items()})
        part_report.counts = +counts

    return _run("warmup", part, [url], options, work)


def part_cache_dir(cache_dir: str | os.PathLike[str], part: str) -> str:
    """The directory under ``cache_dir`` that warmup part ``part`` (``i/n``)
    fills and training rank ``i`` of ``n`` reads (``storage_options={"cache_dir":
    ...}``), on a file system whose writers do not see each other's files
    (a Modal Volume: each container sees it as it was when mounted, and of
    a file two containers wrote, the last commit's is kept). Parts sharing
    one directory there each took their own stamp of every shard they read
    (``storage/cache.py``), and the last commit's hid the blocks the other
    parts had kept under theirs: the job said every part done while every
    other rank's reads went to the store. Alone in its directory, a part is
    that directory's only writer. (Where writers see each other, on one
    machine or a shared POSIX file system, parts may share one directory.)"""
    rank, world = parse_part(part, "part")
    return os.path.join(os.fspath(cache_dir), f"rank-{rank}-of-{world}")


@dataclass
class StreamReport:
    """What a training consumer saw: crops by outcome, throughput and cost."""

    crops: int
    skipped: dict[str, int]
    seconds: float
    requests: int
    bytes_fetched: int

    @property
    def crops_per_second(self) -> float:
        return self.crops / self.seconds if self.seconds > 0 else math.inf

    @property
    def bytes_per_crop(self) -> float:
        return self.bytes_fetched / self.crops if self.crops else math.nan

    @property
    def requests_per_crop(self) -> float:
        return self.requests / self.crops if self.crops else math.nan

    def line(self) -> str:
        skipped = sum(self.skipped.values())
        return (
            f"{self.crops} crops in {self.seconds:.1f} s: {self.crops_per_second:.1f} crops/s, "
            f"{self.bytes_per_crop / 1e3:.1f} kB and {self.requests_per_crop:.2f} requests "
            f"per crop" + (f"; {skipped} skipped {dict(self.skipped)}" if skipped else "")
        )


def stream_example(
    url: str,
    *,
    crops: int = 200,
    duration: float = 8.0,
    sample_rate: int | None = 16000,
    mono: bool = True,
    workers: int | None = None,
    seed: int = 0,
    allow_incomplete: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> StreamReport:
    """A minimal training consumer: stream ``crops`` random crops of the
    dataset at ``url`` (as ``streamer bench`` plans them) and report crops/s
    and what they cost on the store. Each crop's audio is touched as a
    training step would touch it. ``allow_incomplete``: as ``open_dataset``."""
    dataset = open_dataset(url, allow_incomplete=allow_incomplete, **(storage_options or {}))
    config = BenchConfig(
        duration=duration, crops=crops, seed=seed, sample_rate=sample_rate, mono=mono
    )
    streamer = bench_streamer(dataset, config, workers=workers)
    began = time.perf_counter()
    seen = 0
    with streamer:
        for crop in streamer:
            seen += int(crop.audio.shape[-1] > 0)
    seconds = time.perf_counter() - began
    stats = streamer.stats
    return StreamReport(
        crops=seen,
        skipped=dict(stats.skipped),
        seconds=seconds,
        requests=stats.requests,
        bytes_fetched=stats.bytes_read,
    )


def _target(urls: Sequence[str]) -> str:
    """What a report names as its part's dataset: its URLs, credentials stripped."""
    return " -> ".join(safe_url(os.fspath(url)) for url in urls)


def _run(
    job: str,
    part: str,
    urls: Sequence[str],
    storage_options: Mapping[str, Any] | None,
    work: Callable[[PartReport], None],
) -> PartReport:
    """Run one part's ``work``, which fills in the report's counts and
    problems; add the requests and bytes of the stores of ``urls`` over the
    part, and any exception as the part's ``error``."""
    report = PartReport(job=job, part=part, target=_target(urls))
    began = time.perf_counter()
    before: dict[int, tuple[Store, dict[str, Any]]] = {}
    try:
        for url in urls:
            store, _ = open_store(url, storage_options)
            before.setdefault(id(store), (store, store.stats.snapshot()))
        work(report)
    except Exception as exc:
        report.error = describe(exc)
    finally:
        report.seconds = time.perf_counter() - began
    for store, then in before.values():
        now = store.stats.snapshot()
        report.requests += now["requests"] - then["requests"]
        report.bytes_fetched += now["bytes_fetched"] - then["bytes_fetched"]
        report.bytes_stored += now["bytes_stored"] - then["bytes_stored"]
    return report
