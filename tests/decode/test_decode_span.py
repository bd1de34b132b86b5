"""A crop decodes from the frame where its pre-roll starts to the frame that
holds its last sample: not from seek point to seek point.

Seek points are about a second apart; frames and packets a few
milliseconds. The formats that know where each frame of the planned data
starts (mp3 by count, MP4 from its sample table, Ogg Opus and Vorbis from
packet durations) start decoding at the frame at ``CropPlan.decode_from``
and stop after the crop's last sample, so a crop decodes about its own
length plus its pre-roll (docs/performance.md). The crops themselves are
checked against the full decode elsewhere (test_decode.py); here, that
they come out the same while decoding less.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import pack_audio

from streamer.dataset import Dataset
from streamer.decode.crop import CropRequest, decode_job, fetch, prepare, read_deferred
from streamer.formats.job import DecodeContext, DecodeStats, to_gapless
from streamer.formats.registry import format_for

SECONDS = 12.0
#: key -> (codec, sample rate, channels)
FILES = {
    "mp3": ("mp3", 44100, 2),
    "aac": ("aac", 44100, 2),
    "alac": ("alac", 44100, 1),
    "vorbis": ("vorbis", 44100, 2),
    "opus": ("opus", 48000, 2),
}
#: Samples of the longest frame or packet among these (ALAC's 4096).
FRAME = 4096


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return pack_audio(tmp_path_factory.mktemp("span"), FILES, SECONDS)


@pytest.mark.parametrize("key", sorted(FILES))
def test_a_crop_decodes_its_preroll_and_itself_only(dataset: Dataset, key: str) -> None:
    episode = dataset.episode(key)
    index = episode.index
    assert index is not None and float(np.diff(index.sample_pos).mean()) > 0.9 * index.timescale
    # Past the first seek point: a crop planned from the first packet decodes from it.
    starts = np.random.default_rng(7).uniform(2.5, SECONDS - 3.0, 12)
    for start in starts:
        job = prepare(episode, CropRequest(key, float(start), float(start) + 1.5))
        plan = job.plan
        assert plan is not None
        stats = DecodeStats()
        context = DecodeContext(episode, stats, lambda job=job: read_deferred(job))
        samples, at = format_for(index).decode(index, plan, fetch(job), context)
        wanted = to_gapless(index, plan.decode_from)
        # Where the pre-roll starts, to a packet (Vorbis's first one only primes).
        assert abs(at - wanted) < FRAME, (start, to_gapless(index, plan.start_native))
        assert plan.last <= at + samples.shape[1] < plan.last + FRAME
        assert stats.bad_packets == stats.unplanned_reads == 0
        # Each crop decoded so still equals the crop decoded through the
        # pipeline's own entry point, which test_decode.py holds to the full decode.
        crop = decode_job(job, fetch(job), DecodeStats()).audio
        np.testing.assert_array_equal(crop, samples[:, plan.first - at : plan.last - at])
