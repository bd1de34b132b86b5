"""A dataset: column directories of IPC shards with the same names and rows.

::

    root/
      audio/        shard-000000.wsds  shard-000001.wsds ...   (__key__, audio)
      audio_info/   shard-000000.wsds  shard-000001.wsds ...   (__key__, codec, ...)
      <any other>/  same shard names, same rows, same order

This is the wsds layout. The audio column directory defines the shard list;
every other column directory must hold the same shard names, and its
``__key__`` column is checked against the audio one the first time a shard of
it is opened.

One bad shard does not take the dataset down. An audio shard that cannot be
read (truncated, its footer overwritten, unreadable) or whose ``audio_info/``
shard cannot be, or that is missing while its ``audio_info/`` shard is
there, is reported once (a warning naming it and why; listed in
``bad_shards`` and by ``streamer inspect``) and its rows are left out: they
are not in ``len``, the keys, iteration or the episodes samplers draw from.
A ``seek_index/`` shard that cannot be used (unreadable, truncated, its keys
not the audio shard's) costs only speed: its episodes are decoded without
the index, counted with the reason.

A dataset that ``pack`` left incomplete (killed midway, a part of its job
never ran: no manifest, some whole shards) raises ``IncompleteDatasetError``
when its shards are first checked, naming the planned shards that are
missing (``planned.py``: each packed shard records its plan's names), unless
opened with ``allow_incomplete=True``, which serves the shards present with
a warning (``incomplete``). Datasets without that record (wsds, older packs)
open as they are.

Over a network the layout comes from the dataset manifest (``manifest.py``)
when there is one: one request instead of a listing per column directory.
Every shard opened is checked against it; the first contradiction (a shard
rewritten, missing, or present but not in the manifest) is warned about and
the store is listed instead, so a stale manifest costs requests, never rows.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import warnings
import weakref
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

import anyio
import numpy as np
import pyarrow as pa

from ..decode.crop import Crop, CropRequest, hashes_to, read_crop
from ..decode.resample import DEFAULT_QUALITY
from ..errors import (
    CompressedShardWarning,
    CropError,
    DataError,
    IncompleteDatasetError,
    LayoutError,
    ShardError,
    StorageError,
)
from ..formats.ffmpeg import policy_problem
from ..formats.job import DecodeStats, Episode
from ..index.checks import OLDER_BUILDER, check_against_blob
from ..index.table import INDEX_DIR, IndexReader, SeekIndex
from ..shard.blob import BlobHandle
from ..shard.footer import TAIL_BYTES
from ..shard.ipc import KEY_COLUMN, SHARD_SUFFIXES, Shard, shard_name_of
from ..storage import open_url
from ..storage.base import NotFound, Store
from ..storage.local import LocalStore
from ..storage.loop import CallGroup
from ..storage.retry import StoreUnavailable
from ..timing import record
from .manifest import Manifest, describe, read_manifest, store_manifest
from .planned import Incomplete, find_incomplete

__all__ = [
    "AUDIO_COLUMN",
    "INDEX_UNREADABLE",
    "INFO_DIR",
    "KEYS_DIFFER",
    "ROW_UNREADABLE",
    "Dataset",
    "open_dataset",
    "write_manifest",
]

log = logging.getLogger(__name__)

AUDIO_COLUMN = "audio"
INFO_DIR = "audio_info"
#: Fallback reasons of the episodes of a ``seek_index/`` shard that cannot be used.
INDEX_UNREADABLE = "seek_index shard unreadable"
KEYS_DIFFER = "seek_index shard keys differ from audio"
#: How the reason of an index row that cannot be read begins (a corrupt row,
#: one that fails its ``row_crc``): ``streamer index`` builds it again.
ROW_UNREADABLE = "unreadable index row"
#: Shards opened at once when checking a remote dataset's shards.
_OPEN_THREADS = 16


class Dataset:
    """A dataset directory or prefix in a store, opened lazily: shards open on first use.

    ``store`` is where it lives (default: the local file system) and ``root``
    its path there; ``open_dataset(url)`` picks both from a URL. Column
    directories and shards are found in the dataset manifest when
    ``manifest`` is true and there is one, else by listing the store;
    ``manifest=None`` (the default) uses it for network stores, where a
    listing costs requests, and lists local directories.

    ``audio_dir`` names the column directory that holds ``audio_column``;
    by default it is ``audio/`` when present, else the first column
    directory whose shards have that column.

    ``allow_incomplete`` serves a dataset whose pack left planned shards
    missing (``incomplete``), with a warning, instead of raising
    ``IncompleteDatasetError`` when its shards are checked.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        audio_column: str = AUDIO_COLUMN,
        audio_dir: str | None = None,
        store: Store | None = None,
        manifest: bool | None = None,
        allow_incomplete: bool = False,
    ) -> None:
        self.store = store or LocalStore()
        self.root = os.fspath(root)
        self.url = self.store.display(self.root)
        self.audio_column = audio_column
        self._opened_with = {"audio_column": audio_column, "audio_dir": audio_dir}
        self._opened_with |= {"store": self.store, "manifest": manifest}
        self._opened_with |= {"allow_incomplete": allow_incomplete}
        self.allow_incomplete = allow_incomplete
        self._fresh_locks()
        _datasets.add(self)
        #: Column directories listed to check the manifest: the shard names found.
        self._listings: dict[str, set[str] | None] = {}
        self.manifest: Manifest | None = None
        #: Why the manifest is not used: "absent", "not used", or what was wrong with it.
        self.manifest_problem: str | None = "not used"
        if self.store.is_remote if manifest is None else manifest:
            self.manifest, self.manifest_problem = read_manifest(self.store, self.root)
        if self.manifest is not None:
            self.column_dirs, self._sizes = self.manifest.column_dirs, self.manifest.sizes
        else:
            self.column_dirs, self._sizes = _column_dirs(self.store, self.root)
        if self.manifest_problem not in (None, "absent", "not used"):
            # Said once the listing has worked: a store that cannot be
            # reached fails both, and its listing's error says it alone.
            log.warning(
                "%s: the dataset manifest is not used, the store is listed: %s",
                self.url,
                self.manifest_problem,
            )
        if not self.column_dirs:
            raise LayoutError(
                f"{self.url}: no column directories holding {'/'.join(SHARD_SUFFIXES)} shards"
            )
        self._served: list[str] | None = None
        self._incomplete: Incomplete | None = None
        self.audio_dir = AUDIO_COLUMN  # until found: the manifest may be dropped meanwhile
        self.audio_dir = audio_dir or self._find_audio_dir()
        if self.audio_dir not in self.column_dirs and self.manifest is not None:
            self._drop_manifest(f"it has no column directory {self.audio_dir!r}")
        if self.audio_dir not in self.column_dirs:
            raise LayoutError(f"{self.url}: missing column directory {self.audio_dir!r}")
        #: Every shard the store lists (or the manifest has) in the audio column directory.
        self.listed_shards = sorted(self.column_dirs[self.audio_dir])
        self._bad_shards: dict[str, str] = {}
        self._shards: dict[tuple[str, str], Shard] = {}
        self._index_readers: dict[str, IndexReader] = {}
        #: ``seek_index/`` shards that cannot be used: (fallback reason, the error).
        self._index_problems: dict[str, tuple[str, DataError]] = {}
        self._verdicts: dict[tuple[str, int], str | None] = {}
        #: ``audio_info``'s ``num_bytes`` per shard (``_info_sizes``).
        self._recorded_sizes: dict[str, list[int | None] | None] = {}
        #: ``audio_info``'s ``sha256`` per shard (``_info_digests``).
        self._recorded_digests: dict[str, list[str | None] | None] = {}
        self._warned_compressed = False
        self._warned_stale: set[str] = set()
        self._decode_stats: DecodeStats | None = None

    def __repr__(self) -> str:
        return f"Dataset({self.url!r}, shards={len(self.listed_shards)})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as what opens it again (root, store, options): a
        ``spawn`` or ``forkserver`` DataLoader worker handed it (a ``Mix``)
        opens its own; its shards, maps and locks are this process's (its
        locks could not be pickled: ``TypeError``)."""
        return functools.partial(Dataset, self.root, **self._opened_with), ()

    def _fresh_locks(self) -> None:
        """Free locks: when made, and in a forked child (a DataLoader worker
        handed this dataset open, as a ``Mix`` is), where a lock a thread of
        the parent held (opening a shard for a pass broken off) stayed held
        for good and the child waited on it forever."""
        self._relisting = threading.Lock()
        self._checking = threading.Lock()
        self._opening: dict[tuple[str, str], threading.Lock] = {}

    # -- shards -------------------------------------------------------------

    @property
    def shard_names(self) -> list[str]:
        """The shards the dataset serves, in order: every listed audio shard
        that opens with its keys (and its ``audio_info/`` shard, when there
        is that directory). The first call opens them all, which ``len`` and
        the keys need anyway; the others go to ``bad_shards``, with a warning.
        ``IncompleteDatasetError`` when shards its pack planned are missing
        (``incomplete``), unless opened with ``allow_incomplete``."""
        served = self._settled()
        if self._incomplete is not None and not self.allow_incomplete:
            raise IncompleteDatasetError(self._incomplete.message(self.url))
        return served

    @property
    def incomplete(self) -> Incomplete | None:
        """The shards its pack planned that are missing (how many were
        planned, which are missing), or None: none is, or its shards record
        no plan (another tool wrote them, or a streamer before the record).
        Checked with the shards, never raises ``IncompleteDatasetError``."""
        self._settled()
        return self._incomplete

    def _settled(self) -> list[str]:
        """The served shards, checked once (``_check_shards``), and with them
        the planned shards missing (``_find_incomplete``)."""
        if self._served is None:
            with self._checking:
                if self._served is None:
                    served = self._check_shards()
                    self._incomplete = self._find_incomplete()
                    self._served = served
        return self._served

    def _find_incomplete(self) -> Incomplete | None:
        """The planned shards missing from the audio column directory, by the
        records its shards opened (``_check_shards``) carry: their footers are
        read already, nothing more is. Allowed (``allow_incomplete``): warned
        about once."""
        incomplete = self.incomplete_by_opened()
        if incomplete is not None and self.allow_incomplete:
            log.warning(
                "%s: incomplete dataset, only the shards present are used (allow_incomplete): %s",
                self.url,
                incomplete.summary(),
            )
        return incomplete

    def incomplete_by_opened(self) -> Incomplete | None:
        """The planned shards missing from the listing, by the records of the
        audio shards opened so far, none opened for it: for a job's part
        that opens only its own shards (each records the whole plan), where
        ``incomplete`` would read every shard's footer. None when the shards
        opened record no plan, or no shard is opened yet."""
        opened = [
            (name, s.schema.metadata)
            for (d, name), s in list(self._shards.items())
            if d == self.audio_dir
        ]
        return find_incomplete(opened, self.listed_shards, self.url)

    @property
    def bad_shards(self) -> dict[str, str]:
        """Listed shards left out of the dataset, and why (checked with ``shard_names``)."""
        self.shard_names  # noqa: B018 (the check fills it)
        return dict(self._bad_shards)

    def _check_shards(self) -> list[str]:
        while True:
            manifest = self.manifest
            threads = min(_OPEN_THREADS, len(self.listed_shards)) if self.store.is_remote else 1
            # An interrupt stops the other threads' requests too: the pool waits for them.
            with ThreadPoolExecutor(max(threads, 1)) as pool, CallGroup() as calls:
                problems = list(pool.map(calls.bind(self.shard_problem), self.listed_shards))
            if self.manifest is manifest:
                break
            # The manifest turned out stale while checking: check the listing's shards.
            self._bad_shards.clear()
        served = []
        for name, problem in zip(self.listed_shards, problems, strict=True):
            if problem is None:
                served.append(name)
                continue
            self._bad_shards[name] = problem
            log.warning("%s: shard %r and its rows are skipped: %s", self.url, name, problem)
        for name in self._orphans():
            problem = (
                f"no {self.audio_dir}/{name} shard, but {INFO_DIR}/ has one "
                "(deleted, or not copied?)"
            )
            self._bad_shards[name] = problem
            log.warning("%s: shard %r and its rows are skipped: %s", self.url, name, problem)
        return served

    def _orphans(self) -> list[str]:
        """Shards that ``audio_info/`` has and the audio column directory has
        not: their audio is missing (``pack`` writes both), not absent by design."""
        if INFO_DIR not in self.column_dirs or self.audio_dir == INFO_DIR:
            return []
        return sorted(set(self.column_dirs[INFO_DIR]) - set(self.listed_shards))

    def shard_problem(self, name: str) -> str | None:
        """Why listed shard ``name`` cannot be served (what ``bad_shards``
        would say of it), or None when it can: checks this shard alone and
        warns nothing, for a job over one shard (``streamer index``) that
        reports it itself. A remote store that fails raises."""
        try:
            self.shard(name).keys  # noqa: B018 (reads and checks them)
            if INFO_DIR in self.column_dirs and self.audio_dir != INFO_DIR:
                self.shard(name, INFO_DIR)
        except (DataError, StorageError) as exc:
            if self._store_failed(exc):
                raise
            return str(exc)
        return None

    def _store_failed(self, error: Exception) -> bool:
        """Whether ``error`` is a remote store failing, not the shard's bytes:
        a local file that cannot be read is the shard's problem, a store that
        stays unreachable past its retries is not."""
        if not self.store.is_remote:
            return False
        return isinstance(error, StorageError) or isinstance(error.__cause__, StorageError)

    def shard(self, name: str, column_dir: str | None = None) -> Shard:
        """The shard ``name`` of a column directory, opened and key-checked once.

        Safe to call from several threads (the pipeline plans crops
        concurrently): a shard being opened is waited for, not opened twice.
        """
        column_dir = column_dir or self.audio_dir
        key = (column_dir, name)
        cached = self._shards.get(key)
        if cached is not None:
            return cached
        with self._opening.setdefault(key, threading.Lock()):
            cached = self._shards.get(key)
            if cached is None:
                cached = self._shards[key] = self._open_checked(name, column_dir)
            return cached

    def _open_checked(self, name: str, column_dir: str) -> Shard:
        shard = self._open_listed(name, column_dir)
        if column_dir == self.audio_dir:
            self._check_audio(shard)
        else:
            _check_keys_aligned(shard, self.shard(name))
        return shard

    def _open_listed(self, name: str, column_dir: str) -> Shard:
        """Shard ``name`` of a column directory, opened; ``LayoutError`` when
        the directory or the shard is not there. With a manifest, the shard
        is checked against it, and a shard the manifest does not have is
        looked for in a listing: either way a contradiction drops the
        manifest for the listing, and the shard is looked up there."""
        path = self.column_dirs.get(column_dir, {}).get(name)
        if path is None and self.manifest is not None and self._listed(column_dir, name):
            self._drop_manifest(f"{column_dir}/{name} is in the store, not in the manifest")
            path = self.column_dirs.get(column_dir, {}).get(name)
        if column_dir not in self.column_dirs:
            raise LayoutError(f"{self.url}: missing column directory {column_dir!r}")
        if path is None:
            raise LayoutError(
                f"column directory {column_dir!r} has no shard {name!r}",
                shard=self.store.display(self.store.join(self.root, column_dir)),
            )
        try:
            return self._open_shard(path, column_dir)
        except _StaleManifest as stale:
            self._drop_manifest(str(stale))
            return self._open_listed(name, column_dir)

    def _listed(self, column_dir: str, name: str) -> bool | None:
        """Whether a listing of the column directory has shard ``name``
        (whatever its file's suffix), or None when the store cannot list it
        (``_listing``)."""
        files = self._listing(column_dir)
        return None if files is None else name in {shard_name_of(file) for file in files}

    def _listing(self, column_dir: str) -> set[str] | None:
        """The shard files a listing of the column directory has (one request
        per directory and dataset), or None when the store cannot list it
        (there is none, an HTTP server without directory indexes): then
        nothing contradicts the manifest. A store that gave up (an outage
        past its budget) raises: taken for "no such shard", a
        ``seek_index/`` the manifest does not name sent the crops to be
        decoded without an index, by workers that waited a budget of their
        own on the same outage."""
        if column_dir not in self._listings:
            try:
                files = self.store.list_sync(self.store.join(self.root, column_dir))
            except StoreUnavailable:
                raise
            except StorageError:
                self._listings[column_dir] = None
            else:
                self._listings[column_dir] = {
                    f.name
                    for f in files
                    if not f.is_dir
                    and not f.name.startswith(".")
                    and f.name.endswith(SHARD_SUFFIXES)
                }
        return self._listings[column_dir]

    def _drop_manifest(self, reason: str) -> None:
        """Stop using the manifest (it contradicts the store): warn once, list the
        store, and take its layout. Shards already opened were opened from their
        bytes and stay; the served shards, once settled, stay as they are."""
        with self._relisting:
            if self.manifest is None:
                return
            log.warning(
                "%s: the dataset manifest is stale (%s); listing the store instead "
                "(`streamer index` rewrites it)",
                self.url,
                reason,
            )
            self.column_dirs, self._sizes = _column_dirs(self.store, self.root)
            self.manifest, self.manifest_problem = None, f"stale: {reason}"
            if self._served is None and self.audio_dir in self.column_dirs:
                self.listed_shards = sorted(self.column_dirs[self.audio_dir])

    def _check_audio(self, shard: Shard) -> None:
        if self.audio_column not in shard.schema.names:
            raise ShardError(f"no {self.audio_column!r} column", shard=shard.path)
        if not self._warned_compressed and not shard.is_addressable(self.audio_column):
            self._warned_compressed = True
            warnings.warn(
                f"{shard.path}: the {self.audio_column!r} column is IPC-compressed; it is "
                "decompressed a record batch at a time, so byte-range reads are lost "
                "(repack with `streamer pack` for crop-sized reads)",
                CompressedShardWarning,
                stacklevel=3,
            )

    def manifest_state(self) -> str:
        """The dataset manifest checked against a fresh listing of the store
        (for ``streamer inspect``): ``"ok"``, ``"absent"``, why it is not
        usable, or ``"stale: "`` and what differs (shards added, removed or
        resized behind its back, which opening alone cannot see; and of the
        shards opened so far, rows, footer or columns other than it says)."""
        manifest, problem = read_manifest(self.store, self.root)
        if manifest is None:
            return problem or "absent"
        listed, sizes = _column_dirs(self.store, self.root)
        differences = []
        for column_dir in sorted(listed.keys() | manifest.column_dirs.keys()):
            ours, theirs = manifest.column_dirs.get(column_dir, {}), listed.get(column_dir, {})
            for name in sorted(theirs.keys() - ours.keys()):
                differences.append(f"{column_dir}/{name} is not in the manifest")
            for name in sorted(ours.keys() - theirs.keys()):
                differences.append(f"{column_dir}/{name} is not in the store")
            for name in sorted(ours.keys() & theirs.keys()):
                path, size = theirs[name], sizes.get(theirs[name])
                entry = manifest.files.get(ours[name])
                if path != ours[name] or (size is not None and entry and entry.size != size):
                    differences.append(f"{column_dir}/{name} differs from the manifest")
        for (column_dir, _), shard in sorted(self._shards.items()):
            entry = manifest.files.get(shard.path)
            problem = None
            if entry is not None:
                problem = entry.mismatch(shard.layout, manifest.fields.get(column_dir))
            if problem is not None:
                differences.append(f"{column_dir}/{shard.path.rsplit('/', 1)[-1]} has {problem}")
        return "stale: " + "; ".join(differences) if differences else "ok"

    # -- keys ---------------------------------------------------------------

    @cached_property
    def _rows(self) -> np.ndarray:
        """Row number of each shard's first row in the whole dataset, plus the total."""
        counts = [self.shard(name).num_rows for name in self.shard_names]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    @cached_property
    def _key_rows(self) -> dict[str, int]:
        rows: dict[str, int] = {}
        for index, name in enumerate(self.shard_names):
            first = int(self._rows[index])
            for j, key in enumerate(self.shard(name).keys.to_pylist()):
                if key in rows:
                    other = self.shard_index(rows[key])
                    row = rows[key] - int(self._rows[other])
                    raise LayoutError(
                        f"duplicate key: in shard {self.shard_names[other]!r} row {row} and in "
                        f"shard {name!r} row {j} of {self.url} (a crop of it could be of either "
                        "episode: remove or rename one)",
                        shard=name,
                        key=key,
                    )
                rows[key] = first + j
        return rows

    @cached_property
    def _keys_unique(self) -> bool:
        """Whether no key is in the dataset twice: the distinct keys counted
        in Arrow (one hash pass in C++, no Python string or dict entry per
        key; cheaper than making the keys Python strings, which sampling
        does anyway)."""
        arrays = [self.shard(name).keys for name in self.shard_names]
        total = sum(len(keys) for keys in arrays)
        if not total:
            return True
        return len(pa.chunked_array(arrays, pa.string()).unique()) == total  # null: one value

    def check_keys(self) -> None:
        """``LayoutError`` naming the key and both places (shard and row) when
        a key is in the dataset twice, in one shard or in two: a crop of it
        could be of either episode, so the dataset cannot be sampled (every
        lookup of any key raises the same). Checked once per dataset, cheaply
        (``_keys_unique``); only a dataset that fails it is searched for the
        key."""
        if not self._keys_unique:
            self._key_rows  # noqa: B018 (raises, naming the first key found twice)

    def __len__(self) -> int:
        return int(self._rows[-1])

    @property
    def num_rows(self) -> int:
        return len(self)

    def __contains__(self, key: object) -> bool:
        return key in self._key_rows

    def __iter__(self) -> Iterator[str]:
        return self.keys()

    def keys(self) -> Iterator[str]:
        """Every key, in shard order."""
        for name in self.shard_names:
            yield from self.shard(name).keys.to_pylist()

    def shard_index(self, row: int) -> int:
        """Which shard (an index into ``shard_names``) holds a dataset row."""
        return int(np.searchsorted(self._rows, row, side="right")) - 1

    def locate(self, key: str) -> tuple[str, int]:
        """(shard name, row within the shard) of a key."""
        try:
            row = self._key_rows[key]
        except KeyError:
            skipped = (
                f" (skipped shards: {', '.join(self._bad_shards)})" if self._bad_shards else ""
            )
            raise KeyError(f"no episode with key {key!r} in {self.url}{skipped}") from None
        index = self.shard_index(row)
        return self.shard_names[index], row - int(self._rows[index])

    # -- episodes -----------------------------------------------------------

    def blob(self, key: str) -> BlobHandle:
        """A handle on an episode's encoded bytes; reads nothing yet."""
        name, row = self.locate(key)
        return self.shard(name).blob(self.audio_column, row)

    def info(self, key: str) -> dict[str, Any]:
        """The episode's ``audio_info`` row (codec, sample_rate, duration, ...)."""
        return self._info_at(*self.locate(key))

    def _info_at(self, name: str, row: int) -> dict[str, Any]:
        shard = self.shard(name, INFO_DIR)
        return {
            field: shard.column(field).slice(row, 1).to_pylist()[0]
            for field in shard.schema.names
            if field != KEY_COLUMN
        }

    def seek_index(self, key: str) -> SeekIndex:
        """The episode's seek index from ``seek_index/``: its arrays are views
        onto the shard's memory map (``streamer index`` builds the directory).
        Raises ``LayoutError`` when there is no index shard for it and
        ``ShardError`` when there is one that cannot be used."""
        name, row = self.locate(key)
        reader = self._index_reader(name)
        if isinstance(reader, DataError):  # a new one each time: the kept one gathers no traceback
            raise type(reader)(reader.reason, shard=reader.shard, key=reader.key)
        with record("index_read"):
            return reader.read(row)

    def episode(self, key: str) -> Episode:
        """What a crop of ``key`` needs: its blob handle and seek index (None
        when ``seek_index/`` has no shard for it; "no index" with the reason
        when its shard cannot be used, so the crop falls back); reads only
        the index row."""
        return self.episode_at(*self.locate(key))

    def episode_at(self, name: str, row: int, *, info: bool = True) -> Episode:
        """``episode`` of row ``row`` of shard ``name``, found without the key
        lookup, which opens and checks every shard first: a job over one
        shard (``streamer index --verify``) reads that shard alone. Without
        ``info``, ``audio_info`` is not consulted (its ``num_bytes``, its
        fields, its ``sha256``): the blob and its index on their own, for a
        job that found ``audio_info`` describing another blob
        (``info_problem``) and checks the index against the audio itself."""
        blob = self.shard(name).blob(self.audio_column, row)
        key = self.shard(name).keys[row].as_py()
        if info:
            self._check_blob_size(name, row, key, blob.length)
        reader = self._index_reader(name)
        index: SeekIndex | None = None
        if isinstance(reader, IndexReader):
            index = self._trusted_index(reader, name, row, blob.length, info)
        elif isinstance(reader, ShardError):
            index = SeekIndex.unavailable(self._index_problems[name][0])
        digest = self.recorded_sha256(name, row) if index is not None and info else None
        return Episode(key=key, shard=blob.shard, blob=blob, index=index, sha256=digest)

    def info_problem(self, name: str, row: int, *, digest: bool = False) -> str | None:
        """How row ``row`` of shard ``name``'s ``audio_info`` contradicts
        its blob, or None: a ``num_bytes`` other than the blob's length
        (offsets only), and with ``digest``, a ``sha256`` other than its
        bytes' (reads the whole blob). Only what the layout ``pack`` writes
        records about the blob is compared (``_packed_info``). The blob
        alone cannot say which of the two is wrong: ``streamer index
        --verify`` asks its seek index, ``streamer inspect`` reports it."""
        blob = self.shard(name).blob(self.audio_column, row)
        length = blob.length
        recorded = self._recorded_size(name, row)
        if recorded is not None and recorded != length:
            return f"{INFO_DIR} records {recorded} bytes, the blob has {length}"
        expected = self.recorded_sha256(name, row)
        if digest and expected is not None:
            key = self.shard(name).keys[row].as_py()
            if not hashes_to(blob, expected, (blob.shard, key, length, expected)):  # Episode.id
                return f"{INFO_DIR} records a sha256 the blob's bytes do not have"
        return None

    def _check_blob_size(self, name: str, row: int, key: str, length: int) -> None:
        """``CropError`` when ``audio_info`` records another byte length for
        the blob than it has (nothing without ``audio_info`` or its
        ``num_bytes``): the audio shard's row boundaries are damaged (one
        blob lost its first bytes, its neighbour gained them), or
        ``audio_info`` is another pack's. Its crops were decoded from the
        wrong bytes, each one counted as an index "built for another blob"
        only. Only for the layout ``pack`` writes (``audio/audio`` beside
        ``audio_info/``): an audio column of another directory may hold other
        bytes (a transcoded copy) than the ones ``audio_info`` describes."""
        recorded = self._recorded_size(name, row)
        if recorded is not None and recorded != length:
            raise CropError(
                f"the blob has {length} bytes, {INFO_DIR} records {recorded}: "
                f"a damaged audio shard, or {INFO_DIR} of another pack",
                shard=self.shard(name).path,
                key=key,
            )

    def _recorded_size(self, name: str, row: int) -> int | None:
        """``audio_info``'s ``num_bytes`` of the blob at ``row`` of shard
        ``name`` (None: none recorded, ``_info_sizes``)."""
        if name not in self._recorded_sizes:
            self._recorded_sizes[name] = self._info_sizes(name)
        sizes = self._recorded_sizes[name]
        return None if sizes is None else sizes[row]

    def recorded_sha256(self, name: str, row: int) -> bytes | None:
        """``audio_info``'s ``sha256`` of the blob at ``row`` of shard
        ``name`` (``Episode.sha256``): None where there is none, or where it
        is not 64 hexadecimal digits (another tool's column), and for the
        layouts ``_check_blob_size`` leaves alone."""
        if name not in self._recorded_digests:
            self._recorded_digests[name] = self._info_digests(name)
        digests = self._recorded_digests[name]
        text = None if digests is None else digests[row]
        if text is None or len(text) != 64:
            return None
        try:
            return bytes.fromhex(text)
        except ValueError:
            return None

    def _info_digests(self, name: str) -> list[str | None] | None:
        """``audio_info``'s ``sha256`` column of shard ``name``, read once
        (as ``_info_sizes`` reads ``num_bytes``); None when there is none,
        when it is not text, or when the audio column is not the one
        ``pack`` writes (its bytes may not be the ones described)."""
        shard = self._packed_info(name, "sha256")
        if shard is None:
            return None
        kind = shard.schema.field("sha256").type
        text = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
        if not any(is_text(kind) for is_text in text):
            return None
        try:
            return shard.column("sha256").to_pylist()
        except DataError:  # a column that cannot be read records nothing
            return None

    def _packed_info(self, name: str, field: str) -> Shard | None:
        """The ``audio_info/`` shard of shard ``name`` when it has ``field`` and
        describes the audio column ``pack`` writes (another directory's
        audio column may hold other bytes, a transcoded copy); else None, as
        when it cannot be used: nothing recorded."""
        if self.audio_dir != AUDIO_COLUMN or self.audio_column != AUDIO_COLUMN:
            return None
        try:
            shard = self.shard(name, INFO_DIR) if INFO_DIR in self.column_dirs else None
        except DataError:
            return None
        return shard if shard is not None and field in shard.schema.names else None

    def _info_sizes(self, name: str) -> list[int | None] | None:
        """``audio_info``'s ``num_bytes`` column of shard ``name``, read once
        (a row's ``info`` reads every field); None when there is none, or
        when it is not an integer column (another tool's strings, floats):
        such a column is no size record, and compared with a blob's length
        it called intact audio damaged (warned about once per shard)."""
        shard = self._packed_info(name, "num_bytes")
        if shard is None:
            return None
        kind = shard.schema.field("num_bytes").type
        if not pa.types.is_integer(kind):
            log.warning(
                "%s: its 'num_bytes' column is %s, not integers: blob sizes are not checked "
                "against it",
                shard.path,
                kind,
            )
            return None
        return shard.column("num_bytes").to_pylist()

    def _trusted_index(
        self, reader: IndexReader, name: str, row: int, blob_length: int, info: bool = True
    ) -> SeekIndex:
        """The index row, or "no index" with the reason when it cannot be
        trusted for this blob (``index.checks``: a corrupt row, another
        episode's index after rows were swapped, or one built from the blob
        before it was rewritten) or under this FFmpeg
        (``formats.ffmpeg.policy_problem``): its crops fall back. The
        verdict is kept per row, so a long index is checked once; without
        ``info``, checked without ``audio_info`` (``episode_at``), each time."""
        try:
            with record("index_read"):
                index = reader.read(row)
        except ShardError as exc:
            return SeekIndex.unavailable(f"{ROW_UNREADABLE}: {exc.reason}")
        verdict = self._verdicts.get((name, row), ...) if info else ...
        if verdict is ...:
            described = self._info_at(name, row) if info and INFO_DIR in self.column_dirs else None
            verdict = check_against_blob(
                index, blob_length, described, reader.built_for(row), reader.revision
            ) or policy_problem(index)
            if info:
                self._verdicts[(name, row)] = verdict
            if verdict is not None and verdict.startswith(OLDER_BUILDER):
                self._warn_stale(name)
        return index if verdict is None else SeekIndex.unavailable(verdict, index.container)

    def _warn_stale(self, name: str) -> None:
        """Say once per shard that an older builder's rows are not served."""
        if name not in self._warned_stale:
            self._warned_stale.add(name)
            log.warning(
                "%s: %s/%s holds indexes an older streamer built that this one does not "
                "serve: their crops decode without them, slower, until `streamer index` "
                "rebuilds it",
                self.url,
                INDEX_DIR,
                name,
            )

    def index_problems(self) -> dict[str, str]:
        """Every served shard whose ``seek_index/`` shard cannot be used, and
        why (its episodes fall back); opens every index shard not yet open."""
        for name in self.shard_names:
            self._index_reader(name)
        return {name: str(error) for name, (_, error) in self._index_problems.items()}

    def index_problem(self, name: str) -> str | None:
        """Why shard ``name``'s ``seek_index/`` shard cannot be used (what
        ``index_problems`` would say of it), or None: it can, or there is
        none. Opens that index shard alone."""
        reader = self._index_reader(name)
        return str(reader) if isinstance(reader, ShardError) else None

    def _index_reader(self, name: str) -> IndexReader | DataError:
        """The reader of shard ``name``'s ``seek_index/`` shard, or why there
        is none: a ``LayoutError`` (no such shard) or a ``ShardError`` (it
        cannot be used, warned about once)."""
        reader = self._index_readers.get(name)
        if reader is not None:
            return reader
        with self._opening.setdefault((INDEX_DIR, name), threading.Lock()):
            if name in self._index_problems:
                return self._index_problems[name][1]
            if name in self._index_readers:
                return self._index_readers[name]
            try:
                opened = self._open_listed(name, INDEX_DIR)
            except LayoutError as missing:
                return missing
            except (ShardError, StorageError) as exc:
                if self._store_failed(exc):
                    raise  # an outage is not an unusable index: nothing is remembered
                return self._index_unusable(name, INDEX_UNREADABLE, exc)
            try:
                _check_keys_aligned(opened, self.shard(name))
            except ShardError as exc:
                return self._index_unusable(name, KEYS_DIFFER, exc)
            try:
                reader = self._index_readers[name] = IndexReader(opened)
            except ShardError as exc:
                return self._index_unusable(name, INDEX_UNREADABLE, exc)
            return reader

    def _index_unusable(self, name: str, reason: str, error: Exception) -> ShardError:
        if self._store_failed(error):
            raise error
        if not isinstance(error, ShardError):
            error = ShardError(f"cannot open: {error}", shard=f"{INDEX_DIR}/{name}")
        self._index_problems[name] = (reason, error)
        log.warning(
            "%s: %s, its episodes are decoded without it (exact, but slower): %s",
            self.url,
            reason,
            error,
        )
        return error

    @property
    def decode_stats(self) -> DecodeStats:
        """What ``read_crop`` did so far: crops, fallbacks, planned bytes, bad packets."""
        if self._decode_stats is None:
            self._decode_stats = DecodeStats()
        return self._decode_stats

    def crop(
        self,
        key: str,
        start: float,
        end: float,
        sample_rate: int | None = None,
        mono: bool = False,
        *,
        pad: bool = False,
        resample_quality: str = DEFAULT_QUALITY,
    ) -> Crop:
        """Seconds ``[start, end)`` of an episode as a ``Crop``: float32 ``audio``
        of shape ``(channels, samples)`` and the ``sample_rate`` it is at.

        Sample-exact against the full decode (see docs/decoding.md); resampled
        to ``sample_rate`` (libsoxr at ``resample_quality``, one of
        ``decode.resample.QUALITIES``) and downmixed to the channel mean with
        ``mono``. A crop past the end is clipped, or zero-padded with ``pad``.
        """
        request = CropRequest(
            key,
            start,
            end,
            sample_rate=sample_rate,
            mono=mono,
            pad=pad,
            resample_quality=resample_quality,
        )
        return read_crop(self.episode(key), request, self.decode_stats)

    def read_crop(
        self,
        key: str,
        start: float,
        end: float,
        sample_rate: int | None = None,
        mono: bool = False,
        *,
        pad: bool = False,
        resample_quality: str = DEFAULT_QUALITY,
    ) -> np.ndarray:
        """The audio of ``crop(...)``: float32 ``(channels, samples)``."""
        crop = self.crop(
            key, start, end, sample_rate, mono, pad=pad, resample_quality=resample_quality
        )
        return crop.audio

    async def aread_crop(
        self,
        key: str,
        start: float,
        end: float,
        sample_rate: int | None = None,
        mono: bool = False,
        *,
        pad: bool = False,
        resample_quality: str = DEFAULT_QUALITY,
    ) -> np.ndarray:
        """``read_crop`` in a worker thread, for event loops. Cancelling the
        caller cancels the thread's store requests too (they went on retrying
        for the whole outage budget after the caller had gone)."""
        call = functools.partial(
            self.read_crop,
            key,
            start,
            end,
            sample_rate,
            mono,
            pad=pad,
            resample_quality=resample_quality,
        )
        with CallGroup() as calls:
            return await anyio.to_thread.run_sync(calls.bind(call), abandon_on_cancel=True)

    def info_table(self) -> pa.Table:
        """Every episode's ``audio_info`` row, plus the ``shard`` it lives in.

        Shards may differ in their columns (one written with an extra
        column: null in the others' rows) and in compatible types (int32 and
        int64); a column whose types cannot be one raises ``ShardError``
        naming the first shard that disagrees. With every shard skipped
        (``bad_shards``) it has no rows."""
        tables, paths = [], []
        for name in self.shard_names:
            shard = self.shard(name, INFO_DIR)
            table = pa.table({field: shard.column(field) for field in shard.schema.names})
            tables.append(table.append_column("shard", pa.array([name] * table.num_rows)))
            paths.append(shard.path)
        if not tables:  # every shard skipped (bad_shards): no rows, not an error
            return pa.table(
                {KEY_COLUMN: pa.array([], pa.string()), "shard": pa.array([], pa.string())}
            )
        try:
            return pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            raise _schema_disagreement(tables, paths) from None

    def _find_audio_dir(self) -> str:
        if AUDIO_COLUMN in self.column_dirs:
            return AUDIO_COLUMN
        if self.manifest is not None:
            for column_dir, fields in sorted(self.manifest.fields.items()):
                if self.audio_column in fields:
                    return column_dir
            self._drop_manifest(f"no column directory has an {self.audio_column!r} column")
        for column_dir, shards in sorted(self.column_dirs.items()):
            for name in sorted(shards):  # the first shard that opens says
                try:
                    first = self._open_shard(shards[name], column_dir)
                except ShardError:
                    continue
                if self.audio_column in first.schema.names:
                    return column_dir
                break
        raise LayoutError(f"{self.url}: no column directory has an {self.audio_column!r} column")

    def _open_shard(self, path: str, column_dir: str) -> Shard:
        manifest = self.manifest
        entry = manifest.files.get(path) if manifest is not None else None
        try:
            reader = self.store.reader(path, self._sizes.get(path))
            shard = Shard(reader, column_dir=column_dir, tail=entry.tail if entry else TAIL_BYTES)
        except StorageError as exc:
            # Only a shard the store says is not there (404) may mean a stale
            # manifest; a store that fails (an outage, a hang) is asked nothing
            # more: a listing would wait for it once more past its budget.
            # A file renamed to another shard suffix is not in the store either.
            missing = isinstance(exc, NotFound) or not self.store.is_remote
            listing = self._listing(column_dir) if entry is not None and missing else None
            if entry is not None and listing is not None and entry.file not in listing:
                raise _StaleManifest(f"{column_dir}/{entry.file} is not in the store") from exc
            if self.store.is_remote:
                raise
            # A local file listed but not readable (not a regular file, gone):
            # the shard's problem, not a store's.
            raise ShardError(f"cannot read: {exc}", shard=path) from exc
        if entry is not None and manifest is not None:
            problem = entry.mismatch(shard.layout, manifest.fields.get(column_dir))
            if problem is not None:
                raise _StaleManifest(f"{column_dir}/{entry.file} has {problem}")
        return shard


#: Every open dataset of this process (``Dataset._fresh_locks`` after a fork).
_datasets: weakref.WeakSet[Dataset] = weakref.WeakSet()


def _fresh_locks_after_fork() -> None:
    for dataset in list(_datasets):
        dataset._fresh_locks()


os.register_at_fork(after_in_child=_fresh_locks_after_fork)


def open_dataset(
    url: str | os.PathLike[str], *, allow_incomplete: bool = False, **storage_options: Any
) -> Dataset:
    """Open a dataset by path or URL: ``/data/set``, ``file://``, ``s3://bucket/prefix``,
    ``b2://``, ``http(s)://`` (a server with directory listings) or any fsspec protocol.

    ``storage_options`` go to the store (see docs/storage.md): ``endpoint_url``,
    credentials, cache and retry settings (``cache=CacheConfig(...)``,
    ``retry=RetryPolicy(...)``, or their fields as options of their own:
    ``block_size=``, ``attempts=``, ...). Datasets opened with the same
    scheme and options share one store: one connection pool, cache and
    ``dataset.store.stats``. Local paths take no options.

    A dataset whose pack left planned shards missing (no manifest, a part
    of the pack killed or never run) raises ``IncompleteDatasetError`` once
    its shards are checked (``len``, keys, a ``Streamer``) unless
    ``allow_incomplete``: then the shards present are served, with a warning.
    """
    store, root = open_url(url, **storage_options)
    return Dataset(root, store=store, allow_incomplete=allow_incomplete)


def write_manifest(
    store: Store, root: str, column_dirs: Mapping[str, Mapping[str, str]] | None = None
) -> str:
    """List the dataset at ``root`` afresh (or take ``column_dirs``, a listing
    the caller just made) and store its manifest beside its column
    directories (atomically, after every shard is in place); returns the
    manifest's path. ``streamer pack`` and ``streamer index`` call this
    last; call it after changing a dataset's shards by other means.

    ``IncompleteDatasetError``, nothing written, when a column directory
    lacks shards its shards' pack planned (``planned.py``): a manifest is
    what says a dataset is whole, and opening by it lists nothing."""
    if column_dirs is None:
        column_dirs, _ = _column_dirs(store, root)
    metadata: dict[str, list[tuple[str, Mapping[bytes, bytes] | None]]] = {}
    document = describe(store, column_dirs, metadata)
    for column_dir, shards in sorted(column_dirs.items()):
        incomplete = find_incomplete(metadata.get(column_dir, []), shards, store.display(root))
        if incomplete is not None:
            message = incomplete.message(store.display(root))
            raise IncompleteDatasetError(f"{message}; manifest not written")
    return store_manifest(store, root, document)


class _StaleManifest(Exception):
    """A shard contradicts the manifest entry it was opened by (internal)."""


def _column_dirs(store: Store, root: str) -> tuple[dict[str, dict[str, str]], dict[str, int]]:
    """``{column_dir: {shard_name: path}}`` for every subdirectory holding shards,
    and the size of every shard the listing told."""
    try:
        children = store.list_sync(root)
    except StorageError as exc:
        if store.is_remote and not isinstance(exc, NotFound):
            # The store failing (down past its budget, access refused) says
            # nothing of the dataset: its own error, which a job may retry.
            raise
        # A dataset-level error: the message names the directory (no shard).
        raise LayoutError(f"dataset directory does not exist or cannot be listed: {exc}") from exc
    found: dict[str, dict[str, str]] = {}
    sizes: dict[str, int] = {}
    for child in children:
        if not child.is_dir or child.name.startswith("."):
            continue
        folder = store.join(root, child.name)
        shards = {}
        for file in store.list_sync(folder):
            if file.name.startswith(".") or file.is_dir or not file.name.endswith(SHARD_SUFFIXES):
                continue
            path = shards[shard_name_of(file.name)] = store.join(folder, file.name)
            if file.size is not None:
                sizes[path] = file.size
        if shards:
            found[child.name] = shards
    return found, sizes


def _schema_disagreement(tables: list[pa.Table], paths: list[str]) -> ShardError:
    """The error for ``audio_info`` shards whose columns cannot be one: the
    first shard whose schema does not unify with the ones before it."""
    schema = tables[0].schema
    for table, path in zip(tables[1:], paths[1:], strict=True):
        try:
            schema = pa.unify_schemas([schema, table.schema], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            reason = str(exc).splitlines()[0]
            return ShardError(
                f"its columns do not agree with the shards before it ({reason})", shard=path
            )
    return ShardError("the audio_info shards' columns do not agree", shard=INFO_DIR)


def _check_keys_aligned(shard: Shard, audio: Shard) -> None:
    """Fail unless ``shard`` has exactly the rows of its audio shard, in order."""
    if shard.keys.equals(audio.keys):
        return
    ours, theirs = shard.keys.to_pylist(), audio.keys.to_pylist()
    if len(ours) != len(theirs):
        raise ShardError(f"{len(ours)} rows, but {audio.label} has {len(theirs)}", shard=shard.path)
    row = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)
    raise ShardError(
        f"__key__ mismatch with {audio.label}: {ours[row]!r} here, {theirs[row]!r} there",
        shard=shard.path,
        key=theirs[row],
        offset=row,
    )
