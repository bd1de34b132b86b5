"""An index whose length holds under one FFmpeg only is served under that one only.

An ``iTunSMPB`` tag's end padding is cut by FFmpeg 9 (PyAV 19) and not by
FFmpeg 8 (PyAV 18). The MP4 index models the cut for a tag after the track
(docs/decoding.md), so such an index holds under both; for a tag inside the
track (which FFmpeg 9 reads in another time base) it does not, and the
index records the FFmpeg that built and checked it
(``SeekIndex.length_policy``); under another one its crops fall back, and
equal that FFmpeg's full decode: none runs past its end.

``data/smpb-av18/`` is a dataset built under PyAV 18 (FFmpeg 8) before the
cut was modelled, its index recording ``libavformat 62``: under ``tox -e
av19`` it is the index of another FFmpeg, read as a user who upgrades PyAV
would read it. Remake it (after a change of the index's on-disk form)
under PyAV 18 with ``python -m tests.formats.test_length_policy``.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import rewrite_index_shard

from streamer import open_dataset
from streamer.formats import extract
from streamer.formats.ffmpeg import LENGTH_POLICY, full_decode_length
from streamer.index import INDEX_DIR
from streamer.index.table import IndexReader, SeekIndex
from streamer.shard.ipc import Shard
from streamer.write.pack import pack
from testkit.reference import full_decode
from tests.formats.test_generic import FILES, make
from tests.formats.test_mp4_wild import (
    NO_EDIT,
    PRIMING,
    TOLERANCE,
    _mux,
    _smpb_value,
    _with_smpb,
)

FIXTURE = Path(__file__).parent / "data" / "smpb-av18"
KEY = "smpb"
#: Crops (seconds) inside every FFmpeg's decode, and one up to the index's end.
SPANS = [(0.0, 0.3), (0.5, 1.2), (1.5, 1.9)]


def _tagged() -> bytes:
    """AAC with no edit list and an iTunSMPB tag (priming 2112, padding 452)."""
    return _with_smpb(_mux(options=NO_EDIT))


@pytest.mark.parametrize(
    ("make", "policy"),
    [
        # FFmpeg 9's cut of the padding is in the index: it holds under both.
        (_tagged, ""),
        (lambda: _with_smpb(_mux(), value=_smpb_value(PRIMING)), ""),
        # A priming out of range is ignored, its padding is still cut by FFmpeg 9.
        (lambda: _with_smpb(_mux(options=NO_EDIT), value=_smpb_value(16384)), ""),
        # Inside the track FFmpeg 9 reads the tag in the 90 kHz time base.
        (lambda: _with_smpb(_mux(options=NO_EDIT), inside_track=True), LENGTH_POLICY),
        # With an edit list FFmpeg 8 resets a tag inside the track; 9 still cuts.
        (lambda: _with_smpb(_mux(), inside_track=True), LENGTH_POLICY),
        # Two tags: which one FFmpeg 9 cuts by is not measured.
        (lambda: _with_smpb(_tagged()), LENGTH_POLICY),
        (lambda: _mux(options=NO_EDIT), ""),
        # The tag goes to the chapter track read after the audio: nothing to cut.
        (lambda: _with_smpb(_mux(chapters=True)), ""),
        (lambda: _with_smpb(_mux(options=NO_EDIT), value=b"not hex at all"), ""),
        (lambda: _mux("alac", 48000, 1, options=NO_EDIT), ""),
    ],
)
def test_an_index_records_the_ffmpeg_its_length_needs(
    make: Callable[[], bytes], policy: str
) -> None:
    index = extract(io.BytesIO(make()))
    assert index.ok, index.reason
    assert index.length_policy == policy


def _stored(root: Path) -> tuple[Path, dict[str, SeekIndex]]:
    (path,) = (root / INDEX_DIR).iterdir()
    reader = IndexReader(Shard(path))
    return path, {k: reader.read(r) for r, k in enumerate(reader.shard.keys.to_pylist())}


def _assert_crops_are_this_ffmpegs(root: Path, served: bool) -> None:
    """Crops equal the installed FFmpeg's full decode, from the index when
    ``served``, else all through the fallback; a crop asked up to the
    stored index's end stops at this FFmpeg's end."""
    dataset = open_dataset(root)
    full, rate = full_decode(bytes(dataset.blob(KEY).view()))
    index = dataset.episode(KEY).index  # as crops get it
    assert index is not None and index.ok is served, index
    if not served:
        assert index.reason.startswith("index checked under another FFmpeg")
    (path,) = (root / INDEX_DIR).iterdir()
    stored = IndexReader(Shard(path)).read(0)
    claimed = stored.num_samples / stored.timescale
    for start, end in [*SPANS, (claimed - 0.05, claimed)]:
        got = dataset.read_crop(KEY, start, end)
        want = full[:, round(start * rate) : round(end * rate)]
        assert got.shape == want.shape, (start, end, got.shape, want.shape)
        assert float(np.abs(got - want).max()) <= TOLERANCE
    stats = dataset.decode_stats
    assert stats.fallback == (0 if served else stats.crops)


def test_an_index_of_another_ffmpeg_falls_back_to_this_ones_decode(tmp_path: Path) -> None:
    """An index (one every FFmpeg serves) planted with another FFmpeg's policy."""
    src = tmp_path / "src"
    src.mkdir()
    (src / f"{KEY}.m4a").write_bytes(_mux(options=NO_EDIT))
    pack(src, tmp_path / "ds", progress=False)
    _assert_crops_are_this_ffmpegs(tmp_path / "ds", served=True)
    path, rows = _stored(tmp_path / "ds")
    index = rows[KEY]
    rows[KEY] = dataclasses.replace(index, length_policy="libavformat 1")
    _rewrite(path, rows)
    _assert_crops_are_this_ffmpegs(tmp_path / "ds", served=False)


def _rewrite(path: Path, rows: dict[str, SeekIndex]) -> None:
    rewrite_index_shard(path, rows)


def test_a_generic_index_serves_only_under_the_ffmpeg_that_checked_it(tmp_path: Path) -> None:
    """FFmpeg's demuxer placed a generic index's points and decodes from
    them: the index records that FFmpeg, and under another one (planted
    here) the crops go through the fallback, still exact, each counted."""
    data = make(*FILES["adts.aac"][:6])
    src = tmp_path / "src"
    src.mkdir()
    (src / "adts.aac").write_bytes(data)
    pack(src, tmp_path / "ds", progress=False)
    path, rows = _stored(tmp_path / "ds")
    assert rows["adts"].container.startswith("ffmpeg:") and rows["adts"].ok
    assert rows["adts"].length_policy == LENGTH_POLICY
    rows["adts"] = dataclasses.replace(rows["adts"], length_policy="libavformat 1")
    _rewrite(path, rows)
    dataset = open_dataset(tmp_path / "ds")
    index = dataset.episode("adts").index
    assert index is not None and not index.ok
    assert index.reason.startswith("index checked under another FFmpeg (libavformat 1, not ")
    full, rate = full_decode(data)
    for start, end in [(0.0, 0.5), (1.0, 2.2), (2.5, 3.0)]:
        got = dataset.read_crop("adts", start, end)
        want = full[:, round(start * rate) : round(end * rate)]
        assert got.shape == want.shape, (start, end)
        assert float(np.abs(got - want).max()) <= TOLERANCE
    assert dataset.decode_stats.fallback == dataset.decode_stats.crops == 3


def test_an_index_built_under_pyav_18_serves_only_under_ffmpeg_8(tmp_path: Path) -> None:
    """The committed dataset, built and checked under PyAV 18 (FFmpeg 8, whose
    decode keeps the tag's 452 samples of padding): served from its index
    there, through the fallback under any other FFmpeg (FFmpeg 9 cuts them)."""
    root = tmp_path / "smpb-av18"
    shutil.copytree(FIXTURE, root)
    _, rows = _stored(root)
    stored = rows[KEY]
    assert stored.length_policy == "libavformat 62"
    dataset = open_dataset(root)
    full, rate = full_decode(bytes(dataset.blob(KEY).view()))
    same = stored.length_policy == LENGTH_POLICY
    # The hazard: FFmpeg 9's decode ends before the index's (FFmpeg 8's) end.
    assert (full_decode_length(stored) * rate == full.shape[1] * stored.timescale) == same
    _assert_crops_are_this_ffmpegs(root, served=same)


def make_fixture(out: Path) -> None:
    """Pack the tagged file into ``out`` (indexed and checked under the installed PyAV)."""
    src = out.parent / "smpb-src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    src.mkdir(parents=True)
    (src / f"{KEY}.m4a").write_bytes(_tagged())
    pack(src, out, progress=False)
    shutil.rmtree(src)
    # As an index of it was stored before FFmpeg 9's cut was modelled: it
    # records the FFmpeg that checked it.
    path, rows = _stored(out)
    rows[KEY] = dataclasses.replace(rows[KEY], length_policy=LENGTH_POLICY)
    _rewrite(path, rows)


if __name__ == "__main__":
    if not LENGTH_POLICY.endswith(" 62"):
        sys.exit(f"make the fixture under PyAV 18 (FFmpeg 8), not {LENGTH_POLICY}")
    make_fixture(FIXTURE)
    print(f"wrote {FIXTURE}")
