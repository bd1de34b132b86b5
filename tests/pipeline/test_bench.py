"""``streamer bench``: interleaved rounds, the median run, rates relative to the first source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamer.cli import main


def test_bench_rounds_report_the_median_of_interleaved_runs(packed: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    argv = ["bench", str(packed), str(packed), "--duration", "0.5", "--crops", "6"]
    assert main([*argv, "--workers", "0", "1", "--rounds", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["rounds"] == 3 and len(result["runs"]) == 4
    for run in result["runs"]:
        rates = run["rounds_crops_per_s"]
        assert len(rates) == 3 and run["crops_per_s"] == sorted(rates)[1]
        assert run["yielded"] == 6
    first = {run["workers"]: run["crops_per_s"] for run in result["runs"][:2]}
    for run in result["runs"]:
        assert run["relative"] == pytest.approx(run["crops_per_s"] / first[run["workers"]])
    with pytest.raises(SystemExit):
        main([*argv, "--rounds", "0"])
    assert "--rounds: must be at least 1, not 0" in capsys.readouterr().err
