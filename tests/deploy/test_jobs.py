"""The plain-Python side of the cloud jobs (``streamer.jobs``): parts run
against the S3 test server with credentials from the environment only, their
reports merged; failing parts are named with their reason, never dropped;
re-running a part is idempotent."""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import pytest

import streamer
from streamer import jobs
from streamer.dataset.dataset import INFO_DIR
from streamer.dataset.manifest import MANIFEST_NAME
from streamer.index import INDEX_DIR
from streamer.storage import open_url
from streamer.write.index import parse_part
from streamer.write.verify import verify_dataset

#: The shard ``remote_incomplete`` lacks.
MISSING = "shard-000001"


def puts(server) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(r.path for r in server.requests if r.method == "PUT")


def test_partitions_are_the_specs_the_cli_takes() -> None:
    assert jobs.partitions(3) == ["0/3", "1/3", "2/3"]
    with pytest.raises(streamer.StreamerError, match="at least 1 part"):
        jobs.partitions(0)


def test_every_part_of_a_warmup_has_a_cache_directory_of_its_own() -> None:
    for count in (1, 4, 7):
        dirs = {jobs.part_cache_dir("/cache", part) for part in jobs.partitions(count)}
        assert len(dirs) == count and all(d.startswith("/cache/") for d in dirs)
    assert jobs.part_cache_dir("/cache", "01/4") == jobs.part_cache_dir("/cache", "1/4")
    with pytest.raises(streamer.StreamerError, match="0 <= i < n"):
        jobs.part_cache_dir("/cache", "4/4")


def test_index_parts_fan_out_merge_and_finish(s3, remote_unindexed, unindexed: Path) -> None:
    shards = sorted(p.stem for p in (unindexed / "audio").iterdir())
    assert len(shards) > 4
    assert jobs.index_parts(remote_unindexed, 9) == jobs.partitions(len(shards))  # none empty
    parts = jobs.index_parts(remote_unindexed, 4)
    assert parts == jobs.partitions(4)
    reports = [jobs.index_part(remote_unindexed, part) for part in parts]
    assert all(r.ok and r.job == "index" for r in reports), [r.error for r in reports]
    # Each shard is indexed by exactly one part, and every part paid for its own.
    assert [r.counts["shards indexed"] for r in reports] == [len(shards[i::4]) for i in range(4)]
    assert all(r.requests > 0 and r.bytes_stored > 0 for r in reports)
    summary = jobs.merge("index", parts, reports)
    assert summary.ok and summary.parts == 4
    assert summary.counts["shards indexed"] == len(shards)
    assert summary.counts["episodes indexed"] == 11
    assert summary.counts["no index: " + _chained_reason(summary)] == 1
    assert summary.requests == sum(r.requests for r in reports)
    bucket_path = remote_unindexed.removeprefix("s3://")
    stored = sorted(f"/{bucket_path}/{INDEX_DIR}/{name}.wsds" for name in shards)
    info = [p for p in puts(s3) if p.startswith(f"/{bucket_path}/{INFO_DIR}/")]
    # The parts leave the manifest alone; they rewrite the audio_info shards
    # whose durations the index makes exact (AAC's last frame, Opus's pre-skip).
    assert info and set(info) <= {p.replace(INDEX_DIR, INFO_DIR) for p in stored}
    assert puts(s3) == sorted([*info, *stored])
    jobs.finish_index(remote_unindexed)
    assert puts(s3)[-1] == f"/{bucket_path}/{MANIFEST_NAME}"  # written once, after them
    dataset = streamer.open_dataset(remote_unindexed)
    assert len(dataset) == 11
    assert sum(dataset.seek_index(key).ok for key in dataset) == 10
    text = "\n".join(summary.lines())
    assert "index: 4/4 parts done" in text and f"shards indexed: {len(shards)}" in text


def _chained_reason(summary: jobs.JobSummary) -> str:
    (reason,) = [r.removeprefix("no index: ") for r in summary.counts if r.startswith("no index")]
    return reason


def test_rerunning_a_part_is_idempotent(s3, remote_unindexed) -> None:  # type: ignore[no-untyped-def]
    first = jobs.index_part(remote_unindexed, "1/2")
    s3.reset()
    again = jobs.index_part(remote_unindexed, "1/2")
    assert first.ok and again.ok
    assert puts(s3) == []  # nothing written twice
    assert again.counts["shards already indexed"] == first.counts["shards indexed"] > 0
    assert again.counts["shards indexed"] == 0
    assert again.counts["episodes already indexed"] == first.counts["episodes indexed"]


def test_failing_parts_are_reported_with_their_reason(s3, remote_unindexed) -> None:  # type: ignore[no-untyped-def]
    parts = jobs.partitions(2)
    good = jobs.index_part(remote_unindexed, "0/2")
    bad_spec = jobs.index_part(remote_unindexed, "5/2")
    assert not bad_spec.ok and "5/2" in bad_spec.error and "0 <= i < n" in bad_spec.error
    # Nothing listens there; the store gives up after 2 s (300 s by default).
    nowhere = {"endpoint_url": "http://127.0.0.1:9", "give_up_after": 2.0, "backoff": 0.05}
    unreachable = jobs.index_part(remote_unindexed, "1/2", storage_options=nowhere)
    assert not unreachable.ok and "127.0.0.1:9" in unreachable.error, unreachable.error
    assert "test-key-id" not in unreachable.error and "sekrit" not in unreachable.error
    # A lost container comes back from the fan-out as an exception, a missing
    # result as nothing: every part is still in the summary.
    summary = jobs.merge("index", [*parts, "2/2"], [good, unreachable])
    assert not summary.ok
    assert set(summary.failed) == {"1/2", "2/2"}
    assert summary.failed["1/2"] == unreachable.error
    assert "no report" in summary.failed["2/2"]
    crashed = jobs.merge("index", parts, [good, TimeoutError("container lost after 3600 s")])
    assert crashed.failed == {"1/2": "TimeoutError: container lost after 3600 s"}
    assert crashed.counts == good.counts  # the good part's work still counts
    text = "\n".join(crashed.lines())
    assert "1/2 parts done, 1 failed" in text and "failed part 1/2: TimeoutError" in text
    assert "failed part 5/2" in "\n".join(jobs.merge("index", ["5/2"], [bad_spec]).lines())
    odd = jobs.merge("index", ["0/1"], [{"counts": 3}])  # whatever came back is no report
    assert odd.failed == {"0/1": "not a part report: dict"}


def test_an_unreadable_shard_is_a_problem_of_its_part(s3, remote_unindexed, unindexed) -> None:  # type: ignore[no-untyped-def]
    store, root = open_url(remote_unindexed)
    store.put_sync(store.join(root, "audio", "zz-garbage.wsds"), b"not an arrow file" * 10)
    parts = jobs.partitions(5)
    summary = jobs.merge("index", parts, [jobs.index_part(remote_unindexed, p) for p in parts])
    assert summary.failed == {}
    (item,) = summary.problems
    assert item == "shard zz-garbage" and summary.problems[item]
    shards = len(list((unindexed / "audio").iterdir()))
    assert summary.counts["shards indexed"] == shards and summary.counts["shards failed"] == 1
    assert not summary.ok
    assert any(line.startswith("  failed: shard zz-garbage: ") for line in summary.lines())


def test_warmup_parts_fill_the_disk_cache_and_rerun_from_it(
    s3, s3_uploaded, aws_env, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    url = f"s3://{s3_uploaded}/packed"
    cache = tmp_path / "cache"
    parts = jobs.partitions(2)
    options = {"duration": 1.0, "per_episode": 2, "cache_dir": cache}
    reports = [jobs.warmup_part(url, part, **options) for part in parts]
    summary = jobs.merge("warmup", parts, reports)
    assert summary.ok, summary.failed
    assert summary.counts["crops warmed"] == 14  # 7 episodes x 2, split over the parts
    assert all(r.counts["crops warmed"] == 7 for r in reports)
    assert summary.bytes_fetched > 0 and any(cache.rglob("*"))
    store, _ = open_url(url, cache_dir=str(cache))
    store.clear_memory_cache()
    s3.reset()
    again = jobs.warmup_part(url, "1/2", **options)
    assert again.ok and again.counts == reports[1].counts
    assert [r for r in s3.requests if r.method == "GET"] == []  # all from the disk cache
    wrong = jobs.warmup_part(url, "3/2", **options)  # a part reports, it never raises
    assert not wrong.ok and "3/2" in wrong.error


def test_stream_example_reports_rate_and_cost(s3_uploaded, aws_env) -> None:  # type: ignore[no-untyped-def]
    report = jobs.stream_example(f"s3://{s3_uploaded}/packed", crops=12, duration=1.0, workers=1)
    assert report.crops + sum(report.skipped.values()) == 12
    assert report.crops == 12, report.skipped
    assert report.requests > 0 and report.bytes_fetched > 0
    assert 0 < report.crops_per_second < math.inf
    assert report.bytes_per_crop == report.bytes_fetched / 12
    line = report.line()
    assert "12 crops" in line and "crops/s" in line and "kB" in line


def test_pack_parts_into_s3_rerun_and_verify(s3, s3_uploaded, aws_env, audio_dir) -> None:  # type: ignore[no-untyped-def]
    """Local files packed into S3 over three file partitions, one of them run
    twice: every file once, the manifest written by the part that completed
    the plan, and ``verify_dataset`` passes."""
    out = f"s3://{s3_uploaded}/packjob-{uuid.uuid4().hex[:8]}"
    files = sorted(p for p in audio_dir.rglob("*") if p.is_file())
    assert jobs.pack_parts(str(audio_dir), 50) == jobs.partitions(len(files))
    parts = jobs.pack_parts(str(audio_dir), 3)
    reports = [jobs.pack_part(str(audio_dir), out, p, shard_size=200_000) for p in parts]
    assert all(r.ok for r in reports), [r.error for r in reports]
    summary = jobs.merge("pack", parts, reports)
    assert summary.counts["files packed"] == len(files)
    assert summary.counts["manifest written"] == 1  # by the last part, once
    assert summary.counts["episodes indexed"] == len(files)
    assert summary.bytes_stored > summary.counts["bytes packed"] > 0
    s3.reset()
    again = jobs.pack_part(str(audio_dir), out, parts[1], shard_size=200_000)
    assert again.ok and again.counts["files packed"] == 0
    assert again.counts["shards already complete"] == reports[1].counts["shards written"]
    assert [r for r in s3.requests if r.method == "PUT" and "/audio/" in r.path] == []
    assert verify_dataset(out).ok
    dataset = streamer.open_dataset(out)
    assert sorted(dataset) == sorted(str(p.relative_to(audio_dir).with_suffix("")) for p in files)


def _report(part: str, job: str = "index", **counts: int) -> jobs.PartReport:
    from collections import Counter

    return jobs.PartReport(job=job, part=part, counts=Counter(counts))


def test_merge_refuses_reports_of_another_part_or_job() -> None:
    """A fan-out's results are matched to the parts by position; a report that
    names another part (a retried pod's report landing twice), another ``n``
    or another job is not the part's: the part is failed, and nothing counts
    twice."""
    parts = jobs.partitions(2)
    twice = jobs.merge("index", parts, [_report("0/2", episodes=5), _report("0/2", episodes=5)])
    assert not twice.ok and twice.counts["episodes"] == 5
    assert "1/2" in twice.failed and "0/2" in twice.failed["1/2"]
    other_n = jobs.merge("index", parts, [_report("0/2", episodes=5), _report("1/3", episodes=2)])
    assert not other_n.ok and "1/3" in other_n.failed["1/2"] and other_n.counts["episodes"] == 5
    other_job = jobs.merge("index", parts, [_report("0/2"), _report("1/2", job="pack")])
    assert not other_job.ok and "pack" in other_job.failed["1/2"]
    assert any("failed part 1/2" in line for line in other_job.lines())


def test_merge_names_parts_listed_twice_or_missing() -> None:
    """The parts a summary merges are every ``i`` of one ``n``, each once: a
    part listed twice counts once and fails the job, a part left out of the
    list is failed, a mix of ``n`` is failed."""
    doubled = jobs.merge(
        "index", ["0/2", "0/2", "1/2"], [_report("0/2", e=1)] * 2 + [_report("1/2", e=1)]
    )
    assert not doubled.ok and doubled.counts["e"] == 2
    assert any("twice" in why for why in doubled.failed.values())
    # however it is written (a zero-padded task id on a retry): still the same part
    spelled = jobs.merge(
        "index",
        ["0/2", "1/2", "01/2"],
        [_report("0/2", e=1), _report("1/2", e=1)] * 1 + [_report("01/2", e=1)],
    )
    assert not spelled.ok and spelled.counts["e"] == 2
    assert "twice" in spelled.failed["01/2"]
    missing = jobs.merge("index", ["0/3", "2/3"], [_report("0/3"), _report("2/3")])
    assert not missing.ok and "1/3" in missing.failed and missing.parts == 3
    mixed = jobs.merge("index", ["0/2", "1/3"], [_report("0/2"), _report("1/3")])
    assert not mixed.ok
    bad = jobs.merge("index", ["x"], [_report("x")])
    assert not bad.ok and "x" in bad.failed
    assert jobs.merge("index", [], []).ok is False  # a job of no parts did nothing


def test_a_file_added_mid_pack_job_is_not_silently_left_out(audio_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A pack job whose source listing grows between its parts: the part
    done before saw no new file, the part done after plans it into the
    other's partition. The part that finds every shard name in place must
    not write the manifest of a dataset missing that file: it fails, naming
    the shard planned from another listing."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(audio_dir, src)
    out = tmp_path / "out"
    files = sorted(p for p in src.rglob("*") if p.is_file())
    first = f"{len(files) % 2}/2"  # the partition the added file (sorted last) falls in
    then = f"{1 - len(files) % 2}/2"
    early = jobs.pack_part(str(src), str(out), first, index=False)
    assert early.ok, early.error
    shutil.copy(files[0], src / f"zzz{files[0].suffix}")
    late = jobs.pack_part(str(src), str(out), then, index=False)
    summary = jobs.merge(
        "pack",
        [first, then] if first == "0/2" else [then, first],
        ([early, late] if first == "0/2" else [late, early]),
    )
    assert not (out / MANIFEST_NAME).exists()
    assert not late.ok and "changed" in late.error, late.error
    assert not summary.ok and summary.counts["manifest written"] == 0


@pytest.mark.parametrize(
    "spec", ["0/²", "²/3", "\u0660/\u0662", "1/1", "-1/2", "0/0", "1.0/2", "a/2", "0/2/4"]
)
def test_a_spec_that_is_no_i_of_n_fails_its_part_and_the_merge(spec: str) -> None:
    """Only ASCII digits make an ``i/n``: a superscript two passed
    ``str.isdigit`` and then crashed ``int()`` (a ValueError out of ``merge``
    rather than a failed part)."""
    with pytest.raises(streamer.StreamerError, match="expected i/n"):
        parse_part(spec, "--shards")
    summary = jobs.merge("index", [spec], [_report(spec)])
    assert not summary.ok and "expected i/n" in summary.failed[spec]


@pytest.mark.parametrize("spec", ["0/1", "00/2", "3/100000"])
def test_valid_specs(spec: str) -> None:
    i, n = parse_part(spec, "--shards")
    assert 0 <= i < n


def test_finish_index_refuses_while_parts_are_missing(s3, remote_unindexed) -> None:  # type: ignore[no-untyped-def]
    """``finish_index`` after only some parts (one crashed, or not run yet)
    wrote a manifest of a half-indexed dataset without a word; it refuses,
    naming how many shards have no index yet, and writes nothing."""
    assert jobs.index_part(remote_unindexed, "0/2").ok
    s3.reset()
    with pytest.raises(streamer.StreamerError, match=r"shards not indexed yet.*1/2|shards not"):
        jobs.finish_index(remote_unindexed)
    assert puts(s3) == []
    assert jobs.index_part(remote_unindexed, "1/2").ok
    path = jobs.finish_index(remote_unindexed)
    assert path.endswith(MANIFEST_NAME) and puts(s3)[-1].endswith(MANIFEST_NAME)


def test_merged_summary_redacts_what_a_report_carries() -> None:
    """A report's error and problems come back from another process (and
    maybe another version): the summary printed must not repeat a presigned
    query, a user:password@ URL or a key field from them."""
    leaky = _report("0/1")
    leaky.error = "GET https://user:pa55word@host/b/k?X-Amz-Signature=abc123def failed"
    leaky.problems = {"shard s-1": "aws_secret_access_key=wJalrXUtnFEMIK7MDENG rejected"}
    summary = jobs.merge("index", ["0/1"], [leaky])
    text = "\n".join(summary.lines()) + repr(summary)
    for secret in ("pa55word", "abc123def", "wJalrXUtnFEMIK7MDENG"):
        assert secret not in text
    assert "failed part 0/1: GET https://host/b/k" in text and "shard s-1" in text


def test_a_pack_job_no_part_completed_is_not_ok() -> None:
    """Every pack part fine on its own, yet none found every planned shard in
    place (a partition's shards planned from another listing under other
    names, or a part run with another ``n`` that wrote nothing): no manifest,
    no whole dataset. The merged pack summary says so and is not ok."""
    parts = jobs.partitions(2)
    reports = [_report(p, job="pack", **{"files packed": 3}) for p in parts]
    summary = jobs.merge("pack", parts, reports)
    assert summary.counts["manifest written"] == 0
    assert not summary.ok and "manifest" in "\n".join(summary.lines())
    done = [_report(p, job="pack", **{"manifest written": 1}) for p in parts]
    assert jobs.merge("pack", parts, done).ok


def test_merge_refuses_a_report_of_another_dataset(s3, remote_unindexed) -> None:  # type: ignore[no-untyped-def]
    """A report names the dataset its part worked on (credentials stripped):
    one of another dataset fails its part, whether the job's URL is given
    or the reports disagree among themselves."""
    mine = jobs.index_part(remote_unindexed, "0/2")
    theirs = jobs.index_part(remote_unindexed + "-other", "1/2")
    assert mine.target == remote_unindexed
    summary = jobs.merge("index", jobs.partitions(2), [mine, theirs], urls=[remote_unindexed])
    assert set(summary.failed) == {"1/2"} and "-other" in summary.failed["1/2"]
    assert summary.counts == mine.counts
    unsure = jobs.merge("index", jobs.partitions(2), [mine, theirs])
    assert not unsure.ok and "another" in "\n".join(unsure.lines())
    keyed = jobs.index_part("s3://AKIAFAKE:sekrit@" + remote_unindexed[5:], "1/2")
    assert "sekrit" not in keyed.target


@pytest.mark.parametrize("count", [1, 3, 7, 40])
def test_pack_parts_of_any_count_pack_every_file_once(audio_dir, tmp_path, count: int) -> None:  # type: ignore[no-untyped-def]
    """``i/n`` for n of 1, one that does not divide the files, and more parts
    than files (empty parts): every part ok, every file in exactly one
    shard, the manifest written."""
    out = str(tmp_path / "out")
    files = sorted(p for p in audio_dir.rglob("*") if p.is_file())
    parts = jobs.partitions(count)
    reports = [jobs.pack_part(str(audio_dir), out, p, index=False) for p in parts]
    summary = jobs.merge("pack", parts, reports)
    assert summary.ok, (summary.failed, summary.problems)
    assert summary.counts["files packed"] == len(files)
    keys = list(streamer.open_dataset(out))
    assert sorted(keys) == sorted(str(p.relative_to(audio_dir).with_suffix("")) for p in files)
    assert len(keys) == len(set(keys))


def test_parts_left_out_of_a_huge_n_are_counted_not_listed() -> None:
    """``0/10**12`` alone (a typo for 0/12): the summary is at once, one line
    for the parts not run (it looped over every ``i``)."""
    summary = jobs.merge("index", ["0/1000000000000"], [_report("0/1000000000000", episodes=1)])
    assert summary.failed == {
        "?/1000000000000": "999999999999 parts not run (left out of the job's parts)"
    }
    assert summary.parts == 10**12
    few = jobs.merge("index", ["0/3"], [_report("0/3", episodes=1)])
    assert sorted(few.failed) == ["1/3", "2/3"]


def test_every_index_part_says_its_dataset_is_incomplete(s3, remote_incomplete, unindexed) -> None:  # type: ignore[no-untyped-def]
    """A dataset whose pack left a planned shard missing: every index part
    indexes its shards and names the missing one as its problem (from the
    plan its own shards record: it reads no other shard's footer), so the
    merged summary is not ok before ``finish_index`` refuses."""
    planned = sorted(p.stem for p in (unindexed / "audio").iterdir())
    present = [name for name in planned if name != MISSING]
    parts = jobs.index_parts(remote_incomplete, 2)
    reports = []
    for number, part in enumerate(parts):
        s3.reset()
        reports.append(jobs.index_part(remote_incomplete, part))
        paths = [r.path.partition("?")[0] for r in s3.requests if r.method == "GET"]
        read = {path.rsplit("/", 1)[-1] for path in paths if "/audio/" in path}
        assert read == {f"{name}.wsds" for name in present[number::2]}  # its own shards alone
    for report in reports:
        assert report.ok, report.error
        assert report.counts["shards indexed"] > 0
        (why,) = report.problems.values()
        assert "incomplete dataset" in why and f"missing: {MISSING}" in why, why
        assert f"{len(present)} of the {len(planned)} shards" in why
    summary = jobs.merge("index", parts, reports)
    assert not summary.ok and not summary.failed
    assert summary.counts["shards indexed"] == len(present)
    assert any("incomplete dataset" in line for line in summary.lines())
    with pytest.raises(streamer.IncompleteDatasetError, match=MISSING):
        jobs.finish_index(remote_incomplete)


def test_warmup_and_stream_example_serve_an_incomplete_dataset_only_when_allowed(
    s3, remote_incomplete, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    options = {"duration": 0.25, "per_episode": 1, "cache_dir": tmp_path / "cache"}
    refused = jobs.warmup_part(remote_incomplete, "0/1", **options)
    assert not refused.ok and "incomplete dataset" in refused.error
    assert f"missing: {MISSING}" in refused.error
    allowed = jobs.warmup_part(remote_incomplete, "0/1", allow_incomplete=True, **options)
    assert allowed.ok, allowed.error
    warmed = allowed.counts["crops warmed"]
    assert warmed + sum(n for r, n in allowed.counts.items() if r.startswith("crop skipped")) > 0
    with pytest.raises(streamer.IncompleteDatasetError, match=MISSING):
        jobs.stream_example(remote_incomplete, crops=4, duration=0.25, workers=0)
    report = jobs.stream_example(
        remote_incomplete, crops=4, duration=0.25, workers=0, allow_incomplete=True
    )
    assert report.crops + sum(report.skipped.values()) == 4
