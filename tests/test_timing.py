"""The phase profiler: off by default, per-process files, survives kills, merged reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from streamer import timing
from streamer.cli import main

SCRIPT = textwrap.dedent(
    """
    import multiprocessing, sys, time
    from streamer.timing import record

    def child():
        with record("child_work"):
            time.sleep(0.01)

    if __name__ == "__main__":
        for _ in range(3):
            with record("work"):
                time.sleep(0.01)
        with record("other"):
            pass
        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join()
        if sys.argv[1] == "hang":
            print("ready", flush=True)
            while True:
                with record("spin"):
                    time.sleep(0.01)
    """
)


def _run(tmp_path: Path, mode: str, **env: str) -> subprocess.Popen:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    environment = {**os.environ, "STREAMER_TIMING_OUT": str(tmp_path / "t"), **env}
    return subprocess.Popen(
        [sys.executable, str(script), mode], env=environment, stdout=subprocess.PIPE, text=True
    )


def _files(tmp_path: Path) -> list[Path]:
    return sorted(p for p in tmp_path.glob("t.*") if not p.name.endswith(".tmp"))


def test_disabled_record_is_one_shared_no_op(monkeypatch) -> None:
    monkeypatch.setattr(timing, "_enabled", False)
    assert timing.record("a") is timing.record("b")
    with timing.record("a"):
        pass
    assert "a" not in timing.snapshot()["phases"]


def test_nothing_is_written_unless_enabled(tmp_path: Path) -> None:
    process = _run(tmp_path, "exit")
    assert process.wait(timeout=60) == 0
    assert _files(tmp_path) == []


def test_each_process_writes_its_own_file_at_exit(tmp_path: Path) -> None:
    process = _run(tmp_path, "exit", STREAMER_TIMING="1")
    assert process.wait(timeout=60) == 0
    files = _files(tmp_path)
    assert len(files) == 2  # the script and its forked child
    figures = [json.loads(p.read_text()) for p in files]
    parent = next(f for f in figures if f["pid"] == process.pid)
    child = next(f for f in figures if f["pid"] != process.pid)
    count, total, peak = parent["phases"]["work"]
    assert count == 3 and total >= 0.03 and 0.01 <= peak <= total
    assert parent["phases"]["other"][0] == 1
    assert set(child["phases"]) == {"child_work"}  # the fork starts from zero


def test_figures_survive_a_killed_process(tmp_path: Path) -> None:
    process = _run(tmp_path, "hang", STREAMER_TIMING="1", STREAMER_TIMING_INTERVAL="0.05")
    assert process.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    parent = json.loads(Path(f"{tmp_path / 't'}.{process.pid}").read_text())
    assert parent["phases"]["work"][0] == 3
    assert parent["phases"]["spin"][0] >= 5


def test_report_merges_files_sorted_by_total(tmp_path: Path, capsys) -> None:
    for pid, phases in (
        (1, {"decode": [10, 2.0, 0.5], "fetch": [4, 0.5, 0.2]}),
        (2, {"decode": [5, 1.0, 0.7]}),
    ):
        figures = {"pid": pid, "started": 0, "wall_s": 4.0, "phases": phases}
        (tmp_path / f"t.{pid}").write_text(json.dumps(figures))
    png = tmp_path / "chart.png"
    files = [str(tmp_path / "t.1"), str(tmp_path / "t.2")]
    assert main(["timing", "report", *files, "--png", str(png)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2 process(es), 8.00 s of wall time in all"
    decode, fetch = lines[2].split(), lines[3].split()
    assert decode == ["decode", "15", "3.000", "200.000", "700.00", "37.5%"]
    assert fetch[0] == "fetch" and fetch[-1] == "6.2%"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("enabled", [False, True])
def test_record_returns_a_context_manager(monkeypatch, tmp_path: Path, enabled: bool) -> None:
    monkeypatch.setattr(timing, "_enabled", enabled)
    monkeypatch.setattr(timing, "_out", str(tmp_path / "t"))
    with timing.record("x") as phase:
        assert phase is not None
