"""The command as scripts and CI jobs run it: output into a file or a pipe
(no progress-bar junk, one JSON document for ``--json``), a reader that
stops early (``| head -1``), ``streamer help CMD``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streamer.cli import main


def _streamer(*argv: str, **kwargs) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    """The real command in a child process, stdout and stderr into pipes (not a terminal)."""
    if "stdout" not in kwargs:
        kwargs.setdefault("capture_output", True)
    return subprocess.run(
        [sys.executable, "-m", "streamer", *argv], text=True, timeout=300, **kwargs
    )


def test_no_progress_bar_when_stderr_is_not_a_terminal(packed: Path, tmp_path: Path) -> None:
    """A CI log got every tqdm refresh, joined by carriage returns; a script
    reading stderr line by line saw one long line of bars."""
    dataset = tmp_path / "ds"
    shutil.copytree(packed, dataset)
    done = _streamer("index", str(dataset), "--force", "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "index:" not in done.stderr, done.stderr
    assert done.stdout.startswith("indexed ")


def test_a_reader_that_stops_early_is_not_an_error(packed: Path) -> None:
    """``streamer inspect DS | head -1``: the closed pipe printed
    "streamer inspect: error: Broken pipe" and exited 1, failing the script."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write fails
    try:
        done = _streamer("inspect", str(packed), stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141  # as a command killed by SIGPIPE: `set -o pipefail` sees it


def test_help_command(capsys: pytest.CaptureFixture) -> None:
    """`streamer help crop` was "invalid choice: 'help'" (exit 2)."""
    assert main(["help", "crop"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: streamer crop ") and "--sample-rate" in out
    assert main(["help"]) == 0
    assert capsys.readouterr().out.startswith("usage: streamer ")
    assert main(["help", "timing", "report"]) == 0
    assert capsys.readouterr().out.startswith("usage: streamer timing report ")
    with pytest.raises(SystemExit) as exit:
        main(["help", "nosuch"])
    assert exit.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


def test_help_in_a_child_process() -> None:
    done = _streamer("help", "bench")
    assert done.returncode == 0 and done.stdout.startswith("usage: streamer bench"), done.stderr


def test_inspect_json_is_one_document(packed: Path) -> None:
    """`streamer inspect URL --json | python -c 'import json,sys; json.load(sys.stdin)'`."""
    done = _streamer("inspect", str(packed), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rows"] == 7 and report["manifest"] == "ok"
    assert report["columns"]["audio"] == {"__key__": "string", "audio": "large_binary"}
    assert report["indexes"] == {"verified": 7}
    assert report["codecs"]["flac"] == 1 and round(report["hours"], 2) == 0.01
    assert report["skipped_shards"] == {} and report["no_index"] == {}


def _one_file_folder(folder: Path, audio_dir: Path, name: bytes) -> Path:
    """``folder`` holding one flac of ``audio_dir`` under the raw file name ``name``."""
    folder.mkdir()
    flac = next(audio_dir.rglob("*.flac"))
    with open(os.path.join(os.fsencode(folder), name), "wb") as out:
        out.write(flac.read_bytes())
    return folder


def test_a_file_name_that_is_not_utf8(audio_dir: Path, tmp_path: Path) -> None:
    """A file named in Latin-1 (``caf\\xe9.flac``) failed the whole pack with
    "UnicodeEncodeError: 'utf-8' codec can't encode character '\\udce9'".
    Its key spells the bytes out (``caf\\xe9``), and that is what a crop asks
    for, typed or passed as the raw bytes."""
    src = _one_file_folder(tmp_path / "src", audio_dir, b"caf\xe9.flac")
    out = tmp_path / "ds"
    done = _streamer("pack", str(src), str(out))
    assert done.returncode == 0, done.stderr
    assert "packed 1 files" in done.stdout
    from streamer import open_dataset

    assert list(open_dataset(out).keys()) == ["caf\\xe9"]
    for key in (b"caf\\xe9", b"caf\xe9"):
        argv = [sys.executable, "-m", "streamer", "crop", str(out), key, "0", "1"]
        crop = subprocess.run([*argv, "-o", str(tmp_path / "c.npy")], capture_output=True)
        assert crop.returncode == 0, crop.stderr


def test_an_ascii_locale(audio_dir: Path, tmp_path: Path) -> None:
    """Under ``LC_ALL=C`` without Python's UTF-8 mode (stdout ASCII, file
    names decoded as ASCII): packing ``ünï/café.flac`` failed ("surrogates
    not allowed"), and a crop of key ``ünï/café`` said there is no such key."""
    src = tmp_path / "src"
    (src / "ünï").mkdir(parents=True)
    shutil.copy(next(audio_dir.rglob("*.flac")), src / "ünï" / "café.flac")
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    env.pop("PYTHONIOENCODING", None)
    out = tmp_path / "dé ta"
    done = _streamer("pack", str(src), str(tmp_path / "ds"), env=env)
    assert done.returncode == 0, done.stderr
    (tmp_path / "ds").rename(out)  # writing into such a folder is not fixed yet (pyarrow)
    done = _streamer("inspect", str(out), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dataset"].endswith("ta")
    done = _streamer("crop", str(out), "ünï/café", "0", "1", "-o", str(out / "c é.wav"), env=env)
    assert done.returncode == 0, done.stderr
    assert "c \\xe9.wav" in done.stdout or "c é.wav" in done.stdout


@pytest.mark.slow  # 13 s; the interrupted index and pack tests stay in the default run
def test_sigterm_mid_demo_build_leaves_no_staging_folder(tmp_path: Path) -> None:
    """A job runner's SIGTERM killed `streamer demo` on the spot: its staging
    folder (`.demo-*`, the half-made sources) stayed in the cache directory,
    one more per stopped run. Every command unwinds on SIGTERM as on Ctrl-C."""
    import signal
    import time

    cache = tmp_path / "cache"
    process = subprocess.Popen(
        [sys.executable, "-m", "streamer", "demo", "--cache-dir", str(cache)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(cache.glob(".demo-*/src/*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert err.strip().splitlines() == ["streamer demo: interrupted"], err
    assert list(cache.iterdir()) == []


def _json(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)  # exactly one document: nothing else on stdout


@pytest.mark.slow  # 10 s (local), more over S3
@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_pipeline_script_run_twice(
    where: str, audio_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """pack -> index -> inspect --json -> bench --json -> warmup -> crop, each
    step run twice as a retried CI job would, from a read-only working
    directory with a space in every path: the second pack and index add
    nothing and say what they left."""
    from conftest import SECRET

    cwd = tmp_path / "read only"
    cwd.mkdir()
    cwd.chmod(0o555)
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}
    if where == "s3":
        moto_endpoint = request.getfixturevalue("moto_endpoint")
        url = f"s3://{request.getfixturevalue('s3_uploaded')}/pipe line-{os.getpid()}"
        env.update(
            AWS_ACCESS_KEY_ID="test-key-id",
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=moto_endpoint,
        )
        cache = ["--cache-dir", str(tmp_path / "block cache")]
    else:
        url, cache = str(tmp_path / "data set"), []
    run = {"env": env, "cwd": cwd}
    for attempt in range(2):
        done = _streamer("pack", str(audio_dir), url, "--no-index", **run)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("packed 0 files" if attempt else "packed 7 files")
        if attempt:
            assert "already complete" in done.stdout
        done = _streamer("index", url, "--workers", "1", **run)
        assert done.returncode == 0, done.stderr
        assert ("1 already indexed" in done.stdout) or not attempt
        report = _json(_streamer("inspect", url, "--json", **run))
        assert report["rows"] == 7 and report["indexes"] == {"verified": 7}, report
        argv = ["--crops", "4", "--duration", "0.5", "--workers", "0", *cache]
        bench = _json(_streamer("bench", url, "--json", *argv, **run))
        assert bench["yielded"] == 4, bench
        if cache:
            done = _streamer("warmup", url, *argv[:4], *cache, **run)
            assert done.returncode == 0 and done.stdout.startswith("warmed 4 crops"), done.stderr
        out = tmp_path / f"crop {attempt}.npy"
        done = _streamer("crop", url, "set1/flac", "0.5", "1", "-o", str(out), **run)
        assert done.returncode == 0 and out.exists(), done.stderr


@pytest.mark.parametrize("suffix", [".npy", ".wav"])
def test_a_crop_that_cannot_be_written_leaves_the_old_file(
    packed: Path, tmp_path: Path, suffix: str
) -> None:
    """A write that failed half way (disk full, a file size limit) left a
    truncated crop at -o, in place of the good one a previous run had
    written: a `make`-style script that tests for the file took it as done."""
    import resource
    import signal

    out = tmp_path / f"crop{suffix}"
    argv = ["crop", str(packed), "set1/flac", "0", "0.25", "-o", str(out)]
    assert _streamer(*argv).returncode == 0
    before = out.read_bytes()

    def limited() -> None:  # writes past 64 KiB fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))

    argv[3:5] = ["0", "2.5"]  # ~0.9 MB of float32: more than the limit
    done = _streamer(*argv, preexec_fn=limited)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("streamer crop: error: cannot write the crop ("), done.stderr
    assert done.stderr.rstrip().endswith(f"): {out}"), done.stderr
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
