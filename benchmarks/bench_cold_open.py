"""A cold one-crop run over S3: requests and bytes to open a dataset and read one crop.

A 23-minute 64 kbps mono mp3 (Debian's ``lame`` when installed, else PyAV's
libmp3lame) is packed and uploaded to a real S3 server on loopback
(SeaweedFS by default; ``--server moto`` or ``rclone``) twice: with its
dataset manifest, and without (as a wsds dataset, or one written before
manifests: the store is listed). For each of ``--crops``
8-second crops spread over the episode, a cold process is simulated (a new
store: nothing cached) and the dataset is opened and the crop read, as
``streamer crop`` does. Reported per configuration: requests (from the
store's stats) and bytes fetched as a share of the blob, mean and worst.

What the block size costs a training run besides: the pipeline's crops
(``RandomCrops(8.0)``, 12 per episode, in process) over the demo episodes
(``bench_pipeline``'s dataset) served by the loopback HTTP server, cold,
with 256 and 128 KiB blocks: requests and kB per crop.

    python -m benchmarks.bench_cold_open [--minutes 23] [--crops 12] [--server seaweedfs]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

from benchmarks._report import add_server_argument, s3_server, write_json
from streamer.dataset.dataset import Dataset
from streamer.dataset.manifest import MANIFEST_NAME
from streamer.storage.cache import KiB
from streamer.storage.loop import run_sync
from streamer.synth import encode, signal
from streamer.write.pack import pack
from testkit.servers import LoopbackServer, file_handler, upload_tree

BUCKET = "cold"
KEY, SECRET = "bench", "bench-secret"
#: (label, dataset prefix, block size): before, each change alone, after.
CONFIGS = [
    ("listing, 256 KiB blocks", "listed", 256 * KiB),
    ("listing, 128 KiB blocks", "listed", 128 * KiB),
    ("manifest, 256 KiB blocks", "manifest", 256 * KiB),
    ("manifest, 128 KiB blocks", "manifest", 128 * KiB),
]


def write_mp3(path: Path, minutes: float) -> None:
    samples = signal(minutes * 60, 44100, 1, seed=1)
    if shutil.which("lame") is None:
        path.write_bytes(encode(samples, 44100, "mp3", bit_rate=64_000))
        return
    pcm = path.with_suffix(".wav")
    with wave.open(str(pcm), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(44100)
        file.writeframes((np.clip(samples[0], -1, 1) * 32767).astype("<i2").tobytes())
    subprocess.run(["lame", "--quiet", "-b", "64", str(pcm), str(path)], check=True)
    pcm.unlink()


def cold_crop(endpoint: str, prefix: str, block: int, start: float) -> tuple[int, int]:
    """(requests, bytes) of opening the dataset and reading one 8 s crop, cold."""
    from streamer.storage.s3 import S3Store

    store = S3Store(
        "s3",
        {
            "endpoint_url": endpoint,
            "key": KEY,
            "secret": SECRET,
            "region_name": "us-east-1",
            "block_size": block,
        },
    )
    try:
        dataset = Dataset(f"{BUCKET}/{prefix}", store=store)  # what open_dataset makes
        dataset.crop("episode", start, start + 8.0)
        return store.stats.requests, store.stats.bytes_fetched
    finally:
        run_sync(store._close_on_loop())


def run(args: argparse.Namespace, endpoint: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        src = Path(folder) / "src"
        src.mkdir()
        write_mp3(src / "episode.mp3", args.minutes)
        blob = (src / "episode.mp3").stat().st_size
        out = Path(folder) / "ds"
        pack(src, out, progress=False)
        upload_tree(endpoint, out, BUCKET, "manifest", KEY, SECRET)
        (out / MANIFEST_NAME).unlink()
        upload_tree(endpoint, out, BUCKET, "listed", KEY, SECRET)
    starts = np.linspace(5.0, args.minutes * 60 - 13.0, args.crops).round(2)
    rows = {}
    for label, prefix, block in CONFIGS:
        costs = np.array([cold_crop(endpoint, prefix, block, float(s)) for s in starts])
        share = 100 * costs[:, 1] / blob
        rows[label] = {
            "requests_mean": float(costs[:, 0].mean()),
            "requests_max": int(costs[:, 0].max()),
            "blob_percent_mean": float(share.mean()),
            "blob_percent_max": float(share.max()),
        }
    return {
        "parameters": vars(args) | {"blob_bytes": blob},
        "configs": rows,
        "pipeline": pipeline_costs(),
    }


def pipeline_costs() -> dict[str, dict[str, float]]:
    """Requests and kB per crop of a cold pipeline pass per block size."""
    from benchmarks.bench_pipeline import small_shards
    from streamer import RandomCrops, Streamer

    costs = {}
    with tempfile.TemporaryDirectory() as folder:
        local = small_shards(Path(folder), 4)
        server = LoopbackServer(file_handler(local.parent)).start()
        try:
            for block in (256 * KiB, 128 * KiB):
                streamer = Streamer(
                    f"{server.url}/demo",
                    RandomCrops(8.0, per_episode=12),
                    workers=0,
                    seed=1,
                    storage_options={"block_size": block},
                )
                crops = sum(1 for _ in streamer)
                stats = streamer.stats
                costs[f"{block // KiB} KiB"] = {
                    "crops": crops,
                    "requests_per_crop": stats.requests / crops,
                    "kB_per_crop": stats.bytes_read / crops / 1e3,
                }
        finally:
            server.stop()
    return costs


def report(result: dict) -> None:
    p = result["parameters"]
    print(
        f"{p['minutes']} min 64 kbps mp3 ({p['blob_bytes'] / 1e6:.1f} MB), {p['crops']} cold "
        f"8 s crops, S3 = {p['server']} on loopback"
    )
    print(f"{'':26}  {'requests mean/max':>17}  {'% of blob mean/max':>18}")
    for label, row in result["configs"].items():
        print(
            f"{label:26}  {row['requests_mean']:8.2f} / {row['requests_max']:<6}  "
            f"{row['blob_percent_mean']:8.2f} / {row['blob_percent_max']:.2f}"
        )
    before, after = (result["configs"][CONFIGS[i][0]] for i in (0, -1))
    print(
        f"before/after: {before['requests_max'] / after['requests_max']:.2f}x fewer requests, "
        f"{before['blob_percent_max'] / after['blob_percent_max']:.2f}x fewer bytes (worst case)"
    )
    print("pipeline, cold, demo episodes over HTTP (RandomCrops(8.0), 12 per episode):")
    for label, row in result["pipeline"].items():
        print(
            f"  {label} blocks: {row['crops']} crops, {row['requests_per_crop']:.2f} requests"
            f" and {row['kB_per_crop']:.0f} kB per crop"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=23.0)
    parser.add_argument("--crops", type=int, default=12)
    add_server_argument(parser)
    args = parser.parse_args()
    with s3_server(args.server, KEY, SECRET) as (endpoint, _):
        result = run(args, endpoint)
    report(result)
    print("wrote", write_json("bench_cold_open", result))


if __name__ == "__main__":
    main()
