"""Cost of the phase profiler: per call (off and on) against an empty loop, and end to end.

    python -m benchmarks.bench_timing [--calls 1000000] [--crops 200]

End to end reads the same crops from the demo dataset with the profiler off
and on, interleaved in rounds, and reports the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from benchmarks._report import write_json
from streamer import timing
from streamer.dataset.dataset import Dataset
from streamer.decode.fallback import decode_range
from streamer.demo import demo_dataset


def per_call_ns(calls: int) -> dict[str, float]:
    record = timing.record

    def empty() -> None:
        for _ in range(calls):
            pass

    def recorded() -> None:
        for _ in range(calls):
            with record("bench"):
                pass

    def best(fn) -> float:  # type: ignore[no-untyped-def]
        runs = []
        for _ in range(5):
            began = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - began)
        return min(runs) / calls * 1e9

    timing.enable(False)
    loop, off = best(empty), best(recorded)
    timing.enable(True, out=os.devnull)
    on = best(recorded)
    timing.enable(False)
    return {"empty_loop_ns": loop, "off_ns": off - loop, "on_ns": on - loop}


def end_to_end(crops: int, rounds: int = 5) -> dict[str, float]:
    dataset = Dataset(demo_dataset())
    rng = random.Random(0)
    keys = list(dataset)
    plan = [
        (k, rng.uniform(0, dataset.info(k)["duration"] - 4)) for k in rng.choices(keys, k=crops)
    ]

    def read_all() -> float:
        began = time.perf_counter()
        for key, start in plan:
            decode_range(dataset.blob(key), start, start + 4)
        return time.perf_counter() - began

    off, on = [], []
    for _ in range(rounds):
        timing.enable(False)
        off.append(read_all())
        timing.enable(True, out=os.devnull)
        on.append(read_all())
    timing.enable(False)
    return {"off_s": statistics.median(off), "on_s": statistics.median(on)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--crops", type=int, default=200)
    args = parser.parse_args()
    calls = per_call_ns(args.calls)
    print(f"empty loop            {calls['empty_loop_ns']:7.1f} ns/iteration (subtracted below)")
    print(f"record(), profiler off {calls['off_ns']:6.1f} ns/call   (goal <= 150)")
    print(f"record(), profiler on  {calls['on_ns']:6.1f} ns/call")
    e2e = end_to_end(args.crops)
    ratio = e2e["on_s"] / e2e["off_s"]
    print(
        f"{args.crops} demo crops: off {e2e['off_s']:.3f} s, on {e2e['on_s']:.3f} s "
        f"(on/off = {ratio:.3f})"
    )
    print(f"wrote {write_json('timing', {**calls, **e2e, 'crops': args.crops})}")


if __name__ == "__main__":
    main()
