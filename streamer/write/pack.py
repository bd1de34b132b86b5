"""``streamer pack``: turn a folder of audio files into a dataset.

Files are keyed by their path relative to the source folder without the
extension (``SRC/a/b.mp3`` -> ``a/b``) and written, unchanged and
uncompressed, into ``audio/`` shards, with a matching ``audio_info/`` shard
per audio shard. Memory is bounded by one record batch (``batch_size``
files): a batch's bytes are read straight into the buffer Arrow writes from.

Every shard file is written under a hidden temporary name and renamed when
complete, ``audio_info/`` before ``audio/``; the dataset's shard list comes
from ``audio/``, so an interrupted run never leaves a half-written shard in
the dataset. The dataset manifest is written last, once every shard is in
place (an interrupted run leaves none: readers list the directories).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from ..dataset.dataset import AUDIO_COLUMN, INFO_DIR, write_manifest
from ..errors import PackError
from ..index.table import INDEX_COLUMN, INDEX_DIR, OK
from ..shard.ipc import KEY_COLUMN, SHARD_SUFFIXES
from ..storage.local import LocalStore
from .index import IndexReport, build_index
from .probe import AudioInfo, ProbeError, probe
from .sidecar import read_sidecar, write_columns

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_SHARD_SIZE", "PackReport", "pack"]

log = logging.getLogger(__name__)

DEFAULT_SHARD_SIZE = 1 << 30
DEFAULT_BATCH_SIZE = 16
SHARD_SUFFIX = ".wsds"
_TEMP_MARK = ".tmp-"

AUDIO_SCHEMA = pa.schema([(KEY_COLUMN, pa.string()), (AUDIO_COLUMN, pa.large_binary())])
INFO_SCHEMA = pa.schema(
    [
        (KEY_COLUMN, pa.string()),
        ("codec", pa.string()),
        ("container", pa.string()),
        ("sample_rate", pa.int32()),
        ("channels", pa.int32()),
        ("duration", pa.float64()),
        ("num_bytes", pa.int64()),
        ("sha256", pa.string()),
        ("source", pa.string()),
    ]
)


@dataclass
class PackReport:
    """What a ``pack`` run did: counts, shard names, and every skipped file's reason."""

    out: str
    files: int = 0
    bytes: int = 0
    shards: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    index: IndexReport | None = None  # the seek_index/ build, unless index=False
    #: (key, header's duration, index's duration) where audio_info took the index's.
    durations: list[tuple[str, float, float]] = field(default_factory=list)
    #: Sidecar paths that matched no packed file (``columns=``).
    unmatched: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Entry:
    key: str
    source: str  # path relative to SRC, with extension
    path: str
    size: int
    info: AudioInfo


def pack(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    strict: bool = False,
    progress: bool = True,
    index: bool = True,
    columns: str | os.PathLike[str] | None = None,
    columns_dir: str = "labels",
) -> PackReport:
    """Pack every audio file under ``src`` into a new dataset at ``out``.

    A file that is not audio (PyAV cannot probe it, no sample rate or
    channels, nothing decodes) is skipped and listed in ``report.skipped``,
    or, with ``strict``, fails the run (``PackError``) and nothing of the run
    is left in ``out``; so does a source with no audio at all. With ``index``
    (the default) the ``seek_index/`` column directory is built once the
    audio shards are in place, and an episode whose index says a duration
    other than its header's gets the index's in ``audio_info`` (a truncated
    file keeps its header's; listed in ``report.durations``, and logged).

    ``columns`` names a sidecar (CSV, or JSON lines) whose ``path`` column
    lists source files by their path under ``src``; its other columns are
    written to the ``columns_dir`` column directory (``sidecar.py``), and
    its paths that match no packed file are listed in ``report.unmatched``.
    """
    src, out = os.fspath(src), os.fspath(out)
    if not os.path.isdir(src):
        raise PackError(f"source folder {src!r} does not exist")
    sidecar = read_sidecar(columns) if columns is not None else None
    _check_output(out)
    candidates = sorted(_walk(src))
    if not candidates:
        raise PackError(f"source folder {src!r} holds no files: nothing to pack")
    created = _create_output(out)
    report = PackReport(out=out)
    total = sum(size for _, _, size in candidates)
    seen: dict[str, str] = {}
    writer = _ShardWriter(out, batch_size=batch_size, shard_size=shard_size, report=report)
    bar = tqdm(
        total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="pack", disable=not progress
    )
    writer.on_batch = lambda files, nbytes: (
        bar.update(nbytes),
        bar.set_postfix(files=report.files, skipped=len(report.skipped)),
    )
    discard = False  # a refused run leaves nothing; an interrupted one its whole shards
    try:
        for source, path, size in candidates:
            entry, reason = _entry(source, path, size, seen)
            if entry is None:
                if strict:
                    discard = True
                    raise PackError(f"{source}: {reason}")
                report.skipped.append((source, reason))
                bar.update(size)
                continue
            seen[entry.key] = source
            writer.add(entry)
        writer.finish()
        if not report.shards:
            discard = True
            first = report.skipped[0]
            raise PackError(
                f"none of the {len(candidates)} files under {src!r} is audio "
                f"(e.g. {first[0]}: {first[1]})"
            )
    except BaseException:
        writer.abort()
        if discard:
            _discard(out, report.shards, created)
        raise
    finally:
        bar.close()
    if index:
        report.index = build_index(out, progress=progress, manifest=False)
        report.durations = _durations_from_index(out, report.shards)
    if sidecar is not None:
        report.unmatched = write_columns(out, report.shards, sidecar, columns_dir, SHARD_SUFFIX)
    write_manifest(LocalStore(), out)  # last: every shard is in place
    return report


def _entry(source: str, path: str, size: int, seen: dict[str, str]) -> tuple[_Entry | None, str]:
    key = os.path.splitext(source)[0].replace(os.sep, "/")
    if key in seen:
        return None, f"key {key!r} is already taken by {seen[key]}"
    try:
        info = probe(path)
    except ProbeError as exc:
        return None, str(exc)
    return _Entry(key=key, source=source, path=path, size=size, info=info), ""


def _walk(src: str) -> Iterator[tuple[str, str, int]]:
    """(relative path, path, size) of every visible regular file under ``src``."""
    for folder, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            path = os.path.join(folder, name)
            if name.startswith(".") or not os.path.isfile(path):
                continue
            yield os.path.relpath(path, src), path, os.path.getsize(path)


def _check_output(out: str) -> None:
    """Refuse to mix with an existing dataset; clear temp files of a killed run."""
    _remove_temp_files(out)
    for column_dir in (AUDIO_COLUMN, INFO_DIR):
        folder = os.path.join(out, column_dir)
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name.endswith(SHARD_SUFFIXES):
                raise PackError(
                    f"{out!r} already holds a dataset ({column_dir}/{name}); pick a new OUT"
                )


def _create_output(out: str) -> list[str]:
    """Create ``out`` and its column directories; returns the folders it created."""
    missing = []  # out and its missing parents, top first
    folder = os.path.abspath(out)
    while not os.path.exists(folder) and folder != os.path.dirname(folder):
        missing.insert(0, folder)
        folder = os.path.dirname(folder)
    created: list[str] = []
    for folder in [*missing, os.path.join(out, AUDIO_COLUMN), os.path.join(out, INFO_DIR)]:
        if os.path.isdir(folder):
            continue
        try:
            os.mkdir(folder)
        except OSError as exc:
            _discard(out, [], created)
            raise PackError(f"cannot create {folder!r}: {exc.strerror}") from exc
        created.append(folder)
    return created


def _discard(out: str, shards: list[str], created: list[str]) -> None:
    """Remove what a failed run wrote: its shards, then the folders it made."""
    for name in shards:
        for column_dir in (AUDIO_COLUMN, INFO_DIR):
            path = os.path.join(out, column_dir, name + SHARD_SUFFIX)
            if os.path.exists(path):
                os.remove(path)
    for folder in reversed(created):
        with contextlib.suppress(OSError):  # not empty: someone else's files
            os.rmdir(folder)


def _remove_temp_files(out: str) -> None:
    """Delete the hidden shards-in-progress that ``pack`` writes before renaming."""
    for column_dir in (AUDIO_COLUMN, INFO_DIR):
        folder = os.path.join(out, column_dir)
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name.startswith(".") and _TEMP_MARK in name:
                os.remove(os.path.join(folder, name))


class _ShardWriter:
    """Writes batches of entries into paired ``audio/`` + ``audio_info/`` shards."""

    def __init__(self, out: str, *, batch_size: int, shard_size: int, report: PackReport) -> None:
        if batch_size < 1 or shard_size < 1:
            raise PackError("batch_size and shard_size must be positive")
        self.out = out
        self.batch_size = batch_size
        self.shard_size = shard_size
        self.report = report
        self.on_batch = lambda files, nbytes: None
        self._pending: list[_Entry] = []
        self._open: list[tuple[pa.ipc.RecordBatchFileWriter, str, str]] = []
        self._shard_bytes = 0

    def add(self, entry: _Entry) -> None:
        self._pending.append(entry)
        if len(self._pending) >= self.batch_size:
            self._write_batch()

    def finish(self) -> None:
        self._write_batch()
        self._close_shard()

    def abort(self) -> None:
        """Close and delete the shard being written; finished shards stay.

        Deletes every temporary file in the column directories rather than
        the ones on record, so a signal that lands between creating a file
        and recording it leaves nothing behind either.
        """
        for writer, _, _ in self._open:
            writer.close()
        self._open = []
        _remove_temp_files(self.out)

    def _write_batch(self) -> None:
        if not self._pending:
            return
        if not self._open:
            self._open_shard()
        entries, self._pending = self._pending, []
        offsets = np.zeros(len(entries) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([e.size for e in entries])
        values = np.empty(int(offsets[-1]), dtype=np.uint8)
        digests = [
            _read_into(e, values[offsets[i] : offsets[i + 1]]) for i, e in enumerate(entries)
        ]
        keys = pa.array([e.key for e in entries], pa.string())
        audio = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(entries), [None, pa.py_buffer(offsets), pa.py_buffer(values)]
        )
        info = _info_batch(keys, entries, digests)
        (audio_writer, _, _), (info_writer, _, _) = self._open
        info_writer.write_batch(info)
        audio_writer.write_batch(pa.record_batch([keys, audio], schema=AUDIO_SCHEMA))
        self.report.files += len(entries)
        self.report.bytes += int(offsets[-1])
        self._shard_bytes += int(offsets[-1])
        self.on_batch(len(entries), int(offsets[-1]))
        if self._shard_bytes >= self.shard_size:
            self._close_shard()

    def _open_shard(self) -> None:
        name = f"shard-{len(self.report.shards):06d}"
        metadata = {"batch_size": str(self.batch_size)}
        options = pa.ipc.IpcWriteOptions(compression=None)
        for column_dir, schema in ((AUDIO_COLUMN, AUDIO_SCHEMA), (INFO_DIR, INFO_SCHEMA)):
            final = os.path.join(self.out, column_dir, name + SHARD_SUFFIX)
            temp = os.path.join(
                self.out, column_dir, f".{name}{SHARD_SUFFIX}{_TEMP_MARK}{uuid.uuid4().hex[:8]}"
            )
            writer = pa.ipc.new_file(temp, schema.with_metadata(metadata), options=options)
            self._open.append((writer, temp, final))
        self._shard_bytes = 0

    def _close_shard(self) -> None:
        if not self._open:
            return
        for writer, _, _ in self._open:
            writer.close()
        # audio_info first: a shard is part of the dataset once audio/ has it.
        for _, temp, final in reversed(self._open):
            os.replace(temp, final)
        self.report.shards.append(os.path.basename(self._open[0][2])[: -len(SHARD_SUFFIX)])
        self._open = []


def _read_into(entry: _Entry, target: np.ndarray) -> str:
    """Read a file into its slot of the batch buffer; returns its sha256."""
    with open(entry.path, "rb") as file:
        got = file.readinto(memoryview(target))
        if got != entry.size or file.read(1):
            raise PackError(f"{entry.source}: file changed size while packing")
    return hashlib.sha256(memoryview(target)).hexdigest()


def _info_batch(keys: pa.Array, entries: list[_Entry], digests: list[str]) -> pa.RecordBatch:
    columns = {
        "codec": [e.info.codec for e in entries],
        "container": [e.info.container for e in entries],
        "sample_rate": [e.info.sample_rate for e in entries],
        "channels": [e.info.channels for e in entries],
        "duration": [e.info.duration for e in entries],
        "num_bytes": [e.size for e in entries],
        "sha256": digests,
        "source": [e.source.replace(os.sep, "/") for e in entries],
    }
    arrays = [keys] + [
        pa.array(values, INFO_SCHEMA.field(name).type) for name, values in columns.items()
    ]
    return pa.record_batch(arrays, schema=INFO_SCHEMA)


def _durations_from_index(out: str, shards: list[str]) -> list[tuple[str, float, float]]:
    """Put the seek index's duration into ``audio_info`` where the header's
    disagrees (by over 1 % and 0.1 s: a header's estimate is not exact), and
    return those (key, header's, index's). A truncated mp3 keeps the header's
    duration of the whole file; its index counts the frames that are there."""
    changed: list[tuple[str, float, float]] = []
    for name in shards:
        info_path = os.path.join(out, INFO_DIR, name + SHARD_SUFFIX)
        index_path = os.path.join(out, INDEX_DIR, name + SHARD_SUFFIX)
        if not os.path.exists(index_path):
            continue
        index = _read(index_path).column(INDEX_COLUMN).combine_chunks()
        found = _index_durations(index)
        info = _read(info_path)
        durations = info.column("duration").to_pylist()
        keys = info.column(KEY_COLUMN).to_pylist()
        rows = [
            row
            for row, seconds in enumerate(found)
            if seconds is not None
            and not math.isclose(durations[row], seconds, rel_tol=0.01, abs_tol=0.1)
        ]
        for row in rows:
            log.warning(
                "%s: the header says %.1f s, the seek index %.1f s; audio_info keeps the index's",
                keys[row],
                durations[row],
                found[row],
            )
            changed.append((keys[row], durations[row], found[row]))
            durations[row] = found[row]
        if rows:
            _rewrite_durations(info_path, info, durations)
    return changed


def _read(path: str) -> pa.Table:
    """A whole (small) shard in memory, batches as written."""
    with open(path, "rb") as file:
        reader = pa.ipc.open_file(pa.py_buffer(file.read()))
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        return pa.Table.from_batches(batches, reader.schema)


def _index_durations(index: pa.StructArray) -> list[float | None]:
    """Each row's gapless duration from its seek index (None: no index or unknown)."""
    status = index.field("status").to_pylist()
    samples = index.field("num_samples").to_pylist()
    scale = index.field("timescale").to_pylist()
    return [
        n / t if s == OK and n >= 0 and t > 0 else None
        for s, n, t in zip(status, samples, scale, strict=True)
    ]


def _rewrite_durations(path: str, info: pa.Table, durations: list[float]) -> None:
    """Write an ``audio_info`` shard again with new durations, batch for batch
    (same sizes, same metadata), under a temporary name renamed into place."""
    schema, batches = info.schema, info.to_batches()
    column = schema.get_field_index("duration")
    temp = f"{os.path.dirname(path)}/.{os.path.basename(path)}{_TEMP_MARK}{uuid.uuid4().hex[:8]}"
    options = pa.ipc.IpcWriteOptions(compression=None)
    start = 0
    with pa.ipc.new_file(temp, schema, options=options) as writer:
        for batch in batches:
            values = pa.array(durations[start : start + batch.num_rows], pa.float64())
            writer.write_batch(batch.set_column(column, schema.field(column), values))
            start += batch.num_rows
    os.replace(temp, path)
