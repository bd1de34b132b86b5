"""``streamer inspect URL``: what a dataset holds, and what of it cannot be read
(with the stored seek indexes counted by verdict and "no index" reason, and
the dataset manifest checked against a listing). ``--json``: the same as one
JSON object on stdout."""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from typing import Any

import pyarrow as pa

from ..dataset import ROW_UNREADABLE, Dataset, open_dataset
from ..dataset.dataset import INFO_DIR
from ..decode.verify import countable
from ..errors import DataError, LayoutError, ShardError
from ..index.checks import stale_build
from ..index.table import INDEX_DIR, IndexReader, SeekIndex
from ..write.durations import DURATION, is_numeric
from ..write.index import index_label, is_generic
from ._options import add_url_arguments, storage_options


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "inspect", help="shards, rows, columns, hours, codec mix, unreadable shards"
    )
    add_url_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def run(args: argparse.Namespace) -> int:
    # An incomplete dataset is inspected as the shards present, and said to be.
    dataset = open_dataset(args.url, allow_incomplete=True, **storage_options(args))
    report = inspect(dataset)
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report)
    return 1 if report["duplicate_key"] or report["info_sizes"] or report["incomplete"] else 0


def inspect(dataset: Dataset) -> dict[str, Any]:
    """What ``streamer inspect`` says, as a JSON-able dict: ``hours`` and
    ``codecs`` are ``None`` without an audio_info/ column directory (and
    without its ``duration`` or ``codec`` column: another writer's, wsds's,
    has none of the latter); ``unknown_durations`` counts the rows whose
    duration is null or no number (text such as ``"n/a"``; text that is
    one, ``"3.5"``, counts), left out of ``hours``;
    ``indexes``, ``no_index`` and ``span_crcs`` (rows whose audio data is
    checked by span CRCs, ``index.content``) are ``None`` without seek_index/;
    ``duplicate_key`` names a key the dataset holds twice, which no crop can
    be sampled from (``Dataset.check_keys``; the command then exits 1);
    ``info_sizes`` lists the rows whose ``audio_info`` byte count is not
    their blob's length (``Dataset.info_problem``: ``audio_info`` of
    another pack, or a damaged audio shard; their crops fail, and the
    command exits 1), as ``"shard, key"`` -> what differs (``None`` without
    audio_info/); ``incomplete`` says how many of the shards its pack
    planned are present and names the first missing (``Dataset.incomplete``:
    it does not open without ``allow_incomplete``; the command then exits
    1), else ``None``."""
    incomplete = dataset.incomplete
    report: dict[str, Any] = {
        "dataset": str(dataset.url),
        "shards": len(dataset.shard_names),
        "incomplete": None if incomplete is None else incomplete.summary(),
        "skipped_shards": dict(dataset.bad_shards),
        "rows": len(dataset),
        "duplicate_key": _duplicate_key(dataset),
        "manifest": None,  # last: checked against the shards the rest opens too
        "columns": {},
        "audio_dir": dataset.audio_dir,
        "index_problems": {},
        "indexes": None,
        "no_index": None,
        "span_crcs": None,
        "hours": None,
        "unknown_durations": 0,
        "codecs": None,
        "info_sizes": None,
    }
    for column_dir in dataset.column_dirs:
        columns = _columns(dataset, column_dir)
        if columns:
            report["columns"][column_dir] = columns
    if INDEX_DIR in dataset.column_dirs:
        report["index_problems"] = dict(dataset.index_problems())
        report["indexes"], report["no_index"], report["span_crcs"] = _indexes(dataset)
    if INFO_DIR in dataset.column_dirs:
        # Shards whose columns cannot be one table: ShardError naming the
        # first that disagrees (the command's one-line error).
        info = dataset.info_table()
        if DURATION in info.schema.names:
            seconds, report["unknown_durations"] = _seconds(info.column(DURATION))
            report["hours"] = seconds / 3600
        if CODEC in info.schema.names:
            mix = Counter(_label(c) for c in info.column(CODEC).to_pylist())
            report["codecs"] = dict(mix.most_common())
        report["info_sizes"] = _info_sizes(dataset)
    report["manifest"] = dataset.manifest_state()
    return report


def _duplicate_key(dataset: Dataset) -> str | None:
    try:
        dataset.check_keys()
    except LayoutError as exc:
        return str(exc)
    return None


#: The ``audio_info`` column ``pack`` writes FFmpeg's codec name in.
CODEC = "codec"
#: Rows of ``info_sizes`` printed by name; the rest are counted.
SHOWN_ROWS = 10


def _info_sizes(dataset: Dataset) -> dict[str, str]:
    """``info_sizes`` of ``inspect``: offsets only, no audio read."""
    found = {}
    for name in dataset.shard_names:
        for row, key in enumerate(dataset.shard(name).keys.to_pylist()):
            problem = dataset.info_problem(name, row)
            if problem is not None:
                found[f"shard {name}, key {key!r}"] = problem
    return found


def print_report(report: dict[str, Any]) -> None:
    bad = report["skipped_shards"]
    skipped = f" ({len(bad)} skipped)" if bad else ""
    print(f"dataset   {report['dataset']}")
    print(f"shards    {report['shards']}{skipped}")
    if report["incomplete"]:
        print(f"complete  no: {report['incomplete']}; re-run the pack to finish it")
    print(f"rows      {report['rows']}")
    if report["duplicate_key"]:
        print(f"keys      {report['duplicate_key']}")
    print(f"manifest  {report['manifest']}")
    for column_dir, columns in report["columns"].items():
        print(f"columns   {column_dir}/  " + ", ".join(f"{n}: {t}" for n, t in columns.items()))
    for name, reason in bad.items():
        print(f"skipped   {report['audio_dir']}/{name}: {reason}")
    if report["indexes"] is not None:
        for name, reason in report["index_problems"].items():
            print(f"no index  {INDEX_DIR}/{name} (its episodes fall back): {reason}")
        counts = ", ".join(f"{label} {count}" for label, count in report["indexes"].items())
        print(f"indexes   {counts or 'none'}")
        print(f"span CRCs {report['span_crcs']} rows (their audio data is checked; not FLAC, Ogg)")
        for reason, count in report["no_index"].items():
            print(f"no index  {count}: {reason}")
    if INFO_DIR not in report["columns"]:
        none_served = report["skipped_shards"] and not report["shards"]
        why = "every shard is skipped" if none_served else f"no {INFO_DIR}/ column directory"
        print(f"hours     unknown ({why})")
        return
    if report["hours"] is None:
        print(f"hours     unknown (no {DURATION} column in {INFO_DIR}/)")
    else:
        unknown = report["unknown_durations"]
        note = f" ({unknown} rows without a duration: null or no number)" if unknown else ""
        print(f"hours     {report['hours']:.2f}{note}")
    if report["codecs"] is None:
        print(f"codecs    unknown (no {CODEC} column in {INFO_DIR}/)")
    else:
        print("codecs    " + ", ".join(f"{c} {count}" for c, count in report["codecs"].items()))
    wrong = report["info_sizes"]
    if wrong:
        print(
            f"{INFO_DIR}  {len(wrong)} rows whose byte count is not their blob's length "
            f"({INFO_DIR}/ of another pack, or a damaged audio shard: their crops fail)"
        )
        for where, problem in list(wrong.items())[:SHOWN_ROWS]:
            print(f"  {where}: {problem}")
        if len(wrong) > SHOWN_ROWS:
            print(f"  and {len(wrong) - SHOWN_ROWS} more")


def _seconds(column: pa.ChunkedArray) -> tuple[float, int]:
    """The sum of an ``audio_info`` duration column's seconds, and the rows
    left out: null, NaN, negative or infinite, or text that is no number. A
    numeric column of any type (float32, int64, decimal) is read as
    seconds; text is parsed cell by cell (another writer's ``"3.5"``)."""
    if is_numeric(column.type):
        cells = column.cast(pa.float64()).to_pylist()
    else:
        cells = [_number(cell) for cell in column.to_pylist()]
    good = [c for c in cells if c is not None and math.isfinite(c) and c >= 0]
    return math.fsum(good), len(cells) - len(good)


def _number(cell: Any) -> float | None:
    """A cell of a non-numeric duration column as seconds (None: none)."""
    if isinstance(cell, bytes):
        cell = cell.decode("utf-8", "replace")
    if isinstance(cell, bool) or not isinstance(cell, str | int | float):
        return None
    try:
        return float(cell)
    except ValueError:
        return None


def _label(codec: Any) -> str:
    """A codec cell as the report counts it (null: "unknown")."""
    if codec is None:
        return "unknown"
    return codec.decode("utf-8", "replace") if isinstance(codec, bytes) else str(codec)


def _columns(dataset: Dataset, column_dir: str) -> dict[str, str]:
    """The columns of a column directory's first shard that opens (none if none does)."""
    for name in dataset.shard_names:
        try:
            first = dataset.shard(name, column_dir)
        except DataError:
            continue
        return {f.name: str(f.type) for f in first.schema}
    return {}


def _indexes(dataset: Dataset) -> tuple[dict[str, int], dict[str, int], int]:
    """Stored indexes counted: verified, unverified, generic (FFmpeg's packet
    index), those of episodes whose FFmpeg decode ends early (``SeekIndex.ends_early``),
    and "no index" per reason (as stored, and the rows an older
    builder stored that are not served, ``checks.stale_build``; the
    open-time checks may demote more, counted by a crop's
    ``decode_stats.fallback_reasons``)."""
    labels: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    spans = 0
    unusable = dataset.index_problems()
    for name in dataset.shard_names:
        if name in unusable:
            continue
        try:
            reader = IndexReader(dataset.shard(name, INDEX_DIR))
        except DataError:
            continue
        for row in range(reader.shard.num_rows):
            try:
                index = reader.read(row)
            except ShardError as exc:  # a row that fails its row_crc: not served
                index = SeekIndex.unavailable(f"{ROW_UNREADABLE}: {exc.reason}")
            stale = stale_build(index, reader.revision)
            if stale is not None:  # served as "no index" until rebuilt
                index = SeekIndex.unavailable(stale, index.container)
            labels[index_label(index)] += 1
            labels["generic"] += is_generic(index)
            labels["decode ends early"] += index.ends_early
            spans += bool(len(index.span_crc))
            if not index.ok:
                reasons[countable(index.reason)] += 1
    counts = {label: labels[label] for label in sorted(labels) if labels[label]}
    return counts, dict(reasons.most_common()), spans
