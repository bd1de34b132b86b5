"""The format registry: one plug-in per (container, codec), for indexing and decoding alike."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

import streamer
from streamer.formats import FORMATS, Format, extract, format_for, sniff
from streamer.index import SeekIndex
from testkit.reference import full_decode
from tests.formats.test_generic import make
from tests.formats.test_mp4 import timed_every


def test_every_pair_has_exactly_one_format() -> None:
    pairs = [(f.container, codec) for f in FORMATS for codec in f.codecs]
    assert len(pairs) == len(set(pairs))
    for form in FORMATS:
        assert isinstance(form, Format)
        for codec in form.codecs:
            index = SeekIndex(status="ok", codec=codec, container=form.container)
            assert format_for(index) is form
    assert format_for(SeekIndex(status="ok", codec="wmav2", container="mp4")) is None
    assert sniff(b"fLaC\0\0\0\x22") == "flac"


def test_an_mp4_its_format_refuses_is_served_by_the_fallback(tmp_path: Path) -> None:
    """An MP4 the native parser refuses (AC-3 timed 1024 a packet): the
    episode is indexed "no index" with the reason and every crop is served
    by the fallback (never a CropError). The reason is the parser's alone:
    it ended "; generic: mov cannot seek by byte", though FFmpeg's packet
    index never serves an MP4. (AC-3 inside MP4, which no format decoded,
    was the example until the MP4 format decoded it; FLAC before.)"""
    codec, rate, reason = "ac3", 48000, "mp4 sample durations that are not the codec's frame (stts)"
    data = timed_every(make("mp4", "ac3", "fltp", rate, 2, {}, seconds=6.0), 1024)
    index = extract(io.BytesIO(data))
    assert not index.ok and index.reason == reason and index.container == "mp4"
    src = tmp_path / "src"
    src.mkdir()
    (src / f"{codec}.m4a").write_bytes(data)
    streamer.pack(src, tmp_path / "ds", progress=False)
    dataset = streamer.open_dataset(tmp_path / "ds")
    # Not "; generic: mov cannot seek by byte": the generic index never
    # serves an MP4, so the indexer does not try it.
    assert dataset.seek_index(codec).reason == reason
    full, full_rate = full_decode(data)
    for start in (0.0, 1.3, 4.5):
        crop = dataset.crop(codec, start, start + 1.0)
        assert crop.sample_rate == full_rate == rate
        expected = full[:, round(start * rate) : round((start + 1.0) * rate)]
        # The fallback cuts the full decode itself: its very samples, lossy or not.
        np.testing.assert_array_equal(crop.audio, expected)
    assert dataset.decode_stats.fallback == 3
    assert dataset.decode_stats.fallback_reasons == {reason: 3}
    assert dataset.decode_stats.paths == {"fallback from the start": 3}


@pytest.mark.parametrize(
    ("container", "codec", "rate", "timescale", "preroll"),
    [
        ("mp3", "mp3", 44100, 44100, 5 * 1152),  # five frames
        ("mp3", "mp3", 22050, 22050, 5 * 576),  # MPEG-2 frames are half as long
        ("ogg", "vorbis", 44100, 44100, round(0.05 * 44100)),
        ("ogg", "opus", 48000, 48000, 24000),  # 0.5 s on Opus's 48 kHz timeline
        ("mp4", "aac", 44100, 44100, 4410),
        ("mp4", "alac", 44100, 44100, 0),
        ("flac", "flac", 44100, 44100, 0),
        ("wav", "pcm_s16le", 8000, 8000, 0),
    ],
)
def test_each_format_states_its_preroll(
    container: str, codec: str, rate: int, timescale: int, preroll: int
) -> None:
    index = SeekIndex(
        status="ok", codec=codec, container=container, sample_rate=rate, timescale=timescale
    )
    form = format_for(index)
    assert form is not None and form.preroll(index) == preroll
