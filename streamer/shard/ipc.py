"""Opening one Arrow IPC file shard without reading its data.

A shard is opened over any ``RangeReader`` — a local memory map or a remote
object — by reading only its footer and record-batch metadata
(``footer.py``), then the ``__key__`` column and the offsets buffers of its
binary columns. Binary cells are handed out as ``BlobHandle`` objects over
the same reader, at absolute file offsets computed from the metadata, never
through ``column[j]`` (which would materialise a scalar and copy the whole
episode). Over a local mapping every buffer is a zero-copy view into it.

A corrupt or hostile file fails as a ``ShardError`` naming the shard (and
the key and offset where there are ones), never as a bare Arrow or numpy
error: each batch's nodes and buffers must match the schema, its row count
the ``__key__`` column (whose offsets must fit in their buffer: the bytes
bound the rows), and a cell must lie inside its column's values.
"""

from __future__ import annotations

import os
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ShardError, StorageError
from ..storage.base import RangeReader
from ..storage.local import LocalFileReader
from ..timing import record
from .blob import BlobHandle
from .columns import ColumnSlot, build_array, column_slots, decode_shard_buffer, unsupported
from .decompressed import DecompressedValues
from .footer import TAIL_BYTES, read_layout

__all__ = ["KEY_COLUMN", "SHARD_SUFFIXES", "Shard", "shard_name_of"]

KEY_COLUMN = "__key__"
SHARD_SUFFIXES = (".wsds", ".arrow")

_BINARY_OFFSET_TYPES = {pa.binary(): np.int32, pa.large_binary(): np.int64}
#: A ``binary_view`` cell's view: length, then its first 4 bytes, then the
#: data buffer it lies in and its offset there; a cell of at most
#: ``_INLINE`` bytes lies in the view itself, after the length.
_VIEW = np.dtype([("length", "<i4"), ("prefix", "<i4"), ("buffer", "<i4"), ("offset", "<i4")])
_INLINE = 12


class Shard:
    """One IPC file shard of one column directory, opened lazily.

    ``source`` is a local path or a ``RangeReader`` (a remote object).
    ``label`` (``column_dir/name``) is what errors and logs call the shard.
    ``tail`` is the length of the first read, the footer's (``footer.read_layout``).
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | RangeReader,
        *,
        column_dir: str | None = None,
        tail: int = TAIL_BYTES,
    ) -> None:
        self.path = source.url if isinstance(source, RangeReader) else os.fspath(source)
        self.name = shard_name_of(self.path)
        self.column_dir = column_dir or _parent_name(self.path)
        self.label = f"{self.column_dir}/{self.name}"
        try:
            with record("shard_open"):
                self.reader = source if isinstance(source, RangeReader) else LocalFileReader(source)
            with record("footer_read"):
                self.layout, self._pieces = read_layout(self.reader, self.path, tail)
        except StorageError as exc:
            if isinstance(source, RangeReader) and not source.mapped:
                raise  # a store that cannot deliver is not a bad shard
            raise ShardError(f"cannot open as an Arrow IPC file: {exc}", shard=self.path) from exc
        self.schema: pa.Schema = self.layout.schema
        self._slots = self._batch_slots()  # per batch: view columns' buffers vary
        self._check_batches()
        rows = np.fromiter((b.num_rows for b in self.layout.batches), dtype=np.int64)
        #: Row number of the first row of each record batch, plus the total.
        self.batch_starts = np.concatenate([[0], np.cumsum(rows)])
        self._memory_readers: dict[tuple[int, str, int], DecompressedValues] = {}
        self._columns: dict[str, pa.ChunkedArray] = {}
        if KEY_COLUMN not in self.schema.names:
            raise ShardError(f"shard has no {KEY_COLUMN!r} column", shard=self.path)
        self._prefetch()
        # Built and validated from the bytes now: rows the metadata claims
        # that the key column's buffers cannot hold fail here, not in len().
        self.keys  # noqa: B018

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
        """A whole column (for small columns: keys, metadata). Zero-copy when local;
        a remote shard fetches it once and keeps it. Built and validated once."""
        cached = self._columns.get(name)
        if cached is not None:
            return cached
        if name not in self.schema.names:
            raise ShardError(
                f"no column {name!r} (columns: {', '.join(self.schema.names)})", shard=self.path
            )
        kind = self.schema.field(name).type
        reason = unsupported(kind)
        if reason:
            raise ShardError(f"column {name!r} is {kind}: {reason}", shard=self.path)
        chunks = []
        for batch in range(len(self.layout.batches)):
            layout, slot = self.layout.batches[batch], self._slots[batch][name]
            nodes = layout.nodes[slot.first_node : slot.first_node + slot.nodes]
            buffers = self._buffers(batch, range(slot.buffers), name)
            try:
                array = build_array(kind, iter(nodes), iter(buffers), iter(slot.variadic))
                array.validate(full=True)  # buffers too short for the lengths, bad offsets
            except pa.ArrowException as exc:
                raise ShardError(
                    f"column {name!r} of record batch {batch} is corrupt ({exc})",
                    shard=self.path,
                    offset=self._buffer_range(batch, name, 0)[0],
                ) from None
            chunks.append(array)
        column = self._columns[name] = pa.chunked_array(chunks, kind)
        return column

    @cached_property
    def keys(self) -> pa.Array:
        """The ``__key__`` column as one ``string`` array, whichever string
        type the shard stores (``large_string``, as polars writes, is cast:
        the columns of one dataset may differ, and their keys must compare
        equal row for row)."""
        keys = self.column(KEY_COLUMN)
        if pa.types.is_large_string(keys.type) or pa.types.is_string_view(keys.type):
            keys = keys.cast(pa.string())
        elif not pa.types.is_string(keys.type):
            raise ShardError(f"{KEY_COLUMN!r} is {keys.type}, not a string column", shard=self.path)
        keys = keys.combine_chunks()
        if keys.null_count:  # a row no key can name: every lookup and digest assumes text
            row = int(pc.index(keys.is_null(), True).as_py())
            batch, _ = self.locate(row)
            raise ShardError(
                f"{KEY_COLUMN!r} is null in row {row}",
                shard=self.path,
                offset=self._buffer_range(batch, KEY_COLUMN, 0)[0],
            )
        return keys

    def locate(self, row: int) -> tuple[int, int]:
        """(record batch, row within it) of a shard row."""
        if not 0 <= row < self.num_rows:
            raise IndexError(f"row {row} is out of range for {self.label} ({self.num_rows} rows)")
        batch = int(np.searchsorted(self.batch_starts, row, side="right")) - 1
        return batch, row - int(self.batch_starts[batch])

    def is_addressable(self, column: str) -> bool:
        """True when the column's bytes sit uncompressed in the file itself."""
        self._binary_column(column)
        return all(b.compression is None for b in self.layout.batches if b.num_rows)

    def blob(self, column: str, row: int) -> BlobHandle:
        """A handle on the binary cell ``column[row]``; reads nothing but the
        column's offsets or views (read when the shard opened)."""
        self._binary_column(column)
        batch, j = self.locate(row)
        key = self.keys[row].as_py()
        if pa.types.is_binary_view(self._type(column)):
            return self._view_blob(column, batch, j, key)
        validity, offsets_buffer = self._buffers(batch, (0, 1), column)
        width = np.dtype(_BINARY_OFFSET_TYPES[self._type(column)])
        offsets = np.frombuffer(
            offsets_buffer, dtype=width, count=offsets_buffer.size // width.itemsize
        )
        rows = self.layout.batches[batch].num_rows
        if len(offsets) <= rows or (validity.size and validity.size * 8 < rows):
            raise ShardError(
                f"{column!r} buffers are too short for {rows} rows", shard=self.path, key=key
            )
        if validity.size and not (validity[j >> 3] >> (j & 7)) & 1:
            raise ShardError(f"{column!r} is null", shard=self.path, key=key)
        start, end = int(offsets[j]), int(offsets[j + 1])
        return self._cell(column, batch, 2, start, end - start, key)

    def _view_blob(self, column: str, batch: int, j: int, key: str) -> BlobHandle:
        """The cell ``j`` of a ``binary_view`` column (what polars writes by
        default): its view names the data buffer and the offset the bytes
        are at (or holds them, up to ``_INLINE`` bytes)."""
        validity, views_buffer = self._buffers(batch, (0, 1), column)
        rows = self.layout.batches[batch].num_rows
        if views_buffer.size < rows * _VIEW.itemsize or (
            validity.size and validity.size * 8 < rows
        ):
            raise ShardError(
                f"{column!r} buffers are too short for {rows} rows", shard=self.path, key=key
            )
        if validity.size and not (validity[j >> 3] >> (j & 7)) & 1:
            raise ShardError(f"{column!r} is null", shard=self.path, key=key)
        view = np.frombuffer(views_buffer, dtype=_VIEW, count=1, offset=j * _VIEW.itemsize)[0]
        length = int(view["length"])
        if length < 0:
            raise ShardError(f"{column!r} cell has length {length}", shard=self.path, key=key)
        if length <= _INLINE:  # in the view itself, after its length
            return self._cell(column, batch, 1, j * _VIEW.itemsize + 4, length, key)
        (data_buffers,) = self._slots[batch][column].variadic
        if not 0 <= int(view["buffer"]) < data_buffers:
            raise ShardError(
                f"{column!r} cell is in data buffer {int(view['buffer'])} of {data_buffers}",
                shard=self.path,
                key=key,
            )
        return self._cell(column, batch, 2 + int(view["buffer"]), int(view["offset"]), length, key)

    def _cell(
        self, column: str, batch: int, index: int, start: int, length: int, key: str
    ) -> BlobHandle:
        """The handle on bytes ``[start, start + length)`` of buffer ``index``
        of a column's slot in one batch: in the file itself, or in what the
        buffer decompresses to (IPC-compressed shards)."""
        compressed = self.layout.batches[batch].compression is not None
        values_offset, values_length = self._buffer_range(batch, column, index)
        reader: RangeReader = (
            self._memory_reader(batch, column, index) if compressed else self.reader
        )
        if compressed:
            values_offset, values_length = 0, reader.size_sync()
        end = start + length
        if not 0 <= start <= end <= values_length:
            raise ShardError(
                f"{column!r} cell [{start}, {end}) lies outside its values ({values_length} bytes)",
                shard=self.path,
                key=key,
                offset=values_offset + max(start, 0),
            )
        return BlobHandle(reader, values_offset + start, length, shard=self.path, key=key)

    # -- buffers ----------------------------------------------------------------

    def _prefetch(self) -> None:
        """Read, in one batch, ``__key__`` and every binary column's validity
        and offsets (or views)."""
        binary = [f.name for f in self.schema if _is_binary(f.type)]
        ranges = [
            self._buffer_range(batch, column, index)
            for batch, slots in enumerate(self._slots)
            for column, indices in [
                (KEY_COLUMN, range(slots[KEY_COLUMN].buffers)),
                *((name, (0, 1)) for name in binary),
            ]
            for index in indices
        ]
        self._pieces.read(self.reader, [r for r in ranges if r[1]])

    def _buffer_range(self, batch: int, column: str, index: int) -> tuple[int, int]:
        return self.layout.batches[batch].buffers[self._slots[batch][column].first_buffer + index]

    def _batch_slots(self) -> list[dict[str, ColumnSlot]]:
        """Every batch's column slots (``columns.column_slots``)."""
        try:
            return [column_slots(self.schema, b.variadic_counts) for b in self.layout.batches]
        except ValueError as exc:
            raise ShardError(
                f"record batch metadata does not fit the schema: {exc}", shard=self.path
            ) from None

    def _check_batches(self) -> None:
        """Each batch has the schema's nodes and buffers, and every column its rows."""
        for number, (batch, slots) in enumerate(zip(self.layout.batches, self._slots, strict=True)):
            nodes = sum(slot.nodes for slot in slots.values())
            buffers = sum(slot.buffers for slot in slots.values())
            firsts = [slot.first_node for slot in slots.values()]
            if len(batch.nodes) != nodes or len(batch.buffers) != buffers:
                raise ShardError(
                    f"record batch {number} has {len(batch.nodes)} nodes and "
                    f"{len(batch.buffers)} buffers, the schema {nodes} and {buffers}",
                    shard=self.path,
                )
            if any(batch.nodes[first][0] != batch.num_rows for first in firsts):
                raise ShardError(
                    f"record batch {number}: a column's length is not its {batch.num_rows} rows",
                    shard=self.path,
                )

    def _buffers(
        self, batch: int, indices: range | tuple[int, ...], column: str
    ) -> list[pa.Buffer]:
        """Buffers ``indices`` of a column's slot in one batch, decoded."""
        ranges = [self._buffer_range(batch, column, i) for i in indices]
        views = self._pieces.read(self.reader, ranges)
        compression = self.layout.batches[batch].compression
        return [
            decode_shard_buffer(view, compression, shard=self.path, offset=start)
            for view, (start, _) in zip(views, ranges, strict=True)
        ]

    def _type(self, column: str) -> pa.DataType:
        return self.schema.field(column).type

    def _binary_column(self, column: str) -> None:
        if column not in self.schema.names:
            raise ShardError(f"no column {column!r}", shard=self.path)
        kind = self._type(column)
        if not _is_binary(kind):
            raise ShardError(
                f"{column!r} is {kind}, not binary, large_binary or binary_view", shard=self.path
            )

    def _memory_reader(self, batch: int, column: str, index: int = 2) -> DecompressedValues:
        """A reader over what buffer ``index`` of a column's slot decompresses
        to (IPC-compressed shards): the values of a binary column, one data
        buffer (or the views) of a ``binary_view`` one."""
        cache_key = (batch, column, index)
        if cache_key not in self._memory_readers:
            offset, length = self._buffer_range(batch, column, index)
            compression = self.layout.batches[batch].compression
            assert compression is not None
            url = f"{self.path}#batch={batch},column={column}" + (
                f",buffer={index}" if index != 2 else ""
            )
            reader = DecompressedValues(
                self.reader, offset, length, compression, shard=self.path, url=url
            )
            self._memory_readers[cache_key] = reader
        return self._memory_readers[cache_key]


def _is_binary(kind: pa.DataType) -> bool:
    """A column whose cells ``Shard.blob`` hands out."""
    return kind in _BINARY_OFFSET_TYPES or pa.types.is_binary_view(kind)


def _parent_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 2)[-2] if "/" in path else ""


def shard_name_of(path: str) -> str:
    """The shard name of a shard file's path or name: its last name
    without its shard suffix (``audio/shard-000001.wsds``: ``shard-000001``)."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    for suffix in SHARD_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base
