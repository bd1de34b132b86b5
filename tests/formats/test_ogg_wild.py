"""Ogg files (Vorbis, Opus, FLAC) as they come from the wild, cropped
exactly (FFmpeg's full decode).

Each file is a real encoder's packets re-paged byte for byte
(``_ogg_layout``): audio on the page that ends the headers, headers over
several pages, pages of a few packets' pieces or of the whole stream,
streams cut from a live recording (a large or negative starting granule),
and chains (links one after another, as concatenated files and radio
recorders make them). What FFmpeg does with them, which the index follows:

- its output does not depend on the page layout nor on the starting
  granule: every packet decoded, less Opus's pre-skip, the end trimmed to
  the last granule;
- a chain decodes as one stream with one decoder that is never reset: each
  link's end is trimmed (only at an end-of-stream page), a later Opus
  link's pre-skip dropped, and a later Vorbis link's first packet outputs
  its overlap with the link before;
- links of another rate or channel count fail its decode (no index), and
  Vorbis links with other codebooks decode to noise (no index);
- the end-of-stream granule trims the output: Opus's to it (never past
  what the packets decode to), Vorbis's only when that cuts into the last
  packet alone, FLAC's never;
- in a multiplexed file (streams side by side, pages interleaved) its
  first audio stream is the first one announced, whatever comes before.
"""

from __future__ import annotations

import copy
import io
import random
from pathlib import Path

import av
import numpy as np
import pytest
from _index_support import cli_encode, index_of
from _ogg_layout import Stream, interleave, paginate, split

from streamer import open_dataset
from streamer.decode.plan import plan_crop
from streamer.formats import extract
from streamer.formats.ogg import FORMAT
from streamer.write.pack import pack
from testkit.reference import full_decode

OGGENC = ["oggenc", "-Q", "-o", "{out}", "-"]
OPUSENC = ["opusenc", "--quiet", "-", "{out}"]
FLAC = ["flac", "-s", "--ogg", "--blocksize=1152", "-o", "{out}", "-"]
TOLERANCE = 1e-4


def _stream(codec: str, rate: int, channels: int, seconds: float, serial: int) -> Stream:
    command = OGGENC if codec == "vorbis" else OPUSENC
    stream = split(cli_encode(command, rate, channels, seconds), 3 if codec == "vorbis" else 2)
    stream.serial = serial
    return stream


def _files() -> dict[str, bytes]:
    out = {}
    for codec in ("vorbis", "opus"):
        a = _stream(codec, 44100, 2, 2.5, 1)
        b = _stream(codec, 44100, 2, 1.5, 2)
        c = copy.copy(a)
        c.serial = 3
        rate = 44100 if codec == "vorbis" else 48000
        out |= {
            f"{codec}/audio-on-header-page": paginate(a, audio_on_header_page=3),
            f"{codec}/headers-over-pages": paginate(a, header_body=150, audio_on_header_page=2),
            f"{codec}/small-pages": paginate(a, body=180),
            f"{codec}/one-page": paginate(a, body=65000),
            f"{codec}/live-start": paginate(a, offset=rate * 3600 * 7 + 17),
            f"{codec}/negative-start": paginate(a, offset=-700),
            f"{codec}/chain": paginate(a) + paginate(b),
            f"{codec}/chain-of-odd-pages": paginate(a, body=300, audio_on_header_page=1)
            + paginate(b, offset=rate * 100, header_body=200, audio_on_header_page=2)
            + paginate(c, body=5000, offset=-300),
            # Links cut without their end-of-stream pages: nothing trimmed.
            f"{codec}/chain-cut": paginate(a, ended=False)
            + paginate(b, ended=False, body=500)
            + paginate(c),
            # A recording stopped (no end-of-stream page), a download cut short
            # (the last page too): nothing trimmed, the length still known.
            f"{codec}/no-end": paginate(a, ended=False),
            f"{codec}/cut-short": _cut_short(paginate(a, body=1000)),
        }
    flac = split(cli_encode(FLAC, 22050, 2, 2.5), 4)
    out |= {
        "flac/plain": paginate(flac),
        "flac/audio-on-header-page": paginate(flac, audio_on_header_page=2),
        "flac/small-pages": paginate(flac, body=700),
        "flac/one-page": paginate(flac, body=65000),
        "flac/live-start": paginate(flac, offset=22050 * 3600),
        "flac/no-end": paginate(flac, ended=False),
        "flac/cut-short": _cut_short(paginate(flac, body=1000)),
    }
    for codec, stream in (
        ("vorbis", _stream("vorbis", 44100, 1, 1.5, 7)),
        ("opus", _stream("opus", 48000, 1, 1.5, 8)),
        ("flac", flac),
    ):
        for shift in (-100, -3000, 2000):  # the end-of-stream granule, moved
            moved = copy.deepcopy(stream)
            moved.granules[-1] += shift
            out[f"{codec}/last-granule{shift:+d}"] = paginate(moved)
    vorbis, opus = (paginate(_stream(c, 44100, 2, 2.0, n)) for n, c in ((5, "vorbis"), (6, "opus")))
    # Multiplexed: FFmpeg's first audio stream is the first announced.
    out["vorbis/multiplexed"] = interleave(vorbis, opus)
    out["opus/multiplexed"] = interleave(opus, vorbis)
    opus = _stream("opus", 48000, 2, 3.0, 4)
    opus.headers[0] = opus.headers[0][:10] + (65535).to_bytes(2, "little") + opus.headers[0][12:]
    out["opus/large-pre-skip"] = paginate(opus)  # 1.4 s, as in files from the wild
    return out


def _cut_short(data: bytes) -> bytes:
    """The file's first two thirds, its last page cut in the middle."""
    return data[: len(data) * 2 // 3]


@pytest.fixture(scope="module")
def wild(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    files = _files()
    src = tmp_path_factory.mktemp("ogg-wild")
    for key, data in files.items():
        (src / f"{key}.ogg").parent.mkdir(parents=True, exist_ok=True)
        (src / f"{key}.ogg").write_bytes(data)
    out = tmp_path_factory.mktemp("ogg-wild-ds") / "ds"
    pack(src, out, progress=False)
    return out, files


def _crops(duration: float, seed: str) -> list[tuple[float, float]]:
    """The first and the last samples, and 20 random spans."""
    rng = random.Random(seed)
    spans = [
        (0.0, 0.3),
        (0.0, duration),
        (duration - 0.4, duration),
        (duration - 0.1, duration + 1),
    ]
    for _ in range(20):
        start = rng.uniform(0, duration - 0.05)
        spans.append((start, min(start + rng.uniform(0.02, 1.5), duration)))
    return spans


LAYOUTS = (
    "audio-on-header-page",
    "headers-over-pages",
    "small-pages",
    "one-page",
    "live-start",
    "negative-start",
    "chain",
    "chain-of-odd-pages",
    "chain-cut",
    "no-end",
    "cut-short",
)
KEYS = [f"{codec}/{name}" for codec in ("vorbis", "opus") for name in LAYOUTS]
KEYS += ["opus/large-pre-skip", "vorbis/multiplexed", "opus/multiplexed"]
KEYS += [f"flac/{name}" for name in ("plain", "audio-on-header-page", "small-pages", "one-page")]
KEYS += ["flac/live-start", "flac/no-end", "flac/cut-short"]
KEYS += [f"{c}/last-granule{s:+d}" for c in ("vorbis", "opus", "flac") for s in (-100, -3000, 2000)]
#: One file per mechanism in the default run; the rest with ``-m slow``.
DEFAULT = {
    "vorbis/audio-on-header-page",
    "vorbis/headers-over-pages",
    "opus/small-pages",
    "vorbis/one-page",
    "opus/one-page",
    "opus/live-start",
    "vorbis/negative-start",
    "vorbis/chain-of-odd-pages",
    "opus/chain-of-odd-pages",
    "opus/chain-cut",
    "opus/no-end",
    "vorbis/cut-short",
    "flac/no-end",
    "opus/large-pre-skip",
    "opus/multiplexed",
    "flac/audio-on-header-page",
    "vorbis/last-granule-3000",
    "opus/last-granule+2000",
    "flac/last-granule-100",
}


@pytest.mark.parametrize(
    "key", [pytest.param(k, marks=() if k in DEFAULT else pytest.mark.slow) for k in KEYS]
)
def test_crops_equal_the_full_decode(wild: tuple[Path, dict[str, bytes]], key: str) -> None:
    root, files = wild
    dataset = open_dataset(root)
    index = dataset.seek_index(key)
    assert index.ok, index.reason
    full, rate = full_decode(files[key])
    assert index.num_samples == full.shape[1]
    for start, end in _crops(full.shape[1] / rate, key):
        got = dataset.read_crop(key, start, end)
        want = full[:, round(start * rate) : round(end * rate)]
        assert got.shape == want.shape, (start, end)
        if key.startswith(("vorbis", "flac")):
            np.testing.assert_array_equal(got, want, err_msg=f"{key} [{start}, {end})")
        else:
            assert float(np.abs(got - want).max()) <= TOLERANCE, (start, end)
    stats = dataset.decode_stats
    assert stats.fallback == 0 and stats.unplanned_reads == 0 and stats.bad_packets == 0


def test_a_late_link_plans_its_own_headers_only() -> None:
    """A crop in the third link reads that link's headers and the pages
    since the seek point before its own, not the first link's headers."""
    a = _stream("opus", 48000, 1, 1.5, 1)
    data = paginate(a) + paginate(_serial(a, 2)) + paginate(_serial(a, 3))
    index = index_of(data)
    assert len(index.header) == 3
    last = index.num_samples
    plan = FORMAT.refine_plan(index, plan_crop(index, last - 20000, last - 10000, 24000))
    assert plan.header[0] == index.header[2]
    assert len(plan.header) == 2 and plan.header[1][0] > index.header[2][0]


def _serial(stream: Stream, serial: int) -> Stream:
    other = copy.copy(stream)
    other.serial = serial
    return other


def test_chains_ffmpeg_cannot_decode_as_one_stream_have_no_index() -> None:
    stereo, mono = _stream("vorbis", 44100, 2, 1.0, 1), _stream("vorbis", 44100, 1, 1.0, 2)
    data = paginate(stereo) + paginate(mono)
    with pytest.raises(av.FFmpegError):
        full_decode(data)
    assert extract(io.BytesIO(data)).reason == "chained ogg streams of different formats"
    # Other codebooks: FFmpeg decodes the second link with the first's (noise).
    high = split(cli_encode(["oggenc", "-Q", "-q", "9", "-o", "{out}", "-"], 44100, 2, 1.0), 3)
    data = paginate(stereo) + paginate(_serial(high, 5))
    assert extract(io.BytesIO(data)).reason == "chained ogg streams with different vorbis headers"


def test_a_chained_link_of_one_page_has_no_index() -> None:
    """FFmpeg places a one-page stream by assumption (a start at 0), which a
    chain's later link would carry on: not indexed."""
    a = _stream("opus", 48000, 1, 1.0, 1)
    data = paginate(a) + paginate(_serial(a, 2), body=65000)
    assert extract(io.BytesIO(data)).reason == "a chained ogg link of one audio page"
