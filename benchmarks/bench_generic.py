"""Generic packet index benchmark: per-crop cost against the native index,
and a folder of real-world files checked crop by crop.

- cost: the same mp3 through its native index and the generic one, and AAC
  in ADTS (generic) against AAC in M4A (native), one-second crops at random;
  bytes and milliseconds per crop, generic/native ratios from the same run.
  Matroska (WebM Opus, MKA Vorbis, FFmpeg's 5 s clusters, and WebM Opus
  laced 8 frames to a block as mkvmerge laces): the index as
  built, whose points include SimpleBlocks between clusters, against the
  same index with cluster starts only (a crop then decodes whole clusters),
  from the same run.
- cut short: the ADTS AAC file cut at two thirds of its bytes, inside a
  packet (a download or a recording that stopped), through the index that
  ends where FFmpeg's decode does against the fallback alone (its crops
  decode from the start), over the part that decodes: ms per crop and the
  fallback/index ratio from the same run.
- ``--corpus DIR``: every file under DIR FFmpeg decodes gets the generic
  index alone; about 15 crops each (first and last samples included) are
  compared with the full decode (lossless codecs bit for bit, lossy within
  1e-4) and the outcome tallied: exact, wrong (with the error), or no index
  (with the reason).

Run: ``python -m benchmarks.bench_generic [--seconds 120] [--crops 100]
[--corpus /work/corpus] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import io
import json
import math
import os
import random
import time

import av
import numpy as np

from streamer import synth
from streamer.decode.crop import CropRequest, read_crop
from streamer.errors import CropError
from streamer.formats import extract
from streamer.formats.job import DecodeStats, Episode
from streamer.formats.reader import NoIndex, Reader
from streamer.formats.registry import GENERIC
from streamer.index import SeekIndex
from streamer.shard import BlobHandle
from streamer.storage import MemoryReader
from testkit.matroska import laced
from testkit.reference import full_decode

LOSSLESS = ("flac", "alac", "wavpack", "pcm_", "ape", "tak", "tta", "wmalossless")


def _episode(data: bytes, index: SeekIndex) -> Episode:
    return Episode("k", None, BlobHandle(MemoryReader(data), 0, len(data)), index)


def _generic(data: bytes) -> SeekIndex:
    return GENERIC.build_index(Reader(io.BytesIO(data)), density=1.0)


def per_crop(data: bytes, index: SeekIndex, seconds: float, crops: int) -> dict[str, float]:
    """Milliseconds and kilobytes per one-second crop at random starts."""
    rng = random.Random(5)
    starts = [rng.uniform(0, seconds - 1.5) for _ in range(crops)]
    stats = DecodeStats()
    episode = _episode(data, index)
    began = time.perf_counter()
    for start in starts:
        read_crop(episode, CropRequest("k", start, start + 1.0), stats)
    elapsed = time.perf_counter() - began
    return {"ms": elapsed / crops * 1e3, "kb": stats.planned_bytes / crops / 1e3}


def cost(seconds: float, crops: int) -> dict[str, dict[str, float]]:
    samples = synth.signal(seconds, 44100, 2, seed=2)
    mp3 = synth.encode(samples, 44100, "mp3")
    adts = synth.encode(samples, 44100, "aac", container="adts")
    m4a = synth.encode(samples, 44100, "aac")
    runs = {
        "mp3 native": (mp3, extract(io.BytesIO(mp3))),
        "mp3 generic": (mp3, _generic(mp3)),
        "aac m4a native": (m4a, extract(io.BytesIO(m4a))),
        "aac adts generic": (adts, _generic(adts)),
    }
    out = {label: per_crop(data, index, seconds, crops) for label, (data, index) in runs.items()}
    for label, row in out.items():
        print(f"{label:18s} {row['ms']:7.2f} ms/crop {row['kb']:8.1f} kB/crop")
    for codec, native in (("mp3", "mp3 native"), ("aac", "aac m4a native")):
        generic = next(k for k in out if k.startswith(codec) and "generic" in k)
        ratio = out[generic]["ms"] / out[native]["ms"]
        print(f"{codec}: generic/native time {ratio:.2f}x")
    out.update(matroska_points(seconds, crops))
    out.update(cut_short(adts, seconds, crops))
    return out


def cut_short(data: bytes, seconds: float, crops: int) -> dict[str, dict[str, float]]:
    """Per-crop cost of a file cut short, through its index and the fallback."""
    cut = data[: len(data) * 2 // 3]
    index = _generic(cut)
    decoded = index.num_samples / index.sample_rate
    fallback = SeekIndex.unavailable("the benchmark's fallback")
    runs = {"cut index": index, "cut fallback": fallback}
    out = {f"aac adts {label}": per_crop(cut, ix, decoded, crops) for label, ix in runs.items()}
    through, alone = out["aac adts cut index"]["ms"], out["aac adts cut fallback"]["ms"]
    print(
        f"aac adts cut at 2/3 ({decoded:.0f} of {seconds:.0f} s decode): index {through:.2f} "
        f"ms/crop, fallback {alone:.2f} ms/crop: {alone / through:.0f}x"
    )
    return out


def matroska_points(seconds: float, crops: int) -> dict[str, dict[str, float]]:
    """Per-crop cost with block points against cluster starts only."""
    out = {}
    for codec, container, lacing in (
        ("opus", "webm", None),
        ("vorbis", "matroska", None),
        ("opus", "webm", "xiph"),  # as mkvmerge writes it
    ):
        rate = 48000 if codec == "opus" else 44100
        signal = synth.signal(seconds, rate, 2, seed=3)
        data = synth.encode(signal, rate, codec, container=container)
        if lacing is not None:
            data = laced(data, per=8, kind=lacing)
        index = _generic(data)
        # Every candidate point (density inf), of which the cluster starts.
        every = GENERIC.build_index(Reader(io.BytesIO(data)), density=math.inf)
        clusters = np.asarray([data[p : p + 4] == b"\x1f\x43\xb6\x75" for p in every.byte_pos])
        sparse = dataclasses.replace(
            index, sample_pos=every.sample_pos[clusters], byte_pos=every.byte_pos[clusters]
        )
        label = f"{codec} {container}" + (f" ({lacing}-laced)" if lacing else "")
        blocks = out[f"{label} blocks"] = per_crop(data, index, seconds, crops)
        only = out[f"{label} clusters"] = per_crop(data, sparse, seconds, crops)
        print(
            f"{label}: {len(index.byte_pos)} points, {int(clusters.sum())} clusters: "
            f"{blocks['ms']:.2f} ms and {blocks['kb']:.1f} kB per crop, "
            f"cluster starts only {only['ms']:.2f} ms and {only['kb']:.1f} kB: "
            f"{only['ms'] / blocks['ms']:.2f}x time, {only['kb'] / blocks['kb']:.2f}x bytes"
        )
    return out


def check_file(data: bytes) -> tuple[str, str]:
    """("exact" | "wrong" | "errors" | "no index" | "undecodable", detail)."""
    try:
        full, rate = full_decode(data)
    except (av.FFmpegError, ValueError, IndexError) as exc:
        return "undecodable", type(exc).__name__
    try:
        index = _generic(data)
    except NoIndex as exc:
        return "no index", str(exc)
    lossless = index.codec.startswith(LOSSLESS)
    duration = full.shape[1] / rate
    rng = random.Random(1)
    spans = [(0.0, min(0.2, duration)), (max(0.0, duration - 0.3), duration), (0.0, duration)]
    spans += [(a, min(duration, a + rng.uniform(0.01, 1.0))) for a in np.linspace(0, duration, 12)]
    worst, errors = 0.0, 0
    for start, end in spans:
        first, last = round(start * rate), round(end * rate)
        if first >= min(last, full.shape[1]):
            continue
        try:
            crop = read_crop(_episode(data, index), CropRequest("k", start, end))
        except CropError:
            errors += 1
            continue
        want = full[:, first:last]
        if crop.audio.shape != want.shape:
            return "wrong", f"shape {crop.audio.shape} != {want.shape}"
        worst = max(worst, float(np.abs(crop.audio - want).max()) if want.size else 0.0)
    if worst > (0.0 if lossless else 1e-4):
        return "wrong", f"{index.container}/{index.codec} max error {worst:.1e}"
    return ("errors", f"{errors} CropErrors") if errors else ("exact", index.container)


def corpus(folder: str) -> dict[str, object]:
    av.logging.set_level(av.logging.PANIC)
    tally: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    for root, _, names in sorted(os.walk(folder)):
        for name in sorted(names):
            path = os.path.join(root, name)
            with open(path, "rb") as file:
                outcome, detail = check_file(file.read())
            tally[outcome] += 1
            if outcome != "exact":
                reasons[f"{outcome}: {detail}"] += 1
            if outcome in ("wrong", "errors"):
                print(f"{outcome:8s} {os.path.relpath(path, folder)}: {detail}")
    print(dict(tally))
    for reason, count in reasons.most_common():
        print(f"{count:4d}  {reason}")
    return {"tally": dict(tally), "reasons": dict(reasons)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--crops", type=int, default=100)
    parser.add_argument("--corpus", help="a folder of real-world audio files to check")
    parser.add_argument("--json", default="benchmarks/results/generic.json")
    args = parser.parse_args()
    results: dict[str, object] = {"cost": cost(args.seconds, args.crops)}
    if args.corpus:
        results["corpus"] = corpus(args.corpus)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as file:
        json.dump(results, file, indent=2)


if __name__ == "__main__":
    main()
