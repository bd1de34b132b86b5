"""Crop samplers: random, sequential and segment crops; crops past an episode's end are skipped."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import write_audio

import streamer
from streamer import RandomCrops, SegmentCrops, SequentialCrops, Streamer
from streamer.errors import CropError, LayoutError
from streamer.pipeline.episodes import Episodes
from streamer.write.pack import pack


def test_random_crops_lie_inside_their_episodes(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    episodes = Episodes.of(dataset)
    crops = RandomCrops(1.0, per_episode=4).crops(episodes, np.random.default_rng(0))
    assert len(crops) == 4 * len(episodes)
    assert np.allclose(crops.end - crops.start, 1.0)
    assert (crops.start >= 0).all() and (crops.end <= episodes.duration[crops.episode]).all()
    assert len(RandomCrops(5.0).crops(episodes, np.random.default_rng(0))) == 0
    short = RandomCrops(5.0, min_duration=2.0).crops(episodes, np.random.default_rng(0))
    assert len(short) == len(episodes) and (short.start == 0).all()


def test_sequential_crops_cover_each_episode(packed: Path) -> None:
    episodes = Episodes.of(streamer.open_dataset(packed))
    crops = SequentialCrops(1.25, hop=1.0).crops(episodes, np.random.default_rng(0))
    for episode, duration in enumerate(episodes.duration):
        # Exact durations (an M4A's 3.0186 s, not its header's 3.0): the
        # windows reach the last sample.
        mine = crops.episode == episode
        starts = np.arange(np.ceil(duration)).tolist()
        assert crops.start[mine].tolist() == starts
        ends = [min(s + 1.25, duration) for s in starts]
        assert crops.end[mine].tolist() == pytest.approx(ends)


@pytest.fixture
def with_segments(packed: Path, tmp_path: Path) -> Path:
    """``packed`` plus a ``vad/`` column: two segments per episode, one past its end."""
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(packed, root)
    dataset = streamer.open_dataset(root)
    (root / "vad").mkdir()
    for name in dataset.shard_names:
        keys = dataset.shard(name).keys.to_pylist()
        segments = [[[0.5, 1.25], [10.0, 11.0]] for _ in keys]
        table = pa.table({"__key__": keys, "vad": segments})
        with pa.ipc.new_file(str(root / "vad" / f"{name}.wsds"), table.schema) as writer:
            writer.write_table(table)
    return root


def test_segment_crops_and_skipped_failures(with_segments: Path) -> None:
    dataset = streamer.open_dataset(with_segments)
    episodes = Episodes.of(dataset)
    crops = SegmentCrops("vad", max_duration=0.5).crops(episodes, np.random.default_rng(0))
    assert crops.start[crops.episode == 0].tolist() == [0.5, 1.0, 10.0]  # 10.5: past the end
    s = Streamer(dataset, SegmentCrops("vad"), workers=0)
    got = list(s)
    assert len(got) == len(episodes)
    assert all((c.start, c.end) == (0.5, 1.25) for c in got)
    assert s.stats.skipped == {"CropError": len(episodes)}  # the segments past the end
    with pytest.raises(CropError, match="past the end"):
        list(Streamer(dataset, SegmentCrops("vad"), workers=0, on_error="raise"))


def test_episodes_no_sampler_can_draw_from_are_named(packed: Path, tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """Without ``audio_info/`` and a seek index an episode's duration is
    unknown and no sampler plans a crop of it: that is said, not silent."""
    import shutil

    with caplog.at_level("WARNING", logger="streamer.pipeline.episodes"):
        Episodes.of(streamer.open_dataset(packed))
    assert not caplog.records
    root = tmp_path / "bare"
    shutil.copytree(packed, root)
    for column in ("audio_info", "seek_index"):
        shutil.rmtree(root / column)
    (root / "streamer-manifest.json").unlink(missing_ok=True)
    with caplog.at_level("WARNING", logger="streamer.pipeline.episodes"):
        episodes = Episodes.of(streamer.open_dataset(root))
    assert np.isnan(episodes.duration).all()
    [record] = caplog.records
    said = record.getMessage()
    assert f"{len(episodes)} of {len(episodes)} episodes have no known duration" in said
    assert repr(episodes.keys[0]) in said
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamer.pipeline.episodes"):
        for rank, worker in [(0, 1), (1, 0), (1, 1), (0, 0)]:  # every process reads them
            s = Streamer(
                root, RandomCrops(1.0), rank=rank, world_size=2, worker=worker, num_workers=2
            )
            s.episodes()
            assert len(caplog.records) == int((rank, worker) == (0, 0))  # once, by the first


@pytest.fixture(scope="module")
def round_numbers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """WAV episodes whose lengths are whole numbers of the hops below: 12.3 s
    at 8000 Hz (41 hops of 0.3 s), 3 s at 11025 Hz (30 of 0.1 s, 1102.5 samples)."""
    src = tmp_path_factory.mktemp("round-src")
    write_audio(src, "a", "wav", 8000, 1, 12.3, seed=1)
    write_audio(src, "b", "wav", 11025, 2, 3.0, seed=2)
    out = tmp_path_factory.mktemp("round") / "ds"
    pack(src, out, progress=False)
    return out


@pytest.mark.parametrize(("key", "hop"), [("a", 0.3), ("b", 0.1), ("b", 0.3)])
def test_back_to_back_windows_tile_the_episode_sample_for_sample(
    round_numbers: Path, key: str, hop: float
) -> None:
    """No window starts at the end (12.3 / 0.3 is 41.000000000000014: a 42nd
    window held no sample and failed the pass), and window k's last sample is
    just before window k+1's first (k * hop + hop rounded to another sample
    than (k + 1) * hop at 11025 Hz: samples served twice or never)."""
    dataset = streamer.open_dataset(round_numbers)
    duration = dataset.info(key)["duration"]
    whole = dataset.read_crop(key, 0.0, duration)
    s = Streamer(dataset, SequentialCrops(hop), workers=0, on_error="raise", interleave=False)
    crops = sorted((c for c in s if c.key == key), key=lambda c: c.start)
    assert len(crops) == round(duration / hop)
    np.testing.assert_array_equal(np.concatenate([c.audio for c in crops], axis=1), whole)


@pytest.fixture(scope="module")
def half_up(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A WAV episode whose resampled length is an exact half: 65600 samples
    at 16 kHz are 45202.5 at 11.025 kHz, which libsoxr rounds up (45203)
    and ``round`` a time to even (45202)."""
    src = tmp_path_factory.mktemp("half-up-src")
    write_audio(src, "h", "wav", 16000, 1, 65600 / 16000, seed=3)
    out = tmp_path_factory.mktemp("half-up") / "ds"
    pack(src, out, progress=False)
    return out


def test_crops_to_the_end_reach_the_resampled_episodes_last_sample(half_up: Path) -> None:
    """The last window of SequentialCrops and a whole-length RandomCrops crop
    end at the resampled episode's end: they ended at the duration, whose
    rounding left the last sample out (45202 of 45203, with no word)."""
    dataset = streamer.open_dataset(half_up)
    whole = dataset.read_crop("h", 0.0, 10.0, sample_rate=11025)  # clipped at the end
    assert whole.shape == (1, 45203)
    tiles = Streamer(dataset, SequentialCrops(1.0), sample_rate=11025, workers=0, on_error="raise")
    crops = sorted(tiles, key=lambda c: c.start)
    tiled = np.concatenate([c.audio for c in crops], axis=1)  # resampled apart: float noise
    assert tiled.shape == whole.shape
    np.testing.assert_allclose(tiled, whole, rtol=0, atol=1e-6)
    short = RandomCrops(10.0, min_duration=0.5)
    (crop,) = Streamer(dataset, short, sample_rate=11025, workers=0, on_error="raise")
    np.testing.assert_array_equal(crop.audio, whole)
    (native,) = Streamer(dataset, short, workers=0, on_error="raise")  # as long as it is
    assert native.end == dataset.info("h")["duration"] and native.audio.shape == (1, 65600)


def test_short_episodes_get_their_share_of_per_hour_crops(packed: Path) -> None:
    """An episode shorter than ``duration`` gets ``h * per_hour`` whole-length
    crops in expectation, as any episode: it got one every epoch (a 7.9 s
    episode under ``duration=8, per_hour=100``: 4.5 times its share)."""
    episodes = Episodes.of(streamer.open_dataset(packed))
    duration = float(np.max(episodes.duration)) + 1.0  # every episode is short
    sampler = RandomCrops(duration, min_duration=0.0, per_hour=100.0)
    rng = np.random.default_rng(0)
    epochs = 400
    counts = np.zeros(len(episodes.duration))
    for _ in range(epochs):
        np.add.at(counts, sampler.crops(episodes, rng).episode, 1)
    expected = episodes.duration * 100.0 / 3600.0 * epochs
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected) + 1), (counts, expected)


@pytest.fixture(scope="module")
def ragged_ends(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """WAV episodes whose last window holds no sample once rounded: 12128
    samples at 11025 Hz (a window at 1.1 s starts at sample 12127.5, rounded
    to 12128: the end) and 48001 at 48 kHz (a window at 1.0 s holds one
    sample, a third of one at 16 kHz)."""
    src = tmp_path_factory.mktemp("ragged-src")
    write_audio(src, "c", "wav", 11025, 1, 12128 / 11025, seed=1)
    write_audio(src, "d", "wav", 48000, 2, 48001 / 48000, seed=2)
    out = tmp_path_factory.mktemp("ragged") / "ds"
    pack(src, out, progress=False)
    return out


@pytest.mark.parametrize("rate", [None, 16000, 8000, 44100])
def test_no_window_is_planned_that_holds_no_sample(ragged_ends: Path, rate: int | None) -> None:
    """Durations are in seconds, crops are cut in samples: a window starting
    under half a sample before the end was planned, then failed as past the
    end (or, resampled, as decoding to nothing). Every window planned is
    served, and the last samples still are, the resampled episode's too."""
    dataset = streamer.open_dataset(ragged_ends)
    s = Streamer(dataset, SequentialCrops(1.1, hop=0.1), workers=0, sample_rate=rate)
    crops = list(Streamer(dataset, s.sampler, workers=0, sample_rate=rate, on_error="raise"))
    assert len(crops) == len(s.plan())
    starts = {key: sorted(c.start for c in crops if c.key == key) for key in "cd"}
    # At 1.1 s: no native sample; resampled, the resampled episode's last
    # sample when it lies there (16 and 44.1 kHz: 17601 and 48512 samples).
    held = rate in (16000, 44100)
    assert starts["c"] == pytest.approx(np.arange(12 if held else 11) / 10)
    assert len(starts["d"]) == (10 if rate in (16000, 8000) else 11)  # 1.0 s: one sample
    last = max((c for c in crops if c.key == "c"), key=lambda c: c.start)
    assert round(last.end * 11025) == 12128 and last.audio.shape[1] > 0


def test_sample_rates_come_from_the_seek_index_without_audio_info(
    ragged_ends: Path, tmp_path: Path
) -> None:
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(ragged_ends, root)
    shutil.rmtree(root / "audio_info")
    (root / "streamer-manifest.json").unlink(missing_ok=True)
    episodes = Episodes.of(streamer.open_dataset(root), 16000)
    assert episodes.sample_rate.tolist() == [11025, 48000] and episodes.target_rate == 16000
    assert (
        episodes.sample_rate.tolist()
        == Episodes.of(streamer.open_dataset(ragged_ends)).sample_rate.tolist()
    )


def test_overlapping_windows_end_where_a_later_one_starts() -> None:
    episodes = Episodes(None, ["x"], np.zeros(1, np.int32), np.zeros(1, np.int64), np.array([9.0]))  # type: ignore[arg-type]
    crops = SequentialCrops(0.3, hop=0.1).crops(episodes, np.random.default_rng(0))
    starts = set(crops.start.tolist())
    assert all(end in starts for end in crops.end.tolist() if end < 9.0)
    assert crops.end[-1] == 9.0 and crops.start[-1] < 9.0 and len(crops) == 90


def test_segments_split_into_whole_pieces_only(with_segments: Path, tmp_path: Path) -> None:
    """A segment of exactly three pieces (0.1 to 2.2 s by 0.7 s: 3.0000000000000004)
    is three crops, the last ending at the segment's end: no fourth crop of
    nothing that fails."""
    import shutil

    root = tmp_path / "three"
    shutil.copytree(with_segments, root)
    rewrite_vad(root, [[0.1, 2.2]])
    dataset = streamer.open_dataset(root)
    s = Streamer(dataset, SegmentCrops("vad", max_duration=0.7), workers=0, on_error="raise")
    got = [(c.start, c.end) for c in s]
    assert len(got) == 3 * len(Episodes.of(dataset))
    assert sorted(set(got)) == [(0.1, pytest.approx(0.8)), (pytest.approx(0.8), 1.5), (1.5, 2.2)]


def rewrite_vad(root: Path, segments: list[list[float]]) -> None:
    """Give every episode of ``root``'s ``vad/`` column these ``segments``."""
    for shard in (root / "vad").iterdir():
        keys = pa.ipc.open_file(str(shard)).read_all()["__key__"]
        table = pa.table({"__key__": keys, "vad": [segments for _ in range(len(keys))]})
        with pa.ipc.new_file(str(shard), table.schema) as writer:
            writer.write_table(table)


def test_segments_without_usable_times_are_named(with_segments: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """NaN, infinite, negative and inverted segments give no crop: a warning
    says how many and names the first, once (not every epoch or round)."""
    segments = [[0.5, 1.0], [np.nan, 1.0], [-0.5, 1.0], [2.0, 1.5], [1.0, 1.0], [0.2, np.inf]]
    rewrite_vad(with_segments, segments)
    dataset = streamer.open_dataset(with_segments)
    episodes = Episodes.of(dataset)
    sampler = SegmentCrops("vad")
    with caplog.at_level("WARNING", logger="streamer.pipeline.samplers"):
        s = Streamer(dataset, sampler, workers=0, crops_per_epoch=3 * len(episodes))
        got = [(c.start, c.end) for c in s]
        s.set_epoch(1)
        s.plan()
    assert set(got) == {(0.5, 1.0)} and len(got) == 3 * len(episodes)
    [record] = caplog.records
    said = record.getMessage()
    assert f"{5 * len(episodes)} of {6 * len(episodes)} segments have no usable times" in said
    assert f"{episodes.keys[0]!r} [nan, 1]" in said and f"{episodes.keys[0]!r} [-0.5, 1]" in said
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamer.pipeline.samplers"):
        for rank, worker in [(0, 1), (1, 0), (1, 1), (0, 0)]:  # every process plans the epoch
            s = Streamer(
                dataset, SegmentCrops("vad"), rank=rank, world_size=2, worker=worker, num_workers=2
            )
            s.total()
            assert len(caplog.records) == int((rank, worker) == (0, 0))  # once, by the first


def test_episodes_of_no_audio_give_no_crop_whatever_min_duration() -> None:
    """``min_duration=0`` drew ``[0, 0)`` from an episode of duration 0: not a
    crop (``CropRequest`` refuses it), and the pass ended on that ``ValueError``."""
    durations = np.array([0.0, 0.5, 3.0, np.nan])
    episodes = Episodes(None, list("abcd"), np.zeros(4, np.int32), np.arange(4), durations)  # type: ignore[arg-type]
    for minimum in (0.0, -1.0):
        crops = RandomCrops(2.0, min_duration=minimum).crops(episodes, np.random.default_rng(0))
        assert crops.episode.tolist() == [2, 1]
        assert (crops.end > crops.start).all()


@pytest.fixture(scope="module")
def ragged_segments(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """WAV episodes with one segment each whose last piece of 0.5 s holds no
    sample once rounded: "e" (16 kHz, 2 s) [0.5, 1.50002]: 0.32 of a sample
    after 1.5 s; "f" (48 kHz, 2 s) [0.2, 1.2 + 1/48000]: one sample, a third
    of one at 16 kHz; "g" (12128 samples at 11025 Hz) [0.1, 1.2]: a piece
    starting at 1.1 s, sample 12127.5, rounded to the end (the segment runs
    past the end; unsplit, its crop is cut there)."""
    src = tmp_path_factory.mktemp("ragged-segments-src")
    write_audio(src, "e", "wav", 16000, 1, 2.0, seed=1)
    write_audio(src, "f", "wav", 48000, 2, 2.0, seed=2)
    write_audio(src, "g", "wav", 11025, 1, 12128 / 11025, seed=3)
    root = tmp_path_factory.mktemp("ragged-segments") / "ds"
    pack(src, root, progress=False)
    segments = {"e": [[0.5, 1.50002]], "f": [[0.2, 1.2 + 1 / 48000]], "g": [[0.1, 1.2]]}
    (root / "vad").mkdir()
    for shard in (root / "audio").iterdir():
        keys = pa.ipc.open_file(str(shard)).read_all()["__key__"].to_pylist()
        table = pa.table({"__key__": keys, "vad": [segments[key] for key in keys]})
        with pa.ipc.new_file(str(root / "vad" / shard.name), table.schema) as writer:
            writer.write_table(table)
    return root


@pytest.mark.parametrize("rate", [None, 16000])
def test_no_segment_piece_is_planned_that_holds_no_sample(
    ragged_segments: Path, rate: int | None
) -> None:
    """A segment cut into pieces of ``max_duration`` left a last piece under
    half a sample long (or starting at the episode's last sample): planned,
    then a CropError. Every piece planned is served, and the pieces of a
    segment still hold its samples, none twice, none lost."""
    dataset = streamer.open_dataset(ragged_segments)
    s = Streamer(dataset, SegmentCrops("vad", max_duration=0.5), workers=0, sample_rate=rate)
    crops = list(Streamer(dataset, s.sampler, workers=0, sample_rate=rate, on_error="raise"))
    assert len(crops) == len(s.plan())
    pieces = {
        key: sorted((c for c in crops if c.key == key), key=lambda c: c.start) for key in "efg"
    }
    # "g" at 16 kHz: the piece at 1.1 s holds the resampled episode's last
    # sample (17601 samples: the 17600th is at 1.1 s).
    assert [len(pieces[key]) for key in "efg"] == [2, *((2, 3) if rate == 16000 else (3, 2))]
    segments = {"e": (0.5, 1.50002), "f": (0.2, 1.2 + 1 / 48000), "g": (0.1, 1.2)}
    for key in "efg":  # resampled apart, the pieces tile the whole (within float rounding)
        whole = dataset.read_crop(key, *segments[key], sample_rate=rate)
        joined = np.concatenate([c.audio for c in pieces[key]], axis=1)
        assert joined.shape == whole.shape
        np.testing.assert_allclose(joined, whole, rtol=0, atol=1e-6 if rate else 0)


def test_a_segment_past_the_end_fails_once_split_or_not(with_segments: Path) -> None:
    """Only pieces cut from a segment are left out when they hold no sample: a
    segment starting past its episode's end is planned and fails counted,
    once, as it does unsplit (its piece [10.5, 11) is not a second failure)."""
    dataset = streamer.open_dataset(with_segments)
    s = Streamer(dataset, SegmentCrops("vad", max_duration=0.5), workers=0)
    got = list(s)
    assert s.stats.skipped == {"CropError": len(Episodes.of(dataset))}  # [10, 10.5)
    assert sorted((c.start, c.end) for c in got) == sorted(
        [(0.5, 1.0), (1.0, 1.25)] * (len(got) // 2)
    )


BAD_INFO = {"duration": [float("inf"), 1e12, -4.0, 0.0], "sample_rate": [0, -44100]}


def test_audio_info_values_no_audio_has_are_read_from_the_index(  # type: ignore[no-untyped-def]
    packed: Path, tmp_path: Path, caplog
) -> None:
    """A duration of ``inf`` (which ended the epoch with a ValueError naming
    nothing), 1e12 (a sequential sampler asked for 7 TiB), -4 or 0 (the
    episode drew no crop, and nothing said so), a sample rate of 0 or
    below (no crop either): each is taken from the seek index, and said."""
    clean = Episodes.of(streamer.open_dataset(packed))
    changed: list[tuple[str, str, object]] = []

    def change(columns: dict[str, list], rows: int) -> bool:  # type: ignore[type-arg]
        for field, values in BAD_INFO.items():
            for value in values:
                row = len(changed) % rows
                if len(changed) >= len(clean) or row >= rows:
                    break
                columns[field][row] = value
                changed.append((columns["__key__"][row], field, value))
        return True

    said, episodes = _sampled_with_info(packed, tmp_path, change, caplog)
    assert changed
    assert f"{len(changed)} episodes have an audio_info duration or sample rate" in said
    assert repr(changed[0][0]) in said
    rng = np.random.default_rng(0)
    for sampler in (RandomCrops(0.5), SequentialCrops(0.5)):
        crops = sampler.crops(episodes, rng)
        assert set(crops.episode.tolist()) == set(range(len(episodes)))


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: RandomCrops(NAN), "RandomCrops: duration must be a finite number > 0, not nan"),
        (lambda: RandomCrops(INF), "RandomCrops: duration must be a finite number > 0, not inf"),
        (lambda: RandomCrops(1.0, per_hour=INF), "per_hour must be a finite number > 0, not inf"),
        (lambda: RandomCrops(1.0, per_episode=1.5), "per_episode must be a whole number >= 1"),
        (lambda: RandomCrops(1.0, min_duration=NAN), "min_duration must be a finite number"),
        (lambda: SequentialCrops(NAN), "SequentialCrops: duration must be a finite number > 0"),
        (lambda: SequentialCrops(1.0, hop=NAN), "SequentialCrops: hop must be a finite number"),
        (lambda: SequentialCrops(1.0, hop=INF), "SequentialCrops: hop must be a finite number"),
        (lambda: SegmentCrops("vad", max_duration=0), "max_duration must be a finite number > 0"),
        (lambda: SegmentCrops(None), "SegmentCrops: column must be a column's name, not None"),  # type: ignore[arg-type]
    ],
)
def test_sampler_arguments_are_refused_when_made(make, said: str) -> None:  # type: ignore[no-untyped-def]
    """NaN passed ``duration <= 0`` and planned an empty epoch without a word,
    infinite ones failed at the first crop in numpy's words ("repeats may
    not contain negative values"), ``per_episode=1.5`` became 1."""
    with pytest.raises(ValueError, match=re.escape(said)):
        make()


@pytest.mark.parametrize(
    "sampler",
    [
        SequentialCrops(1.0, hop=1e-7),
        RandomCrops(0.1, per_episode=10**9),
        RandomCrops(0.1, per_hour=1e300),
        SegmentCrops("vad", max_duration=1e-9),
    ],
)
def test_a_plan_too_large_to_hold_is_refused_before_it_is_made(
    with_segments: Path, sampler: object
) -> None:
    """A hop of 1e-7 s allocated 24 GB, ``per_episode=10**9`` died on a
    ``MemoryError`` of 82 GiB: past ``MAX_CROPS`` a draw is a ValueError
    naming the sampler and the dataset, before anything that size exists."""
    from streamer.pipeline.samplers import MAX_CROPS

    dataset = streamer.open_dataset(with_segments)
    s = Streamer(dataset, sampler, workers=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError) as raised:
        s.plan()
    said = str(raised.value)
    assert said.startswith(f"{sampler!r} over {dataset.url}: ") and "\n" not in said
    assert f"more than MAX_CROPS ({MAX_CROPS:.0e}" in said


def npy(array: object) -> bytes:
    """``array`` as ``.npy`` bytes (a cell of segments as ``np.save`` writes it)."""
    out = io.BytesIO()
    np.save(out, np.asarray(array))
    return out.getvalue()


@pytest.mark.parametrize(
    ("cell", "said"),
    [
        (
            [[0.5, 1.5, 7.0], [4.0, 5.0, 9.0]],
            "segment 0 is [0.5, 1.5, 7.0], not a [start, end] pair",
        ),
        ([0.5, 1.5], "segment 0 is 0.5, not a [start, end] pair"),
        (npy([[0.5, 1.5, 7.0]]), "its .npy array is float64 (1, 3), not (n, 2) numbers"),
        (npy([0.5, 1.5]), "its .npy array is float64 (2,), not (n, 2) numbers"),
        (b"not npy", "its bytes are not a .npy array"),
        ([{"start": 0.5, "stop": 1.5}], "segment 0 has no start and end"),
        ("0.5-1.5", "'0.5-1.5' is not a list of segments"),
    ],
)
def test_a_cell_that_is_no_list_of_segments_is_named(
    with_segments: Path, cell: object, said: str
) -> None:
    """Every cell was reshaped into pairs: ``[start, end, label]`` triples
    became other pairs (``[7, 4]``, ``[5, 9]``: a crop no segment has, served
    or skipped), and an odd cell ended the plan with numpy's ``cannot
    reshape`` naming nothing. A cell that is not what the docs list is a
    ``LayoutError`` naming the column, the row, the shard and the key."""
    dataset = streamer.open_dataset(with_segments)
    for shard in (with_segments / "vad").iterdir():
        keys = pa.ipc.open_file(str(shard)).read_all()["__key__"]
        table = pa.table({"__key__": keys, "vad": [cell] * len(keys)})
        with pa.ipc.new_file(str(shard), table.schema) as writer:
            writer.write_table(table)
    first = dataset.shard_names[0]
    key = Episodes.of(dataset).keys[0]
    with pytest.raises(LayoutError) as raised:
        Streamer(streamer.open_dataset(with_segments), SegmentCrops("vad"), workers=0).plan()
    message = str(raised.value)
    assert f"SegmentCrops('vad', max_duration=None) over {dataset.url}: vad/vad row 0: " in message
    assert said in message and f"(shard={first!r}, key={key!r})" in message, message


def test_segments_as_npy_bytes_and_structs_are_read(with_segments: Path) -> None:
    """What the docs list: ``.npy`` bytes of an ``(n, 2)`` array (integers
    too), and structs with ``start`` and ``end`` whose other fields each
    crop carries."""
    for cell, fields in (
        (npy([[0.5, 1.25], [1, 2]]), None),
        (
            [{"start": 0.5, "end": 1.25, "text": "a"}, {"start": 1, "end": 2, "text": "b"}],
            [{"text": "a"}, {"text": "b"}],
        ),
    ):
        for shard in (with_segments / "vad").iterdir():
            keys = pa.ipc.open_file(str(shard)).read_all()["__key__"]
            table = pa.table({"__key__": keys, "vad": [cell] * len(keys)})
            with pa.ipc.new_file(str(shard), table.schema) as writer:
                writer.write_table(table)
        dataset = streamer.open_dataset(with_segments)
        crops = SegmentCrops("vad").crops(Episodes.of(dataset), np.random.default_rng(0))
        assert crops.start[crops.episode == 0].tolist() == [0.5, 1.0]
        assert crops.end[crops.episode == 0].tolist() == [1.25, 2.0]
        got = None if crops.fields is None else crops.fields[crops.episode == 0].tolist()
        assert got == fields


def test_audio_info_text_that_is_no_number_is_read_from_the_index(  # type: ignore[no-untyped-def]
    packed: Path, tmp_path: Path, caplog
) -> None:
    """Another tool's text columns: a ``duration`` of ``'n/a'`` ended the
    sampling of the whole dataset with a bare ``could not convert string to
    float``. Text that is a number is that number; text that is none (a
    sample rate of ``'?'`` too) is read from the seek index, and said."""
    changed = []

    def change(columns: dict[str, list], rows: int) -> bool:  # type: ignore[type-arg]
        for field in ("duration", "sample_rate"):
            columns[field] = [None if v is None else repr(v) for v in columns[field]]
        keys = columns["__key__"]
        if not changed:
            columns["duration"][0] = "n/a"
            changed.append(f"{keys[0]!r}: duration='n/a'")
            columns["sample_rate"][-1] = "?"
            changed.append(f"{keys[-1]!r}: sample_rate='?'")
        return False  # text columns: another schema

    said, _ = _sampled_with_info(packed, tmp_path, change, caplog)
    assert "2 episodes have an audio_info duration or sample rate no audio has" in said
    assert all(note in said for note in changed), said


def _sampled_with_info(packed: Path, tmp_path: Path, change, caplog) -> tuple[str, Episodes]:  # type: ignore[no-untyped-def]
    """``packed`` copied with each ``audio_info`` shard's columns passed
    through ``change(columns, rows)`` (which says whether the shard keeps
    its schema), then its episodes read: they are the clean ones (the
    values no audio has are read from the seek index), and the one warning
    that says so."""
    import shutil

    clean = Episodes.of(streamer.open_dataset(packed))
    root = tmp_path / "ds"
    shutil.copytree(packed, root)
    (root / "streamer-manifest.json").unlink(missing_ok=True)
    for path in sorted((root / "audio_info").iterdir()):
        table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
        columns = {name: table.column(name).to_pylist() for name in table.column_names}
        same = change(columns, table.num_rows)
        rewritten = pa.table(columns, schema=table.schema) if same else pa.table(columns)
        with pa.ipc.new_file(str(path), rewritten.schema) as writer:
            writer.write_table(rewritten)
    with caplog.at_level("WARNING", logger="streamer.pipeline.episodes"):
        episodes = Episodes.of(streamer.open_dataset(root))
    np.testing.assert_allclose(episodes.duration, clean.duration)
    np.testing.assert_array_equal(episodes.sample_rate, clean.sample_rate)
    [record] = caplog.records
    return record.getMessage(), episodes
