"""Build the ``seek_index/`` column directory of a dataset, local or remote.

One index shard per audio shard, same name, same rows in the same order,
columns ``__key__``, ``seek_index`` (``table.INDEX_TYPE``), ``num_bytes``
(the length of the blob each row was built from: ``table.BLOB_BYTES_COLUMN``)
``content_crc`` (CRCs of bytes of that blob every crop reads:
``index.content``), ``span_size`` / ``span_crc`` (CRCs of its whole audio
data, span by span: ``content.span_crcs``) and ``row_crc`` (a CRC of the
row itself: ``table.row_checksum``). Episodes are
read through the dataset's store (memory map, S3, ...); each index shard is
written to a local file and stored whole when complete
(``Store.staged_sync``: renamed into place locally, one PUT on S3), so an
interrupted run leaves either a whole index shard or none, and a rerun redoes
only what is missing. Shards are independent, so they are built in parallel
worker processes (stores pickle by their options; each worker opens its
own connections), and ``select_shards`` lets an outside scheduler split the
work across machines.

Every index is checked before it is stored (``decode.verify``: probe crops
through the index against FFmpeg's decode): the first of the episode's
candidate indexes that passes is stored "verified", and an episode none
passes for is stored "no index" with the first failure's reason, unless
the check failed on a FLAC frame or Ogg page that fails its own CRC: that
candidate is stored "unverified" and the episode reported ``damaged``
(its crops count the damage; the fallback would decode it without a word).
``verify=False`` stores the first candidate "unverified".
``verify_index_shards`` re-checks a dataset's stored indexes and rewrites
their shards with the verdicts.

One bad episode never stops a run: a cell that cannot be read or parsed
becomes a "no index" row with its reason (``formats.extract`` never raises
for the bytes themselves). A shard the dataset leaves out (its audio shard
cannot be opened at all, its ``audio_info/`` twin is missing, unreadable or
has other keys: ``Dataset.shard_problem``) is listed in the report's
``failed`` with the reason, and the other shards are still indexed. Only a
storage failure (``StorageError``: the store is down) stops the run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from ..dataset import INFO_DIR, ROW_UNREADABLE, Dataset, write_manifest
from ..decode.crop import as_packed
from ..decode.verify import Checked, check, choose_index, countable, first_damage
from ..errors import (
    CompressedShardWarning,
    DataError,
    IncompleteDatasetError,
    LayoutError,
    ShardError,
    StreamerError,
)
from ..formats.job import Episode
from ..formats.registry import DEFAULT_DENSITY
from ..index.checks import DISAGREES_WITH_INFO, OLDER_BUILDER, stale_build
from ..index.content import (
    STALE,
    content_crcs,
    damaged_spans,
    matches,
    sampled_spans,
    span_crcs,
    span_size,
)
from ..index.table import (
    BLOB_BYTES_COLUMN,
    CONTENT_COLUMN,
    CONTENT_TYPE,
    INDEX_COLUMN,
    INDEX_DIR,
    INDEX_REVISION,
    INDEX_TYPE,
    OK,
    REVISION_KEY,
    ROW_CRC_COLUMN,
    SPAN_COLUMN,
    SPAN_SIZE_COLUMN,
    IndexReader,
    SeekIndex,
    row_checksum,
    to_struct_array,
)
from ..interrupts import interrupts_held
from ..shard.ipc import KEY_COLUMN, Shard
from ..storage import Store, open_url
from .durations import (
    DURATION,
    corrected,
    header_durations,
    index_durations,
    is_numeric,
    same_durations,
    write_durations,
)

log = logging.getLogger(__name__)

__all__ = [
    "IndexReport",
    "build_index",
    "index_label",
    "index_shard",
    "is_generic",
    "parse_part",
    "parse_shards",
    "select_shards",
    "verify_index_shards",
]

#: The most parts a job may be cut into (``i/n``: ``n``): more than any job
#: runs, few enough for 64-bit counters, and shard names of a pack's
#: partitions (``shard-03of12-000000``) that stay short file names.
MAX_PARTS = 10**18
#: Episodes per record batch of an index shard: bounds the writer's memory.
ROWS_PER_BATCH = 256
SCHEMA = pa.schema(
    [
        (KEY_COLUMN, pa.string()),
        pa.field(INDEX_COLUMN, INDEX_TYPE, nullable=False),
        pa.field(BLOB_BYTES_COLUMN, pa.int64()),
        pa.field(CONTENT_COLUMN, CONTENT_TYPE),
        pa.field(SPAN_SIZE_COLUMN, pa.int64()),
        pa.field(SPAN_COLUMN, CONTENT_TYPE),
        pa.field(ROW_CRC_COLUMN, pa.uint32()),
    ],
    metadata={REVISION_KEY: str(INDEX_REVISION).encode()},
)


@dataclass
class ShardResult:
    """What indexing one shard did."""

    name: str
    episodes: int = 0
    skipped: bool = False  # already indexed, left alone
    failed: str = ""  # why the shard could not be indexed (nothing written)
    reasons: Counter[str] = field(default_factory=Counter)  # "no index" reason -> count
    labels: Counter[str] = field(default_factory=Counter)  # ``index_label`` -> count
    #: Episodes whose check passed only with a larger pre-roll (``Checked.raised``).
    larger_preroll: int = 0
    #: ``audio_info`` durations replaced by the index's: (key, header's, index's).
    durations: list[tuple[str, float, float]] = field(default_factory=list)
    #: Episodes whose audio data is damaged: key -> the damaged ``(offset,
    #: length)`` byte ranges (spans that no longer have their span CRCs,
    #: found by ``verify_index_shards``; or the first frame or page failing
    #: its own CRC, found when an index check failed: ``decode.verify.check``).
    damaged: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    #: Episodes whose FFmpeg decode ends before their blob does (a file cut
    #: short, damage): key -> the index's note (``ENDS_EARLY``).
    ends_early: dict[str, str] = field(default_factory=dict)
    #: Episodes whose ``audio_info`` row contradicts the audio (found by
    #: ``verify_index_shards``): key -> what, and which table is wrong.
    info: dict[str, str] = field(default_factory=dict)

    def count(self, indexes: list[SeekIndex]) -> None:
        self.labels.update(index_label(i) for i in indexes)
        self.reasons.update(countable(i.reason) for i in indexes if i.status != OK)

    def kept(self, key: str, checked: Checked) -> SeekIndex:
        """The index to store from a check's answer, its damage noted."""
        if checked.damage is not None:
            self.damaged[key] = [checked.damage]
        if checked.index.ends_early:
            self.ends_early[key] = checked.index.reason
        self.larger_preroll += checked.raised
        return checked.index


def index_label(index: SeekIndex) -> str:
    """What a stored index is, for counting: "verified", "unverified", or
    "no index". (A stored pre-roll does not tell whether the check raised
    it: a parse may set one, Vorbis's below 20 kHz. ``IndexReport`` counts
    the raised ones as they are checked.)"""
    if not index.ok:
        return "no index"
    return index.verdict


def is_generic(index: SeekIndex) -> bool:
    """Whether an index is FFmpeg's generic packet index (not a native format's)."""
    return index.ok and index.container.startswith("ffmpeg:")


@dataclass
class IndexReport:
    """What a ``build_index`` run did, with counts per "no index" reason, and
    the shards that could not be indexed at all (``failed``: name -> reason)
    and the episodes whose audio data is damaged (``damaged``: shard -> key
    -> byte ranges; ``ShardResult.damaged``). ``episodes``, ``ok`` and the
    counts are of the shards indexed by this run; shards already indexed are
    left as they are, their episodes counted apart (``skipped_episodes``)."""

    root: str
    indexed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    episodes: int = 0
    skipped_episodes: int = 0
    ok: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    labels: Counter[str] = field(default_factory=Counter)
    #: Of the episodes checked by this run, those that passed only with a
    #: larger pre-roll than their format's (``ShardResult.larger_preroll``).
    larger_preroll: int = 0
    durations: list[tuple[str, float, float]] = field(default_factory=list)
    damaged: dict[str, dict[str, list[tuple[int, int]]]] = field(default_factory=dict)
    #: shard -> key -> where FFmpeg's decode ends early (``ShardResult.ends_early``).
    ends_early: dict[str, dict[str, str]] = field(default_factory=dict)
    #: shard -> key -> how its ``audio_info`` row contradicts the audio (``ShardResult.info``).
    info: dict[str, dict[str, str]] = field(default_factory=dict)
    #: A key in the dataset twice, where (``Dataset.check_keys``): the dataset
    #: cannot be sampled or read by key until one is removed. Checked when
    #: the run covers every shard (not by one part of a ``--shards`` job).
    duplicate_key: str | None = None
    #: Shards its pack planned are missing (the one line of
    #: ``IncompleteDatasetError``): the dataset is not served whole, and no
    #: manifest is written over it (one would call it whole). Every run says
    #: so, a part of a job too (``shards``), by the records of its own shards.
    incomplete: str | None = None

    def problems(self) -> dict[str, str]:
        """What needs a person's attention, item -> why (empty when nothing
        does): each shard that could not be indexed, each episode whose audio
        data is damaged, a key the dataset holds twice. ``streamer index``
        and ``streamer pack`` exit 1 when there is any; a job counts them as
        its part's problems."""
        found = {f"shard {name}": why for name, why in self.failed.items()}
        for name, episodes in self.damaged.items():
            for key, spans in episodes.items():
                ranges = ", ".join(f"[{offset}, {offset + length})" for offset, length in spans)
                found[f"shard {name}, key {key!r}"] = f"damaged audio data: bytes {ranges}"
        for name, episodes in self.info.items():
            for key, why in episodes.items():
                found[f"{INFO_DIR}/{name}, key {key!r}"] = why
        if self.duplicate_key:
            found["keys"] = f"the dataset cannot be streamed: {self.duplicate_key}"
        if self.incomplete:
            found["dataset"] = self.incomplete
        return found

    def add(self, result: ShardResult) -> None:
        if result.damaged:
            self.damaged[result.name] = result.damaged
        if result.ends_early:
            self.ends_early[result.name] = result.ends_early
        if result.info:
            self.info[result.name] = result.info
        if result.failed:
            self.failed[result.name] = result.failed
            return
        if result.skipped:
            self.skipped.append(result.name)
            self.skipped_episodes += result.episodes
            return
        self.indexed.append(result.name)
        self.episodes += result.episodes
        self.ok += result.episodes - sum(result.reasons.values())
        self.reasons.update(result.reasons)
        self.labels.update(result.labels)
        self.larger_preroll += result.larger_preroll
        self.durations += result.durations


def parse_part(spec: str, option: str = "--shards") -> tuple[int, int]:
    """``(i, n)`` of an ``i/n`` partition spec (0 <= i < n <= ``MAX_PARTS``),
    as ``--shards`` and ``streamer pack --files`` take it; ``StreamerError``
    naming ``option`` otherwise."""
    part, _, count = spec.partition("/")
    digits = part.isascii() and part.isdigit() and count.isascii() and count.isdigit()
    if not digits or not 0 <= int(part) < int(count):  # isdigit alone takes "²", "٢"
        raise StreamerError(f"{option} {spec!r}: expected i/n with 0 <= i < n")
    if int(count) > MAX_PARTS:
        raise StreamerError(f"{option} {spec!r}: n may be at most 10**18")
    return int(part), int(count)


def parse_shards(spec: str, option: str = "--shards") -> tuple[int, int] | list[str]:
    """What a ``--shards`` value says: an ``i/n`` partition (``parse_part``)
    or the names of a comma list. ``StreamerError`` when it names no shard
    (``""``, ``","``): the one was taken for every shard, the other for none,
    and a script's empty variable went unseen."""
    if "/" in spec and "," not in spec:
        return parse_part(spec, option)
    wanted = [name.strip() for name in spec.split(",") if name.strip()]
    if not wanted:
        raise StreamerError(f"{option} {spec!r}: expected i/n or a comma list of shard names")
    return wanted


def select_shards(names: Sequence[str], spec: str | None) -> list[str]:
    """The shards a ``--shards`` value picks (every one for None): ``i/n``
    (every n-th from the i-th, 0-based, for fanning out over n machines) or
    a comma list of names (``parse_shards``)."""
    if spec is None:
        return list(names)
    wanted = parse_shards(spec)
    if isinstance(wanted, tuple):
        part, count = wanted
        return list(names[part::count])
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise StreamerError(f"--shards: no such shards: {', '.join(unknown)}")
    return wanted


def build_index(
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    shards: str | None = None,
    force: bool = False,
    workers: int = 1,
    density: float = DEFAULT_DENSITY,
    verify: bool = True,
    progress: bool = True,
    manifest: bool = True,
) -> IndexReport:
    """Index the dataset at ``url`` (every shard, or the ``shards`` spec).

    ``url`` is a path or any URL ``open_dataset`` takes, with the same
    ``storage_options``; the store must be writable (not HTTP), which is
    checked before any work. Shards already indexed (same keys as their
    audio shard) are skipped unless ``force``. ``workers`` > 1 builds shards
    in that many processes. ``verify=False`` skips each index's check and
    stores it "unverified". An episode whose check failed on damaged audio
    (a FLAC frame or an Ogg page failing its own CRC) is stored with its
    index "unverified" and reported in ``damaged``. Then, with
    ``manifest``, the dataset manifest is rewritten from a fresh listing
    (``dataset.write_manifest``); with ``shards`` (one part of a job), only
    when that listing finds every audio shard indexed
    (``_write_manifest_when_complete``). The shards of a dataset whose pack
    left planned shards missing are indexed, its manifest is not written,
    and the report says why (``report.incomplete``: a problem), one part of
    a job too, ``manifest`` or not (by the records of its own shards).
    """
    options = {"force": force, "density": density, "verify": verify}
    report = _each_shard(url, storage_options, shards, workers, progress, index_shard, options)
    if manifest and not report.incomplete:
        store, root = open_url(url, **(storage_options or {}))
        if shards is None:
            _write_manifest(store, root, report)
        else:
            _write_manifest_when_complete(store, root, report)
    return report


def _write_manifest(
    store: Store,
    root: str,
    report: IndexReport,
    column_dirs: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """The manifest from a fresh listing (or ``column_dirs``, one just
    made), unless planned shards are missing: then why not, in
    ``report.incomplete`` (a problem: the command exits 1)."""
    try:
        write_manifest(store, root, column_dirs)
    except IncompleteDatasetError as exc:
        report.incomplete = str(exc)


def _write_manifest_when_complete(store: Store, root: str, report: IndexReport) -> None:
    """The manifest after one part of an index job, by the part that finds
    every audio shard indexed when it lists (so at least the last one to
    finish). A part that wrote it from an earlier listing could land after
    another part's, leaving out index shards stored since: the dataset opened
    by it would serve their episodes through the fallback, without a word."""
    listed, missing = unindexed_shards(store, root)
    if missing:
        log.info(
            "%d shards not indexed yet: the dataset manifest is left to the part that "
            "finishes last (or `streamer index URL` once every part is done)",
            len(missing),
        )
        return
    _write_manifest(store, root, report, listed.column_dirs)


def unindexed_shards(store: Store, root: str) -> tuple[Dataset, list[str]]:
    """The dataset at ``root`` from a fresh listing, and its audio shards
    that have no index shard (sorted)."""
    listed = Dataset(root, store=store, manifest=False)
    return listed, sorted(set(listed.listed_shards) - set(listed.column_dirs.get(INDEX_DIR, {})))


def verify_index_shards(
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    shards: str | None = None,
    workers: int = 1,
    progress: bool = True,
) -> IndexReport:
    """Re-check the stored indexes of the dataset at ``url`` (``streamer
    index --verify``): each row the dataset would serve (its open-time
    checks, ``index.checks``, applied) is verified again and stored with its
    verdict, demoted to "no index" when it fails (but for a check failed on
    a FLAC frame or an Ogg page failing its own CRC: kept as it is and
    reported in ``damaged``, ``decode.verify.check``); a row that cannot be
    read or that an older builder stored is built again, as ``build_index``
    would (nothing of it can be trusted); every index shard is rewritten
    whole. A row whose audio data no longer has its span CRCs is
    kept as it is (its crops that read the damage go on failing; demoted,
    the fallback would decode the damaged bytes without a word) and
    reported in ``damaged``; a row without span CRCs gets them, from the
    bytes as they are (a row of another blob in one that hashes to its
    recorded ``sha256`` is built anew: ``_rechecked``). An ``audio_info``
    row that contradicts the blob (``Dataset.info_problem``) or whose
    fields the index disagrees with is not taken at its word: the index is
    checked against the audio alone, and when it passes, kept and the
    ``audio_info`` row reported (``info``) as the table in error. A shard
    without a usable index shard is ``failed``.
    The dataset manifest is rewritten after them, unless shards its pack
    planned are missing (``report.incomplete``)."""
    report = _each_shard(url, storage_options, shards, workers, progress, reverify_shard, {})
    if not report.incomplete:
        _write_manifest(*open_url(url, **(storage_options or {})), report)
    return report


def _each_shard(
    url: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None,
    shards: str | None,
    workers: int,
    progress: bool,
    work: Callable[..., ShardResult],
    options: dict[str, Any],
) -> IndexReport:
    """Run ``work(store, root, name, **options)`` on every selected shard, in
    ``workers`` processes, into one report; with the planned shards missing
    (``report.incomplete``), by the records of the selected shards alone
    (opened to count their rows): a part of a job reads no other footer."""
    store, root = open_url(url, **(storage_options or {}))
    store.check_writable(store.join(root, INDEX_DIR))
    # The shards of an incomplete pack are indexed too: its manifest is refused.
    dataset = Dataset(root, store=store, manifest=False, allow_incomplete=True)
    # Every listed shard, those the dataset leaves out too: they are reported ``failed``.
    names = select_shards(dataset.listed_shards, shards)
    report = IndexReport(root=dataset.url)
    total = sum(_rows(dataset, name) for name in names)
    bar = tqdm(total=total, unit="ep", desc="index", disable=not progress)
    try:
        for result in _run(store, root, names, work, options, workers):
            report.add(result)
            bar.update(result.episodes)
            bar.set_postfix(shards=len(report.indexed), skipped=len(report.skipped))
    finally:
        bar.close()
    incomplete = dataset.incomplete_by_opened()
    if incomplete is not None:
        report.incomplete = incomplete.message(dataset.url)
    if shards is None:
        try:
            dataset.check_keys()
        except LayoutError as exc:
            report.duplicate_key = str(exc)
    return report


def _rows(dataset: Dataset, name: str) -> int:
    """Rows of an audio shard, for the progress bar (0 when it cannot be
    opened: ``index_shard`` reports that)."""
    try:
        return dataset.shard(name).num_rows
    except DataError:
        return 0


def _run(
    store: Store,
    root: str,
    names: list[str],
    work: Callable[..., ShardResult],
    options: dict[str, Any],
    workers: int,
) -> Iterator[ShardResult]:
    if workers <= 1 or len(names) <= 1:
        for name in names:
            yield _quietly(work, store, root, name, **options)
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(names)))
    try:
        futures = [pool.submit(_quietly, work, store, root, name, **options) for name in names]
        for future in as_completed(futures):
            yield future.result()
    except BaseException:
        # Ctrl-C, SIGTERM or a failed shard: the shards being built finish
        # (each lands whole or not at all), the queued ones never start.
        pool.shutdown(cancel_futures=True)
        raise
    pool.shutdown()


def _quietly(
    work: Callable[..., ShardResult], store: Store, root: str, name: str, **options: Any
) -> ShardResult:
    """``work`` on one shard without the compressed-shard warning, which the
    job gave once (``_each_shard`` opens every shard to count its rows);
    each shard's own dataset would give it again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompressedShardWarning)
        return work(store, root, name, **options)


def index_shard(
    store: Store,
    root: str,
    name: str,
    *,
    force: bool = False,
    density: float = DEFAULT_DENSITY,
    verify: bool = True,
) -> ShardResult:
    """Build (or, unless ``force``, keep) the index shard of one audio shard
    of the dataset at ``root`` in ``store``; a shard that cannot be indexed
    (``_served``) comes back ``failed`` with the reason, nothing written."""
    dataset = Dataset(root, store=store, manifest=False)
    served = _served(dataset, name)
    if isinstance(served, str):
        return ShardResult(name=name, failed=served)
    audio, info = served
    final = _index_path(dataset, name)
    result = ShardResult(name=name, episodes=audio.num_rows)
    if not force and _complete(dataset, name, final):
        result.skipped = True
        return result
    found = _write(
        dataset,
        final,
        audio,
        result,
        lambda row: _index_row(audio, dataset, row, density, verify, result),
    )
    if info is not None:
        result.durations = _durations_into_info(dataset, name, audio, info, found)
    return result


def _served(dataset: Dataset, name: str) -> tuple[Shard, pa.Table | None] | str:
    """Shard ``name``'s audio shard and its whole ``audio_info`` table (None
    without one), or why it cannot be indexed: the dataset does not serve
    it (its audio shard or ``audio_info/`` twin cannot be opened, or their
    keys differ: ``Dataset.shard_problem``), or a record batch of its
    ``audio_info`` cannot be read (what opening checks, the footer and the
    keys, can). An index of such a shard would count as done while its
    episodes are left out or fail."""
    problem = dataset.shard_problem(name)
    if problem is not None:
        return problem
    path = dataset.column_dirs.get(INFO_DIR, {}).get(name)
    if path is None:
        return dataset.shard(name), None
    reader = dataset.store.reader(path)
    try:
        info = pa.ipc.open_file(pa.py_buffer(reader.read_sync(0, reader.size_sync()))).read_all()
    except (pa.ArrowException, OSError) as exc:  # zstd that does not decompress, say
        return str(ShardError(f"cannot read: {exc}", shard=dataset.store.display(path)))
    return dataset.shard(name), info


def _durations_into_info(
    dataset: Dataset, name: str, audio: Shard, info: pa.Table, found: list[float | None]
) -> list[tuple[str, float, float]]:
    """``durations.corrected`` for the ``audio_info`` shard of ``name``
    (``info``: one ``pack`` or ``pack --no-index`` wrote, its header's
    durations, or another tool's), rewritten whole (``staged_sync``) where
    the index's (``found``) differ, its duration column then float64
    seconds; the rows where they disagree. Nothing for an ``audio_info``
    without durations for exactly the audio's rows; nothing, with a
    warning, for one whose durations are no numbers (text): left as it is.
    A rewrite that fails raises ``ShardError`` naming the shard (its index
    shard is written by then, and stays)."""
    keys = info.column(KEY_COLUMN).to_pylist() if KEY_COLUMN in info.schema.names else None
    if DURATION not in info.schema.names or keys != audio.keys.to_pylist():
        return []
    path = dataset.column_dirs[INFO_DIR][name]
    column_type = info.schema.field(DURATION).type
    if not is_numeric(column_type):
        log.warning(
            "%s: its duration column is %s, not numbers (seconds): left as it is, "
            "not corrected from the seek index",
            dataset.store.display(path),
            column_type,
        )
        return []
    try:
        durations, changed = corrected(info, found)
        if not same_durations(durations, header_durations(info)):
            if column_type != pa.float64():
                log.info(
                    "%s: its duration column was %s, rewritten as float64 (seconds)",
                    dataset.store.display(path),
                    column_type,
                )
            with dataset.store.staged_sync(path) as temp:
                write_durations(temp, info, durations)
    except (pa.ArrowException, ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ShardError(
            f"cannot rewrite its durations from the seek index: {reason}",
            shard=dataset.store.display(path),
        ) from exc
    return changed


def reverify_shard(store: Store, root: str, name: str) -> ShardResult:
    """Check every stored index of one shard again and rewrite its index
    shard with the verdicts (``verify_index_shards``); a shard that cannot
    be indexed (``_served``) comes back ``failed``, as from ``index_shard``."""
    dataset = Dataset(root, store=store, manifest=False)
    served = _served(dataset, name)
    if isinstance(served, str):
        return ShardResult(name=name, failed=served)
    audio = served[0]
    problem = dataset.index_problem(name)
    if problem is None and name not in dataset.column_dirs.get(INDEX_DIR, {}):
        problem = "not indexed (run `streamer index`)"
    if problem is not None:
        return ShardResult(name=name, failed=problem)
    result = ShardResult(name=name, episodes=audio.num_rows)

    def recheck(row: int) -> SeekIndex:
        key = audio.keys[row].as_py()
        try:
            # audio_info's record of the bytes (num_bytes, sha256) against the blob
            other_bytes = dataset.info_problem(name, row, digest=True)
            episode = dataset.episode_at(name, row, info=other_bytes is None)
            assert episode.index is not None
            wrong = other_bytes
            if wrong is None and episode.index.reason.startswith(DISAGREES_WITH_INFO):
                # one of the two is wrong: the index is checked against the audio alone
                field = episode.index.reason.removeprefix(f"{DISAGREES_WITH_INFO}: ")
                wrong = f"{INFO_DIR}'s {field} disagrees with the seek index"
                episode = dataset.episode_at(name, row, info=False)
                fresh = choose_index(episode.blob, key=key, shard=episode.shard)
                if _stream(fresh.index) != _stream(episode.index):
                    # the builder describes the audio otherwise now (fixed since):
                    # the row is an older builder's, not a sign of audio_info's
                    return result.kept(key, fresh)
        except DataError as exc:  # a cell that cannot be read: "no index", as `index` stores it
            return SeekIndex.unavailable(exc.reason)
        index = _rechecked(episode, result)
        if wrong is not None and index.ok and key not in result.damaged:
            # the blob agrees with its index, checked against the audio: audio_info is wrong
            result.info[key] = (
                f"{wrong}: {INFO_DIR} is wrong (another pack's, or damaged); the seek "
                "index agrees with the audio and is kept"
            )
        elif other_bytes is not None:
            # the blob agrees with neither table: it is what is damaged (the
            # audio shard's row boundaries moved, its bytes overwritten)
            result.damaged.setdefault(key, [(0, episode.blob.length)])
        return index

    _write(dataset, _index_path(dataset, name), audio, result, recheck)
    return result


def _stream(index: SeekIndex) -> tuple[object, ...]:
    """What an index says of the stream, as ``audio_info`` records it too."""
    fields = (index.codec, index.sample_rate, index.channels, index.timescale)
    return (*fields, index.first_sample, index.num_samples)


def _rechecked(episode: Episode, result: ShardResult) -> SeekIndex:
    """The index to store for an episode ``verify_index_shards`` re-checks
    (its damage noted in ``result``). A row whose bytes are not the blob's
    (its content or span CRCs) is built anew when the blob hashes to the
    ``sha256`` recorded for it (``as_packed``: the row is another blob's,
    a ``seek_index/`` shard copied from another pack); without that word
    the row is stored "no index" (``STALE``) or its spans reported damaged:
    written anew from damaged bytes, its CRCs would bless the damage."""
    index, key = episode.index, episode.key
    assert index is not None
    if index.reason.startswith((OLDER_BUILDER, ROW_UNREADABLE)):
        # built anew, as `streamer index` would: nothing of the row can be trusted
        return _rebuilt(episode, result)
    if not index.ok:
        return index
    if not matches(index, episode.blob.read_ranges, sample=False):
        # bytes a checksum of their own fails are damage, not a blob changed
        # since indexing: counted through the index, silent in the fallback
        damage = first_damage(episode)
        if damage is not None:
            return result.kept(key, Checked(index, damage))
        if as_packed(episode):
            return _rebuilt(episode, result)
        # its CRCs are written anew from these bytes: they must be its own
        return SeekIndex.unavailable(STALE, index.container)
    damaged = damaged_spans(index, episode.blob.read_ranges)
    if damaged:
        if as_packed(episode):
            return _rebuilt(episode, result)
        result.damaged[key] = damaged
        return index
    return result.kept(key, check(episode))


def _rebuilt(episode: Episode, result: ShardResult) -> SeekIndex:
    """The episode's index built anew from its blob, as ``streamer index`` does."""
    checked = choose_index(episode.blob, key=episode.key, shard=episode.shard)
    return result.kept(episode.key, checked)


def _write(
    dataset: Dataset,
    path: str,
    audio: Shard,
    result: ShardResult,
    index_of: Callable[[int], SeekIndex],
) -> list[float | None]:
    """Write the index shard at ``path`` whole (``staged_sync``): ``index_of(row)``
    for every row of ``audio`` (a shard of ``dataset``), its blob's length
    and content CRCs, counted in ``result``; each row's duration
    (``durations.index_durations``)."""
    found: list[float | None] = []
    with dataset.store.staged_sync(path) as temp, pa.ipc.new_file(temp, SCHEMA) as writer:
        for start in range(0, audio.num_rows, ROWS_PER_BATCH):
            rows = range(start, min(start + ROWS_PER_BATCH, audio.num_rows))
            indexes = [_held(index_of, row) for row in rows]
            result.count(indexes)
            keys = audio.keys.slice(start, len(rows))
            column = to_struct_array(indexes)
            found += index_durations(column)
            lengths = _blob_lengths(dataset, audio, rows)
            crcs = [_crcs(dataset, audio, row, i) for row, i in zip(rows, indexes, strict=True)]
            checksums = [
                row_checksum(key, _with_crcs(index, *c), length)
                for key, index, c, length in zip(
                    keys.to_pylist(), indexes, crcs, lengths, strict=True
                )
            ]
            columns = [
                keys,
                column,
                pa.array(lengths, pa.int64()),
                pa.array([c[0] for c in crcs], CONTENT_TYPE),
                pa.array([c[1] for c in crcs], pa.int64()),
                pa.array([c[2] for c in crcs], CONTENT_TYPE),
                pa.array(checksums, pa.uint32()),
            ]
            writer.write_batch(pa.record_batch(columns, schema=SCHEMA))
    return found


def _crcs(
    dataset: Dataset, audio: Shard, row: int, index: SeekIndex
) -> tuple[list[int] | None, int | None, list[int] | None]:
    """``content.content_crcs``, ``content.span_size`` and
    ``content.span_crcs`` of an index from its row's blob as it is now (just
    indexed: its bytes are in the page or block cache), None for what it
    does not record. An index re-checked (``verify_index_shards``) keeps
    the span CRCs it has: they are of the bytes it was built from, and
    damage found since must go on failing the crops that read it."""
    if not index.ok:
        return None, None, None
    blob = audio.blob(dataset.audio_column, row)
    content = content_crcs(index, blob.read_ranges).tolist()
    if len(index.span_crc):
        return content, index.span_size, index.span_crc.tolist()
    size = span_size(index)
    if not size:
        return content, None, None
    return content, size, span_crcs(index, size, blob.read_ranges).tolist()


def _with_crcs(
    index: SeekIndex, content: list[int] | None, size: int | None, spans: list[int] | None
) -> SeekIndex:
    """``index`` with its CRC columns, as ``IndexReader`` reads the row back."""
    if not size or not spans:
        size, spans = 0, []
    return dataclasses.replace(
        index,
        content_crc=np.asarray(content or [], dtype=np.uint32),
        span_size=size,
        span_crc=np.asarray(spans, dtype=np.uint32),
    )


def _blob_lengths(dataset: Dataset, audio: Shard, rows: Iterable[int]) -> list[int | None]:
    """The byte lengths of the audio cells of ``rows`` (offsets only, no audio
    read); None for a cell that cannot be read (null: its row is "no index")."""
    return [_blob_length(dataset, audio, row) for row in rows]


def _blob_length(dataset: Dataset, audio: Shard, row: int) -> int | None:
    try:
        return audio.blob(dataset.audio_column, row).length
    except DataError:
        return None


def _held(index_of: Callable[[int], SeekIndex], row: int) -> SeekIndex:
    """``index_of(row)`` with Ctrl-C and SIGTERM held until it returns: the
    index and its check read the episode through PyAV, which would swallow
    the interrupt and leave the episode wrongly "no index"."""
    with interrupts_held():
        return index_of(row)


def _index_path(dataset: Dataset, name: str) -> str:
    """Where the index shard of ``name`` goes: ``seek_index/`` plus the audio shard's file name."""
    audio_path = dataset.column_dirs[dataset.audio_dir][name]
    suffix = os.path.splitext(audio_path)[1]
    return dataset.store.join(dataset.root, INDEX_DIR, name + suffix)


def _index_row(
    audio: Shard, dataset: Dataset, row: int, density: float, verify: bool, result: ShardResult
) -> SeekIndex:
    """One episode's index, checked unless not ``verify`` (damage its check
    found noted in ``result``); a cell that cannot be read is "no index"
    with the reason."""
    try:
        blob = audio.blob(dataset.audio_column, row)
        key = blob.key or ""
        chosen = choose_index(blob, key=key, shard=blob.shard, density=density, verify=verify)
    except DataError as exc:
        return SeekIndex.unavailable(exc.reason)
    return result.kept(key, chosen)


def _complete(dataset: Dataset, name: str, path: str) -> bool:
    """Whether ``path`` is an index shard of this version for exactly the audio shard's rows."""
    if dataset.column_dirs.get(INDEX_DIR, {}).get(name) != path:
        return False
    try:
        existing = dataset.shard(name, INDEX_DIR)  # checks its keys against the audio shard
    except DataError:
        return False
    schema = existing.schema
    if INDEX_COLUMN not in schema.names or schema.field(INDEX_COLUMN).type != INDEX_TYPE:
        return False
    return _built_for_these_blobs(dataset, name, existing)


def _built_for_these_blobs(dataset: Dataset, name: str, index: Shard) -> bool:
    """Whether an index shard's rows were built from the audio shard's blobs
    as they are now, as far as its ``num_bytes`` and ``content_crc`` say (a
    shard without them, written before they existed, is taken at its word):
    an audio shard re-packed since (retagged files, other encodes, blobs
    swapped between keys) is indexed again. The content is looked at in
    its small header ranges and first seek point per row, and a few of its
    spans (``_unchanged``): a rewrite elsewhere only is left to the crops'
    own checks."""
    try:
        reader = IndexReader(index)
    except DataError:
        return False
    audio = dataset.shard(name)
    lengths = _blob_lengths(dataset, audio, range(audio.num_rows))
    if any(reader.built_for(row) not in (None, n) for row, n in enumerate(lengths)):
        return False
    return all(_unchanged(dataset, name, reader, row) for row in range(audio.num_rows))


def _unchanged(dataset: Dataset, name: str, reader: IndexReader, row: int) -> bool:
    """Whether row ``row`` of an index shard is still its blob's: its
    content CRCs sampled (``content.matches``), then a few of its span CRCs
    (``content.sampled_spans``: a PCM episode of other samples behind the
    same header, which nothing else tells), which, failing, say "stale"
    only when the blob hashes to its recorded ``sha256`` (``as_packed``):
    a damaged blob indexed anew would have its damage blessed. A "no
    index" row an older builder stored is built again (once: the shard is
    then this revision's): a revision is raised when the builder changes,
    and it may index what that one could not (a VOB, AC-3 from any point)."""
    try:
        index = reader.read(row)
        if stale_build(index, reader.revision) is not None:
            return False
        if not index.ok:
            return reader.revision >= INDEX_REVISION
        if not len(index.content_crc):
            return True
        blob = dataset.shard(name).blob(dataset.audio_column, row)
        if reader.built_for(row) not in (None, blob.length):
            return False
        if not matches(index, blob.read_ranges, sample=True):
            return False
        if sampled_spans(index, blob.read_ranges):
            return True
        episode = Episode(
            blob.key or "", blob.shard, blob, index, dataset.recorded_sha256(name, row)
        )
        return not as_packed(episode)
    except DataError:
        return False
