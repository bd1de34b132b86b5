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
        # The first crop comes after some time, and before the pass's end.
        assert 0 < run["first_crop_ms"] <= 1000 * 6 / run["crops_per_s"]
    first = {run["workers"]: run["crops_per_s"] for run in result["runs"][:2]}
    for run in result["runs"]:
        assert run["relative"] == pytest.approx(run["crops_per_s"] / first[run["workers"]])
    with pytest.raises(SystemExit):
        main([*argv, "--rounds", "0"])
    assert "--rounds: must be at least 1, not 0" in capsys.readouterr().err


def test_bench_reports_the_pure_decode_of_the_same_crops_as_its_limit(
    packed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every run carries the limit (the pure decode's CPU per crop, measured
    in the same run) and its CPU per crop over it; parent and workers add up
    to that CPU; ``--no-limit`` leaves the limit out."""
    argv = ["bench", str(packed), "--duration", "0.5", "--crops", "8", "--workers", "0", "1"]
    assert main([*argv, "--sample-rate", "16000", "--mono", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["mono"] and result["config"]["sample_rate"] == 16000
    for run in result["runs"]:
        assert run["yielded"] == 8 and run["limit_failed"] == {}
        assert run["limit_ms_per_crop"] > 0
        assert run["cpu_over_limit"] == pytest.approx(
            run["cpu_ms_per_crop"] / run["limit_ms_per_crop"]
        )
        assert run["cpu_ms_per_crop"] == pytest.approx(
            run["parent_cpu_ms_per_crop"] + run["worker_cpu_ms_per_crop"]
        )
    zero, one = result["runs"]
    assert zero["worker_cpu_ms_per_crop"] == 0  # workers=0: everything in the parent
    assert one["worker_cpu_ms_per_crop"] > 0
    assert main([*argv, "--no-limit"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split()[6:9] == ["parent", "limit", "/limit"]
    assert all(row.split()[6:8] == ["-", "-"] for row in printed[1:3])


def test_bench_of_episodes_shorter_than_the_crops_says_so(packed: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The fixture's episodes are 3 s and bench's crops 8 s by default: no
    crop fits. One error line naming the dataset and the longest episode
    (the table's printing failed on the missing ``relative``, a TypeError)."""
    assert main(["bench", str(packed), "--crops", "2", "--workers", "0", "--no-limit"]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamer bench: error: "), captured.err
    assert str(packed) in lines[0] and "no episode is 8 s long (the longest is 3.0" in lines[0]
    assert captured.out == ""
