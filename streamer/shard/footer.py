"""The layout of an Arrow IPC file, learned from a few small reads.

An IPC file is ``ARROW1\\0\\0``, a schema message, dictionary and record
batch messages (each: flatbuffer metadata, then a body of buffers), a
flatbuffer footer holding the schema again and every message's position,
the footer's length and ``ARROW1``. ``read_layout`` reads:

1. one suffix range (``TAIL_BYTES``, which remote readers fetch together
   with the object size in one request): the footer, and for small files
   everything else too;
2. in one batch of ranges (one request when the file has one record batch):
   the leading magic, every record batch's metadata plus the first
   ``PREFETCH_BYTES`` of its body, where the first columns' buffers (often
   ``__key__`` and the binary offsets) usually sit.

Nothing else is read: no column data, in particular none of a binary
column's values, and no dictionary batch (a dictionary-encoded column's
record batch buffers are its indices; its values, which nothing here reads,
live in the dictionary batches). The bytes read are kept (``Pieces``) so
later buffer reads inside them cost nothing.

The schema is the footer's, as pyarrow's file reader takes it: the schema
message at the head of the file is not read at all (polars writes it in a
form of its own). A record batch message is framed either way the IPC
format allows: the continuation marker ``0xFFFFFFFF`` and the metadata
length (Arrow 0.15 on), or the length alone (the legacy framing, which
``IpcWriteOptions(use_legacy_format=True)`` still writes).

Only the few flatbuffer tables this needs (Footer, Block, Message,
RecordBatch, FieldNode, Buffer, BodyCompression) are decoded, by the small
reader below, instead of depending on the ``flatbuffers`` runtime and
generated code; the footer's Schema table is handed to
``pyarrow.ipc.read_schema`` (wrapped in a Message of our making), which
knows every Arrow type.

Nothing read from the file is believed before it is bounded by the bytes
that could hold it: every block lies between the header and the footer,
every buffer inside its batch's body, counts are not negative. A file that
breaks any of this is a ``ShardError`` naming it (and the offset, where
there is one).
"""

from __future__ import annotations

import bisect
import dataclasses
import struct
from collections.abc import Iterable

import pyarrow as pa

from ..errors import ShardError
from ..storage.base import RangeReader

__all__ = [
    "PREFETCH_BYTES",
    "TAIL_BYTES",
    "BatchLayout",
    "FileLayout",
    "Pieces",
    "read_layout",
]

TAIL_BYTES = 64 * 1024
PREFETCH_BYTES = 4 * 1024

MAGIC = b"ARROW1"
_CONTINUATION = 0xFFFFFFFF
_BLOCK = struct.Struct("<qi4xq")  # offset, metaDataLength, (padding), bodyLength
_PAIR = struct.Struct("<qq")  # FieldNode (length, null_count) and Buffer (offset, length)
_SCHEMA_HEADER, _RECORD_BATCH_HEADER = 1, 3
#: A Message table wrapping a Schema table that follows it: root offset (16),
#: vtable (5 x u16: its size, the table's, version at +8, header_type at +10,
#: header at +4), padding, then the table (its vtable 12 bytes before it, the
#: header's offset, the version, the header type, padding to 32 bytes).
_MESSAGE = struct.Struct("<I5H2xiIhB5x")
_CODECS = {0: "lz4", 1: "zstd"}


@dataclasses.dataclass(frozen=True)
class BatchLayout:
    """One record batch: its rows, field nodes, and buffers at absolute file offsets."""

    num_rows: int
    nodes: list[tuple[int, int]]  # (length, null_count), depth-first over the schema
    buffers: list[tuple[int, int]]  # (file offset, length), depth-first over the schema
    compression: str | None  # "lz4" / "zstd" when the body's buffers are compressed
    #: Variadic buffers of each string_view / binary_view node, depth-first
    #: (``RecordBatch.variadicBufferCounts``): they follow its views buffer.
    variadic_counts: list[int]


@dataclasses.dataclass(frozen=True)
class FileLayout:
    schema: pa.Schema
    size: int
    batches: list[BatchLayout]
    #: (file offset, length) of the footer flatbuffer: a dataset manifest
    #: records it, so the next open asks for exactly the footer.
    footer: tuple[int, int] = (0, 0)


class Pieces:
    """Byte ranges of one object already in memory, to serve reads inside them.

    Kept sorted by start, none inside another (a piece added inside one
    held is dropped; pieces inside a new one go): their ends then rise with
    their starts, so the one piece that can hold a range is the last that
    starts at or before it, found by bisection. (A scan of every piece per
    read made opening a shard of N record batches cost N^2: 43 s for 4000
    batches, beyond 300 s for 20 000.)"""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._views: list[memoryview] = []

    def add(self, offset: int, data: memoryview) -> None:
        end = offset + len(data)
        first = bisect.bisect_left(self._starts, offset)
        if first and self._ends[first - 1] >= end:
            return  # inside a piece that starts before it
        starts_here = first < len(self._starts) and self._starts[first] == offset
        if starts_here and self._ends[first] >= end:
            return  # inside a piece that starts where it does
        last = first
        while last < len(self._starts) and self._ends[last] <= end:
            last += 1  # inside the new piece
        self._starts[first:last] = [offset]
        self._ends[first:last] = [end]
        self._views[first:last] = [data]

    def get(self, offset: int, length: int) -> memoryview | None:
        """``[offset, offset + length)`` if one piece holds it whole, else ``None``."""
        if length == 0:
            return memoryview(b"")
        at = bisect.bisect_right(self._starts, offset) - 1
        if at < 0 or self._ends[at] < offset + length:
            return None
        start = self._starts[at]
        return self._views[at][offset - start : offset - start + length]

    def read(self, reader: RangeReader, ranges: list[tuple[int, int]]) -> list[memoryview]:
        """Every range, from the pieces where possible, else in one uncached batch."""
        missing = sorted({r for r in ranges if self.get(*r) is None})
        if missing:  # a remote reader's call is a hop to the store loop, even for nothing
            for (offset, _), data in zip(missing, reader.fetch_many_sync(missing), strict=True):
                self.add(offset, data)
        found = [self.get(*r) for r in ranges]
        assert all(view is not None for view in found)
        return found  # type: ignore[return-value]


def read_layout(
    reader: RangeReader, label: str, tail: int = TAIL_BYTES
) -> tuple[FileLayout, Pieces]:
    """Parse the IPC file behind ``reader``; ``label`` names it in errors.

    ``tail`` is how many bytes the first (suffix) read asks for: a caller
    that knows where the footer starts (a dataset manifest) asks for just
    the footer; a shorter tail than the footer costs one more read, never a
    wrong answer."""
    pieces = Pieces()
    tail_start, tail = reader.read_tail_sync(max(tail, len(MAGIC) + 4))
    pieces.add(tail_start, tail)
    size = tail_start + len(tail)
    try:
        if size < 2 * len(MAGIC) + 8 or bytes(tail[-len(MAGIC) :]) != MAGIC:
            raise _invalid(_no_trailer(tail), label)
        (footer_length,) = struct.unpack_from("<i", tail, len(tail) - len(MAGIC) - 4)
        footer_start = size - len(MAGIC) - 4 - footer_length
        if not len(MAGIC) + 2 <= footer_start < size:
            raise _invalid(f"bad footer length {footer_length}", label)
        (footer,) = pieces.read(reader, [(footer_start, footer_length)])
        blocks, schema_message = _parse_footer(footer)
        _check_blocks(blocks, footer_start, label)
        heads = [(b[0], b[1] + min(PREFETCH_BYTES, b[2])) for b in blocks]
        head, *_ = pieces.read(reader, [(0, len(MAGIC)), *heads])
        if bytes(head) != MAGIC:
            raise _invalid("no ARROW1 header", label)
        schema = pa.ipc.read_schema(pa.py_buffer(schema_message))
        _decode_names(schema)
        batches = [_parse_batch(pieces.get(b[0], b[1]), b) for b in blocks]  # type: ignore[arg-type]
    except _Corrupt as exc:
        raise _invalid(exc.reason, label, exc.offset) from None
    except (struct.error, IndexError, ValueError, KeyError, OSError, pa.ArrowException) as exc:
        raise _invalid(f"corrupt metadata ({exc})", label) from exc
    footer_at = (footer_start, footer_length)
    return FileLayout(schema=schema, size=size, batches=batches, footer=footer_at), pieces


def _decode_names(fields: Iterable[pa.Field]) -> None:
    """Decode every field name now: pyarrow does it lazily, so a name that is
    not UTF-8 would fail later, anywhere, as a bare ``UnicodeDecodeError``."""
    for field in fields:
        _ = field.name
        _decode_names(field.type.field(i) for i in range(field.type.num_fields))


#: How an IPC stream ends (a message of length 0, after the continuation marker).
STREAM_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def _no_trailer(tail: memoryview) -> str:
    """Why a file without the trailer is not read: an IPC stream (Hugging Face
    datasets' ``.arrow`` files are) has no footer to find a cell's bytes by."""
    if bytes(tail[-len(STREAM_END) :]) == STREAM_END:
        return (
            "no ARROW1 trailer: an Arrow IPC stream, not an IPC file (rewrite it "
            "with pyarrow.ipc.new_file, or pack the audio with `streamer pack`)"
        )
    return "no ARROW1 trailer"


def _invalid(reason: str, label: str, offset: int | None = None) -> ShardError:
    return ShardError(f"cannot open as an Arrow IPC file: {reason}", shard=label, offset=offset)


class _Corrupt(ValueError):
    """Metadata that contradicts the file, at a known offset."""

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset


def _check_blocks(blocks: list[tuple[int, int, int]], footer_start: int, label: str) -> None:
    """Every record batch (metadata, then body) lies between the header and the footer."""
    for number, (offset, metadata_length, body_length) in enumerate(blocks):
        inside = len(MAGIC) + 2 <= offset and metadata_length > 0 and body_length >= 0
        if not inside or offset + metadata_length + body_length > footer_start:
            raise _invalid(f"record batch {number} lies outside the file", label, offset)


def _parse_footer(footer: memoryview) -> tuple[list[tuple[int, int, int]], bytes]:
    """(record batch blocks, schema message) of a Footer table."""
    table = _Table.root(footer)
    return table.structs(3, _BLOCK), _schema_message(footer, table)


def _schema_message(footer: memoryview, table: _Table) -> bytes:
    """The footer's Schema table as an encapsulated Schema message (what
    ``pyarrow.ipc.read_schema`` reads): a Message table of ours, pointing
    forward to the Schema table inside the footer's bytes, which follow it
    8-byte aligned, so every offset in them still holds."""
    schema = table._target(1)
    if not schema:
        raise ValueError("the footer has no schema")
    version = table.scalar(0, "<h")
    start = _MESSAGE.size  # where the footer's bytes begin, relative to the flatbuffer
    header = start + schema - 20  # the header field sits at byte 20 of the flatbuffer
    message = _MESSAGE.pack(16, 10, 12, 8, 10, 4, 12, header, version, _SCHEMA_HEADER)
    flatbuffer = message + bytes(footer) + bytes(-len(footer) % 8)
    return struct.pack("<Ii", _CONTINUATION, len(flatbuffer)) + flatbuffer


def _parse_batch(message: memoryview, block: tuple[int, int, int]) -> BatchLayout:
    """A record batch message (its metadata) at ``block`` -> its layout."""
    offset, metadata_length, _ = block
    if struct.unpack_from("<I", message)[0] == _CONTINUATION:
        (length,) = struct.unpack_from("<i", message, 4)
        flatbuffer = message[8 : 8 + length]
    else:  # the legacy framing (before Arrow 0.15): the length alone
        (length,) = struct.unpack_from("<i", message)
        flatbuffer = message[4 : 4 + length]
    root = _Table.root(flatbuffer)
    header = root.table(2)
    if root.scalar(1, "<B") != _RECORD_BATCH_HEADER or header is None:
        raise _Corrupt("message is not a record batch", offset)
    compression = header.table(3)
    codec = None if compression is None else _CODECS.get(compression.scalar(0, "<b"))
    if compression is not None and codec is None:
        raise _Corrupt("unknown compression codec", offset)
    body, body_length = offset + metadata_length, block[2]
    num_rows = header.scalar(0, "<q")
    nodes = header.structs(1, _PAIR)
    buffers = header.structs(2, _PAIR)
    if num_rows < 0 or any(not 0 <= nulls <= length for length, nulls in nodes):
        raise _Corrupt("negative row or null count", offset)
    for start, length in buffers:
        if start < 0 or length < 0 or start + length > body_length:
            raise _Corrupt("buffer outside its record batch", body + max(start, 0))
    return BatchLayout(
        num_rows=num_rows,
        nodes=nodes,
        buffers=[(body + start, length) for start, length in buffers],
        compression=codec,
        variadic_counts=[count for (count,) in header.structs(4, struct.Struct("<q"))],
    )


class _Table:
    """A flatbuffer table: a vtable of field offsets, fields by index."""

    __slots__ = ("_buffer", "_position", "_vtable", "_vtable_size")

    def __init__(self, buffer: memoryview, position: int) -> None:
        self._buffer = buffer
        self._position = position
        self._vtable = position - struct.unpack_from("<i", buffer, position)[0]
        self._vtable_size = struct.unpack_from("<H", buffer, self._vtable)[0]

    @classmethod
    def root(cls, buffer: memoryview) -> _Table:
        return cls(buffer, struct.unpack_from("<I", buffer)[0])

    def _field(self, index: int) -> int:
        """Absolute position of field ``index``, or 0 when it is absent."""
        entry = 4 + 2 * index
        if entry + 2 > self._vtable_size:
            return 0
        relative = struct.unpack_from("<H", self._buffer, self._vtable + entry)[0]
        return self._position + relative if relative else 0

    def _target(self, index: int) -> int:
        at = self._field(index)
        return at + struct.unpack_from("<I", self._buffer, at)[0] if at else 0

    def scalar(self, index: int, fmt: str, default: int = 0) -> int:
        at = self._field(index)
        return struct.unpack_from(fmt, self._buffer, at)[0] if at else default

    def table(self, index: int) -> _Table | None:
        at = self._target(index)
        return _Table(self._buffer, at) if at else None

    def structs(self, index: int, layout: struct.Struct) -> list[tuple[int, ...]]:
        """A vector of structs (``[Block]``, ``[Buffer]``, ...), unpacked."""
        at = self._target(index)
        if not at:
            return []
        (count,) = struct.unpack_from("<I", self._buffer, at)
        end = at + 4 + count * layout.size
        if end > len(self._buffer):
            raise ValueError("vector runs past the end of its buffer")
        return list(layout.iter_unpack(self._buffer[at + 4 : end]))
