"""A warmup leaves a disk cache that serves its run, or fails saying why:
a cache directory that cannot keep the run's blocks (disk full, a size limit
smaller than the run) is an error, never "warmed N crops"; a crop of bad
data is skipped, counted by reason and logged with its key."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import streamer
from streamer import ListCrops, Streamer
from streamer.errors import StorageError
from streamer.pipeline.bench import BenchConfig, bench_streamer
from streamer.pipeline.warmup import warmup

CONFIG = BenchConfig(duration=0.5, crops=20, seed=1)


def test_a_cache_too_small_for_the_run_fails_the_warmup(http, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = f"{http.url}/packed"
    # Smaller than the distinct bytes of the plan: refused before any crop is fetched.
    tiny = streamer.open_dataset(url, cache_dir=str(tmp_path / "tiny"), cache_dir_bytes=1000)
    with pytest.raises(
        StorageError, match=r"warmup needs at least \d+ bytes of disk cache but "
    ) as refused:
        warmup(bench_streamer(tiny, CONFIG, workers=0))
    needed = int(str(refused.value).split("at least ")[1].split()[0])
    roomy = streamer.open_dataset(url, cache_dir=str(tmp_path / "roomy"))
    assert warmup(bench_streamer(roomy, CONFIG, workers=0)).crops == 20
    # What the refused run fetched (the open, the indexes) leaves out the crops' bytes.
    assert tiny.store.stats.bytes_fetched + needed <= roomy.store.stats.bytes_fetched
    # Room for the blocks that hold the planned bytes but not for their
    # entries' headers and the shards' metadata: found out after the fetch,
    # by the evictions.
    small = streamer.open_dataset(url, cache_dir=str(tmp_path / "small"), cache_dir_bytes=needed)
    with pytest.raises(StorageError, match=rf"small: its size limit \({needed} bytes"):
        warmup(bench_streamer(small, CONFIG, workers=0))
    # A warmup into a full cache of older entries evicts them, not its own:
    # the limit holds its own entries (measured in a directory of their own:
    # some, stamps and shard tails, are there already) and half as much again,
    # not the older ones besides (the size limit evicts down to 90 %).
    entries = [p for p in (tmp_path / "roomy").rglob("*.blk")]
    for entry in entries:
        os.utime(entry, (time.time() - 3600, time.time() - 3600))
    older = sum(entry.stat().st_size for entry in entries)
    new_blocks = {"block_size": 64 * 1024}  # new blocks: new entries
    few = BenchConfig(duration=0.5, crops=3, seed=7)
    alone = streamer.open_dataset(url, cache_dir=str(tmp_path / "alone"), **new_blocks)
    assert warmup(bench_streamer(alone, few, workers=0)).crops == 3
    own = sum(entry.stat().st_size for entry in (tmp_path / "alone").rglob("*.blk"))
    assert older >= own  # evicting older entries alone can make the room
    options = {"cache_dir_bytes": older + own // 2, **new_blocks}
    full = streamer.open_dataset(url, cache_dir=str(tmp_path / "roomy"), **options)
    assert warmup(bench_streamer(full, few, workers=0)).crops == 3
    assert not all(entry.exists() for entry in entries)  # older entries were evicted


def _file_size_limit(limit: int) -> None:
    """In the child: files cannot grow past ``limit`` bytes (EFBIG, as a full disk fails)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_full_disk_fails_the_warmup_command(http, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The disk tier cannot write a block: the command exits 1 naming the
    cache directory and the reason, not "warmed 20 crops"; no entry is torn."""
    cache = tmp_path / "cache"
    argv = ["warmup", f"{http.url}/packed", "--duration", "0.5", "--crops", "20"]
    done = subprocess.run(
        [sys.executable, "-m", "streamer.cli", *argv, "--cache-dir", str(cache), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: _file_size_limit(64 * 1024),
    )
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert last.startswith("streamer warmup: error: warmup incomplete: disk cache "), last
    assert str(cache) in last and "File too large" in last
    assert "warmed" not in done.stdout
    assert not [p for p in cache.rglob("*") if ".tmp-" in p.name]
    # What was written is whole: a run over the cache reads the same crops.
    cached = streamer.open_dataset(f"{http.url}/packed", cache_dir=str(cache))
    plain = streamer.open_dataset(f"{http.url}/packed")
    for a, b in zip(
        bench_streamer(cached, CONFIG, workers=0),
        bench_streamer(plain, CONFIG, workers=0),
        strict=True,
    ):
        assert a.key == b.key and (a.audio == b.audio).all()


def test_crops_of_bad_data_are_counted_by_reason_and_named(packed: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """Crops planned past their episode's end fail (``CropError``): the
    warmup fetches the others and says which it skipped, and why."""
    keys = sorted(streamer.open_dataset(packed).keys())
    crops = [
        (key, 0.2 * n + (60 if key == keys[0] else 0), 0.2 * n + 0.3)
        for key in keys
        for n in range(3)
    ]
    crops = [(key, start, max(end, start + 0.1)) for key, start, end in crops]
    report = warmup(Streamer(str(packed), ListCrops(crops), seed=1))
    assert report.skipped == {"CropError": 3}
    assert report.crops == 3 * (len(keys) - 1)
    named = [r.getMessage() for r in caplog.records if "warmup: skipping" in r.getMessage()]
    assert len(named) == 3 and all(repr(keys[0]) in line for line in named)


def test_the_warmup_command_takes_a_disk_tier_size(http, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``--cache-dir-bytes`` sets the limit the run is checked against: too
    small is one error line before any download, room enough warms every crop."""
    argv = ["warmup", f"{http.url}/packed", "--duration", "0.5", "--crops", "20"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    command = [sys.executable, "-m", "streamer.cli", *argv]
    small = subprocess.run(
        [*command, "--cache-dir-bytes", "4K"], capture_output=True, text=True, timeout=120
    )
    assert small.returncode == 1 and "Traceback" not in small.stderr, small.stderr
    last = small.stderr.strip().splitlines()[-1]
    assert "warmup needs at least" in last and "may hold 4096 " in last, last
    roomy = subprocess.run(
        [*command, "--cache-dir-bytes", "1G"], capture_output=True, text=True, timeout=120
    )
    assert roomy.returncode == 0, roomy.stderr
    assert roomy.stdout.startswith("warmed 20 crops"), roomy.stdout


def test_entries_lost_to_someone_else_fail_the_warmup(http, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The cache directory is removed while the warmup runs (another job's
    clean-up; another process's smaller size limit would evict alike): what
    it wrote before is gone, and so is the objects' stamp that what it
    writes after is kept under, so the directory serves the run nothing.
    The warmup checks the directory at the end and says so, instead of
    "warmed 20 crops"; a warmup run again fills it and passes the check."""
    import shutil

    cache = tmp_path / "cache"
    dataset = streamer.open_dataset(f"{http.url}/packed", cache_dir=str(cache))
    done = []

    def progress(_: int) -> None:
        done.append(1)
        if len(done) == 5:  # moved away whole first: writers still busy in it cannot
            gone = cache.rename(tmp_path / "removed")  # make the removal fail (not empty)
            shutil.rmtree(gone, ignore_errors=True)

    # Either what it finds missing at the end, or a write that met the
    # directory gone (its folder removed between making and filling a file).
    lost = r"warmup incomplete: .*cache: (\d+ of \d+ blocks|cannot write entries)"
    with pytest.raises(StorageError, match=lost):
        warmup(bench_streamer(dataset, CONFIG, workers=0), concurrency=1, progress=progress)
    again = streamer.open_dataset(f"{http.url}/packed", cache_dir=str(cache), max_concurrency=9)
    assert warmup(bench_streamer(again, CONFIG, workers=0)).crops == 20
    served = streamer.open_dataset(f"{http.url}/packed", cache_dir=str(cache), max_concurrency=7)
    assert len(list(bench_streamer(served, CONFIG, workers=0))) == 20
    assert served.store.stats.misses == 0


def test_metadata_lost_to_someone_else_fails_the_warmup(http, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Another process sharing the directory with a smaller size limit evicts
    the oldest entries first: the stamps, listings and shard footers written
    when the dataset was opened, before the warmup fetched a block. The
    warmup checked its blocks alone and said "warmed 20 crops", and the
    next run asked the store for the rest; it checks those entries too."""
    cache = tmp_path / "cache"
    dataset = streamer.open_dataset(f"{http.url}/packed", cache_dir=str(cache))
    opened = list(cache.rglob("*.blk"))
    for entry in opened:  # as an eviction of the oldest entries would
        entry.unlink()
    lost = r"0 of \d+ blocks fetched and [1-9]\d* of \d+ other entries \(stamps, listings"
    with pytest.raises(StorageError, match=lost):
        warmup(bench_streamer(dataset, CONFIG, workers=0))
    again = streamer.open_dataset(f"{http.url}/packed", cache_dir=str(cache), max_concurrency=9)
    assert opened and warmup(bench_streamer(again, CONFIG, workers=0)).crops == 20


def test_the_warmup_says_what_it_fetched_and_what_the_directory_holds(http, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Crops overlap and share blocks: the crops' bytes (``bytes``) are
    neither what was downloaded nor what the directory keeps. The report and
    the closing line say both; a warmup run again over the warm directory
    fetches nothing, and says so, instead of the crops' bytes once more."""
    from streamer.storage.disk import _HEADER

    cache = tmp_path / "cache"
    config = BenchConfig(duration=0.5, crops=40, seed=1)
    dataset = streamer.open_dataset(f"{http.url}/packed", cache_dir=str(cache))
    first = warmup(bench_streamer(dataset, config, workers=0))
    assert 0 < first.fetched <= dataset.store.stats.bytes_fetched  # opening it: before
    on_disk = sum(p.stat().st_size - _HEADER.size for p in cache.rglob("*.blk"))
    assert 0 < first.cached < on_disk  # the rest: footers, indexes, stamps
    assert first.cached < first.bytes  # crops share blocks
    again = streamer.open_dataset(f"{http.url}/packed", cache_dir=str(cache), max_concurrency=9)
    second = warmup(bench_streamer(again, config, workers=0))
    assert (second.fetched, second.cached, second.bytes) == (0, first.cached, first.bytes)
    argv = ["warmup", f"{http.url}/packed", "--duration", "0.5", "--crops", "40"]
    argv += ["--cache-dir", str(cache), "--no-progress"]
    done = subprocess.run(
        [sys.executable, "-m", "streamer.cli", *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("warmed 40 crops"), done.stdout
    assert f"0.0 MB fetched, {first.cached / 1e6:.1f} MB of blocks in {cache}" in done.stdout


def test_a_cache_too_small_for_the_runs_blocks_is_refused_before_fetching(  # type: ignore[no-untyped-def]
    http, tmp_path: Path
) -> None:
    """The disk tier keeps whole blocks: with 256 KiB blocks the crops' blocks
    take several times their distinct bytes. The room a run needs is counted
    in blocks, so a limit between the two is refused once planned, not found
    out by evictions after every block was downloaded."""
    url = f"{http.url}/packed"
    options = {"block_size": 256 * 1024}
    roomy = streamer.open_dataset(url, cache_dir=str(tmp_path / "roomy"), **options)
    blocks = warmup(bench_streamer(roomy, CONFIG, workers=0)).cached
    tiny = streamer.open_dataset(
        url, cache_dir=str(tmp_path / "tiny"), cache_dir_bytes=blocks - 1, **options
    )
    with pytest.raises(StorageError, match=rf"warmup needs at least {blocks} bytes of disk"):
        warmup(bench_streamer(tiny, CONFIG, workers=0))
    assert tiny.store.stats.bytes_fetched < blocks / 2  # the open and the indexes alone


def test_crops_in_a_shards_last_block_pass_the_warmups_check(  # type: ignore[no-untyped-def]
    packed: Path, tmp_path: Path
) -> None:
    """Without a manifest a shard is opened by reading its last 64 KiB, and
    the blocks wholly inside them come from that read: the disk tier kept
    them as its entry, not as blocks. A warmup of crops at the end of each
    shard's last episode failed as "N of M blocks ... not in it", though
    the directory serves the run after it from disk. That run asks the
    server nothing, not even for the absent manifest (its 404 was not kept)."""
    import shutil

    from testkit.servers import LoopbackServer, file_handler

    root = tmp_path / "served" / "unlisted"
    shutil.copytree(packed, root)
    (root / "streamer-manifest.json").unlink()
    dataset = streamer.open_dataset(root)
    crops = []
    for key in sorted(dataset.keys()):
        end = float(dataset.info(key)["duration"])
        crops.append((key, max(0.0, end - 0.3), end))
    options = {"cache_dir": str(tmp_path / "cache"), "block_size": 16 * 1024}  # 4 in the tail
    http = LoopbackServer(file_handler(tmp_path / "served")).start()
    try:
        remote = streamer.open_dataset(f"{http.url}/unlisted", **options)
        assert warmup(Streamer(remote, ListCrops(crops), seed=1)).crops == len(crops)
        http.reset()
        served = streamer.open_dataset(f"{http.url}/unlisted", max_concurrency=7, **options)
        assert len(list(Streamer(served, ListCrops(crops), seed=1, workers=0))) == len(crops)
        assert http.requests == []
    finally:
        http.stop()
    assert (served.store.stats.misses, served.store.stats.bytes_fetched) == (0, 0)
