"""The real-world corpus table (issue 12): for each file, how its crops are
served and whether they equal FFmpeg's full decode.

Columns: file, codec/container (as FFmpeg names them), index kind (native,
generic = FFmpeg's packet index, or none with the reason), the index's
verdict, crops checked through the indexed dataset, their max abs error at
zero lag and result, and the fallback alone (the same files packed with
``index=False``): how many of its random crops were exact. Totals: the share
of the files FFmpeg decodes fully served from an index, and how many are
exact; apart, the same for files whose decode ends early (FFmpeg fails
after frames came out), checked against what it decodes up to there.

Run: ``python -m benchmarks.corpus_table [FOLDER] [--small] [--crops 8]
[--fallback-crops 50] [--json PATH]``. Without FOLDER it reads the fetched
corpus (``python -m tests.corpus.fetch``; ``--small`` = the default suite's
set); with one, every file under it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from streamer import open_dataset
from streamer.dataset.dataset import Dataset
from streamer.index import SeekIndex
from streamer.write.pack import pack
from testkit.corpus import (
    CropCheck,
    check_crops,
    crop_points,
    full_decode,
    index_kind,
    served_index,
    stage,
)
from testkit.corpus_manifest import corpus_dir, load_manifest

from ._report import write_json

#: How a row's FFmpeg column starts for a file whose decode ends early.
ENDS_EARLY = "ends early: "


@dataclass
class Row:
    file: str
    codec: str = ""
    container: str = ""
    # "full", "errors: ...", ENDS_EARLY + what FFmpeg raised, or why it does not decode it
    ffmpeg: str = "full"
    index: str = ""
    verdict: str = ""
    crops: int = 0
    max_error: float = 0.0
    result: str = ""  # "exact", "exact (N PNS)" or "<class>: N of M: first failure"
    fallback: str = ""


def corpus_files(folder: Path | None, small: bool) -> dict[str, Path]:
    """name -> path: the fetched manifest files, or every file under ``folder``."""
    if folder is None:
        root = corpus_dir()
        chosen = [f.name for f in load_manifest() if f.small or not small]
        return {name: root / name for name in chosen if (root / name).is_file()}
    return {
        str(path.relative_to(folder)): path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.startswith(".")
    }


def summary(check: CropCheck) -> str:
    if check.exact:
        return "exact" + (f" ({check.pns} PNS)" if check.pns else "")
    return f"{check.failure_class()}: {len(check.failures)} of {check.crops}: {check.worst()}"


@dataclass
class Packed:
    """The staged files packed with and without an index (None: pack kept
    no file), and why pack left files out (name -> reason)."""

    indexed: Dataset | None
    plain: Dataset | None
    skipped: dict[str, str]


def measure(name: str, path: Path, packed: Packed, crops: int, fallback: int) -> Row:
    reference = full_decode(path.read_bytes())
    row = Row(name, reference.codec, reference.container)
    if reference.audio is None:
        row.ffmpeg = reference.problem
        return row
    if reference.ends_early:
        row.ffmpeg = ENDS_EARLY + reference.ends_early
    elif reference.errors:
        row.ffmpeg = f"errors: {reference.errors}"
    indexed, plain = packed.indexed, packed.plain
    if indexed is None or plain is None or name not in indexed:
        row.index = f"none: pack skipped it: {packed.skipped.get(name, '?')}"
        return row
    index = served_index(indexed, name)
    row.index, row.verdict = index_kind(index), index.verdict if index.ok else ""
    full, rate, codec = reference.audio, reference.sample_rate, reference.codec

    def crops_of(dataset: Dataset, seek: SeekIndex | None, count: int, seed: int) -> CropCheck:
        points = crop_points(seek, full.shape[1], rate, count, random.Random(seed))
        return check_crops(lambda a, b: dataset.read_crop(name, a, b), full, rate, codec, points)

    through_index = crops_of(indexed, index, crops, seed=1)
    row.crops, row.max_error = through_index.crops, through_index.max_error
    row.result = summary(through_index)
    row.fallback = summary(crops_of(plain, None, fallback, seed=2))
    return row


def pack_both(files: dict[str, Path], tmp: Path) -> Packed:
    """``files`` staged under ``tmp`` and packed with and without an index."""
    src = stage(files, tmp / "src")
    report = pack(src, tmp / "indexed", progress=False)
    pack(src, tmp / "plain", index=False, progress=False)
    kept = bool(report.shards)
    return Packed(
        open_dataset(tmp / "indexed") if kept else None,
        open_dataset(tmp / "plain") if kept else None,
        {os.path.splitext(source)[0]: reason for source, reason in report.skipped},
    )


def run(files: dict[str, Path], crops: int, fallback: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="corpus-table-") as tmp:
        packed = pack_both(files, Path(tmp))
        return [measure(n, p, packed, crops, fallback) for n, p in files.items()]


def render(rows: list[Row]) -> str:
    head = ("file", "codec/container", "FFmpeg", "index", "verdict", "crops", "max err")
    lines = ["| " + " | ".join((*head, "indexed crops", "fallback only")) + " |", "|---" * 9 + "|"]
    for r in rows:
        if not r.index:
            kind = f"{r.codec or '-'}/{r.container or '-'}"
            lines.append(f"| {r.file} | {kind} | does not decode it: {r.ffmpeg} |" + " |" * 6)
            continue
        lines.append(
            f"| {r.file} | {r.codec}/{r.container} | {r.ffmpeg} | {r.index} | {r.verdict} "
            f"| {r.crops} | {r.max_error:.2g} | {r.result} | {r.fallback} |"
        )
    return "\n".join(lines)


def totals(rows: list[Row]) -> dict[str, object]:
    """The goal's figures over the files FFmpeg decodes fully; apart, the
    files whose decode ends early (checked against what it decodes)."""
    measured = [r for r in rows if r.index]
    decodable = [r for r in measured if not r.ffmpeg.startswith(ENDS_EARLY)]
    early = [r for r in measured if r.ffmpeg.startswith(ENDS_EARLY)]
    served = [r for r in decodable if not r.index.startswith("none")]
    count = len(decodable) or 1
    return {
        "files": len(rows),
        "ffmpeg_decodes": len(decodable),
        "served_from_index": len(served),
        "served_from_index_pct": round(100 * len(served) / count, 1),
        "native": sum(r.index == "native" for r in decodable),
        "generic": sum(r.index == "generic" for r in decodable),
        "indexed_exact": sum(r.result.startswith("exact") for r in decodable),
        "fallback_exact": sum(r.fallback.startswith("exact") for r in decodable),
        "ends_early": len(early),
        "ends_early_served_from_index": sum(not r.index.startswith("none") for r in early),
        "ends_early_indexed_exact": sum(r.result.startswith("exact") for r in early),
        "ends_early_fallback_exact": sum(r.fallback.startswith("exact") for r in early),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, help="any folder of audio files")
    parser.add_argument("--small", action="store_true", help="the default suite's set only")
    parser.add_argument("--crops", type=int, default=8, help="random interior crops per file")
    parser.add_argument("--fallback-crops", type=int, default=50)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    files = corpus_files(args.folder, args.small)
    if not files:
        print("no audio files (fetch the corpus: python -m tests.corpus.fetch)", file=sys.stderr)
        return 1
    rows = run(files, args.crops, args.fallback_crops)
    print(render(rows))
    total = totals(rows)
    print()
    print(
        f"{total['files']} files, FFmpeg decodes {total['ffmpeg_decodes']}; served from an index: "
        f"{total['served_from_index']} ({total['served_from_index_pct']} %: "
        f"{total['native']} native, {total['generic']} generic); "
        f"exact through the index: {total['indexed_exact']}; "
        f"fallback alone exact: {total['fallback_exact']}"
    )
    print(
        f"FFmpeg's decode ends early in {total['ends_early']} more (checked up to there); "
        f"served from an index: {total['ends_early_served_from_index']}; exact through the "
        f"index: {total['ends_early_indexed_exact']}; fallback alone exact: "
        f"{total['ends_early_fallback_exact']}"
    )
    payload = {"totals": total, "rows": [asdict(r) for r in rows]}
    path = write_json("corpus_table", payload)
    if args.json:
        args.json.write_text(json.dumps(payload, indent=2))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
