"""Every script in examples/ runs (on the small packed fixture dataset, not the
demo's: same code paths, a fraction of the time). The docs quote them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_example_has_a_test() -> None:
    tested = {"read_crops.py", "stream_crops.py", "pack_folder.py", "torch_loader.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_read_crops(packed: Path) -> None:
    out = run("read_crops.py", str(packed))
    assert "7 episodes" in out and "16 kHz mono: (1, 24000)" in out


def test_stream_crops(packed: Path) -> None:
    out = run("stream_crops.py", str(packed), "5")
    assert len(out.splitlines()) == 5 and "(1, 16000)" in out


def test_pack_folder(audio_dir: Path, tmp_path: Path) -> None:
    out = run("pack_folder.py", str(audio_dir), str(tmp_path / "ds"))
    assert "packed 7 files into 1 shards; skipped []" in out


def test_torch_loader(packed: Path) -> None:
    pytest.importorskip("torch")
    out = run("torch_loader.py", str(packed))
    assert "(4, 1, 16000)" in out
