"""Build the ``seek_index/`` column directory of a dataset.

One index shard per audio shard, same name, same rows in the same order,
columns ``__key__`` and ``seek_index`` (``table.INDEX_TYPE``). Each shard is
written under a hidden temporary name and renamed into place when complete
(the pattern ``streamer pack`` uses), so an interrupted run leaves either a
whole index shard or none, and a rerun redoes only what is missing. Shards
are independent, so they are built in parallel worker processes, and
``select_shards`` lets an outside scheduler split the work across machines.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

import pyarrow as pa
from tqdm import tqdm

from ..errors import DataError, StreamerError
from ..shard.dataset import Dataset
from ..shard.ipc import KEY_COLUMN, Shard
from .extract import DEFAULT_DENSITY, extract
from .table import INDEX_COLUMN, INDEX_DIR, INDEX_TYPE, OK, SeekIndex, to_struct_array

__all__ = ["IndexReport", "build_index", "index_shard", "select_shards"]

#: Episodes per record batch of an index shard: bounds the writer's memory.
ROWS_PER_BATCH = 256
_TEMP_MARK = ".tmp-"
SCHEMA = pa.schema([(KEY_COLUMN, pa.string()), pa.field(INDEX_COLUMN, INDEX_TYPE, nullable=False)])


@dataclass
class ShardResult:
    """What indexing one shard did."""

    name: str
    episodes: int = 0
    skipped: bool = False  # already indexed, left alone
    reasons: Counter[str] = field(default_factory=Counter)  # "no index" reason -> count


@dataclass
class IndexReport:
    """What a ``build_index`` run did, with counts per "no index" reason."""

    root: str
    indexed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    episodes: int = 0
    ok: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, result: ShardResult) -> None:
        (self.skipped if result.skipped else self.indexed).append(result.name)
        self.episodes += result.episodes
        self.ok += result.episodes - sum(result.reasons.values())
        self.reasons.update(result.reasons)


def select_shards(names: Sequence[str], spec: str | None) -> list[str]:
    """The shards a ``--shards`` value picks: ``i/n`` (every n-th from the
    i-th, 0-based, for fanning out over n machines) or a comma list of names."""
    if not spec:
        return list(names)
    if "/" in spec and "," not in spec:
        part, _, count = spec.partition("/")
        if not (part.isdigit() and count.isdigit()) or not 0 <= int(part) < int(count):
            raise StreamerError(f"--shards {spec!r}: expected i/n with 0 <= i < n")
        return list(names[int(part) :: int(count)])
    wanted = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise StreamerError(f"--shards: no such shards: {', '.join(unknown)}")
    return wanted


def build_index(
    root: str | os.PathLike[str],
    *,
    shards: str | None = None,
    force: bool = False,
    workers: int = 1,
    density: float = DEFAULT_DENSITY,
    progress: bool = True,
) -> IndexReport:
    """Index the dataset at ``root`` (every shard, or the ``shards`` spec).

    Shards already indexed (same keys as their audio shard) are skipped
    unless ``force``. ``workers`` > 1 builds shards in that many processes.
    """
    root = os.fspath(root)
    dataset = Dataset(root)
    names = select_shards(dataset.shard_names, shards)
    os.makedirs(os.path.join(root, INDEX_DIR), exist_ok=True)
    report = IndexReport(root=root)
    total = sum(dataset.shard(name).num_rows for name in names)
    bar = tqdm(total=total, unit="ep", desc="index", disable=not progress)
    try:
        for result in _run(root, names, force=force, workers=workers, density=density):
            report.add(result)
            bar.update(result.episodes)
            bar.set_postfix(shards=len(report.indexed), skipped=len(report.skipped))
    finally:
        bar.close()
    return report


def _run(
    root: str, names: list[str], *, force: bool, workers: int, density: float
) -> Iterator[ShardResult]:
    if workers <= 1 or len(names) <= 1:
        for name in names:
            yield index_shard(root, name, force=force, density=density)
        return
    with ProcessPoolExecutor(max_workers=min(workers, len(names))) as pool:
        futures = [
            pool.submit(index_shard, root, name, force=force, density=density) for name in names
        ]
        for future in as_completed(futures):
            yield future.result()


def index_shard(
    root: str, name: str, *, force: bool = False, density: float = DEFAULT_DENSITY
) -> ShardResult:
    """Build (or, unless ``force``, keep) the index shard of one audio shard."""
    dataset = Dataset(root)
    audio = dataset.shard(name)
    suffix = audio.path[len(os.path.splitext(audio.path)[0]) :]
    final = os.path.join(root, INDEX_DIR, name + suffix)
    result = ShardResult(name=name, episodes=audio.num_rows)
    if not force and _complete(final, audio):
        result.skipped = True
        return result
    temp = os.path.join(root, INDEX_DIR, f".{name}{suffix}{_TEMP_MARK}{uuid.uuid4().hex[:8]}")
    try:
        with pa.ipc.new_file(temp, SCHEMA) as writer:
            for start in range(0, audio.num_rows, ROWS_PER_BATCH):
                rows = range(start, min(start + ROWS_PER_BATCH, audio.num_rows))
                indexes = [_index_row(audio, dataset.audio_column, row, density) for row in rows]
                result.reasons.update(i.reason for i in indexes if i.status != OK)
                keys = audio.keys.slice(start, len(rows))
                writer.write_batch(pa.record_batch([keys, to_struct_array(indexes)], schema=SCHEMA))
        os.replace(temp, final)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
    return result


def _index_row(audio: Shard, column: str, row: int, density: float) -> SeekIndex:
    try:
        return extract(audio.blob(column, row), density=density)
    except DataError as exc:
        return SeekIndex.unavailable(exc.reason)


def _complete(path: str, audio: Shard) -> bool:
    """Whether ``path`` is an index shard of this version for exactly these rows."""
    if not os.path.exists(path):
        return False
    try:
        existing = Shard(path, column_dir=INDEX_DIR)
    except DataError:
        return False
    column = existing.schema.field(INDEX_COLUMN) if INDEX_COLUMN in existing.schema.names else None
    return column is not None and column.type == INDEX_TYPE and existing.keys.equals(audio.keys)
