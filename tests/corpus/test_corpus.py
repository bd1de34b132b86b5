"""Crops of real-world audio (issue 12) against FFmpeg's full decode.

The corpus is other encoders' files from other projects' packages
(``tests/corpus/manifest.toml``), fetched before the run by
``python -m tests.corpus.fetch --small`` (the default set) or without
``--small`` (everything, for ``-m slow``). Each set is packed into one
dataset with its seek index and one without (``pack(..., index=False)``), and
every file's crops (start, end, the whole file, random interior ones and
ones crossing seek points) must equal the full decode: lossless
bit-identical, lossy within 1e-4 at zero lag, AAC noise substitution in place
(docs/decoding.md). A file FFmpeg does not decode is skipped with the reason;
one whose decode ends early (FFmpeg fails after frames came out: a file
cut short inside a packet, damage) is checked against what it decodes up
to there, which is the full decode of such a file.

``EXPECTED_FAILURES`` is the one list of what still fails, by failure class:
strict, so a fix elsewhere that makes one pass shows up as XPASS to delete.
"""

from __future__ import annotations

import io
import os
import random
import zlib
from collections.abc import Callable

import numpy as np
import pytest

from streamer import open_dataset
from streamer.dataset.dataset import Dataset
from streamer.decode.verify import QUICK_OPEN
from streamer.formats.ffmpeg import open_input
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
from testkit.reference import decode_to_failure
from testkit.sweep import sweep_file

FILES = load_manifest()
#: Random interior crops per file (through the index; the fallback gets FALLBACK_CROPS).
INTERIOR_CROPS = 8
FALLBACK_CROPS = 50
#: The dense sweep (``testkit.sweep``): seek points per file, random crops, and
#: the rates every fourth file (by name) is also resampled to, mono and not.
#: The full sweep is ``python -m benchmarks.corpus_sweep`` (docs/corpus.md).
SWEEP_POINTS = 8
SWEEP_RANDOM = 10
SWEEP_RATES = (16000, 22050)

#: What still fails (measured on this branch by ``python -m benchmarks.corpus_table``):
#: corpus file -> {test: failure class}, for the tests ``index``
#: (test_an_index_serves_the_file), ``indexed`` (test_crops_equal_the_full_decode)
#: and ``fallback`` (test_fallback_crops_equal_the_full_decode). Classes:
#: ``no-index: <reason>`` (served by the fallback), ``raises: <error>`` (a crop
#: raises), ``length: <+/-n> samples`` (a crop too long or short: misplaced),
#: ``samples: max error <e>`` (right length, wrong samples: misaligned, or too
#: little pre-roll). Strict: delete a line when its test passes (XPASS).
EXPECTED_FAILURES: dict[str, dict[str, str]] = {
    # Its decode ends early, at a WMA packet FFmpeg's decoder rejects that
    # shares its ASF packet's byte position with good ones: FFmpeg's packet
    # index cannot end there (docs/seek-index.md, "A decode that ends early").
    "mutagen/issue_29.wma": {"index": "no-index: decoder rejects the packet at byte 29304"},
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
        pytest.skip(f"FFmpeg does not decode it: {reference.problem}")
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


@pytest.mark.parametrize("file", _params("sweep"))
def test_a_dense_sweep_equals_the_full_decode(datasets: Callable, file: CorpusFile) -> None:
    """Crops on, next to and a pre-roll away from every seek point (up to
    ``SWEEP_POINTS``), ending at the end, one sample long, nearly the whole
    file, through the index and through the fallback alone; every fourth
    file resampled and downmixed too (``testkit.sweep``)."""
    reference = _reference(file)
    rates = SWEEP_RATES if zlib.crc32(file.name.encode()) % 4 == 0 else ()
    sweep = sweep_file(
        file.name,
        reference,
        datasets(file.small, True),
        datasets(file.small, False),
        cap=SWEEP_POINTS,
        random_crops=SWEEP_RANDOM,
        rates=rates,
    )
    assert sweep.exact, f"{len(sweep.failures)} failures: {sweep.failures[:6]}"


@pytest.mark.parametrize("file", _params("index"))
def test_an_index_serves_the_file(datasets: Callable, file: CorpusFile) -> None:
    """Every file FFmpeg decodes gets a native or generic index."""
    _reference(file)
    index = served_index(datasets(file.small, True), file.name)
    assert index.ok, f"no index: {index.reason}"


@pytest.mark.parametrize("file", _params("quick"))
def test_a_quick_open_decodes_the_full_decode(file: CorpusFile) -> None:
    """The index check opens a long episode for its head and tail with little
    probing (``decode.verify.QUICK_OPEN``): what FFmpeg decodes must not
    depend on it, sample for sample and at the same rate."""
    reference = _reference(file)
    with open_input(io.BytesIO((corpus_dir() / file.name).read_bytes()), options=QUICK_OPEN) as c:
        quick, rate, _ = decode_to_failure(c)
    assert rate == reference.sample_rate
    assert quick.shape == reference.audio.shape
    assert np.array_equal(quick, reference.audio)
