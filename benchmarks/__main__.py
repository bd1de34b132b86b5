"""``python -m benchmarks [--quick]``: every benchmark, one after the other.

``--quick`` (a few minutes on 2 cores) shrinks each to small episodes and few
crops; without it each runs at its own defaults (hour-long episodes, 36-hour
scaling: tens of minutes and several GB of temporary disk). Every benchmark
prints its own table and writes its JSON to ``benchmarks/results/``.
``bench_peers`` needs the ``peers`` extra (torchcodec); without it, it prints
why it is skipped and counts as passed; so does ``corpus_table`` without the
fetched corpus (``python -m tests.corpus.fetch``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

#: (module, arguments with --quick, arguments without)
SUITE = [
    ("bench_blob", ["--episode-mb", "50"], []),
    ("bench_timing", ["--calls", "200000", "--crops", "50"], []),
    ("bench_resample", ["--repeats", "5"], []),
    ("bench_index", ["--seconds", "30"], []),
    ("bench_generic", ["--seconds", "30", "--crops", "30"], []),
    ("bench_decode", ["--quick"], []),
    ("bench_peers", ["--quick"], []),
    ("bench_fallback", ["--quick"], []),
    ("bench_scaling", ["--quick"], []),
    ("bench_limit", ["--minutes", "3", "--episodes", "1", "--crops", "60"], []),
    ("bench_in_process", ["--minutes", "2", "--crops", "20", "--rounds", "1"], []),
    ("bench_memory", ["--crops", "600", "--every", "200"], []),
    ("bench_s3_client", ["--rounds", "1"], []),
    ("bench_remote", ["--hours", "0.25", "--crops", "10"], []),
    ("bench_remote_crops", ["--quick"], []),
    ("bench_cold_open", ["--minutes", "5", "--crops", "4"], []),
    ("bench_pipeline", ["--store", "http", "--crops", "50"], []),
    ("bench_warmup", ["--crops", "100"], []),
    ("bench_jobs", ["--minutes", "1", "--episodes", "1", "--crops", "50"], []),
    ("bench_shuffle", ["--copies", "2", "--per-episode", "40"], []),
    ("bench_fanout", ["--gigabytes", "0.15", "--minutes", "2", "--shard-size", "16M"], []),
    ("corpus_table", ["--small"], []),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    parser.add_argument("only", nargs="*", help="run only these (e.g. bench_decode)")
    args = parser.parse_args()
    failed = []
    for module, quick, full in SUITE:
        if args.only and module not in args.only:
            continue
        command = [sys.executable, "-m", f"benchmarks.{module}", *(quick if args.quick else full)]
        print(f"\n=== {' '.join(command[2:])}", flush=True)
        began = time.perf_counter()
        if subprocess.run(command).returncode != 0:
            failed.append(module)
        print(f"=== {module}: {time.perf_counter() - began:.0f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
