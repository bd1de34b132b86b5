"""What the span CRCs cost: per crop, per codec, and in the index.

    python -m benchmarks.bench_span_crc [--minutes 10] [--crops 200] [--duration 2] [--s3]

Per codec (``episodes.BENCH_CODECS``; FLAC and Ogg record no span CRCs: their
frames and pages carry CRCs of their own): the same random crops through the
seek index with their span checks (``index.content.span_checks``) and without
(``span_checks=()``, the data range as planned), rounds alternating the two,
best of ``--repeats``: CPU ms per crop of ``decode_job`` and the ratio; the
CRC work alone (``content.mismatch`` over the fetched bytes) as a share of
the crop without it; the bytes a crop reads with and without (PCM reads out
to its spans' ends); the index's growth (``span_crc`` and ``span_size``
bytes against the ``seek_index/`` shard without them and against the audio).
With ``--s3``: the same crops of the WAV episode over moto (a fresh store per
pass): requests and bytes fetched per crop with and without.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import tempfile
import time

import pyarrow as pa

from benchmarks._report import write_json
from benchmarks.episodes import build_dataset, random_crops
from streamer.dataset.dataset import Dataset
from streamer.decode.crop import CropJob, CropRequest, decode_job, fetch, prepare
from streamer.formats.job import DecodeStats, Episode, Fetched
from streamer.index.content import mismatch, span_crcs
from streamer.index.table import INDEX_DIR, SPAN_COLUMN, SPAN_SIZE_COLUMN

#: ``CropRequest`` options of every crop (``--sample-rate``, ``--mono``).
OPTIONS: dict[str, object] = {}


def _jobs(episode: Episode, key: str, crops: list[tuple[float, float]]) -> list[CropJob]:
    return [prepare(episode, CropRequest(key, start, end, **OPTIONS)) for start, end in crops]  # type: ignore[arg-type]


def build_cost(dataset: Dataset, key: str) -> dict[str, float]:
    """CPU seconds per hour of audio to compute an episode's span CRCs (what
    ``pack`` and ``streamer index`` add), from the page cache; best of 3."""
    episode = dataset.episode(key)
    index = episode.index
    assert index is not None
    times = []
    for _ in range(3):
        began = time.process_time()
        span_crcs(index, index.span_size, episode.blob.read_ranges)
        times.append(time.process_time() - began)
    hours = index.num_samples / index.sample_rate / 3600
    return {
        "codec": key,
        "s_per_hour": min(times) / hours,
        "mb_per_hour": (index.data_end - index.data_start) / hours / 1e6,
    }


def _unchecked(job: CropJob) -> CropJob:
    return dataclasses.replace(job, span_checks=(), data_read=())


def _cpu(jobs: list[CropJob], fetched: list[Fetched]) -> float:
    began = time.process_time()
    for job, got in zip(jobs, fetched, strict=True):
        decode_job(job, got, DecodeStats())
    return (time.process_time() - began) / len(jobs) * 1000


def _crc_only(jobs: list[CropJob], fetched: list[Fetched]) -> float:
    began = time.process_time()
    for _ in range(5):
        for job, got in zip(jobs, fetched, strict=True):
            assert mismatch(job.span_checks, got.pieces) is None
    return (time.process_time() - began) / len(jobs) / 5 * 1000


def measure(dataset: Dataset, key: str, args: argparse.Namespace) -> dict[str, object] | None:
    index = dataset.seek_index(key)
    if not len(index.span_crc):
        return None
    crops = random_crops(dataset, key, args.crops, args.duration)
    return {"codec": key, **_compare(_jobs(dataset.episode(key), key, crops), args.repeats)}


def pcm_sizes(dataset: Dataset, args: argparse.Namespace) -> list[dict[str, object]]:
    """The WAV episode's crops with span CRCs of each of ``--pcm-sizes`` bytes."""
    episode = dataset.episode("wav")
    index = episode.index
    assert index is not None
    crops = random_crops(dataset, "wav", args.crops, args.duration)
    hours = index.num_samples / index.sample_rate / 3600
    rows = []
    for size in args.pcm_sizes:
        crcs = span_crcs(index, size, episode.blob.read_ranges)
        trial = dataclasses.replace(
            episode, index=dataclasses.replace(index, span_size=size, span_crc=crcs)
        )
        row = _compare(_jobs(trial, "wav", crops), args.repeats)
        rows.append({**row, "codec": f"wav/{size}", "index_bytes_per_hour": 4 * len(crcs) / hours})
    return rows


def _compare(checked: list[CropJob], repeats: int) -> dict[str, object]:
    """CPU per crop of ``checked`` with and without their span checks."""
    index = checked[0].episode.index
    assert index is not None
    plain = [_unchecked(job) for job in checked]
    got_checked = [fetch(job) for job in checked]
    got_plain = [fetch(job) for job in plain]
    on, off = [], []
    for _ in range(repeats):
        off.append(_cpu(plain, got_plain))
        on.append(_cpu(checked, got_checked))
    crc = _crc_only(checked, got_checked)
    return {
        "span_size": index.span_size,
        "points": len(index.byte_pos),
        "ms_without": min(off),
        "ms_with": min(on),
        "ratio": min(on) / min(off),
        "crc_ms": crc,
        "crc_share": crc / min(off),
        "bytes_without": sum(job.nbytes for job in plain) / len(plain),
        "bytes_with": sum(job.nbytes for job in checked) / len(checked),
    }


def index_growth(dataset: Dataset) -> dict[str, float]:
    """Bytes of the span columns against the index shard without them, and the audio."""
    span = index = audio = 0
    for name in dataset.shard_names:
        path = dataset.column_dirs[INDEX_DIR][name]
        table = pa.ipc.open_file(path).read_all()
        span += table.select([SPAN_COLUMN, SPAN_SIZE_COLUMN]).nbytes
        index += table.drop_columns([SPAN_COLUMN, SPAN_SIZE_COLUMN]).nbytes
        audio += os.path.getsize(dataset.column_dirs[dataset.audio_dir][name])
    return {"span_bytes": span, "index_bytes": index, "audio_bytes": audio}


def over_s3(dataset: Dataset, args: argparse.Namespace) -> dict[str, float]:
    """WAV crops over moto with and without span checks: requests and bytes per crop."""
    from moto.server import ThreadedMotoServer

    from streamer.storage.s3 import S3Store
    from testkit.servers import upload_tree

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's access log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        upload_tree(endpoint, dataset.root, "bench", "ds", "key", "secret")
        crops = random_crops(dataset, "wav", args.crops, args.duration)
        out: dict[str, float] = {}
        for label, strip in (("without", True), ("with", False)):
            store = S3Store(
                "s3",
                {"endpoint_url": endpoint, "key": "key", "secret": "secret", "region_name": "x"},
            )
            remote = Dataset("bench/ds", store=store)
            jobs = _jobs(remote.episode("wav"), "wav", crops)
            jobs = [_unchecked(job) if strip else job for job in jobs]
            store.stats.reset()
            began = time.perf_counter()
            for job in jobs:
                decode_job(job, fetch(job), DecodeStats())
            out[f"ms_{label}"] = (time.perf_counter() - began) / len(jobs) * 1000
            out[f"requests_{label}"] = store.stats.requests / len(jobs)
            out[f"fetched_{label}"] = store.stats.bytes_fetched / len(jobs)
        return out
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--crops", type=int, default=200)
    parser.add_argument("--duration", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--s3", action="store_true")
    parser.add_argument("--sample-rate", type=int, default=None, help="resample every crop")
    parser.add_argument("--mono", action="store_true", help="downmix every crop")
    parser.add_argument(
        "--pcm-sizes",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[4096, 8192, 16384, 65536],
        help="span sizes (bytes) to compare on the WAV episode",
    )
    args = parser.parse_args()
    OPTIONS.update(sample_rate=args.sample_rate, mono=args.mono)
    with tempfile.TemporaryDirectory() as folder:
        dataset = build_dataset(folder, args.minutes)
        rows = [row for key in dataset if (row := measure(dataset, key, args))]
        rows += pcm_sizes(dataset, args)
        print(
            f"{args.duration:g} s crops, {args.minutes:g}-minute episodes, CPU ms per crop "
            f"(best of {args.repeats}), {OPTIONS}"
        )
        print("codec       span_size  without   with  ratio  CRC alone  bytes without -> with")
        for r in rows:
            print(
                f"{r['codec']:11} {r['span_size']:>9} {r['ms_without']:8.3f} "
                f"{r['ms_with']:6.3f} {r['ratio']:6.3f} {r['crc_ms']:6.3f} ms "
                f"({r['crc_share']:.1%})  {r['bytes_without']:,.0f} -> {r['bytes_with']:,.0f}"
            )
        costs = [
            build_cost(dataset, str(row["codec"])) for row in rows if "/" not in str(row["codec"])
        ]
        for cost in costs:
            print(
                f"build: {cost['codec']:5} {cost['s_per_hour']:.3f} CPU s per hour of audio "
                f"({cost['mb_per_hour']:.0f} MB of audio data per hour)"
            )
        growth = index_growth(dataset)
        print(
            f"index: span columns {growth['span_bytes']:,} B on {growth['index_bytes']:,} B of "
            f"index (+{growth['span_bytes'] / growth['index_bytes']:.1%}), "
            f"{growth['span_bytes'] / growth['audio_bytes']:.4%} of the audio"
        )
        result: dict[str, object] = {"crops": rows, "index": growth, "build": costs}
        if args.s3:
            s3 = over_s3(dataset, args)
            print(
                "wav over S3 (moto), per crop: "
                + ", ".join(f"{name} {value:,.2f}" for name, value in s3.items())
            )
            result["s3"] = s3
        write_json("bench_span_crc", result)


if __name__ == "__main__":
    main()
