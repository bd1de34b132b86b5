"""The dataset manifest: a dataset's layout in one small object, so opening it
over a network costs one request instead of a listing per column directory.

``streamer pack`` and ``streamer index`` write ``streamer-manifest.json``
beside the column directories, last (after every shard) and atomically
(``Store.put_sync``). It records, per column directory, its column names
and, per shard, the file name, size, row count and the footer's position,
so that opening a shard asks for exactly its footer. Version 1::

    {"format": "streamer-dataset-manifest", "version": 1,
     "columns": {"audio": {"fields": ["__key__", "audio"],
                           "shards": {"shard-000000": {"file": "shard-000000.wsds",
                                                       "size": 11041362, "rows": 16,
                                                       "footer": [11040954, 398]}}},
                 "audio_info": {...}, "seek_index": {...}}}

A manifest is a claim, never trusted blindly: ``read_manifest`` refuses one
that cannot be right (not JSON, an unknown version, names that are not
plain names, sizes or footers that contradict each other), and the dataset
checks every shard it opens against its entry (``ShardFile.mismatch``). A
refused or contradicted manifest costs the listing it was meant to spare,
with a warning; it never changes what is served. Datasets written by other
tools (wsds) have none and are listed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

from ..errors import ShardError, StorageError
from ..shard.footer import MAGIC, TAIL_BYTES, FileLayout, read_layout
from ..shard.ipc import SHARD_SUFFIXES
from ..storage.base import NotFound, Store
from ..storage.retry import StoreUnavailable

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "VERSION",
    "Manifest",
    "ManifestError",
    "ShardFile",
    "describe",
    "read_manifest",
    "store_manifest",
]

log = logging.getLogger(__name__)

MANIFEST_NAME = "streamer-manifest.json"
FORMAT = "streamer-dataset-manifest"
VERSION = 1
#: A manifest larger than this is refused (a million shards take about 100 MB).
MAX_MANIFEST_BYTES = 64 << 20
#: The bytes after an IPC footer: its length (int32) and ``ARROW1``.
_TRAILER = 4 + len(MAGIC)
#: Sizes past this are not sizes (2**53: what a JSON number holds exactly).
_MAX_SIZE = 1 << 53


class ManifestError(ValueError):
    """A manifest that cannot be right, and why (it is then not used)."""


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """What a manifest says of one shard file."""

    file: str
    size: int
    rows: int | None
    footer: tuple[int, int] | None  # (offset, length): None for a shard that did not open

    @property
    def tail(self) -> int:
        """The first read that opens this shard: the whole of a small file,
        else exactly its footer and trailer."""
        if self.footer is None or self.size <= TAIL_BYTES:
            return TAIL_BYTES
        return self.size - self.footer[0]

    def mismatch(self, layout: FileLayout, fields: list[str] | None) -> str | None:
        """How the shard as read (``layout``) contradicts this entry, or None."""
        rows = sum(batch.num_rows for batch in layout.batches)
        if layout.size != self.size:
            return f"{layout.size} bytes, the manifest says {self.size}"
        if self.footer is not None and layout.footer != self.footer:
            return f"footer at {list(layout.footer)}, the manifest says {list(self.footer)}"
        if self.rows is not None and rows != self.rows:
            return f"{rows} rows, the manifest says {self.rows}"
        if fields is not None and layout.schema.names != fields:
            return f"columns {layout.schema.names}, the manifest says {fields}"
        return None


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A parsed manifest: the layout a listing would give, plus each file's entry."""

    #: ``{column_dir: {shard_name: store path}}``, as ``Dataset.column_dirs``.
    column_dirs: dict[str, dict[str, str]]
    #: Entry of every shard file, by store path.
    files: dict[str, ShardFile]
    #: Column names of each column directory's shards.
    fields: dict[str, list[str]]

    @property
    def sizes(self) -> dict[str, int]:
        return {path: entry.size for path, entry in self.files.items()}


def read_manifest(store: Store, root: str) -> tuple[Manifest | None, str | None]:
    """(the manifest of the dataset at ``root``, None) or (None, why not).

    One suffix request. An absent manifest (``NotFound``) is the reason
    ``"absent"``; one that cannot be read (denied, a proxy's error page) or
    parsed says so, and the caller warns and lists instead. A
    store that gave up (down for its whole budget) raises ``StoreUnavailable``:
    the listing that followed waited on the same outage once more.
    """
    path = store.join(root, MANIFEST_NAME)
    try:
        start, body = store.reader(path).read_tail_sync(MAX_MANIFEST_BYTES + 1)
    except StoreUnavailable:
        raise
    except NotFound as exc:
        log.debug("%s: no manifest (%s)", store.display(path), exc)
        return None, "absent"
    except StorageError as exc:
        return None, f"cannot be read ({exc})"
    if start > 0 or len(body) > MAX_MANIFEST_BYTES:
        return None, f"larger than {MAX_MANIFEST_BYTES} bytes"
    try:
        return parse(store, root, bytes(body)), None
    except ManifestError as exc:
        return None, str(exc)


def parse(store: Store, root: str, text: bytes) -> Manifest:
    """A manifest from its JSON; ``ManifestError`` when it cannot be right."""
    try:
        document = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ManifestError(f"not a {FORMAT}")
    version = document.get("version")
    if version != VERSION:
        raise ManifestError(f"version {version!r}; this streamer reads version {VERSION}")
    columns = _mapping(document.get("columns"), "columns")
    if not columns:
        raise ManifestError("no column directories")
    column_dirs: dict[str, dict[str, str]] = {}
    files: dict[str, ShardFile] = {}
    fields: dict[str, list[str]] = {}
    for column_dir, column in columns.items():
        _check_name(column_dir, "column directory")
        column = _mapping(column, f"columns.{column_dir}")
        names = column.get("fields")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ManifestError(f"columns.{column_dir}.fields is not a list of names")
        fields[column_dir] = names
        shards = column_dirs[column_dir] = {}
        for name, entry in _mapping(column.get("shards"), f"{column_dir}.shards").items():
            _check_name(name, "shard")
            parsed = _shard_file(_mapping(entry, f"{column_dir}/{name}"), name, column_dir)
            path = shards[name] = store.join(root, column_dir, parsed.file)
            files[path] = parsed
    return Manifest(column_dirs=column_dirs, files=files, fields=fields)


def describe(
    store: Store,
    column_dirs: Mapping[str, Mapping[str, str]],
    metadata: dict[str, list[tuple[str, Mapping[bytes, bytes] | None]]] | None = None,
) -> dict[str, Any]:
    """The manifest document of these column directories (``{dir: {name: path}}``,
    a fresh listing): every shard's footer is read to record where it is. A
    shard that does not open is recorded by name and size alone, so readers
    of the manifest still find it, and report it as the listing would.
    ``metadata``, when given, gets each directory's shards' names and
    schema metadata from those footers (what ``write_manifest`` checks the plan by)."""
    columns: dict[str, Any] = {}
    for column_dir, shards in sorted(column_dirs.items()):
        entries: dict[str, Any] = {}
        fields: list[str] | None = None
        for name, path in sorted(shards.items()):
            reader = store.reader(path)
            file = store.basename(path)
            try:
                layout, _ = read_layout(reader, store.display(path))
            except ShardError:
                entries[name] = {"file": file, "size": reader.size_sync()}
                continue
            if metadata is not None:
                metadata.setdefault(column_dir, []).append((name, layout.schema.metadata))
            rows = sum(batch.num_rows for batch in layout.batches)
            footer = list(layout.footer)
            entries[name] = {"file": file, "size": layout.size, "rows": rows, "footer": footer}
            fields = fields or layout.schema.names
        columns[column_dir] = {"fields": fields or [], "shards": entries}
    return {"format": FORMAT, "version": VERSION, "columns": columns}


def store_manifest(store: Store, root: str, document: Mapping[str, Any]) -> str:
    """Write ``document`` as the manifest of the dataset at ``root`` (atomically),
    unless the manifest there already says exactly this; returns its store path."""
    path = store.join(root, MANIFEST_NAME)
    body = json.dumps(document, separators=(",", ":")).encode()
    try:
        start, current = store.reader(path).read_tail_sync(len(body) + 1)
    except StorageError:
        current, start = b"", 0
    if start != 0 or bytes(current) != body:
        store.put_sync(path, body)
    return path


def _shard_file(entry: Mapping[str, Any], name: str, column_dir: str) -> ShardFile:
    where = f"{column_dir}/{name}"
    file = entry.get("file")
    if not isinstance(file, str) or file not in {name + suffix for suffix in SHARD_SUFFIXES}:
        raise ManifestError(f"{where}: file {file!r} is not the shard's file name")
    size = _count(entry.get("size"), f"{where}: size")
    rows = entry.get("rows")
    rows = None if rows is None else _count(rows, f"{where}: rows")
    footer = entry.get("footer")
    if footer is not None:
        if not isinstance(footer, list) or len(footer) != 2:
            raise ManifestError(f"{where}: footer is not [offset, length]")
        offset, length = (_count(value, f"{where}: footer") for value in footer)
        if length == 0 or offset + length + _TRAILER != size:
            raise ManifestError(f"{where}: footer {footer} does not end a file of {size} bytes")
        footer = (offset, length)
    return ShardFile(file=file, size=size, rows=rows, footer=footer)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"{what} is not an object")
    return value


def _count(value: Any, what: str) -> int:
    """A non-negative integer that can be a byte or row count."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_SIZE:
        raise ManifestError(f"{what} {value!r} is not a size")
    return value


def _check_name(name: str, what: str) -> None:
    """A column directory or shard name is a plain name: a manifest must not
    point readers outside the dataset (``..``, ``/``) or at hidden files."""
    if not name or name.startswith(".") or "/" in name or "\\" in name or "\0" in name:
        raise ManifestError(f"{what} name {name!r} is not a plain name")
