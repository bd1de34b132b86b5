"""Hour-long episodes for the benchmarks, built in seconds.

Encoding an hour of audio per codec would take minutes; instead a short
encode's packets are muxed again and again with shifted timestamps (PyAV
remux: FFmpeg writes correct granules, sample tables and CRCs), and WAV
repeats its PCM. FLAC frames carry their own frame numbers, so FLAC is
encoded for real (it is fast).
"""

from __future__ import annotations

import io
import struct

import av
import numpy as np

from streamer.synth import CODECS, encode, signal

__all__ = ["BENCH_CODECS", "long_episode"]

#: codec -> (sample rate, channels) of the benchmark episodes.
BENCH_CODECS = {
    "mp3": (44100, 2),
    "vorbis": (44100, 2),
    "opus": (48000, 2),
    "flac": (44100, 1),
    "aac": (44100, 2),
    "alac": (44100, 1),
    "wav": (44100, 1),
}
_PIECE = 20.0


def long_episode(codec: str, seconds: float) -> bytes:
    """About ``seconds`` of ``codec`` audio (at least ``seconds``)."""
    rate, channels = BENCH_CODECS[codec]
    piece = signal(_PIECE, rate, channels, seed=3)
    if codec == "flac":
        repeats = int(np.ceil(seconds / _PIECE))
        return encode(np.tile(piece, repeats), rate, codec)
    short = encode(piece, rate, codec)
    if codec == "wav":
        return _repeat_wav(short, int(np.ceil(seconds / _PIECE)))
    return _remux_repeated(short, codec, seconds)


def _remux_repeated(short: bytes, codec: str, seconds: float) -> bytes:
    with av.open(io.BytesIO(short)) as source:
        stream = source.streams.audio[0]
        packets = [p for p in source.demux(stream) if p.size]
        span = packets[-1].pts + packets[-1].duration - packets[0].pts
        repeats = int(np.ceil(seconds / float(span * stream.time_base)))
        out = io.BytesIO()
        with av.open(out, "w", format=CODECS[codec].container) as target:
            copy = target.add_stream_from_template(stream)
            for repeat in range(repeats):
                for packet in packets:
                    again = av.Packet(bytes(packet))
                    again.pts = packet.pts + repeat * span
                    again.dts = (
                        packet.dts if packet.dts is not None else packet.pts
                    ) + repeat * span
                    again.duration = packet.duration
                    again.time_base = stream.time_base
                    again.stream = copy
                    target.mux(again)
    return out.getvalue()


def _repeat_wav(short: bytes, repeats: int) -> bytes:
    data_at = short.index(b"data") + 8
    header, pcm = bytearray(short[:data_at]), short[data_at:]
    size = len(pcm) * repeats
    struct.pack_into("<I", header, 4, len(header) - 8 + size)
    struct.pack_into("<I", header, data_at - 4, size)
    return bytes(header) + pcm * repeats
