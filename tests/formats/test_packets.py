"""Packets handed to FFmpeg's decoders carry its zeroed padding.

FFmpeg's decoders may read past a packet's last byte (the buffer must be
followed by ``AV_INPUT_BUFFER_PADDING_SIZE`` zeroed bytes). ``av.Packet(data)``
points at ``data`` itself, so a decoder read whatever memory came next: an
Opus SILK crop through the Ogg index came out up to 0.1 off the full decode
in about one run in five (the bytes after a packet were another Python
object's), while FFmpeg's demuxer pads what it reads.
"""

from __future__ import annotations

import ast
import ctypes
from pathlib import Path

import av
import numpy as np
import pytest
from _index_support import cli_encode
from _ogg_layout import split

import streamer
from streamer.formats.packets import padded_packet
from testkit.reference import full_decode

#: FFmpeg's AV_INPUT_BUFFER_PADDING_SIZE.
PADDING = 64


@pytest.mark.parametrize("data", [b"", b"\x01", bytes(range(256)) * 3])
def test_a_padded_packet_holds_the_bytes_then_zeros(data: bytes) -> None:
    junk = memoryview(data + b"\xff" * PADDING)[: len(data)]  # non-zero bytes right after
    packet = padded_packet(junk)
    assert bytes(packet) == data and packet.size == len(data)
    if data:
        assert ctypes.string_at(packet.buffer_ptr + len(data), PADDING) == b"\0" * PADDING


def _decode(packets: list[bytes], head: bytes, make) -> np.ndarray:  # type: ignore[no-untyped-def]
    decoder = av.CodecContext.create("opus", "r")
    decoder.extradata = head[:10] + b"\0\0" + head[12:]  # without pre-skip
    frames = [frame.to_ndarray() for p in packets for frame in decoder.decode(make(p))]
    return np.concatenate(frames, axis=1)[:, int.from_bytes(head[10:12], "little") :]


def test_opus_silk_decodes_as_the_full_decode_whatever_follows_its_packets() -> None:
    """Wideband SILK (opusenc at 12 kbit/s from 16 kHz): its packets
    followed by 0xFF bytes decode to other samples (0.48 off) when the
    decoder reads them; padded, they decode to the full decode exactly."""
    data = cli_encode(["opusenc", "--quiet", "--bitrate", "12", "-", "{out}"], 16000, 1, 4.0)
    stream = split(data, 2)
    full, _ = full_decode(data)
    padded = _decode(stream.audio, stream.headers[0], padded_packet)
    np.testing.assert_array_equal(padded[:, : full.shape[1]], full)
    unpadded = _decode(
        stream.audio,
        stream.headers[0],
        lambda p: av.Packet(memoryview(p + b"\xff" * PADDING)[: len(p)]),
    )
    assert float(np.max(np.abs(unpadded[:, : full.shape[1]] - full))) > 0.01  # the hazard is real


def test_the_library_makes_packets_only_through_padded_packet() -> None:
    """No ``av.Packet(...)`` of bytes anywhere else in the package."""
    root = Path(streamer.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "Packet"
                and path.name != "packets.py"
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not found, found
