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
