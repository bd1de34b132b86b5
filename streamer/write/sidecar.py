"""Extra columns for a packed dataset from a sidecar file (CSV or JSON lines).

The sidecar has a ``path`` column: each source file's path relative to the
packed folder (``a/b.mp3``), as ``audio_info``'s ``source`` records it.
Every other column becomes a field of a new column directory with the
audio's shards, rows and keys, which ``Streamer(columns=...)`` joins to the
crops. pyarrow reads the sidecar and infers the types (numbers stay
numbers, JSON lists and objects become Arrow lists and structs); a file the
sidecar does not list gets nulls, and sidecar rows that match no packed
file are reported.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from ..dataset.dataset import INFO_DIR
from ..dataset.tables import read_rows
from ..errors import PackError
from ..shard.ipc import KEY_COLUMN

__all__ = ["PATH_COLUMN", "read_sidecar", "write_columns"]

#: The sidecar column naming each row's source file.
PATH_COLUMN = "path"


def read_sidecar(path: str | os.PathLike[str]) -> pa.Table:
    """The sidecar's table (``.csv``, else JSON lines), with a unique ``path``
    column. A CSV's paths are read as text, as written: inferred, the names of
    files without an extension (``001``) became numbers (``1``) and matched no file."""
    path = os.fspath(path)
    try:
        table = read_rows(path, text=[PATH_COLUMN])
    except (OSError, pa.ArrowInvalid) as exc:
        raise PackError(f"cannot read the sidecar {path!r}: {exc}") from None
    if PATH_COLUMN not in table.column_names:
        raise PackError(f"the sidecar {path!r} has no {PATH_COLUMN!r} column")
    if KEY_COLUMN in table.column_names:
        raise PackError(f"the sidecar {path!r} has a {KEY_COLUMN!r} column; keys come from pack")
    paths = table.column(PATH_COLUMN).cast(pa.string()).to_pylist()
    seen: set[str] = set()
    for row, name in enumerate(paths):
        if name is None:
            raise PackError(f"the sidecar {path!r} has no {PATH_COLUMN!r} in row {row}")
        if name in seen:
            raise PackError(f"the sidecar {path!r} lists {name!r} twice (row {row})")
        seen.add(name)
    return table


def write_columns(
    out: str, shards: list[str], sidecar: pa.Table, column_dir: str, suffix: str
) -> list[str]:
    """Write ``column_dir/`` for the packed ``shards`` from ``sidecar``; returns
    the sidecar paths that match no packed file."""
    if os.path.exists(os.path.join(out, column_dir)):
        raise PackError(f"{out!r} already has a {column_dir!r} column directory")
    os.mkdir(os.path.join(out, column_dir))
    paths = sidecar.column(PATH_COLUMN).cast(pa.string()).to_pylist()
    row_of = {p.replace(os.sep, "/"): row for row, p in enumerate(paths)}
    fields = sidecar.drop_columns([PATH_COLUMN])
    used = np.zeros(len(paths), dtype=bool)
    for name in shards:
        info = pa.ipc.open_file(os.path.join(out, INFO_DIR, name + suffix)).read_all()
        rows = [row_of.get(source) for source in info.column("source").to_pylist()]
        used[[r for r in rows if r is not None]] = True
        table = fields.take(pa.array(rows, pa.int64()))  # a null row is a row of nulls
        table = table.add_column(0, KEY_COLUMN, info.column(KEY_COLUMN))
        final = os.path.join(out, column_dir, name + suffix)
        temp = os.path.join(out, column_dir, f".{name}{suffix}.partial")
        with pa.ipc.new_file(temp, table.schema) as writer:
            writer.write_table(table)
        os.replace(temp, final)
    return [p for p, u in zip(paths, used, strict=True) if not u]
