"""A seek index left over from a blob of the same byte length but other bytes.

Two episodes of one codec, rate and duration are packed, then packed again
with their blobs swapped between the keys (made the same length first: the
shorter padded with zeros at its end), and the first pack's ``seek_index/``
is served with the second pack's audio. ``num_bytes`` and ``audio_info``
agree with the blobs there, so only the bytes can tell. Every crop must be
exact (equal to the exact no-index path on the blob actually there) or be
counted as a fallback with its reason; never wrong samples, never an error.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import write_audio

from streamer import open_dataset
from streamer.dataset import write_manifest
from streamer.index import INDEX_DIR
from streamer.index.content import STALE
from streamer.pipeline import Streamer
from streamer.pipeline.samplers import ListCrops
from streamer.storage.local import LocalStore
from streamer.write.index import build_index, verify_index_shards
from streamer.write.pack import pack

#: codec -> (sample rate, channels)
CODECS = {
    "mp3": (44100, 2),
    "flac": (22050, 1),
    "vorbis": (44100, 2),
    "wav": (16000, 2),
    "aac": (44100, 2),
}
SECONDS = 6.0
WINDOWS = ((0.0, 0.5), (1.2, 2.1), (3.0, 3.4), (5.5, 6.0))


def _with_list_chunk(wav: bytes, size: int) -> bytes:
    """The WAV file with a ``LIST`` chunk of ``size`` bytes (from 8) before
    its ``data`` chunk, and its last ``size + 8`` bytes of samples cut: the
    same length, every sample moved."""
    at = wav.index(b"data")
    body = b"INFO" + bytes(size - 4)
    data_size = struct.unpack_from("<I", wav, at + 4)[0] - size - 8
    out = wav[:at] + b"LIST" + struct.pack("<I", size) + body
    out += b"data" + struct.pack("<I", data_size) + wav[at + 8 : at + 8 + data_size]
    return out[:4] + struct.pack("<I", len(out) - 8) + out[8:]


def _with_id3(mp3: bytes, size: int) -> bytes:
    """The mp3 behind an ID3v2.3 tag of ``size`` bytes of padding: every frame moved."""
    syncsafe = bytes((size >> shift) & 0x7F for shift in (21, 14, 7, 0))
    return b"ID3\3\0\0" + syncsafe + bytes(size) + mp3


def _packed(src: Path, out: Path, blobs: dict[str, bytes], ext: str) -> None:
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for key, data in blobs.items():
        (src / f"{key}.{ext}").write_bytes(data)
    pack(src, out, progress=False)


@pytest.fixture(scope="module", params=sorted(CODECS))
def swapped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """(stale, plain, before): the swapped pack with the first pack's index,
    the swapped pack without any index (the exact path), the first pack."""
    codec = request.param
    rate, channels = CODECS[codec]
    root = tmp_path_factory.mktemp(f"swap-{codec}")
    paths = [
        write_audio(root / "enc", f"e{seed}", codec, rate, channels, SECONDS, seed=seed)
        for seed in (3, 11)
    ]
    ext = paths[0].suffix[1:]
    a, b = (path.read_bytes() for path in paths)
    if codec == "wav":  # one header changed, the length kept
        b = _with_list_chunk(b, 4 * channels * 100)
    if codec == "mp3":  # one retagged (CBR: else the frames would sit where they did)
        b = _with_id3(b, 1000)
    size = max(len(a), len(b))
    a, b = a.ljust(size, b"\0"), b.ljust(size, b"\0")
    _packed(root / "src1", root / "before", {"one": a, "two": b}, ext)
    _packed(root / "src2", root / "after", {"one": b, "two": a}, ext)
    stale = root / "stale"
    shutil.copytree(root / "after", stale)
    shutil.rmtree(stale / INDEX_DIR)
    shutil.copytree(root / "before" / INDEX_DIR, stale / INDEX_DIR)
    write_manifest(LocalStore(), str(stale))
    plain = root / "plain"
    shutil.copytree(root / "after", plain)
    shutil.rmtree(plain / INDEX_DIR)
    return stale, plain, root / "before"


def test_a_same_length_blob_is_never_served_from_the_stale_index(swapped) -> None:  # type: ignore[no-untyped-def]
    stale, plain, before = swapped
    first = open_dataset(before)
    indexed = [key for key in ("one", "two") if first.episode(key).index.ok]
    assert indexed, "the first pack indexed neither episode: nothing is tested"
    dataset, reference = open_dataset(stale), open_dataset(plain)
    for key in ("one", "two"):
        for start, end in WINDOWS:
            np.testing.assert_array_equal(
                dataset.read_crop(key, start, end),
                reference.read_crop(key, start, end),
                err_msg=f"{key} [{start}, {end})",
            )
    stats = dataset.decode_stats
    assert stats.paths == {"fallback from the start": 2 * len(WINDOWS)}
    assert stats.fallback_reasons.get(STALE) == len(indexed) * len(WINDOWS)


def test_index_builds_the_shard_again(swapped) -> None:  # type: ignore[no-untyped-def]
    stale, plain, _ = swapped
    copy = stale.parent / "rebuilt"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(stale, copy)
    report = build_index(copy, progress=False)
    assert report.indexed == ["shard-000000"]
    dataset, reference = open_dataset(copy), open_dataset(plain)
    for key in ("one", "two"):
        np.testing.assert_array_equal(
            dataset.read_crop(key, 1.2, 2.1), reference.read_crop(key, 1.2, 2.1)
        )
    assert STALE not in dataset.decode_stats.fallback_reasons


def test_verify_rebuilds_a_stale_row_of_the_packed_blob(swapped) -> None:  # type: ignore[no-untyped-def]
    """``index --verify`` on a row whose bytes changed, in a blob that
    hashes to ``audio_info``'s ``sha256``: the row is another blob's, and
    is built anew from the blob, not left "no index" for good (plain
    ``index`` skips "no index" rows)."""
    stale, plain, before = swapped
    copy = stale.parent / "reverified"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(stale, copy)
    report = verify_index_shards(copy, progress=False)
    assert STALE not in report.reasons
    assert not report.problems()
    after = open_dataset(plain.parent / "after")
    dataset, reference = open_dataset(copy), open_dataset(plain)
    for key in ("one", "two"):
        if open_dataset(before).episode(key).index.ok:  # rebuilt: as a pack of the blob indexes it
            assert dataset.seek_index(key).ok == after.seek_index(key).ok
        np.testing.assert_array_equal(
            dataset.read_crop(key, 1.2, 2.1), reference.read_crop(key, 1.2, 2.1)
        )
    assert STALE not in dataset.decode_stats.fallback_reasons


def test_verify_does_not_bless_a_stale_row(swapped) -> None:  # type: ignore[no-untyped-def]
    """Without a recorded ``sha256``, ``index --verify`` cannot tell a blob
    rewritten from one damaged, and writes each row's CRCs anew from the
    bytes there: a row whose bytes changed is stored "no index", not
    re-checked through crops that would fall back (and so pass)."""
    stale, _, before = swapped
    copy = stale.parent / "reverified-unhashed"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(stale, copy)
    [info] = (copy / "audio_info").iterdir()
    table = pa.ipc.open_file(str(info)).read_all().drop_columns(["sha256"])
    with pa.ipc.new_file(str(info), table.schema) as writer:
        writer.write_table(table)
    write_manifest(LocalStore(), str(copy))
    indexed = [key for key in ("one", "two") if open_dataset(before).episode(key).index.ok]
    report = verify_index_shards(copy, progress=False)
    assert report.reasons[STALE] == len(indexed)
    dataset = open_dataset(copy)
    for key in indexed:
        assert dataset.seek_index(key).reason == STALE


def _streamed(dataset, plain: Path, before: Path) -> None:  # type: ignore[no-untyped-def]
    indexed = [key for key in ("one", "two") if open_dataset(before).episode(key).index.ok]
    crops = [(key, start, end) for key in ("one", "two") for start, end in WINDOWS]
    reference = open_dataset(plain)
    s = Streamer(dataset, ListCrops(crops), workers=1)
    got = list(s)
    assert len(got) == len(crops)
    for crop in got:
        np.testing.assert_array_equal(
            crop.audio, reference.read_crop(crop.key, crop.start, crop.end)
        )
    assert s.stats.decode.fallback_reasons.get(STALE) == len(indexed) * len(WINDOWS)


def test_streamed_through_a_decode_worker(swapped) -> None:  # type: ignore[no-untyped-def]
    """The same crops from a Streamer with a decode worker, which reads the
    mapped shard itself and falls back, counted."""
    stale, plain, before = swapped
    _streamed(open_dataset(stale), plain, before)


def test_streamed_over_s3_and_http(swapped, remote_folder) -> None:  # type: ignore[no-untyped-def]
    """Remote: the bytes are fetched by the parent and shipped (MP4's
    ``moov`` asked for by the worker when its demuxer opens)."""
    stale, plain, before = swapped
    if not stale.parent.name.startswith(("swap-aac", "swap-mp3")):
        pytest.skip("the shipped-bytes paths: mp3 (plain) and AAC (deferred moov)")
    publish, _ = remote_folder
    _streamed(publish(stale), plain, before)
