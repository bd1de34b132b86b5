"""The PyTorch adapter: DataLoader workers split the epoch; collate pads; resumption."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import streamer  # noqa: E402
import streamer.torch  # noqa: E402
from streamer import RandomCrops, Streamer  # noqa: E402
from streamer.torch import CropDataset, collate  # noqa: E402


def test_dataloader_workers_cover_the_epoch_once(packed: Path) -> None:
    sampler = RandomCrops(0.5, per_episode=4, min_duration=0.1)
    data = streamer.open_dataset(packed)
    expected = {(c.key, c.start) for c in Streamer(data, sampler, sample_rate=16000, workers=0)}
    dataset = CropDataset(str(packed), sampler, sample_rate=16000)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=collate)
    seen = []
    for batch in loader:
        assert batch["audio"].dtype == torch.float32 and batch["audio"].ndim == 3
        assert batch["audio"].shape[0] == len(batch["key"]) == len(batch["lengths"])
        seen += list(zip(batch["key"], batch["start"].tolist(), strict=True))
    assert len(seen) == len(set(seen)) == len(expected) and set(seen) == expected


def test_collate_pads_to_the_longest(packed: Path) -> None:
    data = streamer.open_dataset(packed)
    crops = list(Streamer(data, RandomCrops(0.5), sample_rate=16000, mono=True, workers=0))
    crops[0].audio = crops[0].audio[:, :100]
    batch = collate(crops[:3])
    assert batch["audio"].shape[:2] == (3, 1) and batch["lengths"][0] == 100
    assert float(batch["audio"][0, 0, 100:].abs().sum()) == 0.0


def test_collate_warns_once_when_it_pads_channels(
    packed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mono crop batched with stereo ones gets a silent second channel:
    said once, not on every batch; crops alike but for length say nothing."""
    monkeypatch.setattr(streamer.torch, "_padding_warned", False)
    data = streamer.open_dataset(packed)
    crops = list(Streamer(data, RandomCrops(0.5), sample_rate=16000, workers=0))
    mono = [c for c in crops if c.audio.shape[0] == 1]
    stereo = [c for c in crops if c.audio.shape[0] == 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        collate(mono[:2])
    with pytest.warns(UserWarning, match=r"leading shapes \(1,\), \(2,\) .* pass mono=True"):
        batch = collate([mono[0], stereo[0]])
    assert float(batch["audio"][0, 1].abs().sum()) == 0.0  # what the warning is about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        collate([mono[0], stereo[0]])


def test_crop_dataset_checks_its_options_when_made(packed: Path) -> None:
    sampler = RandomCrops(0.5)
    with pytest.raises(TypeError, match=r"'sample_rat'; did you mean 'sample_rate'\?"):
        CropDataset(str(packed), sampler, sample_rat=16000)
    with pytest.raises(TypeError, match="store options go in storage_options="):
        CropDataset(str(packed), sampler, endpoint_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="its store is already chosen"):
        CropDataset(streamer.open_dataset(packed), sampler, storage_options={"attempts": 2})
    dataset = CropDataset(str(packed), sampler, epoch=2, workers=0, storage_options={})
    assert dataset.epoch == 2 and len(dataset.streamer()) == 7
    for bad in ({"epoch": 1.5}, {"epoch": -1}, {"seed": "7"}, {"batch_size": 0}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be a whole number"):
            CropDataset(str(packed), sampler, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epoch must be a whole number"):
        dataset.set_epoch(1.5)  # type: ignore[arg-type]
    numpy = CropDataset(str(packed), sampler, seed=np.int32(7), epoch=np.int64(1), workers=0)
    numpy.set_epoch(np.int32(2))
    assert numpy.epoch == 2 and type(numpy.epoch) is int and len(numpy.streamer()) == 7


@pytest.mark.parametrize("option", ["worker", "num_workers"])
def test_crop_dataset_refuses_a_worker_partition_of_its_own(packed: Path, option: str) -> None:
    """The DataLoader says which worker a copy is: ``num_workers=4`` taken
    for decode processes (that is ``workers``) under a DataLoader of 2 would
    serve the turns of workers 0 and 1 of 4, half the epoch, without a word."""
    with pytest.raises(TypeError, match="the DataLoader's num_workers"):
        CropDataset(str(packed), RandomCrops(0.5), **{option: 4})


def test_collate_refuses_crops_of_different_rates_unless_allowed(packed: Path) -> None:
    """Crops at their episodes' own rates (no ``sample_rate=``) were stacked
    into one batch: a model saw 0.5 s of 16 kHz and of 48 kHz audio as the
    same thing, and only ``batch["sample_rate"]`` showed it."""
    crops = list(Streamer(streamer.open_dataset(packed), RandomCrops(0.5), mono=True, workers=0))
    rates = {c.sample_rate for c in crops}
    assert len(rates) > 1
    by_rate = {c.sample_rate: c for c in crops}
    mixed = list(by_rate.values())
    with pytest.raises(
        ValueError, match=r"crops of sample rates 16000 .* in one batch: .*sample_rate="
    ):
        collate(mixed)
    batch = collate(mixed, mixed_rates=True)
    assert sorted(batch["sample_rate"].tolist()) == sorted(rates)
    same = [c for c in crops if c.sample_rate == mixed[0].sample_rate]
    assert len(collate(same)["key"]) == len(same)
    resampled = Streamer(
        streamer.open_dataset(packed), RandomCrops(0.5), sample_rate=16000, mono=True, workers=0
    )
    assert set(collate(list(resampled))["sample_rate"].tolist()) == {16000}


def test_collate_keeps_float64_fields_and_ints_past_float32(packed: Path) -> None:
    """A float64 column came out float32 (torch's default dtype): 0.43333333333333335
    as 0.4333333373, an int of 2**24 + 1 beside a float as 2**24; a uint64
    past int64 stays a list (it was a bare ValueError)."""
    data = streamer.open_dataset(packed)
    crops = list(Streamer(data, RandomCrops(0.5), sample_rate=16000, mono=True, workers=0))[:3]
    for crop, score, big in zip(
        crops, [0.43333333333333335, 1234567.891, 16777217], [1, 2, 3], strict=True
    ):
        crop.fields = {"score": score, "n": np.int64(2**62 + big), "huge": np.uint64(2**64 - big)}
    batch = collate(crops)
    assert batch["score"].dtype == torch.float64
    assert batch["score"].tolist() == [0.43333333333333335, 1234567.891, 16777217.0]
    assert batch["n"].dtype == torch.int64 and batch["n"].tolist()[0] == 2**62 + 1
    assert batch["huge"] == [np.uint64(2**64 - 1), np.uint64(2**64 - 2), np.uint64(2**64 - 3)]


def test_collate_lengths_and_mask_leave_out_pad_zeros(packed: Path) -> None:
    """With ``pad=True`` a crop past its episode's end is zero-padded to its
    length, and ``lengths`` / ``mask`` counted the zeros as the crop's own."""
    data = streamer.open_dataset(packed)
    key = next(iter(data))
    end = float(data.info(key)["duration"])
    s = Streamer(
        data,
        streamer.ListCrops([(key, end - 0.25, end + 0.25), (key, 0.0, 0.5)]),
        sample_rate=16000,
        pad=True,
        workers=0,
    )
    crops = sorted(s, key=lambda c: c.start)
    batch = collate(crops)
    assert batch["audio"].shape[-1] == 8000
    assert batch["lengths"].tolist() == [8000, 4000]
    assert int(batch["mask"][1].sum()) == 4000 and crops[1].padded == 4000
    assert float(batch["audio"][1, :, 4000:].abs().sum()) == 0.0


def test_collate_promotes_transform_outputs_and_names_the_crop_of_a_bad_one(packed: Path) -> None:
    """Outputs took the first crop's dtype (0.25 in an int16 batch became 0),
    and a transform's non-array output failed inside torch, naming nothing."""
    data = streamer.open_dataset(packed)
    crops = list(Streamer(data, RandomCrops(0.5), sample_rate=16000, mono=True, workers=0))[:2]
    crops[0].audio = np.ones((1, 4), np.int16)
    crops[1].audio = np.full((1, 4), 0.25, np.float32)
    batch = collate(crops)
    assert batch["audio"].dtype == torch.float32 and float(batch["audio"][1, 0, 0]) == 0.25
    crops[1].audio = None
    with pytest.raises(ValueError, match=f"crop {crops[1].key!r} .* a transform must return"):
        collate(crops)
    crops[1].audio = np.float32(1.0)
    with pytest.raises(ValueError, match="is a scalar"):
        collate(crops)
