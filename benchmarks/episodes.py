"""Hour-long episodes for the benchmarks, built in seconds.

Encoding an hour of audio per codec would take minutes; instead a short
encode's packets are muxed again and again with shifted timestamps (PyAV
remux: FFmpeg writes correct granules, sample tables and CRCs), and WAV
repeats its PCM. FLAC frames carry their own frame numbers, so FLAC is
encoded for real (it is fast).
"""

from __future__ import annotations

import io
import os
import random
import struct

import av
import numpy as np

from streamer.dataset.dataset import Dataset
from streamer.synth import CODECS, encode, signal
from streamer.write.pack import pack

__all__ = ["BENCH_CODECS", "build_dataset", "long_episode", "pack_episodes", "random_crops"]

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


def build_dataset(folder: str, minutes: float) -> Dataset:
    """One episode per codec of ``BENCH_CODECS``, keyed by the codec's name,
    packed into ``folder/dataset``: every benchmark that compares methods per
    codec reads the same episodes."""
    return pack_episodes(folder, [(codec, codec, minutes * 60) for codec in BENCH_CODECS])


def pack_episodes(folder: str, episodes: list[tuple[str, str, float]]) -> Dataset:
    """``(key, codec, seconds)`` episodes from ``long_episode``, packed into
    ``folder/dataset``."""
    src = os.path.join(folder, "src")
    os.makedirs(src)
    for key, codec, seconds in episodes:
        path = os.path.join(src, f"{key}.{CODECS[codec].extension}")
        with open(path, "wb") as file:
            file.write(long_episode(codec, seconds))
    out = os.path.join(folder, "dataset")
    pack(src, out, progress=False)
    return Dataset(out)


def random_crops(
    dataset: Dataset, key: str, count: int, duration: float
) -> list[tuple[float, float]]:
    """``count`` crops of ``duration`` seconds at random positions of ``key``,
    seeded by the key: two benchmarks over the same dataset read the same crops."""
    index = dataset.seek_index(key)
    length = index.num_samples / index.sample_rate
    rng = random.Random(key)
    starts = [rng.uniform(0, length - duration) for _ in range(count)]
    return [(start, start + duration) for start in starts]


def _remux_repeated(short: bytes, codec: str, seconds: float) -> bytes:
    with av.open(io.BytesIO(short)) as source:
        stream = source.streams.audio[0]
        demuxed = [p for p in source.demux(stream) if p.size]
        packets = _steady(demuxed)
        # The first repeated packet takes the first demuxed one's time, so the
        # episode starts where the short encode does (pre-skip, priming or edit
        # list then trim real audio) and its first sample plays at 0.
        shift = demuxed[0].pts - packets[0].pts
        span = packets[-1].pts + packets[-1].duration - packets[0].pts
        repeats = int(np.ceil(seconds / float(span * stream.time_base)))
        out = io.BytesIO()
        with av.open(out, "w", format=CODECS[codec].container) as target:
            copy = target.add_stream_from_template(stream)
            for repeat in range(repeats):
                for packet in packets:
                    again = av.Packet(bytes(packet))
                    offset = shift + repeat * span
                    again.pts = packet.pts + offset
                    again.dts = (packet.dts if packet.dts is not None else packet.pts) + offset
                    again.duration = packet.duration
                    again.time_base = stream.time_base
                    again.stream = copy
                    target.mux(again)
    return out.getvalue()


def _steady(packets: list[av.Packet]) -> list[av.Packet]:
    """The packets that decode to exactly their duration: without the priming
    packets before pts 0 (AAC, Vorbis, Opus pre-skip) and a shorter last one
    (end trimming). Repeated in the middle of an episode those decode to more
    samples than their timestamps span, so the full decode would drift from
    the container's timeline by that much at every repeat."""
    first = next(i for i, packet in enumerate(packets) if packet.pts >= 0)
    last = len(packets)
    if packets[-1].duration < packets[-2].duration:
        last -= 1
    return packets[first:last]


def _repeat_wav(short: bytes, repeats: int) -> bytes:
    data_at = short.index(b"data") + 8
    header, pcm = bytearray(short[:data_at]), short[data_at:]
    size = len(pcm) * repeats
    struct.pack_into("<I", header, 4, len(header) - 8 + size)
    struct.pack_into("<I", header, data_at - 4, size)
    return bytes(header) + pcm * repeats
