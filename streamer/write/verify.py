"""``streamer verify URL``: is a packed dataset whole and consistent?

What a fanned-out pack (or any writer) must leave, checked from the store
alone:

* every ``audio/`` shard has its ``seek_index/`` twin and every other
  column directory's (``audio_info/``, which ``pack`` writes, and any a
  user added), with the same keys in the same order, so equal row counts;
  a twin without an audio shard is a stray. A dataset with no
  ``audio_info/`` at all (a wsds dataset indexed in place) is whole
  without it;
* every key appears once in the whole dataset;
* every shard its pack planned is there (``dataset.planned``);
* the manifest is there and says what the store holds: the same shards in
  every column directory, and for each its size, row count and footer.

Each problem is one line naming the column directory, shard and, where it
applies, the key and row. Nothing is repaired: ``streamer pack`` (re-run)
or ``streamer index`` does that.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..dataset import Dataset
from ..dataset.manifest import MANIFEST_NAME, ManifestError, describe, parse, read_manifest
from ..dataset.planned import find_incomplete
from ..errors import DataError, StorageError
from ..index.table import INDEX_DIR
from ..shard.ipc import Shard
from ..storage import open_url

__all__ = ["VerifyReport", "verify_dataset"]


@dataclass
class VerifyReport:
    """What ``verify_dataset`` found: counts, and one line per problem."""

    url: str
    #: Audio shards, and their rows (those that could be read).
    shards: int = 0
    rows: int = 0
    #: Column directories checked against the audio one.
    column_dirs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_dataset(
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    index: bool = True,
) -> VerifyReport:
    """Check the dataset at ``url`` (a path or any URL ``open_dataset`` takes);
    ``index=False`` does not require ``seek_index/``. Reads every shard's
    footer and keys, never the audio. A store that cannot be reached raises
    (``StorageError``); a dataset that is not there is one problem."""
    store, root = open_url(url, **(storage_options or {}))
    report = VerifyReport(url=store.display(root))
    try:
        dataset = Dataset(root, store=store, manifest=False)
    except DataError as exc:
        if store.is_remote and isinstance(exc.__cause__, StorageError):
            raise exc.__cause__ from None  # the store failed (credentials, bucket), not the data
        report.problems.append(str(exc))
        return report
    listed = dataset.column_dirs
    audio_dir = dataset.audio_dir
    required = [INDEX_DIR] if index else []
    others = sorted({*required, *listed} - {audio_dir})
    report.column_dirs = others
    for column_dir in others:
        if column_dir not in listed:
            report.problems.append(f"{column_dir}/: missing column directory")
    first_seen: dict[str, str] = {}
    metadata = []
    for name in sorted(listed[audio_dir]):
        label = f"{audio_dir}/{name}"
        audio = _open(store, listed[audio_dir][name], audio_dir, label, report)
        if audio is None:
            continue
        report.shards += 1
        report.rows += audio.num_rows
        metadata.append((name, audio.schema.metadata))
        keys = audio.keys.to_pylist()
        for row, key in enumerate(keys):
            where = first_seen.setdefault(key, f"{label} row {row}")
            if where != f"{label} row {row}":
                report.problems.append(f"{label} row {row}: key {key!r} is also in {where}")
        for column_dir in others:
            path = listed.get(column_dir, {}).get(name)
            if path is None:
                if column_dir in listed:
                    report.problems.append(f"{column_dir}/{name}: missing (twin of {label})")
                continue
            twin = _open(store, path, column_dir, f"{column_dir}/{name}", report)
            if twin is not None:
                _compare_keys(twin, f"{column_dir}/{name}", keys, label, report)
    for column_dir in others:
        for name in sorted(set(listed.get(column_dir, {})) - set(listed[audio_dir])):
            report.problems.append(f"{column_dir}/{name}: stray shard, no {audio_dir}/{name}")
    incomplete = find_incomplete(metadata, listed[audio_dir], report.url)
    if incomplete is not None:
        report.problems.append(f"{audio_dir}/: incomplete: {incomplete.summary()}")
    _check_manifest(store, root, listed, report)
    return report


def _open(store: Any, path: str, column_dir: str, label: str, report: VerifyReport) -> Shard | None:
    """The shard at ``path``, or None with the problem reported (a store
    that fails past its retries raises: that is not the dataset's fault)."""
    try:
        return Shard(store.reader(path), column_dir=column_dir)
    except DataError as exc:
        where = f" ({exc.key!r} row {exc.offset})" if exc.key is not None else ""
        report.problems.append(f"{label}: {exc.reason}{where}")
    except StorageError as exc:
        if store.is_remote:
            raise
        report.problems.append(f"{label}: {exc}")
    return None


def _compare_keys(
    twin: Shard, label: str, keys: list[str], audio: str, report: VerifyReport
) -> None:
    ours = twin.keys.to_pylist()
    if len(ours) != len(keys):
        report.problems.append(f"{label}: {len(ours)} rows, {audio} has {len(keys)}")
        return
    for row, (mine, theirs) in enumerate(zip(ours, keys, strict=True)):
        if mine != theirs:
            report.problems.append(f"{label} row {row}: key {mine!r}, {audio} has {theirs!r} there")
            return


def _check_manifest(
    store: Any, root: str, listed: dict[str, dict[str, str]], report: VerifyReport
) -> None:
    """The manifest against a fresh listing and every shard's footer."""
    manifest, problem = read_manifest(store, root)
    if manifest is None:
        report.problems.append(f"{MANIFEST_NAME}: {problem}")
        return
    try:
        fresh = parse(store, root, json.dumps(describe(store, listed)).encode())
    except ManifestError as exc:  # a shard's footer no manifest can record
        report.problems.append(f"{MANIFEST_NAME}: cannot describe the store ({exc})")
        return
    for column_dir in sorted(set(manifest.column_dirs) | set(fresh.column_dirs)):
        said = manifest.column_dirs.get(column_dir, {})
        found = fresh.column_dirs.get(column_dir, {})
        for name in sorted(set(said) - set(found)):
            report.problems.append(f"{MANIFEST_NAME}: lists {column_dir}/{name}, not in the store")
        for name in sorted(set(found) - set(said)):
            report.problems.append(f"{MANIFEST_NAME}: does not list {column_dir}/{name}")
        for name in sorted(set(said) & set(found)):
            entry, actual = manifest.files[said[name]], fresh.files[found[name]]
            if entry != actual:
                report.problems.append(
                    f"{MANIFEST_NAME}: {column_dir}/{name} says {_entry(entry)}, "
                    f"the store has {_entry(actual)}"
                )
        if column_dir in said and manifest.fields.get(column_dir) != fresh.fields.get(column_dir):
            report.problems.append(
                f"{MANIFEST_NAME}: {column_dir}/ columns {manifest.fields.get(column_dir)}, "
                f"the store has {fresh.fields.get(column_dir)}"
            )


def _entry(entry: Any) -> str:
    footer = list(entry.footer) if entry.footer else None
    return f"{entry.file}: {entry.size} bytes, {entry.rows} rows, footer {footer}"
