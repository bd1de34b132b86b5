"""The dense crop sweep over the real-world corpus (or any folder of audio).

For every file FFmpeg decodes, crops at every class of position an index or
a planner could get wrong (``testkit.corpus.dense_spans``: starting on each
seek point ``k`` and at ``k±1``, ``k±preroll``, ``k±preroll±1``, ending on
``k`` and ``k±1``, from the last point to the end, ending exactly at the end,
one sample, nearly all of the file, random ones) are compared sample for
sample with the full decode, through the index and through the fallback
alone (the files packed without an index, ``--fallback-cap`` seek points:
its crops decode from the start); for a subset (the first
``--resampled`` files of each codec/container), also resampled to each of
``--rates`` and downmixed, against the full decode resampled in one pass
and sliced (``testkit.sweep``). Seek points per file are capped (``--cap``:
all of them up to the cap, else that many spread evenly).

Run: ``python -m benchmarks.corpus_sweep [FOLDER] [--small] [--cap 40]
[--fallback-cap 8] [--random 50] [--rates 16000,22050] [--resampled 1] [--density D]
[--no-verify] [--only TEXT] [--json PATH]``: ``--density`` indexes the files
again at D seek points a second (``inf``: every frame or page; seek points
closer than a pre-roll), ``--no-verify`` without the indexes' own check
(what an index builder gets wrong, before the check demotes it). Prints
each file that is not exact with its failures by class, then per codec:
files, crops per path, max error; and the time taken.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from streamer import open_dataset
from streamer.formats.registry import DEFAULT_DENSITY
from streamer.write.index import build_index
from testkit.corpus import full_decode
from testkit.sweep import Sweep, sweep_file

from ._report import write_json
from .corpus_table import corpus_files, pack_both


def _resampled(files: dict[str, tuple[str, str]], per_class: int) -> set[str]:
    """The first ``per_class`` files of each (codec, container)."""
    chosen: dict[tuple[str, str], list[str]] = {}
    for name, kind in files.items():
        chosen.setdefault(kind, [])
        if len(chosen[kind]) < per_class:
            chosen[kind].append(name)
    return {name for names in chosen.values() for name in names}


def run(files: dict[str, Path], args: argparse.Namespace) -> tuple[list[Sweep], list[str]]:
    """The sweeps of the files FFmpeg decodes, and the others with why."""
    rates = tuple(int(r) for r in args.rates.split(",") if r)
    with tempfile.TemporaryDirectory(prefix="corpus-sweep-") as tmp:
        packed = pack_both(files, Path(tmp))
        if packed.indexed is not None and (args.density or args.no_verify):
            density = args.density or DEFAULT_DENSITY
            build_index(
                Path(tmp) / "indexed",
                density=density,
                verify=not args.no_verify,
                force=True,
                progress=False,
            )
            packed.indexed = open_dataset(Path(tmp) / "indexed")
        references, skipped = {}, []
        for name, path in files.items():
            reference = full_decode(path.read_bytes())
            if reference.audio is None:
                skipped.append(f"{name}: {reference.problem}")
            elif packed.indexed is None or packed.plain is None or name not in packed.indexed:
                skipped.append(f"{name}: pack skipped it: {packed.skipped.get(name, '?')}")
            else:
                references[name] = reference
        kinds = {n: (r.codec, r.container) for n, r in references.items()}
        resampled = _resampled(kinds, args.resampled)
        sweeps = []
        for name, reference in references.items():
            assert packed.indexed is not None and packed.plain is not None
            sweep = sweep_file(
                name,
                reference,
                packed.indexed,
                packed.plain,
                cap=args.cap,
                fallback_cap=args.fallback_cap,
                random_crops=args.random,
                rates=rates if name in resampled else (),
            )
            sweeps.append(sweep)
            crops = sum(sweep.crops.values())
            print(f"{name}: {crops} crops, {sweep.seconds:.1f} s", file=sys.stderr)
            if not sweep.exact:
                print(f"{name} ({sweep.codec}, {sweep.index}): {len(sweep.failures)} failures")
                for failure in sweep.failures[:12]:
                    print(f"    {failure}")
            sys.stdout.flush()
        return sweeps, skipped


def by_codec(sweeps: list[Sweep]) -> str:
    """Per codec: files, failing files, crops and max error per path."""
    paths = sorted({p for s in sweeps for p in s.crops}, key=lambda p: (p != "index", p))
    lines = ["| codec | files | not exact | " + " | ".join(paths) + " |"]
    lines.append("|---" * (3 + len(paths)) + "|")
    for codec in sorted({s.codec for s in sweeps}):
        group = [s for s in sweeps if s.codec == codec]
        cells = []
        for path in paths:
            crops = sum(s.crops.get(path, 0) for s in group)
            error = max((s.max_error.get(path, 0.0) for s in group), default=0.0)
            cells.append(f"{crops} / {error:.2g}" if crops else "-")
        bad = sum(not s.exact for s in group)
        lines.append(f"| {codec} | {len(group)} | {bad} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, help="any folder of audio files")
    parser.add_argument("--small", action="store_true", help="the default suite's set only")
    parser.add_argument("--cap", type=int, default=40, help="seek points per file at most")
    parser.add_argument(
        "--fallback-cap", type=int, default=8, help="seek points per file through the fallback"
    )
    parser.add_argument("--random", type=int, default=50, help="random crops per file and path")
    parser.add_argument("--rates", default="16000,22050", help="resampled targets ('' for none)")
    parser.add_argument("--resampled", type=int, default=1, help="files per codec/container")
    parser.add_argument(
        "--density", type=float, help="index again at this many seek points a second (inf: all)"
    )
    parser.add_argument(
        "--no-verify", action="store_true", help="index again without the indexes' own check"
    )
    parser.add_argument("--only", default="", help="only the files whose name contains this")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    files = {k: v for k, v in corpus_files(args.folder, args.small).items() if args.only in k}
    if not files:
        print("no audio files (fetch the corpus: python -m tests.corpus.fetch)", file=sys.stderr)
        return 1
    began = time.perf_counter()
    sweeps, skipped = run(files, args)
    took = time.perf_counter() - began
    print()
    print(by_codec(sweeps))
    crops = sum(sum(s.crops.values()) for s in sweeps)
    bad = [s for s in sweeps if not s.exact]
    print(
        f"\n{len(files)} files, {len(sweeps)} decoded by FFmpeg and swept "
        f"({len(skipped)} not); {crops} crops (cells: crops / max abs error), "
        f"{sum(s.pns for s in sweeps)} within AAC noise substitution; "
        f"{len(bad)} files not exact; {took:.0f} s"
    )
    payload = {
        "seconds": took,
        "args": {k: str(v) for k, v in vars(args).items()},
        "skipped": skipped,
        "sweeps": [asdict(s) for s in sweeps],
    }
    path = write_json("corpus_sweep", payload)
    if args.json:
        args.json.write_text(json.dumps(payload, indent=2))
    print(f"results: {path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
