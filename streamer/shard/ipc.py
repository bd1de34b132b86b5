"""Opening one Arrow IPC file shard without reading its data.

A local shard is memory-mapped and opened with ``pyarrow.ipc``: that parses
only the footer and the record-batch metadata, and every column becomes a view
onto the mapping. Binary cells are handed out as ``BlobHandle`` objects whose
offsets come from the array's offsets buffer, never through ``column[j]``
(which would materialise a scalar and copy the whole episode).
"""

from __future__ import annotations

import os
from functools import cached_property

import numpy as np
import pyarrow as pa

from ..errors import ShardError, StorageError
from ..storage.local import LocalFileReader, MemoryReader
from .blob import BlobHandle

__all__ = ["KEY_COLUMN", "SHARD_SUFFIXES", "Shard"]

KEY_COLUMN = "__key__"
SHARD_SUFFIXES = (".wsds", ".arrow")

_BINARY_OFFSET_TYPES = {pa.binary(): np.int32, pa.large_binary(): np.int64}


class Shard:
    """One IPC file shard of one column directory, opened lazily.

    ``label`` (``column_dir/name``) is what errors and logs call the shard.
    """

    def __init__(self, path: str | os.PathLike[str], *, column_dir: str | None = None) -> None:
        self.path = os.fspath(path)
        self.name = _shard_name(self.path)
        self.column_dir = column_dir or os.path.basename(os.path.dirname(self.path))
        self.label = f"{self.column_dir}/{self.name}"
        try:
            self.reader = LocalFileReader(self.path)
            ipc = pa.ipc.open_file(self.reader.mapping)
            self.schema: pa.Schema = ipc.schema
            self._batches = [ipc.get_batch(i) for i in range(ipc.num_record_batches)]
        except (StorageError, pa.ArrowException, OSError) as exc:
            raise ShardError(f"cannot open as an Arrow IPC file: {exc}", shard=self.path) from exc
        rows = np.fromiter((b.num_rows for b in self._batches), dtype=np.int64)
        #: Row number of the first row of each record batch, plus the total.
        self.batch_starts = np.concatenate([[0], np.cumsum(rows)])
        self._memory_readers: dict[tuple[int, str], MemoryReader] = {}
        if KEY_COLUMN not in self.schema.names:
            raise ShardError(f"shard has no {KEY_COLUMN!r} column", shard=self.path)

    def __repr__(self) -> str:
        return f"Shard({self.path!r}, rows={self.num_rows})"

    @property
    def num_rows(self) -> int:
        return int(self.batch_starts[-1])

    @property
    def metadata(self) -> dict[str, str]:
        """Schema metadata (``batch_size`` and the like), decoded as text."""
        raw = self.schema.metadata or {}
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}

    def column(self, name: str) -> pa.ChunkedArray:
        """A whole column, zero-copy (for small columns: keys, metadata)."""
        if name not in self.schema.names:
            raise ShardError(
                f"no column {name!r} (columns: {', '.join(self.schema.names)})", shard=self.path
            )
        return pa.chunked_array(
            [b.column(name) for b in self._batches], self.schema.field(name).type
        )

    @cached_property
    def keys(self) -> pa.Array:
        """The ``__key__`` column as one string array."""
        keys = self.column(KEY_COLUMN)
        if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
            raise ShardError(f"{KEY_COLUMN!r} is {keys.type}, not a string column", shard=self.path)
        return keys.combine_chunks()

    def locate(self, row: int) -> tuple[int, int]:
        """(record batch, row within it) of a shard row."""
        if not 0 <= row < self.num_rows:
            raise IndexError(f"row {row} is out of range for {self.label} ({self.num_rows} rows)")
        batch = int(np.searchsorted(self.batch_starts, row, side="right")) - 1
        return batch, row - int(self.batch_starts[batch])

    def is_addressable(self, column: str) -> bool:
        """True when the column's bytes sit uncompressed in the file itself."""
        return all(self._values_in_file(b.column(column)) for b in self._batches if b.num_rows)

    def blob(self, column: str, row: int) -> BlobHandle:
        """A handle on the binary cell ``column[row]``; reads nothing."""
        batch_index, j = self.locate(row)
        array = self._batches[batch_index].column(self._binary_column(column))
        key = self.keys[row].as_py()
        if array.null_count and array.slice(j, 1).null_count:
            raise ShardError(f"{column!r} is null", shard=self.path, key=key)
        _, offsets_buffer, values = array.buffers()[:3]
        offsets = np.frombuffer(offsets_buffer, dtype=_BINARY_OFFSET_TYPES[array.type])
        start, end = int(offsets[array.offset + j]), int(offsets[array.offset + j + 1])
        if self._values_in_file(array):
            base = values.address - self.reader.base_address
            return BlobHandle(self.reader, base + start, end - start, shard=self.path, key=key)
        reader = self._memory_reader(batch_index, column, values)
        return BlobHandle(reader, start, end - start, shard=self.path, key=key)

    def _binary_column(self, column: str) -> str:
        if column not in self.schema.names:
            raise ShardError(f"no column {column!r}", shard=self.path)
        kind = self.schema.field(column).type
        if kind not in _BINARY_OFFSET_TYPES:
            raise ShardError(f"{column!r} is {kind}, not binary or large_binary", shard=self.path)
        return column

    def _values_in_file(self, array: pa.Array) -> bool:
        values = array.buffers()[2]
        if values is None or values.size == 0:
            return True
        start = values.address - self.reader.base_address
        return start >= 0 and start + values.size <= self.reader.size_sync()

    def _memory_reader(self, batch: int, column: str, values: pa.Buffer) -> MemoryReader:
        """A reader over a decompressed values buffer (IPC-compressed shards)."""
        cache_key = (batch, column)
        if cache_key not in self._memory_readers:
            url = f"{self.path}#batch={batch},column={column}"
            self._memory_readers[cache_key] = MemoryReader(values, url=url)
        return self._memory_readers[cache_key]


def _shard_name(path: str) -> str:
    base = os.path.basename(path)
    for suffix in SHARD_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base
