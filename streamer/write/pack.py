"""``streamer pack``: turn audio files into a dataset, locally or in a store.

SRC is a local folder, a store prefix or a list file of URLs
(``sources.py``); OUT a local folder or a store prefix (``s3://``,
``b2://``). Files are keyed by their path relative to SRC without the
extension (``SRC/a/b.mp3`` -> ``a/b``) and written, unchanged and
uncompressed, into ``audio/`` shards, each with its ``audio_info/`` and
(with ``index``) ``seek_index/`` twins. Memory is bounded by one record
batch (``batch_size`` files): a batch's bytes are read straight into the
buffer Arrow writes from, and probed there.

Which files go into which shard is planned from the listing alone
(``plan.py``), so a pack fans out over processes or machines with
``shards="i/n"`` or ``files="i/n"``, each run doing its part of one plan.

Crash safety: a shard is built whole in a local staging folder (audio,
audio_info, then its seek index), then stored ``audio_info/`` first and
``audio/`` last, each object atomically (a rename locally; one PUT or a
multipart upload completed at once on S3). The dataset's shards are those
of ``audio/``, so a killed run leaves whole shards and no part of one, and
a re-run skips every shard already complete (its audio shard carries the
plan's fingerprint of its SRC and files). Two runs given one partition
write the same bytes (nothing in a shard depends on time or the writer),
so the last writer wins harmlessly. The dataset manifest is written last,
by the run that finds every planned shard of every partition complete
after its own. Every shard records the plan's shard names
(``dataset.planned``), so a dataset some part of the plan never reached
does not open as if whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from ..dataset.dataset import AUDIO_COLUMN, INFO_DIR, write_manifest
from ..dataset.planned import PLANNED_KEY
from ..errors import PackError, ShardError, StorageError
from ..index.table import INDEX_DIR
from ..interrupts import interrupts_held
from ..shard.footer import read_layout
from ..shard.ipc import KEY_COLUMN, SHARD_SUFFIXES
from ..storage import LocalStore, MissingBucket, NotFound, Store
from .index import IndexReport, index_shard
from .plan import Plan, PlannedShard, make_plan, source_origin, taken
from .probe import AudioInfo, MemoryFile, ProbeError, probe
from .sidecar import read_sidecar, write_columns
from .sources import (
    SourceFile,
    UnreadableSource,
    is_remote_url,
    list_sources,
    open_store,
    read_into,
    shown,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_SHARD_SIZE",
    "PLAN_KEY",
    "PackReport",
    "check_out_is_not_src",
    "pack",
]

log = logging.getLogger(__name__)

DEFAULT_SHARD_SIZE = 1 << 30
DEFAULT_BATCH_SIZE = 16
SHARD_SUFFIX = ".wsds"
#: Schema metadata of a packed shard: its planned files' fingerprint (``plan.py``).
PLAN_KEY = "streamer.pack.plan"
#: The reason a hidden file or folder of SRC is not packed.
HIDDEN = "hidden: its name starts with '.'"
#: Local staging folders of runs in progress: ``<host>-<pid>-<random>`` each.
STAGING_DIR = ".streamer-pack"

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
    #: Shards this run wrote.
    shards: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    index: IndexReport | None = None  # the seek_index/ build, unless index=False
    #: (key, header's duration, index's duration) where audio_info took the index's.
    durations: list[tuple[str, float, float]] = field(default_factory=list)
    #: Sidecar paths that matched no packed file (``columns=``).
    unmatched: list[str] = field(default_factory=list)
    #: This run's part of the plan: its shards' names.
    planned: list[str] = field(default_factory=list)
    #: Shards of this run's part found complete in OUT (an earlier or a
    #: concurrent run wrote them) and left as they are.
    already_complete: list[str] = field(default_factory=list)
    #: Whether this run wrote the dataset manifest: it does when every shard
    #: of the plan, of every partition, is complete after its own work.
    manifest_written: bool = False


@dataclass(frozen=True)
class _Entry:
    """A packed file: where it came from, and what the probe said."""

    file: SourceFile
    info: AudioInfo
    digest: str

    @property
    def key(self) -> str:
        return self.file.key


def pack(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    shards: str | None = None,
    files: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    strict: bool = False,
    progress: bool = True,
    index: bool = True,
    columns: str | os.PathLike[str] | None = None,
    columns_dir: str = "labels",
) -> PackReport:
    """Pack every audio file of ``src`` into the dataset at ``out``.

    ``src``: a local folder, a store prefix (``s3://bucket/raw``, ``b2://``,
    any fsspec URL) or the path of a list file of URLs; ``out``: a local
    folder or a store prefix. ``storage_options`` configure whichever of
    them is remote (``endpoint_url``, credentials, ...; as ``open_dataset``).

    ``shards="i/n"`` packs only the plan's shards ``j % n == i``;
    ``files="i/n"`` only the files ``j % n == i``, into shards named by
    the partition. Run every ``i`` of one ``n`` (anywhere, in any order,
    again after a crash): together they pack every file once, and the
    last to finish writes the manifest. Shards already complete in
    ``out`` are skipped (``report.already_complete``); a shard in ``out``
    that is not of this plan (another source, files rewritten since, another
    shard size or batch size) refuses the run.

    A local ``out`` inside ``src`` is not packed (a re-run would take its
    shards for sources); ``out`` may not be ``src`` itself.

    A file that is not audio (PyAV cannot probe it, no sample rate or
    channels, its first audio stream holds no packet) or that cannot be read, and one whose key
    another file has (``plan.py``), is skipped and listed in ``report.skipped``,
    or, with ``strict``, fails the run (``PackError``); so does a whole run
    with no audio at all, and then nothing of the run is left in a local
    ``out``. A key whose first file is skipped goes to the next of its
    files (a corrupt ``a.flac`` beside ``a.mp3``: ``a.mp3``). With
    ``index`` (the default) each shard's ``seek_index/`` is built before
    it is stored, and an episode whose index says a duration
    other than its header's gets the index's in ``audio_info`` (a truncated
    file keeps its header's; listed in ``report.durations``, and logged).

    ``columns`` names a sidecar (CSV, or JSON lines) whose ``path`` column
    lists source files by their path under ``src``; its other columns are
    written to the ``columns_dir`` column directory (``sidecar.py``), and
    its paths that match no packed file are listed in ``report.unmatched``.
    Sidecars need a whole run into a local ``out``.
    """
    src, out = os.fspath(src), os.fspath(out)
    if shards and files:
        raise PackError("partition by shards or by files, not both")
    if batch_size < 1 or shard_size < 1:
        raise PackError("batch_size and shard_size must be positive")
    if "://" not in src and not os.path.exists(src):
        raise PackError(f"source folder {src!r} does not exist")
    store, root = open_store(out, storage_options)
    local = isinstance(store, LocalStore)
    if columns is not None and (shards or files or not local):
        raise PackError("columns= needs a whole run (no shards= or files=) into a local OUT")
    sidecar = read_sidecar(columns) if columns is not None else None
    store.check_writable(root)
    check_out_is_not_src(src, out)
    hidden: list[str] = []
    listing = list_sources(src, storage_options, leave_out=root if local else None, hidden=hidden)
    if not listing:
        what = "source" if "://" in src or os.path.isfile(src) else "source folder"
        raise PackError(f"{what} {shown(src)} holds no files: nothing to pack")
    plan = make_plan(
        listing,
        shard_size=shard_size,
        batch_size=batch_size,
        shards=shards,
        by_files=files,
        origin=source_origin(src, listing, storage_options),
    )
    existing = _listing(store, root)
    _check_output(store, root, plan, existing)
    report = PackReport(out=store.display(root), planned=[s.name for s in plan.mine])
    if index:
        report.index = IndexReport(root=report.out)
    if plan.reports:  # ignored by design, even with strict: listed, so nothing goes unsaid
        report.skipped += [(name, HIDDEN) for name in hidden]
    if strict and plan.duplicates:  # else each is reported as its key is packed
        source, reason = plan.duplicates[0]
        raise PackError(f"{source}: {reason}")
    todo = _finish_stored(store, root, plan, existing, report)
    created = _create_output(root) if local else []
    bar = tqdm(
        total=sum(s.bytes for s in todo),
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc="pack",
        disable=not progress,
    )
    writer = _ShardWriter(
        store, root, batch_size=batch_size, strict=strict, report=report, record=plan.record
    )
    writer.on_batch = lambda nbytes: (
        bar.update(nbytes),
        bar.set_postfix(files=report.files, skipped=len(report.skipped)),
    )
    discard = False  # a refused run leaves nothing (locally); an interrupted one its whole shards
    try:
        with _staging(store, root) as staging:
            for planned in todo:
                writer.write(planned, staging)
        whole_run = not shards and not files and len(todo) == len(plan.mine)
        if whole_run and report.files == 0:  # and nothing of the plan was there before
            discard = True
            first = next(s for s in report.skipped if s[1] != HIDDEN)
            raise PackError(
                f"none of the {len(listing)} files under {src!r} is audio "
                f"(e.g. {first[0]}: {first[1]})"
            )
    except PackError:
        discard = discard or strict
        raise
    finally:
        bar.close()
        if discard and local:
            _discard(root, report.shards, created)
    if sidecar is not None:
        names = [s.name for s in plan.every]
        report.unmatched = write_columns(root, names, sidecar, columns_dir, SHARD_SUFFIX)
    if _complete(store, root, plan, index):
        write_manifest(store, root)  # last: every shard of the plan is in place
        report.manifest_written = True
    return report


def check_out_is_not_src(src: str, out: str) -> None:
    """``PackError`` when ``out`` is the local folder ``src`` itself (paths or
    ``file://`` URLs): a re-run would take its shards for sources. An ``out``
    inside ``src`` is left out of the walk instead. The command line checks
    this before anything else, as a usage error."""
    paths = [open_store(url, None)[1] for url in (src, out) if not is_remote_url(url)]
    if len(paths) == 2 and os.path.realpath(paths[0]) == os.path.realpath(paths[1]):
        raise PackError(f"OUT {out!r} is SRC: pick another OUT (a new folder, in SRC or not)")


def _listing(store: Store, root: str) -> dict[str, dict[str, str]]:
    """``{column_dir: {shard name: file name}}`` of the packed column directories in ``out``."""
    found: dict[str, dict[str, str]] = {}
    for column_dir in (AUDIO_COLUMN, INFO_DIR, INDEX_DIR):
        try:
            entries = store.list_sync(store.join(root, column_dir))
        except StorageError as exc:
            folder_missing = isinstance(exc, NotFound) and not isinstance(exc, MissingBucket)
            if store.is_remote and not folder_missing:  # FTP/SFTP folders may be; a bucket not
                raise PackError(f"cannot use {store.display(root)} as OUT: {exc}") from None
            entries = []  # no such folder (yet)
        found[column_dir] = {
            _strip_suffix(e.name): e.name
            for e in entries
            if not e.is_dir and not e.name.startswith(".") and e.name.endswith(SHARD_SUFFIXES)
        }
    return found


def _strip_suffix(name: str) -> str:
    return next(name[: -len(s)] for s in SHARD_SUFFIXES if name.endswith(s))


def _check_output(store: Store, root: str, plan: Plan, existing: dict[str, dict[str, str]]) -> None:
    """Refuse to mix with a dataset that is not of this plan: a shard of
    another name, or of this run's part with another fingerprint (another
    source, files rewritten since, another shard size or batch size)."""
    planned = {s.name for s in plan.every}
    mine = {s.name: s for s in plan.mine}
    out = store.display(root)
    for column_dir in (AUDIO_COLUMN, INFO_DIR):
        for name, file in sorted(existing[column_dir].items()):
            ours = name in planned
            if ours and column_dir == AUDIO_COLUMN and name in mine:
                ours = mine[name].packed_by(_fingerprint(store, root, file))
            if not ours:
                raise PackError(
                    f"{out!r} already holds a dataset ({column_dir}/{file}); pick a new OUT"
                )


def _fingerprint(store: Store, root: str, file: str) -> str | None:
    """The plan fingerprint an audio shard carries (None: none, or unreadable)."""
    path = store.join(root, AUDIO_COLUMN, file)
    try:
        layout, _ = read_layout(store.reader(path), store.display(path))
    except ShardError:
        return None
    metadata = layout.schema.metadata or {}
    value = metadata.get(PLAN_KEY.encode())
    return value.decode(errors="replace") if value is not None else None


def _finish_stored(
    store: Store, root: str, plan: Plan, existing: dict[str, dict[str, str]], report: PackReport
) -> list[PlannedShard]:
    """The shards of this run's part still to build. Those already stored
    are left as they are (``already_complete``), or indexed in place when
    stored without their seek index (a run without ``index``). Objects are
    stored whole and ``audio/`` last: an audio shard of this plan (its
    fingerprint checked) with its ``audio_info/`` twin is complete."""
    todo = []
    for planned in plan.mine:
        if planned.name not in existing[AUDIO_COLUMN] or planned.name not in existing[INFO_DIR]:
            todo.append(planned)
        elif report.index is not None and planned.name not in existing[INDEX_DIR]:
            report.index.add(index_shard(store, root, planned.name))
        else:
            report.already_complete.append(planned.name)
    return todo


def _complete(store: Store, root: str, plan: Plan, index: bool) -> bool:
    """Whether every shard of the plan (every partition's) is in ``out`` now."""
    listed = _listing(store, root)
    needed = (AUDIO_COLUMN, INFO_DIR, INDEX_DIR) if index else (AUDIO_COLUMN, INFO_DIR)
    if not all(s.name in listed[d] for s in plan.every for d in needed):
        return False
    # Every name is there; a shard of another partition carries the files its
    # own run listed, which differ from this plan's when SRC changed between
    # the runs (a file added mid-job lands in a partition already packed, one
    # rewritten has another mtime) or when that run packed another SRC.
    mine = {s.name for s in plan.mine}
    for planned in plan.every:
        file = listed[AUDIO_COLUMN][planned.name]
        if planned.name not in mine and not planned.packed_by(_fingerprint(store, root, file)):
            raise PackError(
                f"{store.display(root)!r}: {AUDIO_COLUMN}/{file} was packed from another "
                "source or another listing of it (files added, removed or changed during "
                "the job); manifest not written: pack every part again into a new OUT"
            )
    return True


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
        for column_dir in (AUDIO_COLUMN, INFO_DIR, INDEX_DIR):
            path = os.path.join(out, column_dir, name + SHARD_SUFFIX)
            if os.path.exists(path):
                os.remove(path)
    for folder in reversed([*created, os.path.join(out, INDEX_DIR)]):
        with contextlib.suppress(OSError):  # not empty: someone else's files
            os.rmdir(folder)


#: Staging folders of this process's runs in progress (``_staging``).
_held: set[str] = set()


@contextlib.contextmanager
def _staging(store: Store, root: str) -> Iterator[str]:
    """This run's staging folder, removed at the end: inside a local ``out``
    (so storing a shard is a rename), else in the system's temporary folder.
    Folders of runs on this host that died (SIGKILL) are removed first: those
    whose process is gone, and those of this process's id that no run of this
    process holds (a container restarted keeps its host name, and its pack
    gets the id its killed one had)."""
    base = os.path.join(root, STAGING_DIR) if isinstance(store, LocalStore) else None
    base = base or os.path.join(tempfile.gettempdir(), "streamer-pack")
    host = socket.gethostname()
    folder = os.path.join(base, f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    _make_own_folder(folder)
    _held.add(folder)
    for name in os.listdir(base):  # ours in it: no other run removes it now
        owner, _, rest = name.rpartition("-")[0].rpartition("-")
        if owner != host or not rest.isdigit():
            continue
        path = os.path.join(base, name)
        dead = int(rest) == os.getpid() and path not in _held
        if dead or not _alive(int(rest)):
            shutil.rmtree(path, ignore_errors=True)
    try:
        yield folder
    finally:
        _held.discard(folder)
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):  # other runs' folders are still there
            os.rmdir(base)


def _make_own_folder(folder: str, attempts: int = 50) -> None:
    """Make ``folder`` and the shared staging folder above it. Another run
    ending removes that one when it is empty, which may fall between making
    it and making ``folder`` in it: then both are made again, a moment
    later (a part of a fan-out on the same host failed with "No such file
    or directory")."""
    for attempt in range(attempts - 1):
        with contextlib.suppress(FileNotFoundError):
            os.makedirs(folder)
            return
        time.sleep(0.001 * (1 + attempt % 8))
    os.makedirs(folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _ShardWriter:
    """Builds planned shards in a staging folder and stores them in ``out``."""

    def __init__(
        self,
        store: Store,
        root: str,
        *,
        batch_size: int,
        strict: bool,
        report: PackReport,
        record: str,
    ) -> None:
        self.store = store
        #: The plan's shard names (``dataset.planned``), in every shard's metadata.
        self.record = record
        self.root = root
        self.batch_size = batch_size
        self.strict = strict
        self.report = report
        self.on_batch = lambda nbytes: None

    def write(self, planned: PlannedShard, staging: str) -> None:
        """Build ``planned`` whole in ``staging``, index it, then store it."""
        folder = os.path.join(staging, planned.name)
        name = planned.name + SHARD_SUFFIX
        metadata = {
            "batch_size": str(self.batch_size),
            PLAN_KEY: planned.fingerprint,
            PLANNED_KEY: self.record,
        }
        options = pa.ipc.IpcWriteOptions(compression=None)
        paths = {}
        writers = []
        try:
            for column_dir, schema in ((AUDIO_COLUMN, AUDIO_SCHEMA), (INFO_DIR, INFO_SCHEMA)):
                os.makedirs(os.path.join(folder, column_dir))
                paths[column_dir] = os.path.join(folder, column_dir, name)
                writers.append(
                    pa.ipc.new_file(
                        paths[column_dir], schema.with_metadata(metadata), options=options
                    )
                )
            queue = list(planned.files)
            alternates = dict(planned.alternates)
            while queue:
                self._write_batch(queue, alternates, writers)
        except BaseException:
            # What closing a writer left mid-write raises (Ctrl-C inside
            # Arrow: "Bad file descriptor") must not replace what stopped it:
            # the staged shard is discarded either way.
            for writer in writers:
                with contextlib.suppress(Exception):
                    writer.close()
            raise
        for writer in writers:
            writer.close()
        if self.report.index is not None:
            indexed = index_shard(LocalStore(), folder, planned.name)
            self.report.index.add(indexed)
            self.report.durations += indexed.durations
            paths[INDEX_DIR] = os.path.join(folder, INDEX_DIR, name)
        # audio_info (and seek_index) first: a shard is part of the dataset once audio/ has it.
        for column_dir in (INFO_DIR, INDEX_DIR, AUDIO_COLUMN):
            if column_dir in paths:
                target = self.store.join(self.root, column_dir, name)
                self.store.move_in_sync(target, paths[column_dir])
        self.report.shards.append(planned.name)
        shutil.rmtree(folder, ignore_errors=True)

    def _write_batch(
        self,
        queue: list[SourceFile],
        alternates: dict[str, tuple[SourceFile, ...]],
        writers: list[pa.ipc.RecordBatchFileWriter],
    ) -> None:
        """One record batch: files taken from the front of ``queue`` until
        ``batch_size`` of them are audio (or none are left), so every batch
        but a shard's last is full, as wsds readers expect. Each file is read
        into one buffer and probed in place; one that is not audio is skipped
        and its bytes overwritten by the next file's. The buffer is sized for
        the next ``batch_size`` files and grows only past a skipped one.

        A file's ``alternates`` (other files of its key, ``plan.py``) are
        reported as such once it is packed; if it is skipped, the first of
        them is tried next, in its place."""
        values = np.empty(_bytes_ahead(queue, self.batch_size), dtype=np.uint8)
        offsets = [0]
        entries: list[_Entry] = []
        taken_bytes = 0
        while queue and len(entries) < self.batch_size:
            file = queue.pop(0)
            taken_bytes += file.size
            end = offsets[-1] + file.size
            if end > len(values):  # a skipped file made room for fewer than needed
                more = _bytes_ahead(queue, self.batch_size - len(entries) - 1)
                values = np.concatenate(
                    [values[: offsets[-1]], np.empty(file.size + more, np.uint8)]
                )
            slot = values[offsets[-1] : end]
            try:
                digest = _read_into(file, memoryview(slot))
                with interrupts_held():
                    info = probe(MemoryFile(memoryview(slot), file.source))
            except (UnreadableSource, ProbeError) as exc:
                if self.strict:
                    raise PackError(f"{file.source}: {exc}") from None
                self.report.skipped.append((file.source, str(exc)))
                others = alternates.pop(file.source, ())
                if others:  # the key passes on
                    queue.insert(0, others[0])
                    alternates[others[0].source] = others[1:]
                continue
            for other in alternates.pop(file.source, ()):
                self.report.skipped.append((other.source, taken(other, file)))
                taken_bytes += other.size
            entries.append(_Entry(file, info, digest))
            offsets.append(end)
        nbytes = offsets[-1]
        if entries:
            keys = pa.array([e.key for e in entries], pa.string())
            audio = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(),
                len(entries),
                [
                    None,
                    pa.py_buffer(np.array(offsets, dtype=np.int64)),
                    pa.py_buffer(values[:nbytes]),
                ],
            )
            audio_writer, info_writer = writers
            info_writer.write_batch(_info_batch(keys, entries))
            audio_writer.write_batch(pa.record_batch([keys, audio], schema=AUDIO_SCHEMA))
        self.report.files += len(entries)
        self.report.bytes += nbytes
        self.on_batch(taken_bytes)


def _bytes_ahead(queue: list[SourceFile], count: int) -> int:
    """Bytes of the next ``count`` files of ``queue``."""
    return sum(f.size for f in queue[:count])


def _read_into(file: SourceFile, target: memoryview) -> str:
    """Read a file into its slot of the batch buffer; returns its sha256."""
    read_into(file, target)
    return hashlib.sha256(target).hexdigest()


def _info_batch(keys: pa.Array, entries: list[_Entry]) -> pa.RecordBatch:
    columns = {
        "codec": [e.info.codec for e in entries],
        "container": [e.info.container for e in entries],
        "sample_rate": [e.info.sample_rate for e in entries],
        "channels": [e.info.channels for e in entries],
        "duration": [e.info.duration for e in entries],
        "num_bytes": [e.file.size for e in entries],
        "sha256": [e.digest for e in entries],
        "source": [e.file.source for e in entries],
    }
    arrays = [keys] + [
        pa.array(values, INFO_SCHEMA.field(name).type) for name, values in columns.items()
    ]
    return pa.record_batch(arrays, schema=INFO_SCHEMA)
