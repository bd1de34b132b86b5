"""Rows of a CSV or JSON-lines file (a crop manifest, a pack sidecar), read by pyarrow."""

from __future__ import annotations

import os
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.csv
import pyarrow.json

__all__ = ["read_rows"]


def read_rows(path: str | os.PathLike[str], text: Iterable[str] = ()) -> pa.Table:
    """The table of a ``.csv`` file, else of JSON lines (``.gz`` too).

    A CSV's ``text`` columns (keys, file paths) are read as written, as
    strings: pyarrow infers each column's type, and names that look like
    numbers (``001``, a file without an extension) became other names
    (``1``), another episode or no file at all. JSON says what is a string."""
    path = os.fspath(path)
    with pa.input_stream(path, compression="detect") as stream:
        if not path.lower().removesuffix(".gz").endswith(".csv"):
            return pa.json.read_json(stream)
        as_text = pa.csv.ConvertOptions(column_types=dict.fromkeys(text, pa.string()))
        return pa.csv.read_csv(stream, convert_options=as_text)
