"""Memory over a long run: the parent's and the decode workers' RSS every N crops.

Streams ``--crops`` crops from the demo dataset (its seven episodes, one per
codec, many crops each) with ``--workers`` decode processes, the consumer
dropping each crop once received (as a training step does), and prints the
resident set of the parent and of each worker every ``--every`` crops, split
as ``/proc/PID/status`` does: anonymous memory (the heap, decoder state:
what would show a leak), file-backed pages (the libraries, and the pages of
the memory-mapped shard files read so far: they grow as random crops touch
more of a shard, up to its size, and are the page cache's, shared and
reclaimable) and shared memory (the arena's regions this process touched).
Flat anonymous memory after warm-up means nothing accumulates per crop.
Linux only (``/proc``).

    python -m benchmarks.bench_memory [--crops 10000] [--every 1000] [--duration 8]
"""

from __future__ import annotations

import argparse
import os

import streamer
from benchmarks._report import write_json
from streamer.demo import demo_dataset
from streamer.pipeline.bench import BenchConfig, bench_streamer


def rss_mb(pid: int | str = "self") -> dict[str, float]:
    """Resident MB in all (``VmRSS``) and by kind (``RssAnon``, ``RssFile``,
    ``RssShmem``), from ``/proc/PID/status``."""
    found = dict.fromkeys(KINDS, float("nan"))
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in found:
                found[name] = int(value.split()[0]) / 1024
    return found


#: The ``/proc/PID/status`` fields printed: all, anonymous, file-backed, shared memory.
KINDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def _shown(mb: dict[str, float]) -> str:
    return "/".join(f"{mb[kind]:.0f}" for kind in KINDS)


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
    print(f"MB resident: all/anonymous/file/shared; {dataset.url}")
    print(f"{'crops':>7}  {'parent':<18}workers")
    with s:
        for count, crop in enumerate(s, 1):
            del crop
            if count % args.every == 0:
                workers = [rss_mb(pid) for pid in s.worker_pids]
                rows.append({"crops": count, "parent_mb": rss_mb(), "workers_mb": workers})
                shown = "  ".join(_shown(mb) for mb in workers)
                print(f"{count:>7}  {_shown(rows[-1]['parent_mb']):<18}{shown}", flush=True)
    print(f"skipped {s.stats.skipped}, worker restarts {s.stats.worker_restarts}")
    print("wrote", write_json("memory", {"args": vars(args), "rows": rows, "pid": os.getpid()}))


if __name__ == "__main__":
    main()
