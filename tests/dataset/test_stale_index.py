"""A seek index built from other bytes than the audio shard now holds.

Sources retagged and packed again (an ID3v2 tag grown in front of an mp3,
a WAV ``LIST`` chunk before ``data``) keep their keys, codecs, durations and
sizes within a few KiB; every audio frame moves. A ``seek_index/`` shard left
from the first pack passes every field check (keys, codec, rate, duration,
data range inside the blob), and before its rows recorded the length of the
blob they were built from, each crop of those episodes was decoded at the
old offsets: wrong audio, not a word (mp3: 2 bad packets in 6 wrong crops;
wav: none). Now such a row is not used: its crops fall back, counted, and
``streamer index`` builds the shard again.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import write_audio

from streamer import open_dataset
from streamer.dataset import Dataset, write_manifest
from streamer.index import INDEX_DIR
from streamer.index.checks import ANOTHER_BLOB
from streamer.index.content import STALE
from streamer.index.table import CONTENT_COLUMN, ROW_CRC_COLUMN
from streamer.storage.local import LocalStore
from streamer.synth import encode, signal
from streamer.write.index import build_index
from streamer.write.pack import pack

#: key -> (codec, sample rate, channels); the flac is not retagged.
FILES = {"talk": ("mp3", 44100, 2), "music": ("wav", 16000, 2), "plain": ("flac", 22050, 1)}
RETAGGED = ("talk", "music")
WINDOWS = ((0.0, 1.0), (2.3, 3.1), (3.5, 3.9))


def _id3(size: int) -> bytes:
    """An ID3v2.3 tag of ``size`` bytes after its header: a title, then padding."""
    title = b"TIT2" + (11).to_bytes(4, "big") + b"\0\0" + b"\0retagged!!"
    syncsafe = bytes((size >> shift) & 0x7F for shift in (21, 14, 7, 0))
    return b"ID3\3\0\0" + syncsafe + title + bytes(size - len(title))


def _with_list_chunk(wav: bytes) -> bytes:
    """The WAV file with a ``LIST/INFO`` chunk before its ``data`` chunk."""
    info = b"INFOINAM" + struct.pack("<I", 10) + b"retagged!\0"
    at = wav.index(b"data")
    out = wav[:at] + b"LIST" + struct.pack("<I", len(info)) + info + wav[at:]
    return out[:4] + struct.pack("<I", len(out) - 8) + out[8:]


RETAG: dict[str, Callable[[bytes], bytes]] = {
    "mp3": lambda data: _id3(3000) + data,
    "wav": _with_list_chunk,
}


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(before, after): the sources packed, then packed again after the retag."""
    root = tmp_path_factory.mktemp("stale-index")
    paths = {
        key: write_audio(root / "src", key, codec, rate, channels, 4.0, seed=len(key))
        for key, (codec, rate, channels) in FILES.items()
    }
    pack(root / "src", root / "before", progress=False)
    for key in RETAGGED:
        path = paths[key]
        path.write_bytes(RETAG[FILES[key][0]](path.read_bytes()))
    pack(root / "src", root / "after", progress=False)
    return root / "before", root / "after"


def _stale(packs: tuple[Path, Path], folder: Path) -> Path:
    """The second pack with the first pack's ``seek_index/`` and a manifest
    that agrees with it (nothing but the index itself tells)."""
    before, after = packs
    shutil.copytree(after, folder)
    shutil.rmtree(folder / INDEX_DIR)
    shutil.copytree(before / INDEX_DIR, folder / INDEX_DIR)
    write_manifest(LocalStore(), str(folder))
    return folder


def _assert_exact_or_counted(dataset: Dataset, reference: Dataset) -> None:
    for key in FILES:
        for start, end in WINDOWS:
            np.testing.assert_array_equal(
                dataset.read_crop(key, start, end), reference.read_crop(key, start, end)
            )
    crops = len(RETAGGED) * len(WINDOWS)
    assert dataset.decode_stats.fallback_reasons == {ANOTHER_BLOB: crops}
    assert dataset.decode_stats.paths == {
        "fallback from the start": crops,
        "index": len(WINDOWS),  # the flac's bytes did not change: its index holds
    }


def test_an_index_of_the_blobs_before_a_repack_is_not_used(
    packs: tuple[Path, Path], tmp_path: Path
) -> None:
    stale = _stale(packs, tmp_path / "stale")
    _assert_exact_or_counted(open_dataset(stale), open_dataset(packs[1]))


def test_over_s3_and_http_too(packs: tuple[Path, Path], tmp_path: Path, remote_folder) -> None:  # type: ignore[no-untyped-def]
    publish, _ = remote_folder
    dataset = publish(_stale(packs, tmp_path / "stale"))
    assert dataset.manifest is not None  # the manifest agrees: only the index can tell
    _assert_exact_or_counted(dataset, open_dataset(packs[1]))


def test_index_builds_a_stale_shard_again(packs: tuple[Path, Path], tmp_path: Path) -> None:
    stale = _stale(packs, tmp_path / "stale")
    report = build_index(stale, progress=False)
    assert report.indexed == ["shard-000000"]
    dataset, reference = open_dataset(stale), open_dataset(packs[1])
    for key in FILES:
        np.testing.assert_array_equal(
            dataset.read_crop(key, 2.3, 3.1), reference.read_crop(key, 2.3, 3.1)
        )
    assert dataset.decode_stats.paths == {"index": len(FILES)}


def _remuxed(m4a: bytes, moov_first: bool) -> bytes:
    """The M4A with its chunk offsets moved with the data: ``moov`` before
    ``mdat`` (what ``-movflags faststart`` does), or ``free`` after
    ``mdat`` (``moov`` stays where it was). The same bytes, the same
    length, every frame elsewhere."""
    boxes, at = {}, 0
    while at < len(m4a):
        size = int.from_bytes(m4a[at : at + 4])
        boxes[m4a[at + 4 : at + 8]] = m4a[at : at + size]
        at += size
    moov = bytearray(boxes[b"moov"])
    shift = len(moov) if moov_first else -len(boxes[b"free"])
    stco = moov.index(b"stco") + 8  # version and flags, then the count
    for i in range(int.from_bytes(moov[stco : stco + 4])):
        entry = stco + 4 + 4 * i
        offset = int.from_bytes(moov[entry : entry + 4]) + shift
        moov[entry : entry + 4] = offset.to_bytes(4)
    if moov_first:
        return boxes[b"ftyp"] + boxes[b"free"] + bytes(moov) + boxes[b"mdat"]
    return boxes[b"ftyp"] + boxes[b"mdat"] + boxes[b"free"] + bytes(moov)


def _old_index_shard(folder: Path, *columns: str) -> None:
    """``folder``'s seek_index/ shards as written before ``columns`` existed
    (and ``row_crc``, which came after them all)."""
    import pyarrow as pa

    for shard in (folder / INDEX_DIR).iterdir():
        table = pa.ipc.open_file(str(shard)).read_all()
        table = table.drop_columns([*columns, ROW_CRC_COLUMN])
        with pa.ipc.new_file(str(shard), table.schema) as writer:
            writer.write_table(table)


@pytest.fixture(scope="module", params=["aac", "alac"])
def m4a_packs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """An M4A episode packed ("before"); re-muxed to the same length with
    ``moov`` first ("moved") or its ``mdat`` 8 bytes earlier, ``moov`` in
    place ("shifted"); encoded again from another signal, a longer file
    ("other"): each packed, and with the first pack's index as written
    before ``content_crc`` ("stale ...": only the decoder's ``moov`` check
    can tell) and as written now ("current ...")."""
    codec = request.param
    root = tmp_path_factory.mktemp(f"stale-{codec}")
    path = write_audio(root / "src", "ep", codec, 44100, 2, 4.0, seed=1)
    first = path.read_bytes()
    pack(root / "src", root / "before", progress=False)
    out = {"before": root / "before"}
    remuxed = {"moved": _remuxed(first, True), "shifted": _remuxed(first, False)}
    for name, data in (*remuxed.items(), ("other", None)):
        if data is None:  # a longer file: the old moov's offset is inside it
            data = encode(signal(4.3, 44100, 2, seed=2), 44100, codec)
            assert len(data) > len(first)
        path.write_bytes(data)
        pack(root / "src", root / name, progress=False)
        out[name] = root / name
        out[f"current-{name}"] = _stale((root / "before", root / name), root / f"now-{name}")
        stale = _stale((root / "before", root / name), root / f"stale-{name}")
        # its length differs: only an index shard from before num_bytes lets it through
        _old_index_shard(stale, CONTENT_COLUMN, *(["num_bytes"] if name == "other" else []))
        out[f"stale-{name}"] = stale
    return out


@pytest.mark.parametrize("case", ["moved", "shifted", "other"])
def test_a_stale_m4a_index_row_falls_back_counted(m4a_packs: dict[str, Path], case: str) -> None:
    """An M4A index row its checks let through (the blob re-muxed to its very
    length with ``moov`` first; a shard from before ``num_bytes`` over a
    re-encoded blob): the decoder found no ``moov`` where the index has it
    and every crop failed (``CropError: cannot decode aac: no moov box in
    the header ranges``); with ``moov`` in place over frames 8 bytes
    earlier, crops were decoded from bytes outside their plan. Now they fall
    back, exact, counted with the reason."""
    dataset = open_dataset(m4a_packs[f"stale-{case}"])
    reference = open_dataset(m4a_packs[case])
    for start, end in WINDOWS:
        np.testing.assert_array_equal(
            dataset.read_crop("ep", start, end), reference.read_crop("ep", start, end)
        )
    assert dataset.decode_stats.paths == {"fallback from the start": len(WINDOWS)}
    [(reason, count)] = dataset.decode_stats.fallback_reasons.items()
    assert count == len(WINDOWS) and reason.startswith("index built for another blob")


@pytest.mark.parametrize("case", ["moved", "shifted"])
def test_a_current_m4a_index_row_is_caught_by_its_content_crcs(
    m4a_packs: dict[str, Path], case: str
) -> None:
    """The same re-muxed blobs under an index shard as written now: the
    bytes a crop reads have other CRCs than its row records (before the
    decoder opens anything): exact, counted as stale."""
    dataset = open_dataset(m4a_packs[f"current-{case}"])
    reference = open_dataset(m4a_packs[case])
    for start, end in WINDOWS:
        np.testing.assert_array_equal(
            dataset.read_crop("ep", start, end), reference.read_crop("ep", start, end)
        )
    assert dataset.decode_stats.fallback_reasons == {STALE: len(WINDOWS)}


def test_a_stale_m4a_index_row_falls_back_in_a_decode_worker(m4a_packs: dict[str, Path]) -> None:
    """Through a Streamer's worker process: the worker decodes the fallback
    itself, and the reason comes back in the pipeline's counts."""
    from streamer import SequentialCrops, Streamer

    s = Streamer(m4a_packs["stale-moved"], SequentialCrops(1.0), workers=1, on_error="raise")
    crops = sorted(s, key=lambda c: c.start)
    reference = open_dataset(m4a_packs["moved"])
    assert len(crops) == len(s.plan()) == s.stats.decode.fallback >= 4
    assert s.stats.decode.paths == {"fallback from the start": len(crops)}
    for crop in crops:
        np.testing.assert_array_equal(crop.audio, reference.read_crop("ep", crop.start, crop.end))
