"""Peers in the same run: torchcodec's ``AudioDecoder`` against streamer, per codec.

    python -m benchmarks.bench_peers [--minutes 60] [--crops 30] [--duration 8]
    python -m benchmarks.bench_peers --quick      # 10-minute episodes, 10 crops

The episodes and crops are bench_decode's (``episodes.build_dataset`` and
``episodes.random_crops``: same codecs, same seeds), read from local shards
on one core:

- streamer: ``Dataset.read_crop``;
- torchcodec over bytes: copy the blob out of the shard, ``AudioDecoder(bytes)``,
  ``get_samples_played_in_range(start, end)``; a new decoder for every crop,
  as in a training loop that draws a new episode for every crop;
- torchcodec over a file-like object: the same over the dataset's blob
  handle (ranged reads from the shard's memory map), counting the bytes,
  reads and seeks FFmpeg asks for.

Every crop is compared with the reference of streamer's tests: the episode's
full decode (PyAV) sliced at ``round(t * sample_rate)``. When a crop is not
in place, the shift (lag, in samples) with the least squared error within
±100 ms is reported with the error that remains after it. torchcodec's crops
are also compared with torchcodec's own full decode, which tells a seek that
misplaces samples apart from a decoder that decodes differently.

Needs the ``peers`` extra (``pip install 'streamer-audio[peers]'``: torchcodec, which
needs torch and FFmpeg's shared libraries); without it, it says so and exits.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import av
import numpy as np

from benchmarks._report import write_json
from benchmarks.episodes import BENCH_CODECS, build_dataset, random_crops
from streamer.dataset.dataset import Dataset
from streamer.formats.ffmpeg import open_input
from streamer.formats.frames import frame_to_float32
from streamer.shard.blob import BlobHandle

Crop = tuple[float, float]
Method = Callable[[float, float], np.ndarray]

INSTALL = "pip install 'streamer-audio[peers]'"
#: A crop is in place when its max abs error is at most this (the tests' bound for lossy codecs).
TOLERANCE = 1e-4
#: How far the lag search looks either side of the crop, in seconds.
LAG_SEARCH = 0.1


def load_audio_decoder() -> tuple[Any, str]:
    """torchcodec's ``AudioDecoder`` class and its versions, or ``None`` and why not.

    ``import torchcodec`` succeeds without FFmpeg (its image decoders do not
    need it), so the FFmpeg version it loaded is checked too.
    """
    try:
        import torch
        import torchcodec
        from torchcodec.decoders import AudioDecoder
    except Exception as error:  # ImportError, or torch failing to load its own libraries
        return None, f"torchcodec is not importable ({type(error).__name__}: {error})"
    if torchcodec.ffmpeg_major_version is None:
        return None, "torchcodec found no FFmpeg shared libraries (e.g. Debian's ffmpeg package)"
    versions = (
        f"torchcodec {torchcodec.__version__}, torch {torch.__version__}, "
        f"FFmpeg {torchcodec.ffmpeg_major_version}"
    )
    return AudioDecoder, versions


class CountingFile(io.RawIOBase):
    """A blob handle as the file-like object torchcodec reads through, counting
    what FFmpeg asks of it: each read is a ranged read of the shard's mmap."""

    def __init__(self, blob: BlobHandle) -> None:
        super().__init__()
        self.blob = blob
        self.reads = 0
        self.seeks = 0
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.blob.tell()

    def read(self, size: int = -1) -> bytes:
        data = self.blob.read(size)
        self.reads += 1
        self.bytes_read += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.seeks += 1
        return self.blob.seek(offset, whence)


@dataclass
class Match:
    """How a method's crops compare with a reference, worst over the crops:
    the max abs error in place; the shifts (samples) at which the crops fit
    best (``[0]`` when in place) and the max abs error once shifted by them;
    whether every crop has the reference's channels and
    ``round(end * sr) - round(start * sr)`` samples."""

    error: float
    lags: list[int]
    error_at_lag: float
    shape_ok: bool


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    """Max abs difference, in float64 so that tiny errors do not round away."""
    if got.size == 0:
        return 0.0
    return float(np.abs(got.astype(np.float64) - want).max())


def best_lag(got: np.ndarray, window: np.ndarray) -> int:
    """Where ``got`` sits in ``window`` with the least squared error (index of
    its first sample), from one FFT cross-correlation over all channels."""
    count, width = got.shape[1], window.shape[1]
    size = width + count
    window = window.astype(np.float64)
    spectrum = np.fft.rfft(window, size) * np.conj(np.fft.rfft(got.astype(np.float64), size))
    correlation = np.fft.irfft(spectrum, size)[:, : width - count + 1].sum(axis=0)
    energy = np.concatenate([[0.0], np.cumsum((window**2).sum(axis=0))])
    return int(np.argmin(energy[count:] - energy[:-count] - 2 * correlation))


def match_crop(
    got: np.ndarray, first: int, count: int, reference: np.ndarray, offset: int, margin: int
) -> tuple[float, int, float, bool]:
    """(error in place, lag, error at lag, shape ok) of ``got``, the crop of
    samples ``[first, first + count)``, against ``reference``, whose column 0
    is sample ``offset``. The lag is searched only when the crop is not in place."""
    if got.shape[0] != reference.shape[0]:
        return float("inf"), 0, float("inf"), False
    shape_ok = got.shape[1] == count
    at = first - offset
    got = got[:, : min(got.shape[1], reference.shape[1] - at)]
    error = max_error(got, reference[:, at : at + got.shape[1]])
    if error <= TOLERANCE:
        return error, 0, error, shape_ok
    low = max(at - margin, 0)
    shifted = low + best_lag(got, reference[:, low : at + got.shape[1] + margin])
    after = max_error(got, reference[:, shifted : shifted + got.shape[1]])
    return error, shifted - at, after, shape_ok


def match(
    outputs: list[np.ndarray],
    spans: list[tuple[int, int]],
    references: list[tuple[np.ndarray, int]],
    margin: int,
) -> Match:
    """Every crop against its reference (array, sample offset of its column 0)."""
    results = [
        match_crop(got, first, last - first, reference, offset, margin)
        for got, (first, last), (reference, offset) in zip(outputs, spans, references, strict=True)
    ]
    return Match(
        error=max(r[0] for r in results),
        lags=sorted({r[1] for r in results}),
        error_at_lag=max(r[2] for r in results),
        shape_ok=all(r[3] for r in results),
    )


def reference_windows(data: bytes, windows: list[tuple[int, int]]) -> list[np.ndarray]:
    """Samples ``[low, high)`` of the episode's full decode for each window.

    The full decode is the one streamer's tests compare with (PyAV, every
    frame of the first audio stream, concatenated); one pass keeps only the
    windows, not the hour of samples.
    """
    lows = np.array([low for low, _ in windows])
    highs = np.array([high for _, high in windows])
    pieces: list[list[np.ndarray]] = [[] for _ in windows]
    position = 0
    with open_input(io.BytesIO(data)) as container:
        for frame in container.decode(container.streams.audio[0]):
            end = position + frame.samples
            hits = np.flatnonzero((lows < end) & (highs > position))
            if hits.size:
                samples = frame_to_float32(frame)
                for i in hits:
                    pieces[i].append(samples[:, max(lows[i] - position, 0) : highs[i] - position])
            position = end
    return [np.concatenate(piece, axis=1) for piece in pieces]


def describe(error: Exception) -> str:
    """An exception in one line for the table: FFmpeg's messages run long."""
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def timed(method: Method, crops: list[Crop]) -> tuple[float, list[np.ndarray]]:
    """Seconds per crop, and the crops, kept to compare once the clock stops."""
    outputs = []
    began = time.perf_counter()
    for start, end in crops:
        outputs.append(method(start, end))
    return (time.perf_counter() - began) / len(crops), outputs


def torchcodec_methods(
    decoder: Any, dataset: Dataset, key: str, files: list[CountingFile]
) -> dict[str, Method]:
    """The two torchcodec paths; the file-like one appends its files to ``files``."""

    def from_bytes(start: float, end: float) -> np.ndarray:
        data = bytes(dataset.blob(key).view())
        return decoder(data).get_samples_played_in_range(start, end).data.numpy()

    def from_file(start: float, end: float) -> np.ndarray:
        file = CountingFile(dataset.blob(key))
        files.append(file)
        return decoder(file).get_samples_played_in_range(start, end).data.numpy()

    return {"torchcodec_bytes": from_bytes, "torchcodec_file": from_file}


def run_streamer(
    dataset: Dataset, key: str, crops: list[Crop]
) -> tuple[dict[str, Any], list[np.ndarray]]:
    """streamer's seconds and planned bytes per crop, and its crops."""
    dataset.read_crop(key, *crops[0])  # warm up: open shards, load decoders
    before = dataset.decode_stats.planned_bytes
    seconds, outputs = timed(lambda start, end: dataset.read_crop(key, start, end), crops)
    planned = (dataset.decode_stats.planned_bytes - before) / len(crops)
    return {"seconds": seconds, "bytes_per_crop": planned}, outputs


def run_torchcodec(
    decoder: Any, dataset: Dataset, key: str, crops: list[Crop]
) -> tuple[dict[str, dict[str, Any]], dict[str, list[np.ndarray]]]:
    """Each torchcodec path's figures (or its error) and crops."""
    files: list[CountingFile] = []
    entries: dict[str, dict[str, Any]] = {}
    outputs = {}
    for name, method in torchcodec_methods(decoder, dataset, key, files).items():
        try:
            method(*crops[0])  # warm up: load torchcodec's libraries
            files.clear()
            seconds, outputs[name] = timed(method, crops)
        except Exception as error:  # report this codec's failure, measure the others
            entries[name] = {"failed": describe(error)}
        else:
            entries[name] = {"seconds": seconds}
    blob = dataset.blob(key)
    if "torchcodec_bytes" in outputs:
        began = time.perf_counter()
        for _ in range(3):
            bytes(blob.view())
        entries["torchcodec_bytes"].update(
            bytes_per_crop=blob.length, copy_seconds=(time.perf_counter() - began) / 3
        )
    if "torchcodec_file" in outputs:
        entries["torchcodec_file"].update(
            bytes_per_crop=sum(f.bytes_read for f in files) / len(files),
            reads_per_crop=sum(f.reads for f in files) / len(files),
            seeks_per_crop=sum(f.seeks for f in files) / len(files),
            bytes_by_crop=[f.bytes_read for f in files],
        )
    return entries, outputs


def torchcodec_full(decoder: Any, data: bytes, rate: int) -> tuple[np.ndarray, int]:
    """torchcodec's own full decode, and the sample its first column is at:
    torchcodec's time 0 is the container's, not always the first decoded sample."""
    samples = decoder(data).get_all_samples()
    return samples.data.numpy(), round(samples.pts_seconds * rate)


def measure(decoder: Any, dataset: Dataset, codec: str, args: argparse.Namespace) -> dict[str, Any]:
    """One codec: every method over the same crops, then every crop checked."""
    key = codec
    rate = dataset.seek_index(key).sample_rate
    crops = random_crops(dataset, key, args.crops, args.duration)
    spans = [(round(start * rate), round(end * rate)) for start, end in crops]
    margin = round(LAG_SEARCH * rate)
    data = bytes(dataset.blob(key).view())
    row: dict[str, Any] = {"codec": codec, "episode_bytes": len(data), "sample_rate": rate}
    row["crop_starts"] = [start for start, _ in crops]

    row["streamer"], streamer_out = run_streamer(dataset, key, crops)
    peers, outputs = run_torchcodec(decoder, dataset, key, crops)
    row.update(peers)

    windows = [(max(first - margin, 0), last + margin) for first, last in spans]
    lows = [low for low, _ in windows]
    references = list(zip(reference_windows(data, windows), lows, strict=True))
    row["streamer"]["exact"] = asdict(match(streamer_out, spans, references, margin))
    for name, got in outputs.items():
        row[name]["exact"] = asdict(match(got, spans, references, margin))
    if outputs:
        try:
            own = [torchcodec_full(decoder, data, rate)] * len(spans)
        except Exception as error:  # the crops are measured; say why this check is missing
            own_error = {"failed": describe(error)}
            for name in outputs:
                row[name]["own_full_decode"] = own_error
        else:
            for name, got in outputs.items():
                row[name]["own_full_decode"] = asdict(match(got, spans, own, margin))
    if len(outputs) == 2:
        pairs = zip(outputs["torchcodec_bytes"], outputs["torchcodec_file"], strict=True)
        row["same_samples"] = all(np.array_equal(a, b) for a, b in pairs)
    return row


def _error(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}"


def _lags(exact: dict[str, Any]) -> str:
    return ",".join(str(lag) for lag in exact["lags"])


def print_speed(row: dict[str, Any]) -> None:
    """One codec's line of crops/s and bytes per crop."""
    streamer = row["streamer"]
    line = f"{row['codec']:<8}{1 / streamer['seconds']:>10.1f}"
    for name in ("torchcodec_bytes", "torchcodec_file"):
        entry = row[name]
        if "failed" in entry:
            line += f"{'error':>10}{'':>9}"
        else:
            line += f"{1 / entry['seconds']:>10.1f}{entry['seconds'] / streamer['seconds']:>8.1f}x"
    line += f"{streamer['bytes_per_crop'] / 1e3:>10.0f}{row['episode_bytes'] / 1e6:>10.1f}"
    file = row["torchcodec_file"]
    if "failed" not in file:
        line += (
            f"{file['bytes_per_crop'] / 1e3:>11.0f}{file['reads_per_crop']:>7.0f}"
            f"{file['seeks_per_crop']:>7.0f}"
        )
    print(line)


def print_exactness(row: dict[str, Any]) -> None:
    """One codec's line of errors against the full decode (and torchcodec's own),
    then whatever failed."""
    streamer = row["streamer"]["exact"]
    line = f"{row['codec']:<8}{_error(streamer['error']):>10}{_lags(streamer):>6}"
    paths = [row["torchcodec_bytes"], row["torchcodec_file"]]
    entry = next((path for path in paths if "exact" in path), None)
    own: dict[str, Any] = {}
    if entry is None:
        line += "  torchcodec failed:"
    else:
        exact, own = entry["exact"], entry["own_full_decode"]
        line += f"{_error(exact['error']):>10}{_lags(exact):>8}{_error(exact['error_at_lag']):>10}"
        line += (
            f"{'':>18}" if "failed" in own else f"{_lags(own):>8}{_error(own['error_at_lag']):>10}"
        )
        line += f"{'yes' if exact['shape_ok'] else 'NO':>7}"
        line += f"{'yes' if row.get('same_samples') else 'no':>7}"
    print(line)
    for name in ("torchcodec_bytes", "torchcodec_file"):
        if "failed" in row[name]:
            print(f"{'':<8}{name}: {row[name]['failed']}")
    if "failed" in own:
        print(f"{'':<8}torchcodec's full decode: {own['failed']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="episode length")
    parser.add_argument("--crops", type=int, default=30, help="crops per codec")
    parser.add_argument("--duration", type=float, default=8.0, help="crop seconds")
    parser.add_argument("--quick", action="store_true", help="10-minute episodes, 10 crops")
    args = parser.parse_args()
    decoder, versions = load_audio_decoder()
    if decoder is None:
        print(f"bench_peers: skipped: {versions}; enable it with {INSTALL}")
        return
    if args.quick:
        args.minutes, args.crops = 10.0, 10
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        dataset = build_dataset(folder, args.minutes)
        print(
            f"{args.duration:g} s crops out of {args.minutes:g}-minute episodes, local mmap, "
            f"one core, {versions}; PyAV's FFmpeg {av.ffmpeg_version_info}"
        )
        for codec in BENCH_CODECS:
            rows.append(measure(decoder, dataset, codec, args))
    print("\ncrops/s (higher is better); x: time per crop / streamer's; kB or MB per crop")
    print(
        f"{'codec':<8}{'streamer':>10}{'tc bytes':>10}{'':>9}{'tc file':>10}{'':>9}"
        f"{'kB/crop':>10}{'MB copied':>10}{'kB read':>11}{'reads':>7}{'seeks':>7}"
    )
    for row in rows:
        print_speed(row)
    print(
        "\nmax abs error against the full decode sliced at round(t*sr): in place, and at the"
        "\nlag (samples) that fits best; 'own': torchcodec against its own full decode"
    )
    print(
        f"{'codec':<8}{'streamer':>10}{'lag':>6}{'tc':>10}{'tc lag':>8}{'at lag':>10}"
        f"{'own lag':>8}{'own err':>10}{'shape':>7}{'b = f':>7}"
    )
    for row in rows:
        print_exactness(row)
    payload = {"args": vars(args), "torchcodec": versions, "pyav_ffmpeg": av.ffmpeg_version_info}
    print(f"wrote {write_json('peers', {**payload, 'rows': rows})}")


if __name__ == "__main__":
    main()
