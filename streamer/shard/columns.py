"""Arrow arrays rebuilt from the buffers a record batch's metadata locates.

A record batch lists its field nodes and buffers depth-first over the
schema. ``column_slots`` says which of them belong to each top-level column;
``build_array`` turns a column's (decompressed) buffers back into an array
with ``pyarrow.Array.from_buffers``, zero-copy when the buffers are views of
a memory map.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator

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

_VIEW_TYPES = ("is_string_view", "is_binary_view", "is_list_view", "is_large_list_view")
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


def column_slots(schema: pa.Schema) -> dict[str, ColumnSlot]:
    """The slot of every top-level column of ``schema``."""
    slots, node, buffer = {}, 0, 0
    for field in schema:
        nodes, buffers = _count(field.type)
        slots[field.name] = ColumnSlot(node, nodes, buffer, buffers)
        node, buffer = node + nodes, buffer + buffers
    return slots


def unsupported(kind: pa.DataType) -> str | None:
    """Why a type cannot be rebuilt here, or ``None`` when it can."""
    if pa.types.is_dictionary(kind):
        return "dictionary-encoded"
    if any(getattr(pa.types, check, lambda _: False)(kind) for check in _VIEW_TYPES):
        return "a view type"
    for index in range(kind.num_fields):
        reason = unsupported(kind.field(index).type)
        if reason:
            return reason
    return None


def _own_buffers(kind: pa.DataType) -> int:
    """Buffers IPC writes for a node of this type (children not included)."""
    if pa.types.is_null(kind) or pa.types.is_run_end_encoded(kind):
        return 0
    if pa.types.is_union(kind):
        return kind.num_buffers - 1  # IPC unions have no validity bitmap
    return kind.num_buffers


def _count(kind: pa.DataType) -> tuple[int, int]:
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
    kind: pa.DataType, nodes: Iterator[tuple[int, int]], buffers: Iterator[pa.Buffer]
) -> pa.Array:
    """Rebuild one node (and its children) from depth-first node and buffer iterators."""
    length, null_count = next(nodes)
    own: list[pa.Buffer | None] = [next(buffers) for _ in range(_own_buffers(kind))]
    if pa.types.is_null(kind) or pa.types.is_union(kind) or pa.types.is_run_end_encoded(kind):
        own = [None, *own]  # no validity bitmap in IPC; pyarrow wants the slot
    elif own[0] is not None and own[0].size == 0:
        own[0] = None  # an empty validity bitmap: no nulls
    children = [build_array(kind.field(i).type, nodes, buffers) for i in range(kind.num_fields)]
    if pa.types.is_null(kind):
        null_count = length
    elif own[0] is None:
        null_count = 0
    return pa.Array.from_buffers(kind, length, own, null_count, children=children or None)
