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
had set 1 s; 132 of 400 crops off, by up to 6.3e-3."""

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


def _tone(form: str, encoder: str = "libopencore_amrnb") -> bytes:
    """12 s of a steady 220 Hz tone (and a little noise) through ``encoder``."""
    t = np.arange(SECONDS * RATE) / RATE
    noise = np.random.default_rng(104000).standard_normal(t.size) * 0.01
    samples = ((0.3 * np.sin(2 * np.pi * 220 * t) + noise) * 32767).astype(np.int16)
    out = io.BytesIO()
    with av.open(out, "w", format=form) as muxer:
        stream = muxer.add_stream(encoder, rate=RATE)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(samples[None], format="s16", layout="mono")
        frame.sample_rate = RATE
        for packet in [*stream.encode(frame), *stream.encode(None)]:  # PyAV cuts the frames
            muxer.mux(packet)
    return out.getvalue()


#: key -> (file name, container format, encoder)
FILES = {
    "raw": ("raw.amr", "amr", "libopencore_amrnb"),
    "in-3gp": ("in-3gp.3gp", "3gp", "libopencore_amrnb"),
    "ra144": ("ra144.ra", "rm", "real_144"),
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
    for name, form, encoder in FILES.values():
        if _has_encoder(encoder):
            (src / name).write_bytes(_tone(form, encoder))
    root = tmp_path_factory.mktemp("amr") / "ds"
    assert not pack(src, root, progress=False).skipped
    return root


@pytest.mark.parametrize(
    ("key", "container"), [("raw", "ffmpeg:amr"), ("in-3gp", "mp4"), ("ra144", "ffmpeg:rm")]
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
    assert rate == RATE
    n = full.shape[1]
    rng = np.random.default_rng(1)
    starts = [0, n - 400, *rng.integers(0, n - 400, size=60).tolist()]
    for first in starts:
        last = first + 400
        got = data.read_crop(key, first / RATE, last / RATE)
        error = float(np.abs(got - full[:, first:last]).max())
        assert error <= TOLERANCE, (first, error)
    assert data.decode_stats.unplanned_reads == 0 and data.decode_stats.fallback == 0
