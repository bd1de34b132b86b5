"""Deterministic audio for the demo, the tests and the benchmarks.

Everything here is generated and encoded locally with PyAV's own encoders, so
the demo and the test suite never download anything. The signal is built to
make misalignment visible: a chirp whose frequency changes every sample, an
amplitude envelope, and seeded noise, different per channel.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np

__all__ = ["CODECS", "EncoderSpec", "encode", "signal"]


@dataclass(frozen=True)
class EncoderSpec:
    """How PyAV writes one codec: container format, encoder and sample format."""

    container: str
    encoder: str
    sample_format: str
    extension: str
    options: tuple[tuple[str, str], ...] = ()
    needs_stereo: bool = False
    sample_rates: tuple[int, ...] = ()


CODECS: dict[str, EncoderSpec] = {
    "mp3": EncoderSpec("mp3", "libmp3lame", "fltp", "mp3"),
    # PyAV's wheels have no libvorbis; FFmpeg's native encoder is experimental
    # and only encodes stereo.
    "vorbis": EncoderSpec(
        "ogg", "vorbis", "fltp", "ogg", (("strict", "experimental"),), needs_stereo=True
    ),
    "opus": EncoderSpec(
        "ogg", "libopus", "flt", "opus", sample_rates=(48000, 24000, 16000, 12000, 8000)
    ),
    "flac": EncoderSpec("flac", "flac", "s16", "flac"),
    # Without perceptual noise substitution: PNS noise comes from a generator
    # whose state runs from the first frame, so no seeking decoder matches it
    # (see docs/decoding.md); test files should be exact.
    "aac": EncoderSpec("ipod", "aac", "fltp", "m4a", (("aac_pns", "0"),)),
    "alac": EncoderSpec("ipod", "alac", "s16p", "m4a"),
    "wav": EncoderSpec("wav", "pcm_s16le", "s16", "wav"),
}


def signal(seconds: float, sample_rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """A float32 ``(channels, samples)`` test signal in [-0.5, 0.5]."""
    n = round(seconds * sample_rate)
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64) / sample_rate
    out = np.empty((channels, n), dtype=np.float32)
    for ch in range(channels):
        f0 = 110.0 * (ch + 1) + 40.0 * seed
        # A slow exponential-ish sweep, so every position has its own frequency.
        phase = 2 * np.pi * (f0 * t + 30.0 * t**2 / max(seconds, 1.0))
        envelope = 0.55 + 0.45 * np.sin(2 * np.pi * (0.7 + 0.1 * ch) * t)
        noise = rng.standard_normal(n) * 0.02
        out[ch] = (0.3 * envelope * np.sin(phase) + noise).astype(np.float32)
    return out


def _frame(
    block: np.ndarray, spec: EncoderSpec, layout: str, sample_rate: int, pts: int
) -> av.AudioFrame:
    planar = spec.sample_format.endswith("p")
    as_int = spec.sample_format.startswith("s16")
    data = block if planar else block.T.reshape(1, -1)
    if as_int:
        data = (np.clip(data, -1.0, 1.0) * 32767.0).round().astype(np.int16)
    else:
        data = data.astype(np.float32)
    frame = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(data), format=spec.sample_format, layout=layout
    )
    frame.sample_rate = sample_rate
    # Explicit timestamps: without them FFmpeg's vorbis encoder writes wrong granules.
    frame.pts = pts
    frame.time_base = Fraction(1, sample_rate)
    return frame


def encode(
    samples: np.ndarray,
    sample_rate: int,
    codec: str,
    *,
    bit_rate: int | None = None,
    options: dict[str, str] | None = None,
    container: str | None = None,
) -> bytes:
    """Encode float32 ``(channels, samples)`` audio into a complete file's bytes.

    ``codec`` is a key of ``CODECS``. Raises ``ValueError`` for combinations
    the encoder cannot do (mono vorbis, opus at 44.1 kHz) instead of letting
    FFmpeg fail obscurely. ``container`` overrides the codec's usual one
    (FLAC or Opus in ``"mp4"``, say).
    """
    spec = CODECS[codec]
    channels = samples.shape[0]
    if spec.needs_stereo and channels != 2:
        raise ValueError(f"PyAV's {spec.encoder} encoder only encodes stereo")
    if spec.sample_rates and sample_rate not in spec.sample_rates:
        raise ValueError(f"{spec.encoder} cannot encode at {sample_rate} Hz")
    layout = {1: "mono", 2: "stereo"}[channels]
    out = io.BytesIO()
    with av.open(out, "w", format=container or spec.container) as muxer:
        stream = muxer.add_stream(
            spec.encoder, rate=sample_rate, options={**dict(spec.options), **(options or {})}
        )
        stream.layout = layout
        if bit_rate:
            stream.bit_rate = bit_rate
        block = 4096
        for start in range(0, samples.shape[1], block):
            frame = _frame(samples[:, start : start + block], spec, layout, sample_rate, start)
            for packet in stream.encode(frame):
                muxer.mux(packet)
        for packet in stream.encode(None):
            muxer.mux(packet)
    return out.getvalue()
