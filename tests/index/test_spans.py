"""Span CRCs (``index.content``): what a span is, what a crop reads and checks."""

from __future__ import annotations

import dataclasses
import io
import itertools
import zlib

import numpy as np
import pytest
from _index_support import encoded, index_of

from streamer.formats import extract
from streamer.index.checks import check_against_blob
from streamer.index.content import (
    content_crcs,
    damaged_spans,
    expected_spans,
    mismatch,
    span_checks,
    span_crcs,
    span_ranges,
    span_size,
)
from streamer.index.table import SeekIndex


def _read(data: bytes):  # type: ignore[no-untyped-def]
    return lambda ranges: [memoryview(data)[o : o + n] for o, n in ranges]


def _with_spans(data: bytes, index: SeekIndex) -> SeekIndex:
    """``index`` with the CRCs a stored row records: content, and spans."""
    size = span_size(index)
    return dataclasses.replace(
        index,
        content_crc=content_crcs(index, _read(data)),
        span_size=size,
        span_crc=span_crcs(index, size, _read(data)),
    )


@pytest.mark.parametrize(("codec", "density"), [("mp3", 1.0), ("mp3", float("inf")), ("wav", 1.0)])
def test_spans_tile_the_data_and_each_crop_reads_the_spans_it_touches_whole(
    codec: str, density: float
) -> None:
    data = encoded(codec, 44100, 2, seconds=6.0)
    index = _with_spans(data, extract(io.BytesIO(data), density=density))
    spans = span_ranges(index, index.span_size)
    assert len(spans) == len(index.span_crc) == expected_spans(index)
    start = int(index.data_start if index.block_align else index.byte_pos[0])
    assert spans[0][0] == start and sum(spans[-1]) == index.data_end
    assert all(sum(a) == b[0] for a, b in itertools.pairwise(spans))
    if codec == "wav":
        assert index.span_size == 8192  # 176 400 bytes a second: 0.046 s
    elif density == 1.0:
        assert index.span_size == 1  # one CRC per seek-point interval: no reading more
    else:
        assert 20 <= index.span_size <= 60  # every frame a point: about a second a span
    bounds = {offset for offset, _ in spans} | {index.data_end}
    rng = np.random.default_rng(1)
    for _ in range(30):
        first = int(rng.integers(start, index.data_end - 1))
        last = int(rng.integers(first + 1, index.data_end + 1))
        if not index.block_align:  # a compressed crop's data runs from seek point to seek point
            points = index.byte_pos
            first = int(points[np.searchsorted(points, first, side="right") - 1])
            after = np.searchsorted(points, last)
            last = int(points[after]) if after < len(points) else index.data_end
        read, checks = span_checks(index, (first, last - first))
        assert read[0] <= first and sum(read) >= last
        assert read[0] in bounds and sum(read) in bounds  # whole spans, no more
        assert sum(length for _, length, _ in checks) == read[1]
        if codec == "mp3" and density == 1.0:
            assert read == (first, last - first)
        piece = ((read[0], memoryview(data)[read[0] : sum(read)]),)
        assert mismatch(checks, piece) is None
        damaged = bytearray(data)
        damaged[(first + last) // 2] ^= 1
        bad = mismatch(checks, ((read[0], memoryview(bytes(damaged))[read[0] : sum(read)]),))
        assert bad is not None and bad[0] <= (first + last) // 2 < bad[0] + bad[1]


def test_damaged_spans_names_each_damaged_range() -> None:
    data = encoded("mp3", 44100, 1, seconds=6.0)
    index = _with_spans(data, index_of(data, density=1.0))
    spans = span_ranges(index, index.span_size)
    assert damaged_spans(index, _read(data)) == []
    damaged = bytearray(data)
    for offset, length in (spans[1], spans[4]):
        damaged[offset + length - 1] ^= 0x80
    assert damaged_spans(index, _read(bytes(damaged))) == [spans[1], spans[4]]
    assert zlib.crc32(data[spans[1][0] : sum(spans[1])]) == int(index.span_crc[1])


def test_a_row_without_content_crcs_is_not_span_checked() -> None:
    """Without the seek-point checks a changed span could as well be a stale
    index as damaged data: such a row (a hand-made shard) is not checked."""
    data = encoded("mp3", 44100, 1, seconds=3.0)
    index = dataclasses.replace(
        _with_spans(data, index_of(data, density=1.0)), content_crc=np.zeros(0, np.uint32)
    )
    assert span_checks(index, (int(index.byte_pos[0]), 1000)).checks == ()


def test_flac_and_ogg_record_none_and_a_row_with_the_wrong_count_is_not_used() -> None:
    for codec in ("flac", "opus"):
        assert span_size(extract(io.BytesIO(encoded(codec, 48000, 1)))) == 0
    data = encoded("mp3", 44100, 1, seconds=3.0)
    index = _with_spans(data, index_of(data, density=1.0))
    assert check_against_blob(index, len(data)) is None
    short = dataclasses.replace(index, span_crc=index.span_crc[:-1])
    assert check_against_blob(short, len(data)) == (
        "implausible index: span CRCs do not match its audio data"
    )
