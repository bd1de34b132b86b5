"""``audio_info`` shards that do not share one schema: one written later
with an extra column, or an integer column of another width. The table of
every episode's info (``inspect``, ``Dataset.info_table``) failed with
pyarrow's bare "Schema at index 1 was different" naming no shard, while
crops worked; columns that can be one now are, and those that cannot name
the shard."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from helpers import write_audio

from streamer import open_dataset
from streamer.cli import main
from streamer.errors import ShardError
from streamer.write.pack import pack


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    for key in ("a", "b", "c"):
        write_audio(tmp_path / "src", key, "flac", 16000, 1, 1.0, seed=ord(key))
    pack(tmp_path / "src", tmp_path / "ds", progress=False, shard_size=1, batch_size=1)
    return tmp_path / "ds"


def _rewrite_info(root: Path, change) -> Path:  # type: ignore[no-untyped-def]
    """The last ``audio_info`` shard again, its table passed through ``change``."""
    path = sorted((root / "audio_info").iterdir())[-1]
    with pa.memory_map(str(path)) as source:
        table = ipc.open_file(source).read_all()
    table = change(table)
    fresh = path.with_suffix(".new")  # the table still maps the old file
    with pa.OSFile(str(fresh), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    fresh.replace(path)
    (root / "streamer-manifest.json").unlink(missing_ok=True)
    return path


def test_an_extra_column_and_wider_integers_make_one_table(dataset: Path) -> None:
    def change(table: pa.Table) -> pa.Table:
        table = table.append_column("language", pa.array(["en"] * table.num_rows))
        column = table.schema.get_field_index("channels")
        return table.set_column(column, "channels", table["channels"].cast(pa.int64()))

    _rewrite_info(dataset, change)
    info = open_dataset(dataset).info_table()
    assert info.num_rows == 3
    assert info["language"].null_count == 2 and info["channels"].to_pylist() == [1, 1, 1]


def test_columns_that_cannot_be_one_name_the_shard(
    dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def change(table: pa.Table) -> pa.Table:
        column = table.schema.get_field_index("channels")
        return table.set_column(column, "channels", table["channels"].cast(pa.string()))

    path = _rewrite_info(dataset, change)
    with pytest.raises(ShardError, match="channels") as raised:
        open_dataset(dataset).info_table()
    assert raised.value.shard is not None and raised.value.shard.endswith(path.name)
    assert main(["inspect", str(dataset)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and path.name in err[0] and "channels" in err[0]
