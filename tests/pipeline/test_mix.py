"""Mixing datasets: each takes its share of the crops by weight, spread evenly."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import pack_audio

import streamer
from streamer import Mix, RandomCrops, Streamer


def _the_warning(caplog: pytest.LogCaptureFixture) -> str:
    """The one warning logged (failing if there were others)."""
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    return said[0]


def test_mix_takes_shares_by_weight(packed: Path, audio_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    streamer.pack(audio_dir, other, progress=False)
    mix = Mix([(str(packed), 3.0), (str(other), 1.0)])
    s = Streamer(mix, RandomCrops(0.5, per_episode=4), workers=0)
    sources = s.plan().source
    assert len(sources) == 56 and (sources == 0).sum() == 42
    assert abs(np.flatnonzero(sources == 1).mean() - len(sources) / 2) < 6  # spread evenly
    crops = list(s)
    assert len(crops) == 56 and s.stats.yielded == 56


def test_a_source_without_crops_is_named_and_takes_no_share(
    packed: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A mix item whose episodes are all shorter than the crops has nothing
    to give: its share must not silently cut the others' (half of the
    epoch gone at 1:1), and the mix it cannot make is named."""
    short = pack_audio(tmp_path, {"a": ("flac", 16000, 1), "bb": ("wav", 16000, 1)}, 0.3)
    sampler = RandomCrops(0.5, per_episode=4)  # 28 crops of packed, none of short
    with caplog.at_level("WARNING", logger="streamer.pipeline.order"):
        s = Streamer(Mix([(str(packed), 1.0, "long"), (short, 1.0, "short")]), sampler, workers=0)
        crops = list(s)
    assert len(crops) == s.total(0) == 28 and {c.source for c in crops} == {"long"}
    said = _the_warning(caplog)
    assert f"Mix: item 'short' at {short.url} (weight 1, 2 episodes) has no crop" in said
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamer.pipeline.order"):
        for rank, worker in [(0, 1), (1, 0), (1, 1), (0, 0)]:  # every process plans the epoch
            mix = Mix([(str(packed), 1.0, "long"), (short, 1.0, "short")])
            s = Streamer(mix, sampler, rank=rank, world_size=2, worker=worker, num_workers=2)
            assert s.total() == 28
            assert len(caplog.records) == int((rank, worker) == (0, 0))  # once, by the first


@pytest.mark.parametrize(
    ("items", "says"),
    [
        ([("A", float("nan"))], "weight of item 0 (A) must be a finite number >= 0, not nan"),
        ([("A", 1.0), ("B", float("inf"))], "item 1 (B) must be a finite number >= 0, not inf"),
        ([("A", -1.0), ("B", 1.0)], "item 0 (A) must be a finite number >= 0, not -1"),
        ([("A", -1.0)], "item 0 (A) must be a finite number >= 0, not -1"),
        ([("A", 0.0)], "Mix weights are all zero"),
        ([("A", 0.0), ("B", 0, "b")], "all zero: no item would give a crop (A: 0, b: 0)"),
        ([("A", "3")], "weight of item 0 (A) must be a finite number >= 0, not '3'"),
        ([("A", True)], "weight of item 0 (A) must be a finite number >= 0, not True"),
        ([("A",)], "',): give (dataset, weight) or (dataset, weight, name)"),
        ([("A", 1.0, "a", "b")], "', 1.0, 'a', 'b'): give (dataset, weight) or"),
        ([("A", 1.0, "")], "the name of item 0 must be a non-empty string, not ''"),
        ([("A", 1.0, None)], "the name of item 0 must be a non-empty string, not None"),
        ([("A", 1.0, "x"), ("B", 1.0, "x")], "items 0 and 1 are both named 'x'"),
        ([("A", 1.0), ("A", 2.0)], "items 0 and 1 are both named"),
    ],
)
def test_meaningless_items_are_refused(
    packed: Path, items: list[tuple[object, ...]], says: str
) -> None:
    """A NaN or infinite weight crashed planning with ``cannot convert float
    NaN to integer``; a single item's weight (0, -1, NaN) was not looked at;
    two items of one name (or the same URL twice unnamed) yielded crops that
    ``crop.source`` could not tell apart; extra tuple elements were dropped."""
    data = {"A": str(packed), "B": str(packed)}
    given = [(data[item[0]], *item[1:]) for item in items]  # type: ignore[index]
    with pytest.raises(ValueError) as caught:
        Mix(given)  # type: ignore[arg-type]
    assert says.replace("(A", f"({packed}").replace("(B)", f"({packed})") in str(caught.value)


def test_items_may_be_any_iterable_and_the_same_dataset_twice_by_two_names(packed: Path) -> None:
    mix = Mix(item for item in [(str(packed), 1, "one"), (str(packed), 2.5, "two")])
    assert mix.names == ["one", "two"] and [w for _, w in mix.sources] == [1.0, 2.5]
    assert Mix([(str(packed), np.float32(0.5)), (str(packed), 0, "off")]).names[1] == "off"


@pytest.mark.parametrize("weights", [(2, 1, 1), (1, 1, 1), (5, 3, 1), (1e9, 1, 1), (0, 1, 2)])
def test_shares_add_up_to_the_epoch_and_match_the_weights(
    packed: Path, weights: tuple[float, ...]
) -> None:
    """Each source's count is its share of the epoch's crops rounded down or
    up, the counts add up to the epoch, and over epochs they average the
    shares asked for. Rounding each share alone lost or added crops (2:1:1
    of 21: 10 + 5 + 5 = 20) and favoured one source in every epoch alike
    (2:1:1 of 70 was 35/18/18 each epoch: 35 of 71)."""
    for per_episode in (1, 2, 3, 10):  # 7, 14, 21, 70 crops of each source
        mix = Mix([(str(packed), w, name) for w, name in zip(weights, "abc", strict=True)])
        s = Streamer(mix, RandomCrops(0.2, per_episode=per_episode), workers=0)
        total = 7 * per_episode * sum(w > 0 for w in weights)  # weight 0: absent
        quota = total * np.array(weights) / sum(weights)
        counts = np.array([np.bincount(s.plan(e).source, minlength=3) for e in range(40)])
        assert (counts.sum(axis=1) == total).all()
        assert (np.abs(counts - quota) < 1).all(), (counts, quota)
        assert (np.abs(counts.mean(axis=0) - quota) < 0.2).all(), (counts.mean(axis=0), quota)


def _crop_ids(crops: list[streamer.Crop]) -> list[tuple[str, str, float]]:
    return [(c.source, c.key, round(c.start, 6)) for c in crops]


def _two(packed: Path, tmp_path: Path) -> list[tuple[object, float, str]]:
    other = pack_audio(tmp_path, {"b1": ("flac", 44100, 2), "b2": ("wav", 22050, 2)}, 2.0)
    return [(str(packed), 2.0, "speech"), (other, 1.0, "music")]


def test_a_resumed_mix_yields_the_rest_of_the_epoch_and_refuses_another_mix(
    packed: Path, tmp_path: Path
) -> None:
    items = _two(packed, tmp_path)
    sampler = RandomCrops(0.5, per_episode=3)
    whole = _crop_ids(list(Streamer(Mix(items), sampler, workers=0, seed=3)))
    assert len(whole) == 27 and {s for s, _, _ in whole} == {"speech", "music"}
    s = Streamer(Mix(items), sampler, workers=0, seed=3)
    crops = iter(s)
    first = [next(crops) for _ in range(11)]
    state = s.state_dict()
    s.close()
    resumed = Streamer(Mix(items), sampler, workers=0, seed=3)
    resumed.load_state_dict(state)
    assert _crop_ids(first) + _crop_ids(list(resumed)) == whole
    speech, music = items
    for other in (
        [(speech[0], 1.0, "speech"), music],  # other weights
        [music, speech],  # other order
        [speech],  # an item missing
        [speech, (music[0], 1.0, "music"), (str(packed), 1.0, "more")],  # one more
    ):
        with pytest.raises(ValueError, match="state is for the Mix of items"):
            Streamer(Mix(other), sampler, workers=0, seed=3).load_state_dict(state)


def test_ranks_and_workers_over_a_mix_take_every_crop_once(packed: Path, tmp_path: Path) -> None:
    """Two ranks of two workers: together the epoch's crops (as many times as
    the plan holds each: music's 6 crops cycle to fill its 9), each labelled
    with its source, less the one that ``drop_last`` drops (counted)."""
    mix = Mix(_two(packed, tmp_path))
    sampler = RandomCrops(0.5, per_episode=3)
    whole = Streamer(mix, sampler, workers=0).plan()
    planned = Counter(
        zip(whole.source.tolist(), whole.episode.tolist(), whole.start.tolist(), strict=True)
    )
    got: Counter[tuple[int, int, float]] = Counter()
    dropped = 0
    for rank in range(2):
        for worker in range(2):
            s = Streamer(
                mix, sampler, workers=0, rank=rank, world_size=2, worker=worker, num_workers=2
            )
            part = s.plan()
            got.update(
                zip(part.source.tolist(), part.episode.tolist(), part.start.tolist(), strict=True)
            )
            crops = list(s)
            assert [c.source for c in crops] == [mix.names[i] for i in part.source]
            dropped += s.stats.dropped
    assert len(whole) == 27 and (np.bincount(whole.source) == [18, 9]).all()
    assert got.total() == 26 and dropped == 1 and not got - planned


@pytest.mark.parametrize(("sample_rate", "mono"), [(None, False), (16000, True), (8000, False)])
def test_sources_of_other_rates_and_channels(
    packed: Path, tmp_path: Path, sample_rate: int | None, mono: bool
) -> None:
    """Each crop comes at its own source's rate and channels, or at the
    Streamer's, and names its source; none is another source's audio."""
    items = _two(packed, tmp_path)
    crops = list(
        Streamer(
            Mix(items),
            RandomCrops(0.5, per_episode=2),
            workers=0,
            sample_rate=sample_rate,
            mono=mono,
        )
    )
    music = [c for c in crops if c.source == "music"]
    assert len(music) == len(crops) // 3 and {c.key for c in music} == {"b1", "b2"}
    for c in crops:
        rate = sample_rate or {"b1": 44100, "b2": 22050}.get(c.key, c.sample_rate)
        assert c.sample_rate == rate and c.audio.shape[-1] == round(0.5 * rate)
        if c.source == "music":
            assert c.audio.shape[0] == (1 if mono else 2)


def test_an_item_of_weight_zero_is_as_if_absent(packed: Path, tmp_path: Path) -> None:
    """Its crops counted in the epoch's length: ``[(speech, 1), (music, 0)]``
    planned speech's 21 crops and music's 6 as 27 of speech, cycling speech's
    crops (6 of them twice) instead of the epoch of speech alone."""
    (speech, _, _), (music, _, _) = _two(packed, tmp_path)
    sampler = RandomCrops(0.5, per_episode=3)
    alone = Streamer(Mix([(speech, 1.0, "speech")]), sampler, workers=0).plan()
    for items in (
        [(speech, 1.0, "speech"), (music, 0.0, "music")],
        [(music, 0, "music"), (speech, 3.0, "speech")],
    ):
        plan = Streamer(Mix(items), sampler, workers=0).plan()
        assert len(plan) == len(alone) == 21
        used = [name for (_, w, name) in items].index("speech")
        assert (plan.source == used).all()
        rows = sorted(zip(plan.episode.tolist(), plan.start.tolist(), strict=True))
        assert len(set(rows)) == 21  # no crop twice


def test_a_source_whose_shard_is_corrupt_has_its_crops_skipped_not_replaced(
    packed: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Music's shard overwritten mid-file: its crops that cannot be decoded
    are counted as skipped (the log names the source), the others come as
    planned; no speech crop takes a failed music crop's place."""
    items = _two(packed, tmp_path)
    shard = next((Path(items[1][0].url) / "audio").glob("*.wsds"))  # type: ignore[attr-defined]
    data = bytearray(shard.read_bytes())
    data[len(data) // 4 : 3 * len(data) // 4] = b"\x55" * (len(data) // 2)
    shard.write_bytes(bytes(data))
    s = Streamer(Mix(items), RandomCrops(0.5, per_episode=3), workers=0)
    planned = np.bincount(s.plan().source, minlength=2)
    with caplog.at_level("WARNING", logger="streamer.pipeline.streamer"):
        crops = list(s)
    skipped = sum(s.stats.skipped.values())
    assert skipped and len(crops) + skipped == s.total() == 27
    assert sum(c.source == "speech" for c in crops) == planned[0] == 18
    assert sum(c.source == "music" for c in crops) == planned[1] - skipped
    said = [r.getMessage() for r in caplog.records if "skipping crop" in r.getMessage()]
    assert len(said) == skipped and all("of source 'music'" in m for m in said)
    # the counts say which dataset lost them, not only why
    assert s.stats.skipped_by_source == {"music": s.stats.skipped}
    assert s.stats.as_dict()["skipped_by_source"] == {"music": s.stats.skipped}


def test_a_share_under_one_crop_is_named(
    packed: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """1e9:1 over 27 crops: music's share is 2.7e-8 crops, so nearly every
    epoch has none of it; that is what the weights ask, but said, not silent."""
    (speech, _, _), (music, _, _) = _two(packed, tmp_path)
    with caplog.at_level("WARNING", logger="streamer.pipeline.order"):
        s = Streamer(
            Mix([(speech, 1e9, "speech"), (music, 1, "music")]), RandomCrops(0.5, per_episode=3)
        )
        assert (s.plan().source == 0).sum() == 27
    said = _the_warning(caplog)
    assert f"Mix: item 'music' at {music.url} (weight 1) has a share of 2.7e-08 crops" in said
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamer.pipeline.order"):
        Streamer(
            Mix([(speech, 20, "speech"), (music, 1, "music")]), RandomCrops(0.5, per_episode=3)
        ).plan()
    assert not caplog.records  # 27 / 21 = 1.3 crops


def test_the_warnings_name_the_item_not_only_its_url(
    packed: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same dataset twice, by two names: a warning naming only the URL
    could be about either."""
    items = [(str(packed), 1e9, "clean"), (str(packed), 1.0, "augmented")]
    with caplog.at_level("WARNING", logger="streamer.pipeline.order"):
        Streamer(Mix(items), RandomCrops(0.5, per_episode=2)).plan()
    url = streamer.open_dataset(packed).url
    assert _the_warning(caplog).startswith(f"Mix: item 'augmented' at {url} (weight 1) ")


def test_a_resume_refuses_a_mix_of_other_names_and_says_why(packed: Path, tmp_path: Path) -> None:
    """The same two datasets with their names swapped plan the same order:
    its state loaded without a word and every crop after it was labelled
    with the other item's name for the rest of the epoch. So is the same
    dataset twice under two names, swapped. A state names its mix's items
    and weights; the same weights scaled (4:2 for 2:1) are the same mix."""
    (speech, _, _), (music, _, _) = items = _two(packed, tmp_path)
    sampler = RandomCrops(0.5, per_episode=3)
    for given, other in (
        (items, [(speech, 2.0, "music"), (music, 1.0, "speech")]),
        (
            [(speech, 1.0, "clean"), (speech, 1.0, "noisy")],
            [(speech, 1.0, "noisy"), (speech, 1.0, "clean")],
        ),
    ):
        s = Streamer(Mix(given), sampler, workers=0, seed=3)
        crops = iter(s)
        [next(crops) for _ in range(5)]
        state = s.state_dict()
        s.close()
        assert state["mix"] == [[name, w / sum(x[1] for x in given)] for _, w, name in given]
        other_mix = Streamer(Mix(other), sampler, workers=0, seed=3)
        assert other_mix.digest() != s.digest()
        with pytest.raises(ValueError, match=r"state is for the Mix of items \[.*\], this is"):
            other_mix.load_state_dict(state)
    scaled = Streamer(Mix([(speech, 4.0, "speech"), (music, 2.0, "music")]), sampler, workers=0)
    s = Streamer(Mix(items), sampler, workers=0)
    next(iter(s))
    state = s.state_dict()
    s.close()
    scaled.load_state_dict(state)
    assert len(list(scaled)) == 26
