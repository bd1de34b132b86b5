"""AC-3 and E-AC-3 in every container FFmpeg muxes them into: crops through
the index and through the fallback alone equal the full decode (opened as
``open_input`` opens it, with ``cons_noisegen``: docs/decoding.md) bit for
bit, at the first and last samples, across frames, one sample long, and
resampled to 16 kHz mono as the resampled full decode."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np
import pytest
from _index_support import packed_alone

from streamer import open_dataset
from streamer.dataset import Dataset
from streamer.decode.resample import downmix, resample
from streamer.decode.verify import countable
from streamer.write.pack import pack
from testkit.reference import full_decode
from tests.formats.test_generic import make

#: File name -> (muxer, encoder, rate, channels). ``eac3.wav`` is WAV's
#: format tag 0x2000, ``ac3.spdif`` IEC 61937 bursts as FFmpeg's spdif
#: muxer writes them (in a PCM WAV: below).
FILES = {
    "ac3.ac3": ("ac3", "ac3", 48000, 2),
    "eac3.eac3": ("eac3", "eac3", 32000, 1),
    "ac3.mp4": ("mp4", "ac3", 44100, 2),
    "eac3.mov": ("mov", "eac3", 48000, 1),
    "ac3.mka": ("matroska", "ac3", 32000, 2),
    "eac3.ts": ("mpegts", "eac3", 44100, 2),
    "ac3.vob": ("vob", "ac3", 48000, 2),
    "eac3.avi": ("avi", "eac3", 48000, 2),
    "ac3.caf": ("caf", "ac3", 44100, 1),
    "eac3.wav": ("wav", "eac3", 48000, 2),
    "ac3.w64": ("w64", "ac3", 48000, 1),
    "ac3.spdif": ("spdif", "ac3", 48000, 2),
}


def _bare(folder: Path, data: bytes, name: str) -> Dataset:
    """``data`` packed alone into ``folder``/ds without a seek index."""
    (folder / "src").mkdir(parents=True)
    (folder / "src" / name).write_bytes(data)
    pack(folder / "src", folder / "ds", progress=False, index=False)
    return open_dataset(folder / "ds")


@pytest.mark.parametrize("name", sorted(FILES))
def test_crops_equal_the_full_decode_through_the_index_and_the_fallback(
    tmp_path: Path, name: str
) -> None:
    muxer, encoder, rate, channels = FILES[name]
    data = make(muxer, encoder, "fltp", rate, channels, {}, seconds=2.5)
    full, got_rate = full_decode(data)
    assert got_rate == rate
    n = full.shape[1]
    crops = [(0, 1), (0, 1536), (1535, 1537), (4000, 20000), (n // 2, n // 2 + 1)]
    crops += [(n - 1536, n), (n - 1, n)]
    reference = resample(downmix(full), rate, 16000)
    (tmp_path / "indexed").mkdir()
    indexed, key = packed_alone(tmp_path / "indexed", data, name)
    bare = _bare(tmp_path / "bare", data, name)
    for dataset in (indexed, bare):
        for first, last in crops:
            got = dataset.read_crop(key, first / rate, last / rate)
            np.testing.assert_array_equal(got, full[:, first:last], err_msg=f"[{first}, {last})")
        for start, end in ((0.0, 0.5), (1.1, 1.9), (n / rate - 0.4, n / rate)):
            got = dataset.read_crop(key, start, end, sample_rate=16000, mono=True)
            want = reference[:, round(start * 16000) : round(end * 16000)]
            assert got.shape == want.shape
            assert float(np.abs(got - want).max()) <= 1e-6, (start, end)
    assert indexed.decode_stats.fallback == 0, indexed.episode(key).index.reason
    assert bare.decode_stats.fallback == len(crops) + 3


def test_ac3_bursts_in_a_pcm_wav_are_served_as_ffmpeg_decodes_them(tmp_path: Path) -> None:
    """IEC 61937 (S/PDIF) bursts of AC-3 stored as 16-bit stereo PCM in a
    WAV: FFmpeg's wav demuxer finds them in the data's first 64 KiB and
    decodes AC-3. The WAV index reads PCM, so its check fails, and the
    reason counted says so; every crop falls back to FFmpeg's decode, exact."""
    bursts = make("spdif", "ac3", "fltp", 48000, 2, {}, seconds=2.5)
    out = io.BytesIO()
    with wave.open(out, "wb") as pcm:
        pcm.setnchannels(2)
        pcm.setsampwidth(2)
        pcm.setframerate(48000)
        pcm.writeframes(bursts)
    data = out.getvalue()
    full, rate = full_decode(data)
    (tmp_path / "indexed").mkdir()
    indexed, key = packed_alone(tmp_path / "indexed", data, "a.wav")
    bare = _bare(tmp_path / "bare", data, "a.wav")
    n = full.shape[1]
    for dataset in (indexed, bare):
        for first, last in ((0, 1), (1535, 1537), (n - 1, n)):
            got = dataset.read_crop(key, first / rate, last / rate)
            np.testing.assert_array_equal(got, full[:, first:last], err_msg=f"[{first}, {last})")
        assert dataset.decode_stats.fallback == 3
    (reason,) = indexed.decode_stats.fallback_reasons
    assert countable(reason) == (
        "failed its check: FFmpeg decodes ac3 from it, not pcm_s16le: the head crop differs"
    )
