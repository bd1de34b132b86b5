"""Every script in examples/ runs (on the small packed fixture dataset, not the
demo's: same code paths, a fraction of the time). The docs quote them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(script: str, *args: str, launcher: tuple[str, ...] = ()) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), *sys.path])}
    done = subprocess.run(
        [sys.executable, *launcher, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_example_has_a_test() -> None:
    tested = {"read_crops.py", "stream_crops.py", "pack_folder.py", "torch_loader.py"}
    tested |= {"torch_ddp.py"}
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


def torchrun(nproc: int, *args: str) -> str:
    """``examples/torch_ddp.py`` under ``torchrun --nproc_per_node=nproc`` (gloo)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    launcher = ("-m", "torch.distributed.run", f"--nproc_per_node={nproc}")
    launcher += ("--master_addr=127.0.0.1", f"--master_port={port}")
    return run("torch_ddp.py", *args, launcher=launcher)


#: The transcript of every 3-second fixture file, as the sidecar gives it.
SEGMENTS = [{"start": 0.0, "end": 1.5, "text": "one"}, {"start": 1.5, "end": 3.0, "text": "two"}]


def labelled(audio_dir: Path, out: Path) -> Path:
    """The fixture files packed with a sidecar: a speaker and a transcript each."""
    sidecar = out.parent / "labels.jsonl"
    files = sorted(p.relative_to(audio_dir).as_posix() for p in audio_dir.rglob("*.*"))
    rows = [{"path": f, "speaker": f"spk-{Path(f).stem}", "transcript": SEGMENTS} for f in files]
    sidecar.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = [str(audio_dir), str(out), "--batch-size", "2", "--shard-size", "600000"]
    subprocess.run(
        [sys.executable, "-m", "streamer.cli", "pack", *args, "--columns", str(sidecar)],
        check=True,
        capture_output=True,
    )
    return out


def consumed(log: Path, nproc: int) -> dict[int, list[tuple[int, list[str]]]]:
    """Each rank's batches from ``--consumed-log``: (epoch, crops) in order;
    every batch's labels and supervisions checked against its crops."""
    out = {}
    for rank in range(nproc):
        lines = (log.parent / f"{log.name}.{rank}-of-{nproc}").read_text().splitlines()
        batches = [json.loads(line) for line in lines]
        for b in batches:
            assert b["labels"] == [f"spk-{key.split('/')[1]}" for key in b["crops"]]
            assert b["texts"] == [
                [seg["text"] for seg in SEGMENTS if seg["start"] < s + 0.5 and seg["end"] > s]
                for s in b["start"]
            ]
        out[rank] = [
            (b["epoch"], [f"{k}@{s:.4f}" for k, s in zip(b["crops"], b["start"], strict=True)])
            for b in batches
        ]
    return out


def test_torch_ddp_resumes_three_times_and_elastically(audio_dir: Path, tmp_path: Path) -> None:
    """49 crops an epoch over 2 ranks (24 each, one left out: no rank waits
    for another), batches of 4. Stops after 2, 2 and 3 steps, the third
    run on one process: the first two resumes continue each rank's batches
    exactly; over the epoch no crop is taken twice and all but one are
    taken; the last run's next epoch is the uninterrupted run's, and
    differs from epoch 0 with persistent workers. Every batch carries each
    crop's speaker and the transcript segments that overlap it."""
    pytest.importorskip("torch")
    packed = labelled(audio_dir, tmp_path / "labelled")
    whole = consumed_after(packed, tmp_path / "whole", [(2, None)])
    assert [len(whole[r]) for r in (0, 1)] == [12, 12]  # 6 batches x 2 epochs, each rank
    resumed = consumed_after(packed, tmp_path / "resumed", [(2, 2), (2, 2), (1, 3), (2, None)])
    assert [run[rank] for run in resumed[:2] for rank in (0, 1)] == [
        whole[0][:2],
        whole[1][:2],
        whole[0][2:4],
        whole[1][2:4],
    ]
    epoch0 = [
        crop
        for run in resumed
        for batches in run.values()
        for epoch, crops in batches
        if epoch == 0
        for crop in crops
    ]
    whole0 = {c for r in (0, 1) for epoch, crops in whole[r] if epoch == 0 for c in crops}
    assert len(epoch0) == len(set(epoch0)) == 48  # nothing twice, one of 49 left out
    assert len(set(epoch0) | whole0) <= 49  # all from epoch 0's 49 crops
    for rank in (0, 1):
        epoch1 = [b for b in whole[rank] if b[0] == 1]
        assert [b for b in resumed[-1][rank] if b[0] == 1] == epoch1
        assert {c for _, crops in epoch1 for c in crops}.isdisjoint(whole0)


def consumed_after(packed: Path, folder: Path, runs: list[tuple[int, int | None]]):  # type: ignore[no-untyped-def]
    """Run the example ``runs`` times ((nproc, stop after steps) each) on one
    checkpoint; each run's consumed batches by rank."""
    folder.mkdir()
    out = []
    for number, (nproc, stop) in enumerate(runs):
        log = folder / f"run{number}"
        args = [str(packed), str(folder / "checkpoint.pt"), "--consumed-log", str(log)]
        args += ["--label", "speaker", "--supervisions", "transcript"]
        torchrun(nproc, *args, *(["--stop-after", str(stop)] if stop else []))
        out.append(consumed(log, nproc))
    return out if len(runs) > 1 else out[0]


def test_the_docs_quote_the_ddp_example() -> None:
    """docs/pipeline.md shows the DDP script as the test above runs it."""
    docs = (EXAMPLES.parent / "docs" / "pipeline.md").read_text()
    after = docs[docs.index("A complete DDP script") :]
    body = after[after.index("```python\n") + 10 :]
    quoted = body[: body.index("\n```")]
    assert len(quoted.splitlines()) > 40
    assert quoted in (EXAMPLES / "torch_ddp.py").read_text()
