"""Audio muxed behind a video track, as music videos and screen recordings are."""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np

from streamer.synth import signal

__all__ = ["with_video"]


def with_video(
    seconds: float, container_format: str, codec: str, frame: int, audio_start: float = 0.0
) -> bytes:
    """A small MPEG-4 video track from 0, then ``seconds`` of stereo 48 kHz
    audio (``codec``, ``frame`` samples a packet, as s16) from
    ``audio_start`` seconds, in ``container_format``. With both at 0 the
    muxer writes the video's first packet first; that picture is noise, a
    packet of a few KiB, as a real one is."""
    rate, fps = 48000, 5
    samples = (np.clip(signal(seconds, rate, 2, seed=2), -1, 1) * 32767).round().astype(np.int16)
    offset = round(audio_start * rate)
    out = io.BytesIO()
    with av.open(out, "w", format=container_format) as container:
        video = container.add_stream("mpeg4", rate=fps)
        video.width, video.height, video.pix_fmt = 32, 32, "yuv420p"
        audio = container.add_stream(codec, rate=rate)
        audio.layout = "stereo"
        noise = np.random.default_rng(0).integers(0, 256, (32, 32, 3), np.uint8)
        for n in range(round(seconds * fps)):
            pixels = noise if n == 0 else np.full((32, 32, 3), n * 40 % 256, np.uint8)
            picture = av.VideoFrame.from_ndarray(pixels)
            picture.pts, picture.time_base = n, Fraction(1, fps)
            for packet in video.encode(picture.reformat(format="yuv420p")):
                container.mux(packet)
        for start in range(0, samples.shape[1], frame):
            packed = np.ascontiguousarray(samples[:, start : start + frame].T).reshape(1, -1)
            block = av.AudioFrame.from_ndarray(packed, format="s16", layout="stereo")
            block.sample_rate, block.time_base = rate, Fraction(1, rate)
            block.pts = offset + start
            for packet in audio.encode(block):
                container.mux(packet)
        for stream in (video, audio):
            for packet in stream.encode(None):
                container.mux(packet)
    return out.getvalue()
