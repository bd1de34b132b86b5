"""Crops of real-world audio (issue 12) against FFmpeg's full decode.

The corpus is other encoders' files from other projects' packages
(``tests/corpus/manifest.toml``), fetched before the run by
``python -m tests.corpus.fetch --small`` (the default set) or without
``--small`` (everything, for ``-m slow``). Each set is packed into one
dataset with its seek index and one without (``pack(..., index=False)``), and
every file's crops (start, end, the whole file, random interior ones and
ones crossing seek points) must equal the full decode: lossless
bit-identical, lossy within 1e-4 at zero lag, AAC noise substitution in place
(docs/decoding.md). A file FFmpeg does not decode is skipped with the reason.

``EXPECTED_FAILURES`` is the one list of what still fails, by failure class:
strict, so a fix elsewhere that makes one pass shows up as XPASS to delete.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import pytest

from streamer import open_dataset
from streamer.dataset.dataset import Dataset
from streamer.write.pack import pack
from testkit.corpus import (
    Reference,
    check_crops,
    crop_points,
    full_decode,
    served_index,
    stage,
)
from testkit.corpus_manifest import CorpusFile, corpus_dir, load_manifest

FILES = load_manifest()
#: Random interior crops per file (through the index; the fallback gets FALLBACK_CROPS).
INTERIOR_CROPS = 8
FALLBACK_CROPS = 50

#: What still fails (measured on this branch by ``python -m benchmarks.corpus_table``):
#: corpus file -> {test: failure class}, for the tests ``index``
#: (test_an_index_serves_the_file), ``indexed`` (test_crops_equal_the_full_decode)
#: and ``fallback`` (test_fallback_crops_equal_the_full_decode). Classes:
#: ``no-index: <reason>`` (served by the fallback), ``raises: <error>`` (a crop
#: raises), ``length: <+/-n> samples`` (a crop too long or short: misplaced),
#: ``samples: max error <e>`` (right length, wrong samples: misaligned, or too
#: little pre-roll). Strict: delete a line when its test passes (XPASS).
EXPECTED_FAILURES: dict[str, dict[str, str]] = {
    "audiofile/gs-16b-1c-16000hz.opus": {
        "fallback": "samples: max error 0.0035",
    },
    "audiofile/gs-16b-1c-44100hz.aac": {
        "index": "no-index: unknown container",
        "indexed": "samples: max error 0.18",
        "fallback": "samples: max error 0.21",
    },
    "audiofile/gs-16b-1c-44100hz.m4a": {
        "index": "no-index: index disagrees with audio_info: channels",
    },
    "audiofile/gs-16b-1c-8000hz.amr": {
        "index": "no-index: unknown container",
        "indexed": "samples: max error 0.087",
        "fallback": "samples: max error 0.13",
    },
    "beets/empty.ape": {
        "index": "no-index: unknown container",
    },
    "beets/empty.m4a": {
        "index": "no-index: index disagrees with audio_info: channels",
    },
    "beets/empty.mpc": {
        "index": "no-index: unknown container",
    },
    "beets/empty.wv": {
        "index": "no-index: unknown container",
    },
    "beets/emptylist.mp3": {
        "index": "no-index: index disagrees with audio_info: duration",
        "indexed": "samples: max error 0.11",
        "fallback": "samples: max error 0.11",
    },
    "lmms-common/clav01.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "raises: the stream's timestamps skip a range (fallback)",
    },
    "lmms-common/kick01.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "raises: the stream's timestamps skip a range (fallback)",
    },
    "minetest-data/default_dig_metal.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -128 samples",
    },
    "minetest-data/default_snow_footstep.4.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -128 samples",
    },
    "minetest-data/doors_door_close.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -256 samples",
    },
    "minetest-data/doors_door_open.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -256 samples",
    },
    "minetest-data/player_damage.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -128 samples",
    },
    "minetest-data/soundstuff_mono.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "raises: the stream's timestamps skip a range (fallback)",
    },
    "mutagen/11k-1ch-2s-silence.aif": {
        "index": "no-index: unknown container",
    },
    "mutagen/48k-2ch-s16-silence.aif": {
        "index": "no-index: unknown container",
    },
    "mutagen/5644800-2ch-s01-silence.dff": {
        "index": "no-index: unknown container",
    },
    "mutagen/5644800-2ch-s01-silence.dsf": {
        "index": "no-index: unknown container",
    },
    "mutagen/8k-1ch-1s-silence.aif": {
        "index": "no-index: unknown container",
    },
    "mutagen/8k-1ch-3.5s-silence.aif": {
        "index": "no-index: unknown container",
    },
    "mutagen/8k-4ch-1s-silence.aif": {
        "index": "no-index: unknown container",
    },
    "mutagen/apev2-lyricsv2.mp3": {
        "index": "no-index: index disagrees with audio_info: duration",
        "indexed": "samples: max error 0.054",
        "fallback": "samples: max error 0.054",
    },
    "mutagen/audacious-trailing-id32-apev2.mp3": {
        "indexed": "length: -64 samples",
        "fallback": "samples: max error 0.33",
    },
    "mutagen/bad-TYER-frame.mp3": {
        "fallback": "samples: max error 0.58",
    },
    "mutagen/bad-xing.mp3": {
        "indexed": "length: -1152 samples",
        "fallback": "samples: max error 0.029",
    },
    "mutagen/click.mpc": {
        "index": "no-index: unknown container",
    },
    "mutagen/covr-with-name.m4a": {
        "indexed": "raises: decoder covered samples [a, b) but the crop needs [a, b)",
    },
    "mutagen/dsd.wv": {
        "index": "no-index: unknown container",
    },
    "mutagen/empty.aac": {
        "index": "no-index: unknown container",
        "indexed": "length: -1024 samples",
        "fallback": "length: -1024 samples",
    },
    "mutagen/empty.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -128 samples",
    },
    "mutagen/empty.oggflac": {
        "index": "no-index: unsupported codec in ogg: flac",
        "indexed": "length: +593 samples",
        "fallback": "length: +593 samples",
    },
    "mutagen/empty.spx": {
        "index": "no-index: unsupported codec in ogg: speex",
    },
    "mutagen/empty.tta": {
        "index": "no-index: unknown container",
    },
    "mutagen/ep7.m4b": {
        "fallback": "samples: max error 0.25",
    },
    "mutagen/ep9.m4b": {
        "fallback": "samples: max error 0.53",
    },
    "mutagen/example.opus": {
        "index": "no-index: index disagrees with audio_info: duration",
    },
    "mutagen/has-tags.m4a": {
        "indexed": "raises: decoder covered samples [a, b) but the crop needs [a, b)",
    },
    "mutagen/has-tags.tak": {
        "index": "no-index: unknown container",
    },
    "mutagen/id3v1v2-combined.mp3": {
        "indexed": "length: -1152 samples",
    },
    "mutagen/id3v22-test.mp3": {
        "indexed": "length: -1152 samples",
    },
    "mutagen/lame-peak.mp3": {
        "fallback": "samples: max error 0.072",
    },
    "mutagen/lame.mp3": {
        "fallback": "samples: max error 0.076",
    },
    "mutagen/lame397v9short.mp3": {
        "indexed": "raises: range is past the end of the episode",
        "fallback": "raises: range is past the end of the episode (FFmpeg decodes 0 s)",
    },
    "mutagen/mac-396.ape": {
        "index": "no-index: unknown container",
    },
    "mutagen/mac-399.ape": {
        "index": "no-index: unknown container",
    },
    "mutagen/multipage-setup.ogg": {
        "fallback": "length: -154 samples",
    },
    "mutagen/multipagecomment.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -128 samples",
    },
    "mutagen/multiplexed.spx": {
        "index": "no-index: unsupported codec in ogg: speex",
    },
    "mutagen/no-tags.3g2": {
        "index": "no-index: index disagrees with audio_info: channels",
        "indexed": "length: -1024 samples",
        "fallback": "length: -1024 samples",
    },
    "mutagen/no-tags.m4a": {
        "indexed": "raises: decoder covered samples [a, b) but the crop needs [a, b)",
    },
    "mutagen/no-tags.mp3": {
        "fallback": "samples: max error 0.75",
    },
    "mutagen/no_length.wv": {
        "index": "no-index: unknown container",
    },
    "mutagen/sample_length.oggtheora": {
        "index": "no-index: unsupported codec in ogg: skeleton",
    },
    "mutagen/silence-1.wma": {
        "index": "no-index: unknown container",
        "indexed": "length: -4080 samples",
        "fallback": "length: -4080 samples",
    },
    "mutagen/silence-2.wma": {
        "index": "no-index: unknown container",
        "indexed": "raises: range is past the end of the episode (FFmpeg decodes 0 s)",
        "fallback": "raises: range is past the end of the episode (FFmpeg decodes 0 s)",
    },
    "mutagen/silence-3.wma": {
        "index": "no-index: unknown container",
        "indexed": "raises: range is past the end of the episode (FFmpeg decodes 0 s)",
        "fallback": "raises: range is past the end of the episode (FFmpeg decodes 0 s)",
    },
    "mutagen/silence-44-s.ac3": {
        "index": "no-index: unknown container",
        "indexed": "length: +2 samples",
        "fallback": "length: +2 samples",
    },
    "mutagen/silence-44-s.eac3": {
        "index": "no-index: unknown container",
        "indexed": "length: +2 samples",
        "fallback": "length: +2 samples",
    },
    "mutagen/silence-44-s.tak": {
        "index": "no-index: unknown container",
    },
    "mutagen/silence-44-s.wv": {
        "index": "no-index: unknown container",
    },
    "mutagen/sv8_header.mpc": {
        "index": "no-index: unknown container",
        "indexed": "raises: range is past the end of the episode (FFmpeg decodes 0 s)",
        "fallback": "raises: range is past the end of the episode (FFmpeg decodes 0 s)",
    },
    "mutagen/vbri.mp3": {
        "index": "no-index: index disagrees with audio_info: duration",
        "indexed": "samples: max error 0.17",
        "fallback": "samples: max error 0.17",
    },
    "mutagen/with-id3.aif": {
        "index": "no-index: unknown container",
    },
    "mutagen/xing.mp3": {
        "indexed": "length: -1152 samples",
    },
    "oxygen-sounds/Oxygen-Window-Maximize.ogg": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -128 samples",
    },
    "pymediainfo/aac_he_v2.aac": {
        "index": "no-index: unknown container",
    },
    "pymediainfo/issue55.flv": {
        "index": "no-index: unknown container",
        "indexed": "length: -16 samples",
        "fallback": "length: -16 samples",
    },
    "pymediainfo/sample.mp4": {
        "fallback": "samples: max error 0.0028",
    },
    "pymediainfo/vbr_requires_parsespeed_1.mp4": {
        "index": "no-index: unsupported codec in mp4: mp4a object type 0xdd",
        "indexed": "length: -128 samples",
        "fallback": "length: -128 samples",
    },
    "python3-scipy/test-8000Hz-be-3ch-5S-24bit.wav": {
        "index": "no-index: unknown container",
    },
    "python3-scipy/test-8000Hz-le-1ch-10S-20bit-extra.wav": {
        "index": "no-index: unsupported wav format 0x0001 with 20 bits",
    },
    "python3-scipy/test-8000Hz-le-1ch-1byte-ulaw.wav": {
        "index": "no-index: no decoder for pcm_mulaw in wav",
    },
    "python3-scipy/test-8000Hz-le-3ch-5S-24bit-inconsistent.wav": {
        "index": "no-index: invalid wav fmt chunk",
        "indexed": "samples: max error 1",
        "fallback": "samples: max error 1",
    },
    "python3-scipy/test-8000Hz-le-3ch-5S-64bit.wav": {
        "index": "no-index: unsupported wav format 0x0001 with 64 bits",
    },
    "python3-scipy/test-8000Hz-le-4ch-9S-12bit.wav": {
        "index": "no-index: unsupported wav format 0x0001 with 12 bits",
    },
    "python3-scipy/test-8000Hz-le-5ch-9S-5bit.wav": {
        "index": "no-index: unsupported wav format 0x0001 with 5 bits",
    },
    "sound-theme-freedesktop/audio-volume-change.oga": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "raises: the stream's timestamps skip a range (fallback)",
    },
    "sound-theme-freedesktop/dialog-information.oga": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "raises: the stream's timestamps skip a range (fallback)",
    },
    "sound-theme-freedesktop/phone-outgoing-calling.oga": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -256 samples",
    },
    "sound-theme-freedesktop/service-logout.oga": {
        "fallback": "length: -116 samples",
    },
    "sound-theme-freedesktop/suspend-error.oga": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "length: -128 samples",
    },
    "teeworlds-data/foley_dbljump-01.wv": {
        "index": "no-index: unknown container",
    },
    "teeworlds-data/music_menu.wv": {
        "index": "no-index: unknown container",
    },
    "teeworlds-data/sfx_ctf_grab_en.wv": {
        "index": "no-index: unknown container",
    },
    "teeworlds-data/sfx_ctf_grab_pl.wv": {
        "index": "no-index: unknown container",
    },
    "teeworlds-data/sfx_hit_weak-01.wv": {
        "index": "no-index: unknown container",
    },
    "teeworlds-data/sfx_msg-client.wv": {
        "index": "no-index: unknown container",
    },
    "teeworlds-data/sfx_msg-highlight.wv": {
        "index": "no-index: unknown container",
    },
    "yaru-theme-sound/audio-volume-change.oga": {
        "indexed": "raises: no Ogg page to place the decoded samples by",
        "fallback": "raises: the stream's timestamps skip a range (fallback)",
    },
    "wave-bwf-rf64/markers.wav": {
        "index": "raises: pack skips it: PyAV cannot decode its Latin-1 metadata",
        "indexed": "raises: pack skips it: PyAV cannot decode its Latin-1 metadata",
        "fallback": "raises: pack skips it: PyAV cannot decode its Latin-1 metadata",
    },
}


def _params(test: str) -> list[object]:
    params = []
    for file in FILES:
        marks = [] if file.small else [pytest.mark.slow]
        failure = EXPECTED_FAILURES.get(file.name, {}).get(test)
        if failure:
            marks.append(pytest.mark.xfail(reason=failure, strict=True))
        params.append(pytest.param(file, id=file.name, marks=marks))
    return params


# -- the datasets: one per set (small / the rest), with and without an index ---


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Callable[[bool, bool], Dataset]:
    """``get(small, indexed)``: the dataset of that set, packed on first use."""
    made: dict[tuple[bool, bool], Dataset] = {}

    def get(small: bool, indexed: bool) -> Dataset:
        if (small, indexed) not in made:
            root = tmp_path_factory.mktemp("corpus")
            fetched = {
                f.name: corpus_dir() / f.name
                for f in FILES
                if f.small == small and (corpus_dir() / f.name).is_file()
            }
            if not fetched:
                pytest.skip("no corpus file fetched")
            pack(stage(fetched, root / "src"), root / "dataset", index=indexed, progress=False)
            made[small, indexed] = open_dataset(root / "dataset")
        return made[small, indexed]

    return get


def _reference(file: CorpusFile) -> Reference:
    """The file's full decode; skips (or, in CI, fails for the default set)
    when the file was not fetched, and skips files FFmpeg does not decode."""
    path = corpus_dir() / file.name
    if not path.is_file():
        message = f"{file.name} not fetched: run `python -m tests.corpus.fetch`"
        if os.environ.get("CI") and file.small:
            pytest.fail(message)
        pytest.skip(message)
    reference = full_decode(path.read_bytes())
    if reference.audio is None:
        pytest.skip(f"FFmpeg does not decode it fully: {reference.problem}")
    return reference


def _check(dataset: Dataset, file: CorpusFile, crops: int, seed: int) -> None:
    reference = _reference(file)
    assert file.name in dataset, f"pack left {file.name} out though FFmpeg decodes it"
    index = served_index(dataset, file.name)
    full, rate = reference.audio, reference.sample_rate
    points = crop_points(index, full.shape[1], rate, crops, random.Random(seed))
    check = check_crops(
        lambda start, end: dataset.read_crop(file.name, start, end),
        full,
        rate,
        reference.codec,
        points,
    )
    assert check.exact, f"{len(check.failures)} of {check.crops} crops: {check.failures[:4]}"


@pytest.mark.parametrize("file", _params("indexed"))
def test_crops_equal_the_full_decode(datasets: Callable, file: CorpusFile) -> None:
    _check(datasets(file.small, True), file, INTERIOR_CROPS, seed=1)


@pytest.mark.parametrize("file", _params("fallback"))
def test_fallback_crops_equal_the_full_decode(datasets: Callable, file: CorpusFile) -> None:
    """Without any index (``pack(..., index=False)``): exact length and
    position (and samples) for every codec."""
    _check(datasets(file.small, False), file, FALLBACK_CROPS, seed=2)


@pytest.mark.parametrize("file", _params("index"))
def test_an_index_serves_the_file(datasets: Callable, file: CorpusFile) -> None:
    """Every file FFmpeg decodes gets a native or generic index."""
    _reference(file)
    index = served_index(datasets(file.small, True), file.name)
    assert index.ok, f"no index: {index.reason}"
