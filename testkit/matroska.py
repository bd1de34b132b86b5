"""Matroska files laced as mkvmerge writes them, from FFmpeg's, which never laces.

mkvmerge puts several audio frames in one block (Xiph or EBML lacing, or
fixed-size lacing when the frames are alike); FFmpeg's demuxer then reports
every frame of the block at the block's position. ``laced(data)`` rewrites
an FFmpeg-made file so: consecutive single-frame SimpleBlocks of a cluster
become one laced SimpleBlock of ``per`` frames. The Segment gets an unknown
size and loses its SeekHead and Cues (their positions would be stale); the
frames, their order and so the full decode stay the same.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

__all__ = ["LACINGS", "laced"]

#: Lacing kinds and their flag bits in a block's flags byte.
LACINGS = {"xiph": 0x02, "fixed": 0x04, "ebml": 0x06}

_SEGMENT, _CLUSTER, _SIMPLE_BLOCK = 0x18538067, 0x1F43B675, 0xA3
_SEEK_HEAD, _CUES = 0x114D9B74, 0x1C53BB6B
_KEYFRAME = 0x80
_UNKNOWN_SIZE = b"\x01\xff\xff\xff\xff\xff\xff\xff"


def laced(data: bytes, per: int = 4, kind: str = "xiph") -> bytes:
    """``data`` (FFmpeg's Matroska) with its SimpleBlocks laced ``per`` to a
    block, by ``kind`` (``LACINGS``; fixed lacing joins frames of one size only)."""
    out = bytearray()
    for element, start, body, end in _children(data, 0, len(data)):
        if element != _SEGMENT:
            out += data[start:end]
            continue
        out += _SEGMENT.to_bytes(4, "big") + _UNKNOWN_SIZE
        for child, child_start, child_body, child_end in _children(data, body, end):
            if child == _CLUSTER:
                out += _element(_CLUSTER, _laced_cluster(data, child_body, child_end, per, kind))
            elif child not in (_SEEK_HEAD, _CUES):
                out += data[child_start:child_end]
    return bytes(out)


def _laced_cluster(data: bytes, body: int, end: int, per: int, kind: str) -> bytes:
    out = bytearray()
    pending: list[tuple[bytes, bytes]] = []  # (track number and timestamp, frame)

    def flush() -> None:
        if len(pending) == 1:
            out.extend(_element(_SIMPLE_BLOCK, pending[0][0] + bytes([_KEYFRAME]) + pending[0][1]))
        elif pending:
            frames = [frame for _, frame in pending]
            head = bytes([_KEYFRAME | LACINGS[kind], len(frames) - 1]) + _lace_sizes(frames, kind)
            out.extend(_element(_SIMPLE_BLOCK, pending[0][0] + head + b"".join(frames)))
        pending.clear()

    for element, start, content, stop in _children(data, body, end):
        # One-byte track number: its 3 bytes with the timestamp, then the flags.
        single = element == _SIMPLE_BLOCK and not data[content + 3] & 0x06
        frame = data[content + 4 : stop] if single else b""
        alike = kind != "fixed" or not pending or len(frame) == len(pending[0][1])
        if not single or not alike:
            flush()
        if single:
            pending.append((data[content : content + 3], frame))
            if len(pending) == per:
                flush()
        else:
            out += data[start:stop]
    flush()
    return bytes(out)


def _lace_sizes(frames: list[bytes], kind: str) -> bytes:
    """The lace head after the frame count: sizes of all frames but the last."""
    sizes = [len(frame) for frame in frames[:-1]]
    if kind == "fixed":
        return b""
    if kind == "xiph":
        return b"".join(b"\xff" * (size // 255) + bytes([size % 255]) for size in sizes)
    out = _size(sizes[0])
    for before, size in itertools.pairwise(sizes):
        difference = size - before
        length = next(n for n in range(1, 9) if abs(difference) < (1 << (7 * n - 1)) - 1)
        out += _size(difference + (1 << (7 * length - 1)) - 1, length)
    return out


def _children(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(ID, start, content start, end) of each element in ``data[start:end]``."""
    at = start
    while at < end:
        length = 9 - data[at].bit_length()
        element = int.from_bytes(data[at : at + length])
        size_at = at + length
        size_length = 9 - data[size_at].bit_length()
        size = int.from_bytes(data[size_at : size_at + size_length])
        size &= (1 << (7 * size_length)) - 1
        content = size_at + size_length
        if size == (1 << (7 * size_length)) - 1:  # unknown: to the end of the parent
            size = end - content
        yield element, at, content, content + size
        at = content + size


def _element(element: int, content: bytes) -> bytes:
    return element.to_bytes((element.bit_length() + 7) // 8, "big") + _size(len(content)) + content


def _size(value: int, length: int | None = None) -> bytes:
    """An EBML size of ``length`` bytes (the fewest by default)."""
    if length is None:
        length = next(n for n in range(1, 9) if value < (1 << (7 * n)) - 1)
    return ((1 << (7 * length)) | value).to_bytes(length, "big")
