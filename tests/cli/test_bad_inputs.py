"""Every subcommand against bad inputs: one line on stderr naming what was
wrong, exit code 2 for a bad command line and 1 for a failure, no traceback
(issue 17). The table is ``BAD_INPUTS``: (argv, message, exit code); ``DS``
stands for a packed dataset, ``TMP`` for a fresh folder, ``JUNK`` for a
folder holding only a file of random bytes named .mp3."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamer.cli import main
from streamer.cli._options import add_url_arguments

CROP = ["crop", "DS", "set1/flac"]
NO_DIR = "dataset directory does not exist or cannot be listed: cannot list /nonexistent: No such"
BAD_INPUTS: list[tuple[list[str], str, int]] = [
    ([], "the following arguments are required: COMMAND", 2),
    (["nosuch"], "argument COMMAND: invalid choice: 'nosuch'", 2),
    (["crop", "DS"], "the following arguments are required: KEY, START, END, -o/--output", 2),
    (
        [*CROP, "-5", "2", "-o", "TMP/c.npy"],
        "argument START: must be a finite number of seconds >= 0, not -5",
        2,
    ),
    ([*CROP, "20", "10", "-o", "TMP/c.npy"], "END must be after START (20 .. 10)", 2),
    ([*CROP, "10", "10", "-o", "TMP/c.npy"], "END must be after START (10 .. 10)", 2),
    (
        [*CROP, "nan", "2", "-o", "TMP/c.npy"],
        "argument START: must be a finite number of seconds >= 0, not nan",
        2,
    ),
    (
        [*CROP, "1", "inf", "-o", "TMP/c.npy"],
        "argument END: must be a finite number of seconds >= 0, not inf",
        2,
    ),
    ([*CROP, "one", "2", "-o", "TMP/c.npy"], "argument START: must be a number, not 'one'", 2),
    ([*CROP, "0", "1", "-o", "TMP/c.mp3"], "-o must end in .npy or .wav, not 'TMP/c.mp3'", 2),
    (
        [*CROP, "0", "1", "--sample-rate", "0", "-o", "TMP/c.npy"],
        "argument --sample-rate: must be at least 1, not 0",
        2,
    ),
    (
        [*CROP, "0", "1", "--sample-rate", "1000000000", "-o", "TMP/c.wav"],
        "argument --sample-rate: must be 1000 to 768000 Hz, not 1000000000",
        2,
    ),
    (
        [*CROP, "0", "1", "--sample-rate", "999", "-o", "TMP/c.wav"],
        "argument --sample-rate: must be 1000 to 768000 Hz, not 999",
        2,
    ),
    (
        ["bench", "DS", "--sample-rate", "2000000"],
        "argument --sample-rate: must be 1000 to 768000 Hz, not 2000000",
        2,
    ),
    (
        [*CROP, "0", "1000000", "--pad", "-o", "TMP/c.wav"],
        "a WAV file holds at most 4 GiB of 16-bit samples; this crop is ",
        2,
    ),
    ([*CROP, "0", "1e308", "-o", "TMP/c.npy"], "END 1e+308 is past any audio (at most 1e+07 s)", 2),
    (
        [*CROP, "3", "9000000", "--pad", "-o", "TMP/c.npy"],
        "this crop needs ",  # ... GiB of memory, more than this machine's
        2,
    ),
    (
        ["inspect", "s3://bucket/prefix", "--endpoint-url", "not a url"],
        "argument --endpoint-url: must be an http:// or https:// URL naming a host, not 'not a",
        2,
    ),
    (
        ["bench", "s3://bucket/prefix", "--endpoint-url", "s3.example.com"],
        "argument --endpoint-url: must be an http:// or https:// URL naming a host, not 's3.exam",
        2,
    ),
    (
        ["inspect", "s3://bucket/prefix", "--endpoint-url", "http://user:sekrit@:99"],
        "argument --endpoint-url: must be an http:// or https:// URL naming a host, not 'http://",
        2,
    ),
    (
        [*CROP, "0", "1", "--endpoint-url", "http://x", "-o", "TMP/c.npy"],
        "--endpoint-url applies to remote URLs (s3://, b2://, http://...), not 'DS'",
        2,
    ),
    ([*CROP, "0", "1", "-o", "TMP/missing/c.npy"], "no such directory: TMP/missing", 1),
    (["crop", "DS", "nope", "0", "1", "-o", "TMP/c.npy"], "no episode with key 'nope' in DS", 1),
    (
        ["crop", "/nonexistent", "k", "0", "1", "-o", "TMP/c.npy"],
        NO_DIR,
        1,
    ),
    (
        ["pack", "DS", "TMP/out", "--shard-size", "12Q"],
        "argument --shard-size: must be a size such as 500G or 2T, not '12Q'",
        2,
    ),
    (
        ["pack", "DS", "TMP/out", "--shard-size", "0"],
        "argument --shard-size: must be a size such as 500G or 2T, not '0'",
        2,
    ),
    (
        ["pack", "DS", "TMP/out", "--batch-size", "0"],
        "argument --batch-size: must be at least 1, not 0",
        2,
    ),
    (["pack", "/nonexistent", "TMP/out"], "source folder '/nonexistent' does not exist", 1),
    (["pack", "TMP", "TMP/out"], "source folder 'TMP' holds no files: nothing to pack", 1),
    (
        ["pack", "JUNK", "TMP/out", "--no-progress"],
        "none of the 1 files under 'JUNK' is audio (e.g. noise.mp3: not audio",
        1,
    ),
    (["pack", "JUNK", "/proc/out", "--no-progress"], "cannot create '/proc/out'", 1),
    (
        ["pack", "JUNK", "http://127.0.0.1:1/out", "--no-progress"],
        "http://127.0.0.1:1/out: HTTP stores are read-only (pack into a local or S3 OUT;",
        2,
    ),
    (
        ["pack", "JUNK", "DS"],
        "'DS' already holds a dataset (audio/shard-000000.wsds); pick a new OUT",
        1,
    ),
    (["pack", "JUNK", "JUNK"], "OUT 'JUNK' is SRC: pick another OUT (a new folder,", 2),
    (["pack", "JUNK", "file://JUNK/"], "OUT 'file://JUNK/' is SRC: pick another OUT", 2),
    (
        ["index", "DS", "--density", "0"],
        "argument --density: must be above 0 (or inf: every frame), not 0",
        2,
    ),
    (
        ["index", "DS", "--density", "nan"],
        "argument --density: must be above 0 (or inf: every frame), not nan",
        2,
    ),
    (
        ["index", "DS", "--density", "-1"],
        "argument --density: must be above 0 (or inf: every frame), not -1",
        2,
    ),
    (["index", "DS", "--workers", "0"], "argument --workers: must be at least 1, not 0", 2),
    (
        ["index", "DS", "--workers", "1000000000"],
        "argument --workers: must be at most MAXW (4 processes per CPU), not 1000000000",
        2,
    ),
    (
        ["index", "DS", "--endpoint-url", "http://x"],
        "--endpoint-url applies to remote URLs (s3://, b2://, http://...), not 'DS'",
        2,
    ),
    (
        ["index", "DS", "--shards", "5/2"],
        "argument --shards: '5/2': expected i/n with 0 <= i < n",
        2,
    ),
    (["index", "DS", "--shards", "a,b"], "--shards: no such shards: a, b", 1),
    (
        ["index", "DS", "--shards", ","],
        "argument --shards: ',': expected i/n or a comma list of shard names",
        2,
    ),
    (
        ["index", "DS", "--shards", ""],
        "argument --shards: '': expected i/n or a comma list of shard names",
        2,
    ),
    (
        ["index", "/nonexistent"],
        NO_DIR,
        1,
    ),
    (
        ["inspect", "/nonexistent"],
        NO_DIR,
        1,
    ),
    (["inspect", "TMP"], "TMP: no column directories holding .wsds/.arrow shards", 1),
    (
        ["inspect", "http://user:sekrit-0xC0FFEE@[::1/ds?token=sekrit-0xC0FFEE"],
        "http://[::1/ds: not a valid URL (Invalid IPv6 URL)",
        1,
    ),
    (
        ["inspect", "http://u%3Asekrit-0xC0FFEE@127.0.0.1:1/ds"],
        "http://127.0.0.1:1/ds: not a valid URL (its user name holds a ':'",
        1,
    ),
    (
        ["inspect", "http://user:sekrit-0xC0FFEE@127.0.0.1:99999/ds"],
        "http://127.0.0.1:99999/ds: not a valid URL (Port out of range 0-65535)",
        1,
    ),
    (
        ["inspect", "DS", "--endpoint-url", "http://x"],
        "--endpoint-url applies to remote URLs (s3://, b2://, http://...), not 'DS'",
        2,
    ),
    (["bench", "DS", "--crops", "0"], "argument --crops: must be at least 1, not 0", 2),
    (
        ["bench", "DS", "--duration", "-1"],
        "argument --duration: must be a finite number of seconds > 0, not -1",
        2,
    ),
    (["bench", "DS", "--workers", "-1"], "argument --workers: must be 0 or more, not -1", 2),
    (["bench", "DS", "--rounds", "0"], "argument --rounds: must be at least 1, not 0", 2),
    (
        ["bench", "DS", "--crops", "1000000000000"],
        "argument --crops: must be 1 to 10000000 (every crop is planned up front), "
        "not 1000000000000",
        2,
    ),
    (
        ["bench", "DS", "--rounds", "1000000000"],
        "argument --rounds: must be 1 to 1000 (each round runs every configuration), "
        "not 1000000000",
        2,
    ),
    (
        ["bench", "DS", "--duration", "1e-300"],
        "argument --duration: must be at least 0.001 (seconds: a shorter crop is next to no "
        "audio), not 1e-300",
        2,
    ),
    (
        ["warmup", "DS", "--cache-dir", "TMP", "--crops", "100000000"],
        "argument --crops: must be 1 to 10000000",
        2,
    ),
    (["demo", "--crops", "1000000000000"], "argument --crops: must be 1 to 10000000", 2),
    (["demo", "--duration", "0.0000001"], "argument --duration: must be at least 0.001", 2),
    (
        ["bench", "DS", "--workers", "2", "1000000000"],
        "argument --workers: must be at most MAXW (4 processes per CPU), not 1000000000",
        2,
    ),
    (
        ["demo", "--workers", "100000"],
        "argument --workers: must be at most MAXW (4 processes per CPU), not 100000",
        2,
    ),
    (
        ["bench", "DS", "--cache-dir", "TMP"],
        "--cache-dir applies to remote URLs (s3://, b2://, http://...), not 'DS'",
        2,
    ),
    (
        ["bench", "DS", "--endpoint-url", "http://x"],
        "--endpoint-url applies to remote URLs (s3://, b2://, http://...), not 'DS'",
        2,
    ),
    (["warmup", "DS"], "--cache-dir is required", 2),
    (
        ["warmup", "DS", "--cache-dir", "TMP"],
        "--cache-dir applies to remote URLs (s3://, b2://, http://...), not 'DS'",
        2,
    ),
    (
        ["warmup", "DS", "--cache-dir", "TMP", "--crops", "0"],
        "argument --crops: must be at least 1, not 0",
        2,
    ),
    (
        ["warmup", "DS", "--cache-dir", "TMP", "--cache-dir-bytes", "lots"],
        "argument --cache-dir-bytes: must be a size such as 500G or 2T, not 'lots'",
        2,
    ),
    (
        ["warmup", "DS", "--cache-dir", "TMP", "--cache-dir-bytes", "9" * 400],
        "argument --cache-dir-bytes: must be a size such as 500G or 2T, not '999",
        2,
    ),
    (
        ["warmup", "DS", "--cache-dir", "TMP", "--cache-dir-bytes", "0K"],
        "argument --cache-dir-bytes: must be a size such as 500G or 2T, not '0K'",
        2,
    ),
    (
        [
            "warmup",
            "http://127.0.0.1:1/ds",
            "--cache-dir",
            "JUNK/noise.mp3",
            "--give-up-after",
            "1",
        ],
        "cannot use 'JUNK/noise.mp3' as the disk cache (cache_dir): not a directory",
        1,
    ),
    (
        ["demo", "--cache-dir", "JUNK/noise.mp3"],
        "cannot use 'JUNK/noise.mp3' as the demo's cache directory: not a directory",
        1,
    ),
    (["demo", "--crops", "0"], "argument --crops: must be at least 1, not 0", 2),
    (
        ["demo", "--duration", "0"],
        "argument --duration: must be a finite number of seconds > 0, not 0",
        2,
    ),
    (["demo", "--workers", "-1"], "argument --workers: must be 0 or more, not -1", 2),
    (["timing", "report", "nomatch.*"], "no such timing file: nomatch.*", 1),
    (["timing", "report", "JUNK"], "a folder, not a timing file: JUNK", 1),
    (
        ["timing", "report", "JUNK/noise.mp3"],
        "JUNK/noise.mp3: not a streamer timing file (UnicodeDecodeError)",
        1,
    ),
]


@pytest.fixture(scope="module")
def places(packed: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    junk = tmp_path_factory.mktemp("junk")
    (junk / "noise.mp3").write_bytes(bytes(range(256)) * 64)
    return {"DS": str(packed), "JUNK": str(junk), "MAXW": str(4 * (os.cpu_count() or 1))}


def _fill(text: str, places: dict[str, str]) -> str:
    for name, value in places.items():
        text = text.replace(name, value)
    return text


@pytest.mark.parametrize(
    ("argv", "message", "code"), BAD_INPUTS, ids=[" ".join(a) or "(none)" for a, _, _ in BAD_INPUTS]
)
def test_bad_input(argv, message, code, places, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    where = {**places, "TMP": str(tmp_path)}
    assert _exit_code([_fill(arg, where) for arg in argv]) == code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    command = argv[0] if argv and argv[0] != "nosuch" else ""
    prefix = f"streamer {command}".strip() + (
        " report" if command == "timing" and code == 2 else ""
    )
    assert lines[0].startswith(f"{prefix}: error: "), lines[0]
    assert _fill(message, where) in lines[0]
    assert "(shard=" not in lines[0] and "Traceback" not in captured.err
    assert "sekrit" not in captured.err
    assert captured.out == ""
    if argv[:1] == ["pack"]:
        assert not (tmp_path / "out").exists()  # refused before anything was written


def _exit_code(argv: list[str]) -> int:
    """``main``'s return value, or the code argparse exits with."""
    try:
        return main(argv)
    except SystemExit as done:
        return int(done.code or 0)


def test_exit_codes_as_the_shell_sees_them(packed: Path, tmp_path: Path) -> None:
    """The real command: a usage error exits 2, a failure 1, one line each;
    ``-v`` adds the traceback."""
    run = [sys.executable, "-m", "streamer.cli"]
    usage = subprocess.run(
        [*run, "crop", str(packed), "k", "nan", "1", "-o", str(tmp_path / "c.npy")],
        capture_output=True,
        text=True,
    )
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1, usage.stderr
    failure = subprocess.run([*run, "inspect", "/nonexistent"], capture_output=True, text=True)
    assert failure.returncode == 1 and failure.stderr.count("\n") == 1, failure.stderr
    verbose = subprocess.run(
        [*run, "-v", "inspect", "/nonexistent"], capture_output=True, text=True
    )
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr
    assert verbose.stderr.strip().splitlines()[-1] == failure.stderr.strip()


def test_absurd_counts_are_usage_errors_of_the_real_command(packed: Path) -> None:
    """``streamer bench URL --crops 1000000000000`` planned every crop up front
    and died on a MemoryError line (7.28 TiB; ``--crops 100000000`` took
    5 GB before its first crop). The bound is checked before anything opens."""
    bench = [sys.executable, "-m", "streamer", "bench", str(packed), "--duration", "1"]
    done = subprocess.run(
        [*bench, "--workers", "0", "--crops", "1000000000000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "streamer bench: error: argument --crops: must be 1 to 10000000 "
        "(every crop is planned up front), not 1000000000000\n"
    )


def test_the_library_bounds_a_bench_alike() -> None:
    from streamer.pipeline.bench import BenchConfig, bench

    with pytest.raises(ValueError, match=r"crops must be 1 to 10000000 .*not 1000000000000"):
        BenchConfig(crops=10**12)
    with pytest.raises(ValueError, match=r"duration must be at least 0\.001"):
        BenchConfig(duration=float("nan"))
    with pytest.raises(ValueError, match="rounds must be 1 to 1000"):
        bench([], [0], BenchConfig(), rounds=10**9)


def test_version(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("streamer ")


def _dead_endpoint() -> str:
    """An address on loopback where nothing listens (connections are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.parametrize(
    "command",
    [
        ["inspect", "s3://bucket/ds"],
        ["crop", "HTTP/ds", "k", "0", "1", "-o", "TMP/c.npy"],
        ["index", "s3://bucket/ds"],
        ["warmup", "HTTP/ds", "--cache-dir", "TMP/cache"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_dead_store_fails_a_one_shot_command_within_give_up_after(
    command: list[str], tmp_path: Path
) -> None:
    """Nothing answers at the endpoint: the command gives up after
    ``--give-up-after`` (not the library's 300 s), exit 1, one error line
    naming the store, no traceback (a log line may say it is waiting)."""
    endpoint = _dead_endpoint()
    argv = [a.replace("HTTP", endpoint).replace("TMP", str(tmp_path)) for a in command]
    if argv[1].startswith("s3://"):
        argv += ["--endpoint-url", endpoint]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "streamer.cli", *argv, "--give-up-after", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert time.monotonic() - began < 20  # interpreter start, imports, then 1 s of waiting
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[-1].startswith(f"streamer {argv[0]}: error: ") and "127.0.0.1" in lines[-1]
    assert all(line.startswith("WARNING streamer.storage: waiting") for line in lines[:-1])


def test_crop_waits_out_a_stalled_store_once(  # type: ignore[no-untyped-def]
    http, packed: Path, tmp_path: Path, monkeypatch
) -> None:
    """The listing and the manifest answer, every range read stalls: ``crop``
    gives up once. Its check of the crop's size read ``audio_info``, gave
    up, took that for "unknown", and the crop then sent its first attempt
    and waited the whole budget out again (22 s for a budget of 5)."""
    from streamer import open_dataset
    from streamer.cli import crop, main

    quick = crop.storage_options
    monkeypatch.setattr(crop, "storage_options", lambda args: {**quick(args), "read_timeout": 0.5})
    key = next(iter(open_dataset(packed)))
    http.faults.hangs, http.faults.stall_seconds, http.faults.only_under = 1000, 30.0, "/audio"
    argv = ["crop", f"{http.url}/packed", key, "0", "1", "-o", str(tmp_path / "c.npy")]
    began = time.monotonic()
    assert main([*argv, "--give-up-after", "1"]) == 1
    took = time.monotonic() - began
    ranged = [r.at - began for r in http.requests if r.range]
    # One budget: no attempt is sent past it (the second wait sent one at 1.2 s).
    assert ranged and ranged[-1] - ranged[0] <= 1.0, (took, ranged)
    assert took < 1 + 0.5 + 1.5  # give_up_after + read_timeout, and slack


def test_one_shot_commands_wait_less_than_training_by_default() -> None:
    from streamer.cli._options import ONE_SHOT_GIVE_UP, storage_options
    from streamer.storage import RetryPolicy

    parser = argparse.ArgumentParser()
    add_url_arguments(parser)
    assert storage_options(parser.parse_args(["s3://b/ds"])) == {"give_up_after": ONE_SHOT_GIVE_UP}
    assert RetryPolicy().give_up_after > ONE_SHOT_GIVE_UP
    given = parser.parse_args(["http://h/ds", "--give-up-after", "5"])
    assert storage_options(given) == {"give_up_after": 5.0}
    assert storage_options(parser.parse_args(["/local/ds"])) == {}  # local files take none
    assert _exit_code(["inspect", "/tmp", "--give-up-after", "0"]) == 2  # must be > 0


def test_an_fsspec_protocol_its_options_cannot_make_is_one_line() -> None:
    """``github://``: fsspec's GitHub file system needs ``org=`` and ``repo=``,
    which its URLs do not carry. The command said ``TypeError: ...__init__()
    missing ...`` after an "Exception ignored in ... __del__" traceback from
    the half-made instance."""
    done = subprocess.run(
        [sys.executable, "-m", "streamer.cli", "inspect", "github://path/ds"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr  # the URL alone cannot work
    assert lines[0].startswith("streamer inspect: error: GithubFileSystem for github:// URLs"), (
        lines[0]
    )
    assert "'org'" in lines[0] and "storage option" in lines[0]


def test_an_ftp_url_that_cannot_connect_is_one_line_without_its_password() -> None:
    """``ftp://user:password@host:port/ds``: the host, port and user come from the URL
    (as fsspec reads it); a refused connection is one line naming the server."""
    secret = "sekrit-0xC0FFEE-never-log-me"
    done = subprocess.run(
        [sys.executable, "-m", "streamer.cli", "inspect", f"ftp://user:{secret}@127.0.0.1:1/ds"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "ftp://127.0.0.1:1/" in lines[0] and "refused" in lines[0], lines[0]
    assert secret not in done.stderr + done.stdout


def test_pack_into_a_url_whose_path_keeps_its_password_does_not_print_it(
    audio_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    """``memory://`` (fsspec leaves a URL of a file system it does not take
    apart as it is, user info and query in its paths): the summary line
    named OUT as given, ``packed ... into 1 shards in memory://user:PASSWORD@...``."""
    secret = "sekrit-0xC0FFEE-never-log-me"
    out = f"memory://user:{secret}@host/ds-summary?token={secret}"
    assert main(["pack", str(audio_dir), out, "--no-progress", "--no-index"]) == 0
    captured = capsys.readouterr()
    assert "into 1 shards in memory://host/ds-summary?…;" in captured.out, captured.out
    assert secret not in captured.out + captured.err
