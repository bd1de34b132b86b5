"""Arrow arrays rebuilt from the buffers a record batch's metadata locates.

A record batch lists its field nodes and buffers depth-first over the
schema. ``column_slots`` says which of them belong to each top-level column
of one batch; ``build_array`` turns a column's (decompressed) buffers back
into an array with ``pyarrow.Array.from_buffers``, zero-copy when the
buffers are views of a memory map.

What a node's buffers are, per the IPC format: a validity bitmap first
(none for null, union and run-end-encoded nodes), then its type's own; a
``string_view`` / ``binary_view`` node has its views buffer followed by as
many data buffers as the batch's ``variadicBufferCounts`` gives it (one
entry per such node, depth-first), so the slots of the columns after it
differ from batch to batch; a dictionary-encoded node holds its indices
only (the values are in the file's dictionary batches). Every column's
buffers are counted, so a column that cannot be rebuilt (``unsupported``)
never moves the others: only asking for it fails.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator, Sequence

import pyarrow as pa

from ..errors import ShardError

__all__ = [
    "ColumnSlot",
    "build_array",
    "column_slots",
    "decode_buffer",
    "decode_shard_buffer",
    "unsupported",
]

#: Most bytes one compressed byte decompresses to, per IPC codec (zstd's RLE
#: blocks: 128 KiB from 4 bytes; LZ4 frames: about 255), with a margin.
_MAX_RATIO = {"zstd": 1 << 16, "lz4": 1 << 9}
_SLACK = 1 << 16


@dataclasses.dataclass(frozen=True)
class ColumnSlot:
    """Where one top-level column's nodes and buffers sit in a batch's lists."""

    first_node: int
    nodes: int
    first_buffer: int
    buffers: int
    #: Variadic buffer counts of the column's view nodes, depth-first.
    variadic: tuple[int, ...] = ()


def column_slots(schema: pa.Schema, variadic_counts: Sequence[int] = ()) -> dict[str, ColumnSlot]:
    """The slot of every top-level column of ``schema`` in a record batch
    whose ``variadicBufferCounts`` are ``variadic_counts``; ``ValueError``
    when those are not one count, at least 0, per view node."""
    views = sum(_views(field.type) for field in schema)
    if len(variadic_counts) != views or any(count < 0 for count in variadic_counts):
        raise ValueError(
            f"variadic buffer counts {list(variadic_counts)[:8]} "
            f"for {views} string_view / binary_view columns"
        )
    slots, node, buffer, view = {}, 0, 0, 0
    for field in schema:
        counts = tuple(variadic_counts[view : view + _views(field.type)])
        nodes, buffers = _count(field.type)
        buffers += sum(counts)
        slots[field.name] = ColumnSlot(node, nodes, buffer, buffers, counts)
        node, buffer, view = node + nodes, buffer + buffers, view + len(counts)
    return slots


def unsupported(kind: pa.DataType) -> str | None:
    """Why a type cannot be rebuilt here, or ``None`` when it can."""
    if pa.types.is_dictionary(kind):
        return "dictionary-encoded columns are not read (their values are in dictionary batches)"
    for index in range(kind.num_fields):
        reason = unsupported(kind.field(index).type)
        if reason:
            return reason
    return None


def _is_view(kind: pa.DataType) -> bool:
    """A type with variadic buffers (``string_view``, ``binary_view``)."""
    return pa.types.is_string_view(kind) or pa.types.is_binary_view(kind)


def _views(kind: pa.DataType) -> int:
    """Nodes with variadic buffers in a node of this type and its children."""
    own = 1 if _is_view(kind) else 0
    return own + sum(_views(kind.field(i).type) for i in range(kind.num_fields))


def _own_buffers(kind: pa.DataType) -> int:
    """Buffers IPC writes for a node of this type (children and variadic
    buffers not included)."""
    if pa.types.is_null(kind) or pa.types.is_run_end_encoded(kind):
        return 0
    if pa.types.is_union(kind):
        return kind.num_buffers - 1  # IPC unions have no validity bitmap
    if pa.types.is_dictionary(kind):
        return kind.index_type.num_buffers  # the indices: validity and values
    if _is_view(kind):
        return 2  # validity and views
    return kind.num_buffers


def _count(kind: pa.DataType) -> tuple[int, int]:
    if pa.types.is_dictionary(kind):
        return 1, _own_buffers(kind)  # the value type's children are in the dictionary batch
    nodes, buffers = 1, _own_buffers(kind)
    for index in range(kind.num_fields):
        child_nodes, child_buffers = _count(kind.field(index).type)
        nodes, buffers = nodes + child_nodes, buffers + child_buffers
    return nodes, buffers


def decode_buffer(raw: memoryview, compression: str | None) -> pa.Buffer:
    """One body buffer as a pyarrow buffer, decompressed if needed.

    Compressed bodies prefix each buffer with its uncompressed length (-1:
    stored uncompressed), which is believed only up to what the codec can
    make of the compressed bytes (``ValueError`` beyond: nothing is allocated
    for a lie).
    """
    if compression is None or len(raw) == 0:
        return pa.py_buffer(raw)
    if len(raw) < 8:
        raise ValueError("compressed buffer without its length")
    (length,) = struct.unpack_from("<q", raw)
    if length == -1:
        return pa.py_buffer(raw[8:])
    if not 0 <= length <= _MAX_RATIO[compression] * (len(raw) - 8) + _SLACK:
        raise ValueError(f"{len(raw) - 8} compressed bytes cannot hold {length}")
    return pa.decompress(raw[8:], decompressed_size=length, codec=compression, asbytes=False)


def decode_shard_buffer(
    raw: memoryview, compression: str | None, *, shard: str, offset: int
) -> pa.Buffer:
    """``decode_buffer``, failing as a ``ShardError`` at ``offset`` of ``shard``."""
    try:
        return decode_buffer(raw, compression)
    except (ValueError, OSError, pa.ArrowException) as exc:
        raise ShardError(f"corrupt compressed buffer ({exc})", shard=shard, offset=offset) from None


def build_array(
    kind: pa.DataType,
    nodes: Iterator[tuple[int, int]],
    buffers: Iterator[pa.Buffer],
    variadic: Iterator[int] | None = None,
) -> pa.Array:
    """Rebuild one node (and its children) from depth-first node, buffer and
    variadic buffer count iterators (``ColumnSlot.variadic``)."""
    variadic = iter(()) if variadic is None else variadic
    length, null_count = next(nodes)
    count = _own_buffers(kind) + (next(variadic) if _is_view(kind) else 0)
    own: list[pa.Buffer | None] = [next(buffers) for _ in range(count)]
    if pa.types.is_null(kind) or pa.types.is_union(kind) or pa.types.is_run_end_encoded(kind):
        own = [None, *own]  # no validity bitmap in IPC; pyarrow wants the slot
    elif own[0] is not None and own[0].size == 0:
        own[0] = None  # an empty validity bitmap: no nulls
    children = [
        build_array(kind.field(i).type, nodes, buffers, variadic) for i in range(kind.num_fields)
    ]
    if pa.types.is_null(kind):
        null_count = length
    elif own[0] is None:
        null_count = 0
    return pa.Array.from_buffers(kind, length, own, null_count, children=children or None)
