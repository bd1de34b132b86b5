"""``streamer inspect URL``: what a dataset holds."""

from __future__ import annotations

import argparse
from collections import Counter

from ..dataset import open_dataset
from ..dataset.dataset import INFO_DIR
from ._options import add_url_arguments, storage_options


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("inspect", help="shards, rows, columns, hours, codec mix")
    add_url_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    dataset = open_dataset(args.url, **storage_options(args))
    print(f"dataset   {dataset.url}")
    print(f"shards    {len(dataset.shard_names)}")
    print(f"rows      {len(dataset)}")
    for column_dir in dataset.column_dirs:
        first = dataset.shard(dataset.shard_names[0], column_dir)
        columns = ", ".join(f"{f.name}: {f.type}" for f in first.schema)
        print(f"columns   {column_dir}/  {columns}")
    if INFO_DIR not in dataset.column_dirs:
        print(f"hours     unknown (no {INFO_DIR}/ column directory)")
        return 0
    info = dataset.info_table()
    seconds = sum(d for d in info.column("duration").to_pylist() if d == d)
    print(f"hours     {seconds / 3600:.2f}")
    mix = Counter(info.column("codec").to_pylist())
    print("codecs    " + ", ".join(f"{codec} {count}" for codec, count in mix.most_common()))
    return 0
