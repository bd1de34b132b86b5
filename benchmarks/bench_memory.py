"""Memory over a long run: the parent's and the decode workers' RSS every N crops.

Streams ``--crops`` crops from the demo dataset (its seven episodes, one per
codec, many crops each) with ``--workers`` decode processes, the consumer
dropping each crop once received (as a training step does), and prints the
resident set of the parent and of each worker (``VmRSS``, shared memory
pages included: the arena counts in every process mapping it) every
``--every`` crops. Flat figures after warm-up mean nothing accumulates per
crop. Linux only (``/proc``).

    python -m benchmarks.bench_memory [--crops 10000] [--every 1000] [--duration 8]
"""

from __future__ import annotations

import argparse
import os

import streamer
from benchmarks._report import write_json
from streamer.demo import demo_dataset
from streamer.pipeline.bench import BenchConfig, bench_streamer


def rss_mb(pid: int | str = "self") -> tuple[float, float]:
    """(resident MB, of which shared memory), from ``/proc/PID/status``."""
    found = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssShmem"):
                found[name] = int(value.split()[0]) / 1024
    return found.get("VmRSS", float("nan")), found.get("RssShmem", float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crops", type=int, default=10000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    dataset = streamer.open_dataset(demo_dataset())
    config = BenchConfig(duration=args.duration, crops=args.crops)
    s = bench_streamer(dataset, config, workers=args.workers)
    rows = []
    print(f"{'crops':>7}{'parent MB (shared)':>20}{'workers MB (shared)':>30}")
    with s:
        for count, crop in enumerate(s, 1):
            del crop
            if count % args.every == 0:
                workers = [rss_mb(pid) for pid in s.worker_pids]
                rows.append({"crops": count, "parent_mb": rss_mb(), "workers_mb": workers})
                parent = "{:.0f} ({:.0f})".format(*rows[-1]["parent_mb"])
                shown = " ".join("{:.0f} ({:.0f})".format(*mb) for mb in workers)
                print(f"{count:>7}{parent:>20}{shown:>30}", flush=True)
    print(f"skipped {s.stats.skipped}, worker restarts {s.stats.worker_restarts}")
    print("wrote", write_json("memory", {"args": vars(args), "rows": rows, "pid": os.getpid()}))


if __name__ == "__main__":
    main()
