"""The ``SeekIndex`` of one episode and its Arrow form in ``seek_index/`` shards.

On disk an index is one row of a struct column ``seek_index`` (beside
``__key__``, ``num_bytes``, the length of the blob it was built from,
``content_crc``, CRC-32s of bytes of that blob, ``span_size`` /
``span_crc``, CRC-32s of its whole audio data span by span: ``content``,
and ``row_crc``, a CRC-32 of the row itself: ``row_checksum``), in a shard
with the same name and rows as the audio shard. The
seek points are two ``list<int64>`` children, so reading an episode's points
is offsets arithmetic on the list values buffer: two numpy views, no Python
object per point. ``IndexReader`` keeps those views per record batch, which is
what makes a lookup a few microseconds regardless of the index's length.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ShardError
from ..shard.ipc import Shard

__all__ = [
    "BLOB_BYTES_COLUMN",
    "CONTENT_COLUMN",
    "CONTENT_TYPE",
    "ENDS_EARLY",
    "EXACT_FROM",
    "INDEX_COLUMN",
    "INDEX_DIR",
    "INDEX_REVISION",
    "INDEX_TYPE",
    "NO_INDEX",
    "OK",
    "REVISION_KEY",
    "ROW_CRC_COLUMN",
    "SPAN_COLUMN",
    "SPAN_SIZE_COLUMN",
    "UNVERIFIED",
    "VERIFIED",
    "IndexReader",
    "SeekIndex",
    "row_checksum",
    "to_struct_array",
]

INDEX_DIR = "seek_index"
INDEX_COLUMN = "seek_index"
#: An index shard's schema metadata key: the revision of the builder that
#: wrote it (absent in shards written before revisions: 0).
REVISION_KEY = b"streamer.index_revision"
#: The builder revision this version writes: raised by a fix that changes
#: what the builder stores for a codec, so that what an older one stored
#: for it (``EXACT_FROM``) is rebuilt, not served.
INDEX_REVISION = 6
#: Codec -> the first builder revision whose rows it serves crops from;
#: rows an older builder stored for it place or pre-roll crops wrongly:
#: they are not served (their crops fall back, ``checks.stale_build``)
#: and ``streamer index`` rebuilds their shards.
#: 1: Opus's pre-roll for the modes of its packets (SILK: 1-2 s; before,
#: 0.5 s left some crops of speech up to 1.86 off; docs/decoding.md).
#: 2: ALAC and FLAC in MP4 whose ``stts`` does not time the packets as they
#: decode (a gap, a clock's jitter) have no index (crops were a packet off).
#: 3: an Ogg page whose granule is not where its packets end has no index
#: (crops after it were that far off: Opus, FLAC; Vorbis failed).
#: 4: a fixed-blocksize FLAC stream whose frames before the last do not all
#: hold STREAMINFO's block size, or with a frame that comes again, has no
#: native index (crops after a short or repeated frame were that far off;
#: with a STREAMINFO of 65535 every crop failed).
#: 5: AC-3 and E-AC-3 crops decode from 0.1 s before them, their dither
#: seeded per frame, not from the first packet; an older row was checked
#: only as decoded from there (its pre-roll never checked, a generic one's
#: measured loss stored without the codec's 0.1 s on top).
#: 6: FFmpeg's packet index ends where FFmpeg's decode ends early (a file cut
#: short inside a packet), which had "no index": no codec's rows change,
#: the "no index" rows of older builders are built again.
EXACT_FROM: dict[str, int] = {"opus": 3, "alac": 2, "flac": 4, "vorbis": 3, "ac3": 5, "eac3": 5}
#: The byte length of the blob each row was built from. Byte positions are
#: only right for that blob: an audio shard re-packed from retagged files
#: (an ID3v2 tag or a WAV LIST chunk grown, every frame moved) keeps its keys,
#: durations and codecs, and the old index would place crops at the old
#: offsets. Shards written before it existed lack it (no check then).
BLOB_BYTES_COLUMN = "num_bytes"
#: CRC-32s of bytes of the blob each row was built from that every crop
#: reads anyway (``content.checked_ranges``): a blob rewritten to the same
#: length has other bytes there. Null, or absent in older shards: not checked.
CONTENT_COLUMN = "content_crc"
CONTENT_TYPE = pa.list_(pa.uint32())
#: CRC-32s of the whole audio data, one per span (``content.span_ranges``):
#: bytes damaged between seek points. Same type as ``CONTENT_COLUMN``; null,
#: or absent in older shards: not checked.
SPAN_COLUMN = "span_crc"
#: What a span is, per row (int64): seek-point intervals per span CRC, for
#: PCM bytes per span from ``data_start`` (``content.span_size``).
SPAN_SIZE_COLUMN = "span_size"
#: A CRC-32 of each row as a whole (``row_checksum``: its key, every field
#: of its ``seek_index`` and the columns above): a row whose numbers changed
#: after the build (a flipped bit, a hand edit, cells moved between rows)
#: places crops wrongly while every other check may still pass (a
#: ``timescale`` one off, a seek point a byte late). Null, or absent in
#: older shards: not checked.
ROW_CRC_COLUMN = "row_crc"
OK = "ok"
NO_INDEX = "no index"
#: How the ``reason`` of an index whose episode FFmpeg's decode ends before
#: its blob does begins (a file cut short inside a packet, damage): the index
#: ends there, as the full decode does (docs/seek-index.md); ``streamer index``
#: and ``inspect`` report such episodes, whose later bytes no crop serves.
ENDS_EARLY = "FFmpeg's decode ends early"
#: ``SeekIndex.verdict`` values: what the indexer's own check of the index found.
UNVERIFIED = "unverified"
VERIFIED = "verified"

_EMPTY = np.zeros(0, dtype=np.int64)
_NO_CRCS = np.zeros(0, dtype=np.uint32)
_INT64 = np.dtype(np.int64)


@dataclass(frozen=True, eq=False)
class SeekIndex:
    """Where an episode's audio is, and how to start decoding anywhere in it.

    Positions on the *native timeline* count in ``timescale`` units per second
    from the start of the encoded stream, before any gapless trimming; see
    ``docs/seek-index.md`` for what the native timeline is per codec. The gapless
    decode (what FFmpeg yields for the whole file) is the native timeline from
    ``first_sample`` for ``num_samples`` units.

    ``sample_pos[i]`` / ``byte_pos[i]``: a decoder that starts reading the
    blob at ``byte_pos[i]`` (after feeding it the ``header`` ranges) gets the
    frame or page whose first sample is at native position ``sample_pos[i]``.
    Both ascend strictly. Decoders still need their pre-roll: start one or
    more points earlier than the crop (bit reservoir, MDCT overlap, Opus
    convergence).
    """

    status: str
    #: Why there is no index; for an index, "" or a note on the episode
    #: (``ENDS_EARLY``).
    reason: str = ""
    codec: str = ""
    container: str = ""
    sample_rate: int = 0
    channels: int = 0
    #: Native-timeline units per second (== sample_rate except Opus: 48000;
    #: mp4: the track's media timescale).
    timescale: int = 0
    #: Native position of the first sample of the gapless decode.
    first_sample: int = 0
    #: Length of the gapless decode in native units; -1 when unknown.
    num_samples: int = -1
    #: Encoder delay as the file states it (LAME tag, Opus pre-skip, mp4 edit
    #: list media time); already folded into ``first_sample``.
    encoder_delay: int = 0
    #: Padding at the end as the file states it (LAME tag); already folded
    #: into ``num_samples``. MP4: the samples of the last frame that FFmpeg 9
    #: cuts (AAC, mp3: the rest of the frame after where the file ends the
    #: track; ALAC, Opus, AMR, Vorbis: what the last packet's stts duration
    #: runs past the edit list's end); in ``num_samples``, which FFmpeg 8
    #: and before decode, and not in FFmpeg 9's decode
    #: (``formats.ffmpeg.full_decode_length``).
    padding: int = 0
    #: "" when ``num_samples`` (through ``formats.ffmpeg.full_decode_length``)
    #: is the full decode's length under every FFmpeg; otherwise the FFmpeg
    #: whose policy it follows (``formats.ffmpeg.LENGTH_POLICY`` of the one
    #: that built and checked it: an iTunSMPB tag's end padding, which FFmpeg
    #: 9 cuts and 8 does not). Under another FFmpeg the index is not served.
    length_policy: str = ""
    #: Bytes per sample frame for PCM (wav): a sample's byte is
    #: ``data_start + sample * block_align``; 0 for compressed codecs.
    block_align: int = 0
    #: What the indexer's check found (``decode.verify``): ``"verified"`` (probe
    #: crops decoded through this index equal FFmpeg's full decode), or
    #: ``"unverified"`` (not checked). An index that fails its check is never
    #: written: the row becomes "no index" with the reason.
    verdict: str = UNVERIFIED
    #: Pre-roll this episode needs, in native units, when its check found the
    #: format's default too short (0: the format's default).
    preroll: int = 0
    #: (offset, length) byte ranges in the blob a decoder needs before any audio.
    header: tuple[tuple[int, int], ...] = ()
    #: Byte range of the audio data: first frame/page to the end of the last.
    data_start: int = 0
    data_end: int = 0
    sample_pos: np.ndarray = field(default_factory=lambda: _EMPTY)
    byte_pos: np.ndarray = field(default_factory=lambda: _EMPTY)
    #: The row's ``CONTENT_COLUMN`` (uint32; empty: not recorded, not
    #: checked). Not part of ``INDEX_TYPE``: a column of its own.
    content_crc: np.ndarray = field(default_factory=lambda: _NO_CRCS)
    #: The row's ``SPAN_SIZE_COLUMN`` and ``SPAN_COLUMN`` (0 and empty: not
    #: recorded, not checked).
    span_size: int = 0
    span_crc: np.ndarray = field(default_factory=lambda: _NO_CRCS)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @classmethod
    def unavailable(cls, reason: str, container: str = "") -> SeekIndex:
        """The "no index" record: the episode stays readable by a full decode."""
        return cls(status=NO_INDEX, reason=reason, container=container)

    @property
    def ends_early(self) -> bool:
        """Whether it is an index of an episode whose FFmpeg decode ends
        before its blob does (its ``reason`` is the note, ``ENDS_EARLY``)."""
        return self.ok and self.reason.startswith(ENDS_EARLY)

    def __repr__(self) -> str:
        if not self.ok:
            return f"SeekIndex({self.status}: {self.reason!r}, container={self.container!r})"
        return (
            f"SeekIndex({self.codec}/{self.container}, {self.sample_rate} Hz x{self.channels}, "
            f"{len(self.sample_pos)} points, first_sample={self.first_sample}, "
            f"num_samples={self.num_samples})"
        )


_SCALARS: dict[str, pa.DataType] = {
    "status": pa.string(),
    "reason": pa.string(),
    "codec": pa.string(),
    "container": pa.string(),
    "verdict": pa.string(),
    "length_policy": pa.string(),
    "sample_rate": pa.int32(),
    "channels": pa.int32(),
    "timescale": pa.int32(),
    "first_sample": pa.int64(),
    "num_samples": pa.int64(),
    "encoder_delay": pa.int32(),
    "padding": pa.int32(),
    "block_align": pa.int32(),
    "preroll": pa.int32(),
    "data_start": pa.int64(),
    "data_end": pa.int64(),
}
_LISTS = ("header_offset", "header_length", "sample_pos", "byte_pos")

INDEX_TYPE = pa.struct(
    [pa.field(name, kind, nullable=False) for name, kind in _SCALARS.items()]
    + [pa.field(name, pa.list_(pa.int64()), nullable=False) for name in _LISTS]
)


def _list_values(index: SeekIndex) -> dict[str, np.ndarray]:
    header = np.asarray(index.header, dtype=np.int64).reshape(-1, 2)
    return {
        "header_offset": header[:, 0],
        "header_length": header[:, 1],
        "sample_pos": np.asarray(index.sample_pos, dtype=np.int64),
        "byte_pos": np.asarray(index.byte_pos, dtype=np.int64),
    }


def row_checksum(key: str, index: SeekIndex, built_for: int | None) -> int:
    """The CRC-32 ``ROW_CRC_COLUMN`` holds for the row of ``key``: over the
    key, every ``INDEX_TYPE`` field, the CRC columns (``content_crc``,
    ``span_size``, ``span_crc``) and ``built_for`` (``BLOB_BYTES_COLUMN``;
    None: null), each with its length, in a fixed order and byte order. The
    key is in it so that a row moved under another key fails too."""
    crc = _crc_of_bytes(key.encode(), 0)
    for name, kind in _SCALARS.items():
        value = getattr(index, name)
        if pa.types.is_string(kind):
            crc = _crc_of_bytes(value.encode(), crc)
        else:
            crc = zlib.crc32(struct.pack("<q", value), crc)
    for values in _list_values(index).values():
        crc = _crc_of_array(values, "<i8", crc)
    crc = _crc_of_array(index.content_crc, "<u4", crc)
    crc = zlib.crc32(struct.pack("<q", index.span_size), crc)
    crc = _crc_of_array(index.span_crc, "<u4", crc)
    return zlib.crc32(struct.pack("<q", -1 if built_for is None else built_for), crc)


def _crc_of_bytes(data: bytes, crc: int) -> int:
    return zlib.crc32(data, zlib.crc32(struct.pack("<q", len(data)), crc))


def _crc_of_array(values: np.ndarray, dtype: str, crc: int) -> int:
    data = np.ascontiguousarray(values, dtype=dtype)
    return zlib.crc32(data, zlib.crc32(struct.pack("<q", len(data)), crc))


def to_struct_array(indexes: list[SeekIndex]) -> pa.StructArray:
    """Many indexes as one ``INDEX_TYPE`` array; list children are built from
    concatenated numpy arrays, never point by point."""
    children: list[pa.Array] = [
        pa.array([getattr(i, name) for i in indexes], kind) for name, kind in _SCALARS.items()
    ]
    values = [_list_values(i) for i in indexes]
    for name in _LISTS:
        parts = [v[name] for v in values]
        offsets = np.zeros(len(parts) + 1, dtype=np.int32)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        flat = np.concatenate(parts) if parts else _EMPTY
        children.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)))
    return pa.StructArray.from_arrays(children, fields=list(INDEX_TYPE))


class _BatchViews:
    """One record batch of ``seek_index`` as numpy views over its buffers
    (which ``Shard.column`` has validated: every view lies inside them)."""

    def __init__(self, array: pa.StructArray, shard: Shard) -> None:
        if array.null_count:
            raise ShardError(f"null {INDEX_COLUMN!r} rows", shard=shard.path)
        children = dict(zip([f.name for f in INDEX_TYPE], array.flatten(), strict=True))
        self.strings: dict[str, list[str]] = {}
        self.ints: dict[str, np.ndarray] = {}
        for name, kind in _SCALARS.items():
            if pa.types.is_string(kind):
                self.strings[name] = children[name].to_pylist()  # short, and few per row
            else:
                self.ints[name] = _values(children[name], kind.bit_width // 8)
        self.lists = {name: _list_views(children[name]) for name in _LISTS}


def _values(array: pa.Array, width: int) -> np.ndarray:
    values = _view(array.buffers()[1], np.dtype(f"<i{width}"))
    return values[array.offset : array.offset + len(array)]


def _list_views(array: pa.ListArray, dtype: np.dtype = _INT64) -> tuple[np.ndarray, np.ndarray]:
    offsets = _view(array.buffers()[1], np.dtype(np.int32))
    offsets = offsets[array.offset : array.offset + len(array) + 1]
    values = array.values
    if values.buffers()[1] is None:  # no values at all
        return offsets, np.zeros(0, dtype=dtype)
    flat = _view(values.buffers()[1], dtype)[values.offset :]
    return offsets, flat


def _view(buffer: pa.Buffer, dtype: np.dtype) -> np.ndarray:
    """The whole elements of a buffer (a file's buffer may carry a ragged tail)."""
    return np.frombuffer(buffer, dtype=dtype, count=buffer.size // dtype.itemsize)


class IndexReader:
    """Reads ``SeekIndex`` rows out of one open ``seek_index/`` shard.

    The returned arrays are read-only views onto the shard's memory map. A
    row is read as it is stored, once its ``row_crc`` is found right (the
    first read of each row computes it; a row that fails raises
    ``ShardError`` each time): whether it can be trusted for its blob is
    ``checks.check_against_blob``'s to say.
    """

    def __init__(self, shard: Shard) -> None:
        if INDEX_COLUMN not in shard.schema.names:
            raise ShardError(f"no {INDEX_COLUMN!r} column", shard=shard.path)
        if shard.schema.field(INDEX_COLUMN).type != INDEX_TYPE:
            raise ShardError(
                f"{INDEX_COLUMN!r} has type {shard.schema.field(INDEX_COLUMN).type}, "
                "not the one this version writes (rebuild with `streamer index --force`)",
                shard=shard.path,
            )
        self.shard = shard
        self.revision = _revision(shard)
        self._chunks = shard.column(INDEX_COLUMN).chunks
        self._views: dict[int, _BatchViews] = {}
        self._blob_bytes = _int_column(shard, BLOB_BYTES_COLUMN)
        self._content = _CrcColumn(shard, CONTENT_COLUMN)
        self._spans = _CrcColumn(shard, SPAN_COLUMN)
        self._span_sizes = _int_column(shard, SPAN_SIZE_COLUMN)
        self._row_crcs = _int_column(shard, ROW_CRC_COLUMN, pa.uint32())
        #: Rows whose ``row_crc`` was computed: None when right, else the error.
        self._checked: dict[int, ShardError | None] = {}

    def built_for(self, row: int) -> int | None:
        """The byte length of the blob row ``row`` was built from (None: the
        shard does not say: it predates ``BLOB_BYTES_COLUMN``, or the cell
        could not be read)."""
        if self._blob_bytes is None or self._blob_bytes[row] < 0:
            return None
        return int(self._blob_bytes[row])

    def read(self, row: int) -> SeekIndex:
        index = self._read(row)
        if self._row_crcs is not None and self._row_crcs[row] >= 0:
            if row not in self._checked:
                self._checked[row] = self._checksum_error(row, index)
            error = self._checked[row]
            if error is not None:
                raise ShardError(error.reason, shard=error.shard, key=error.key)
        return index

    def _checksum_error(self, row: int, index: SeekIndex) -> ShardError | None:
        assert self._row_crcs is not None
        key = self.shard.keys[row].as_py()
        if row_checksum(key, index, self.built_for(row)) == self._row_crcs[row]:
            return None
        return ShardError(
            f"{INDEX_COLUMN!r} row does not match its {ROW_CRC_COLUMN!r} "
            "(changed since it was built, or moved from another row)",
            shard=self.shard.path,
            key=key,
        )

    def _read(self, row: int) -> SeekIndex:
        batch, j = self.shard.locate(row)
        views = self._views.get(batch)
        if views is None:
            views = self._views[batch] = _BatchViews(self._chunks[batch], self.shard)
        values: dict[str, Any] = {name: column[j] for name, column in views.strings.items()}
        values.update((name, int(column[j])) for name, column in views.ints.items())
        arrays = {
            name: flat[offsets[j] : offsets[j + 1]] for name, (offsets, flat) in views.lists.items()
        }
        if len(arrays["header_offset"]) != len(arrays["header_length"]):
            raise ShardError(
                f"corrupt {INDEX_COLUMN!r} row: header offsets and lengths differ in number",
                shard=self.shard.path,
                key=self.shard.keys[row].as_py(),
            )
        header = tuple(
            zip(arrays["header_offset"].tolist(), arrays["header_length"].tolist(), strict=True)
        )
        return SeekIndex(
            **values,
            header=header,
            sample_pos=arrays["sample_pos"],
            byte_pos=arrays["byte_pos"],
            content_crc=self._content.row(batch, j),
            **self._span_fields(row, batch, j),
        )

    def _span_fields(self, row: int, batch: int, j: int) -> dict[str, Any]:
        """``span_size`` and ``span_crc`` of a row, when it records both."""
        size = -1 if self._span_sizes is None else int(self._span_sizes[row])
        crcs = self._spans.row(batch, j)
        if size <= 0 or not len(crcs):
            return {}
        return {"span_size": size, "span_crc": crcs}


class _CrcColumn:
    """A ``list<uint32>`` column of CRCs (``CONTENT_COLUMN``, ``SPAN_COLUMN``)
    of an index shard, read a record batch at a time as numpy views."""

    def __init__(self, shard: Shard, name: str) -> None:
        self._chunks: list[pa.ListArray] | None = None
        self._views: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
        if name in shard.schema.names:
            column = shard.column(name)
            if column.type != CONTENT_TYPE:
                raise ShardError(f"{name!r} is not a {CONTENT_TYPE} column", shard=shard.path)
            self._chunks = list(column.chunks)

    def row(self, batch: int, j: int) -> np.ndarray:
        """Row ``j`` of record batch ``batch`` (a view; empty when the shard
        has no such column or the row is null)."""
        if self._chunks is None:
            return _NO_CRCS
        views = self._views.get(batch)
        if views is None:
            chunk = self._chunks[batch]
            valid = chunk.is_valid().to_numpy(zero_copy_only=False) if chunk.null_count else None
            views = self._views[batch] = (*_list_views(chunk, np.dtype("<u4")), valid)
        offsets, flat, valid = views
        if valid is not None and not valid[j]:
            return _NO_CRCS
        return flat[offsets[j] : offsets[j + 1]]


def _int_column(shard: Shard, name: str, kind: pa.DataType | None = None) -> np.ndarray | None:
    """An integer column of an index shard (``num_bytes``, ``span_size``:
    int64; ``row_crc``: ``kind`` uint32) as one int64 array (-1 for a null),
    or None when it has none; ``ShardError`` when it has another type."""
    if name not in shard.schema.names:
        return None
    kind = kind or pa.int64()
    column = shard.column(name)
    if column.type != kind:
        raise ShardError(f"{name!r} is not an {kind} column", shard=shard.path)
    return np.asarray(column.cast(pa.int64()).fill_null(-1).to_numpy())


def _revision(shard: Shard) -> int:
    """The builder revision an index shard records (``REVISION_KEY``; 0: none)."""
    value = (shard.schema.metadata or {}).get(REVISION_KEY, b"0")
    try:
        return int(value)
    except ValueError:
        raise ShardError(f"{REVISION_KEY.decode()} is {value[:20]!r}", shard=shard.path) from None
