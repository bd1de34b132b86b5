"""An Ogg page rewritten after indexing, its CRC redone: crops over it are
exact or counted, never wrong without a word.

The index records CRCs of the bytes at each seek point (``index.content``),
none of the pages between them, and checks every page's granule position
against what its packets decode to only when it is built. A page whose
packets were zeroed, or two of them merged into one (the page as long as
before, so the blob keeps its length), still passes its CRC, and decodes
to less than its granule says: crops read through it from the seek point
before it ran short of their end (a ``CropError``) or, the whole episode,
came out longer than FFmpeg's full decode of the file, counted nowhere. The
decoder now holds each page to its granule position as the index did
(``decode._placed``) and hands a crop that needs packets past the first
page that fails it to the exact path, counted as a stale index.

Crops that do not read the page are served from their own bytes as the
index describes them, the same as before the rewrite: what FFmpeg's decode
of the whole file holds after a page that lost samples has moved, which only
checks over every page's bytes would see (Ogg indexes record none).
"""

from __future__ import annotations

import contextlib
import io
import shutil
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
from _ogg_layout import lacing, page
from helpers import record_sha256

from streamer import open_dataset
from streamer.dataset import Dataset
from streamer.decode.crop import CropRequest, prepare
from streamer.formats.frames import frame_to_float32
from streamer.formats.job import StaleIndex
from streamer.formats.ogg import pages as ogg
from streamer.formats.ogg.parse import MISPLACED
from streamer.formats.reader import Reader
from streamer.synth import encode, signal
from streamer.write.pack import pack

SECONDS = 6.0
#: key -> (codec, sample rate, channels, file name)
FILES = {
    "opus": ("opus", 48000, 1, "opus.opus"),
    "vorbis": ("vorbis", 44100, 2, "vorbis.ogg"),
    "flac": ("flac", 44100, 1, "flac.oga"),
}
#: 1 s crops every quarter of a second, and the whole episode.
CROPS = [(n / 4, n / 4 + 1) for n in range(int(SECONDS - 1) * 4)] + [(0.0, SECONDS)]
TOLERANCE = 1e-4
COUNTED = StaleIndex(MISPLACED).reason


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A packed and indexed dataset of one short episode per codec (FLAC in Ogg)."""
    root = tmp_path_factory.mktemp("rewritten")
    for key, (codec, rate, channels, name) in FILES.items():
        audio = signal(SECONDS, rate, channels, seed=len(key))
        (root / "src").mkdir(exist_ok=True)
        (root / "src" / name).write_bytes(encode(audio, rate, codec, container="ogg"))
    pack(root / "src", root / "dataset", progress=False)
    return root / "dataset"


def _sizes(lacing: bytes) -> list[int]:
    """The sizes of the packets a page's lacing values describe."""
    sizes, size = [], 0
    for value in lacing:
        size += value
        if value < 255:
            sizes.append(size)
            size = 0
    return sizes


def zeroed(victim: ogg.Page) -> tuple[bytes, bytes]:
    """The page's lacing and its body zeroed (Opus: packets of 10 ms)."""
    return victim.lacing, bytes(len(victim.body))


def merged(victim: ogg.Page) -> tuple[bytes, bytes]:
    """Two of the page's packets laced as one, in as many lacing values: a
    packet fewer, the bytes and their length as they were."""
    sizes = _sizes(victim.lacing)
    for n in range(len(sizes) - 1):
        a, b = sizes[n], sizes[n + 1]
        if len(lacing(a)) + len(lacing(b)) == len(lacing(a + b)):
            laced = b"".join(lacing(size) for size in (*sizes[:n], a + b, *sizes[n + 2 :]))
            assert len(laced) == len(victim.lacing)
            return laced, victim.body
    raise AssertionError("no two packets to merge in as many lacing values")


def _rewrite(
    clean: Path, folder: Path, key: str, rewrite: Callable[[ogg.Page], tuple[bytes, bytes]]
) -> tuple[Dataset, ogg.Page]:
    """A copy of ``clean`` in which the episode's middle audio page is
    rewritten (its CRC redone) and ``audio_info`` records the new bytes'
    sha256, as a repack would (else a stale index is no rewrite but bytes
    other than the packed ones: a ``CropError``, tests/decode/
    test_not_as_packed.py), opened, and that page."""
    root = folder / "dataset"
    shutil.copytree(clean, root)
    dataset = open_dataset(root)
    blob, index = dataset.blob(key), dataset.seek_index(key)
    data = bytes(blob.read_range(0, blob.length))
    audio = [p for p in ogg.scan(Reader(io.BytesIO(data))) if p.offset >= index.data_start]
    victim = audio[len(audio) // 2]
    lacing, body = rewrite(victim)
    new = page(victim.flags, victim.granule, victim.serial, victim.sequence, lacing, body)
    assert len(new) == victim.end - victim.offset
    (shard,) = (root / "audio").iterdir()
    raw = bytearray(shard.read_bytes())
    at = blob.offset + victim.offset
    raw[at : at + len(new)] = new
    shard.write_bytes(bytes(raw))
    record_sha256(root, key, data[: victim.offset] + new + data[victim.end :])
    return open_dataset(root), victim


def _full_decode(data: bytes) -> np.ndarray:
    """FFmpeg's decode of every packet of the file's stream, a packet its
    decoder rejects (a zeroed FLAC frame) left out."""
    out = []
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        for packet in container.demux(stream):
            with contextlib.suppress(av.FFmpegError):
                out += [frame_to_float32(frame) for frame in stream.codec_context.decode(packet)]
    return np.concatenate(out, axis=1)


def _crops(dataset: Dataset, key: str) -> list[tuple[float, float, np.ndarray | None, bool]]:
    """Each crop's start and end, audio (None: it raised) and whether
    anything was counted for it (a fallback or a bad packet)."""
    out = []
    stats = dataset.decode_stats
    for start, end in CROPS:
        before = (stats.fallback, stats.bad_packets)
        try:
            audio = dataset.read_crop(key, start, end)
        except Exception:
            audio = None
        out.append((start, end, audio, (stats.fallback, stats.bad_packets) != before))
    return out


def _exact(audio: np.ndarray | None, full: np.ndarray, start: float, end: float, rate: int) -> bool:
    """Whether ``audio`` is the crop of ``full`` (clipped at its end)."""
    want = full[:, round(start * rate) : round(end * rate)]
    return (
        audio is not None and audio.shape == want.shape and np.abs(audio - want).max() <= TOLERANCE
    )


def _reads(dataset: Dataset, key: str, start: float, end: float, victim: ogg.Page) -> bool:
    """Whether the crop's planned bytes hold the page."""
    job = prepare(dataset.episode(key), CropRequest(key, start, end))
    assert job.plan is not None
    offset, length = job.plan.data
    return offset <= victim.offset < offset + length


@pytest.mark.parametrize(
    ("key", "rewrite"),
    [("opus", zeroed), ("opus", merged), ("vorbis", merged), ("flac", zeroed)],
)
def test_crops_over_a_rewritten_page_are_exact_or_counted(
    clean: Path, tmp_path: Path, key: str, rewrite: Callable[[ogg.Page], tuple[bytes, bytes]]
) -> None:
    dataset, victim = _rewrite(clean, tmp_path, key, rewrite)
    blob = dataset.blob(key)
    full = _full_decode(bytes(blob.read_range(0, blob.length)))
    rate = dataset.seek_index(key).sample_rate
    before = open_dataset(clean)
    for start, end, audio, counted in _crops(dataset, key):
        if _reads(dataset, key, start, end, victim):
            assert counted or _exact(audio, full, start, end, rate), f"[{start}, {end}) s"
        else:  # as the index describes the bytes it reads (the docstring above)
            np.testing.assert_array_equal(audio, before.read_crop(key, start, end))
    # (Crops that start on the page go to the exact path by its seek-point CRC.)
    assert dataset.decode_stats.fallback_reasons.get(COUNTED, 0) > 0


@pytest.mark.parametrize("key", sorted(FILES))
def test_intact_pages_count_nothing(clean: Path, key: str) -> None:
    dataset = open_dataset(clean)
    blob = dataset.blob(key)
    full = _full_decode(bytes(blob.read_range(0, blob.length)))
    rate = dataset.seek_index(key).sample_rate
    for start, end, audio, counted in _crops(dataset, key):
        assert not counted and _exact(audio, full, start, end, rate), f"[{start}, {end}) s"
    assert dataset.decode_stats.paths == {"index": len(CROPS)}
