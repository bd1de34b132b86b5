"""AMR-NB crops, raw (``.amr``: the generic index) and in 3GP (the MP4
index), and RealAudio 1.0 (14.4, ``ra_144``: the generic index) crops,
against the full decode. The decoder's predictors converge slowly
after a cold start, and how slowly depends on the signal: on a steady tone
a decode started at a frame stayed over 1e-4 away for up to 4.6 s (noise:
under 1 s; a speech recording of the corpus: 1.4 s), where the pre-rolls
were 0.5 s (generic) and 1 s (MP4), raised to 2 s by the index check: up
to 1.6e-3 off, in 9 and 23 of 150 crops. AMR is decoded from the first
packet now, as AC-3 (an hour of AMR decodes in about 3 s). ``ra_144``, an
LPC speech codec too: over 1e-4 for up to 3 s on the tone, where the check
had set 1 s; 132 of 400 crops off, by up to 6.3e-3.

The same holds for the other decoders that carry state from the stream's
start (decoded from the first packet too, ``FROM_THE_START``): GSM 06.10
(Asterisk's music on hold in the corpus: up to 2.5 s to converge, a crop
1.5e-3 off), G.723.1 (1 s), G.722 (0.45 s) and the backward-adaptive
ADPCMs, whose predictor never resyncs: Yamaha, QuickTime IMA4 (an AIFF-C
``ima4`` block keeps the decoder's full-precision predictor when its
header's truncated one matches) and Nellymoser (noise drawn from a
generator seeded once). Without it the index check dropped the index of
the last three (the fallback served them) and a G.723.1 or GSM crop could
be off."""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

from streamer import open_dataset
from streamer.write.pack import pack
from testkit.reference import full_decode

RATE = 8000
SECONDS = 12
TOLERANCE = 1e-4


def _tone(form: str, encoder: str = "libopencore_amrnb", rate: int = RATE) -> bytes:
    """12 s of a steady 220 Hz tone (and a little noise) through ``encoder``."""
    t = np.arange(SECONDS * rate) / rate
    noise = np.random.default_rng(104000).standard_normal(t.size) * 0.01
    samples = ((0.3 * np.sin(2 * np.pi * 220 * t) + noise) * 32767).astype(np.int16)
    out = io.BytesIO()
    with av.open(out, "w", format=form) as muxer:
        stream = muxer.add_stream(encoder, rate=rate)
        stream.layout = "mono"
        stream.codec_context.bit_rate = BIT_RATES.get(encoder, 0)
        planar = stream.codec_context.codec.audio_formats[0].is_planar
        form = "s16p" if planar else "s16"
        frame = av.AudioFrame.from_ndarray(samples[None], format=form, layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:  # PyAV cuts the frames
            muxer.mux(packet)
    return out.getvalue()


#: Encoders that accept only some bit rates.
BIT_RATES = {"g723_1": 6300, "adpcm_g726": 32000}
#: key -> (file name, container format, encoder, sample rate)
FILES = {
    "raw": ("raw.amr", "amr", "libopencore_amrnb", RATE),
    "in-3gp": ("in-3gp.3gp", "3gp", "libopencore_amrnb", RATE),
    "ra144": ("ra144.ra", "rm", "real_144", RATE),
    "g723": ("g723.wav", "wav", "g723_1", RATE),
    "g722": ("g722.wav", "wav", "adpcm_g722", 16000),
    "g726": ("g726.wav", "wav", "adpcm_g726", RATE),
    "yamaha": ("yamaha.wav", "wav", "adpcm_yamaha", RATE),
    "ima4": ("ima4.aiff", "aiff", "adpcm_ima_qt", RATE),
    "nellymoser": ("nellymoser.flv", "flv", "nellymoser", RATE),
}


def _has_encoder(name: str) -> bool:
    """Whether this PyAV's FFmpeg has the encoder (some builds leave AMR out)."""
    try:
        av.codec.Codec(name, "w")
    except av.codec.codec.UnknownCodecError:
        return False
    return True


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("amr-src")
    for name, form, encoder, rate in FILES.values():
        if _has_encoder(encoder):
            (src / name).write_bytes(_tone(form, encoder, rate))
    root = tmp_path_factory.mktemp("amr") / "ds"
    assert not pack(src, root, progress=False).skipped
    return root


@pytest.mark.parametrize(
    ("key", "container"),
    [
        ("raw", "ffmpeg:amr"),
        ("in-3gp", "mp4"),
        ("ra144", "ffmpeg:rm"),
        ("g723", "ffmpeg:wav"),
        ("g722", "ffmpeg:wav"),
        ("g726", "ffmpeg:wav"),
        ("yamaha", "ffmpeg:wav"),
        ("ima4", "ffmpeg:aiff"),
        ("nellymoser", "ffmpeg:flv"),
    ],
)
def test_lpc_speech_codec_crops_equal_the_full_decode(
    dataset: Path, key: str, container: str
) -> None:
    if not _has_encoder(FILES[key][2]):
        pytest.skip(f"this FFmpeg has no {FILES[key][2]} encoder")
    data = open_dataset(dataset)
    index = data.episode(key).index
    assert index.ok and index.container == container, index.reason
    full, rate = full_decode(bytes(data.blob(key).view()))
    assert rate == FILES[key][3]
    n = full.shape[1]
    rng = np.random.default_rng(1)
    starts = [0, n - 400, *rng.integers(0, n - 400, size=60).tolist()]
    for first in starts:
        last = first + 400
        got = data.read_crop(key, first / rate, last / rate)
        error = float(np.abs(got - full[:, first:last]).max())
        assert error <= TOLERANCE, (first, error)
    assert data.decode_stats.unplanned_reads == 0 and data.decode_stats.fallback == 0
