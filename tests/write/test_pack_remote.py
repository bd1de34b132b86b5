"""``streamer pack`` with remote sources and outputs, through real S3 servers
(moto, SeaweedFS) and a real HTTP server on loopback: the same bytes as a
local pack (but for the plan fingerprint, which names the source), large
shards in multipart uploads that are aborted on failure, and one-line
errors naming the source or output that failed."""

from __future__ import annotations

import hashlib
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import BUCKET, S3_KINDS, SECRET, servers, write_audio

from streamer import open_dataset
from streamer.cli import main
from streamer.errors import PackError, StorageError
from streamer.storage import open_url
from streamer.write.pack import pack
from streamer.write.verify import verify_dataset
from testkit.servers import LoopbackServer, file_handler, s3_client

SHARD_SIZE = 40_000
#: The S3 servers these tests write to (single and multipart uploads,
#: aborted ones): every one of ``S3_KINDS`` (``SLOW_SERVERS`` in the slow run).
WRITE_KINDS = servers(*S3_KINDS)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("remote-src")
    for i in range(7):
        codec = ("flac", "mp3", "wav")[i % 3]
        write_audio(src, f"d{i % 2}/ep{i:02d}", codec, 16000, 1, 0.5 + 0.1 * i, seed=i)
    (src / "notes.txt").write_text("not audio")
    return src


@pytest.fixture(scope="module")
def local_pack(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What every remote pack of ``source`` must equal, byte for byte."""
    out = tmp_path_factory.mktemp("local-pack") / "ds"
    pack(source, out, shard_size=SHARD_SIZE, batch_size=2, progress=False)
    return out


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(params=WRITE_KINDS)
def s3w(request: pytest.FixtureRequest, s3_servers: Any, s3_uploaded: str, aws: None) -> Any:
    server = s3_servers(request.param)
    server.reset()
    yield server
    server.reset()


def _prefix(name: str) -> str:
    return f"s3://{BUCKET}/{name}-{uuid.uuid4().hex[:8]}"


#: A plan fingerprint in a shard's schema metadata (``plan.py``): it names
#: SRC, so packs of the same files from two places differ in it alone.
FINGERPRINT = re.compile(rb"3:[0-9a-f]{32}")


def _digest(body: bytes) -> str:
    """sha256 of ``body`` with plan fingerprints blanked (at their length)."""
    return hashlib.sha256(FINGERPRINT.sub(b"3:" + b"0" * 32, body)).hexdigest()


def _digests_local(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): _digest(p.read_bytes())
        for p in root.rglob("*")
        if p.is_file()
    }


def _digests_s3(url: str, endpoint: str) -> dict[str, str]:
    store, root = open_url(url, endpoint_url=endpoint)
    found = {}

    def walk(path: str, prefix: str) -> None:
        for entry in store.list_sync(path):
            child = store.join(path, entry.name)
            if entry.is_dir:
                walk(child, prefix + entry.name + "/")
            else:
                body = store.reader(child).fetch_many_sync([(0, entry.size)])[0]
                found[prefix + entry.name] = _digest(bytes(body))

    walk(root, "")
    return found


def _upload(folder: Path, url: str, endpoint: str) -> None:
    store, root = open_url(url, endpoint_url=endpoint)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            store.put_sync(store.join(root, path.relative_to(folder).as_posix()), path)


def test_local_to_s3_and_s3_to_local_write_the_local_packs_bytes(
    source: Path, local_pack: Path, s3w: Any, tmp_path: Path
) -> None:
    options = {"endpoint_url": s3w.url}
    out = _prefix("packed")
    report = pack(
        source, out, storage_options=options, shard_size=SHARD_SIZE, batch_size=2, progress=False
    )
    assert report.manifest_written and report.skipped[0][0] == "notes.txt"
    assert verify_dataset(out, storage_options=options).ok
    assert _digests_s3(out, s3w.url) == _digests_local(local_pack)
    # s3 -> local: the raw files from a prefix.
    raw = _prefix("raw")
    _upload(source, raw, s3w.url)
    down = pack(
        raw,
        tmp_path / "ds",
        storage_options=options,
        shard_size=SHARD_SIZE,
        batch_size=2,
        progress=False,
    )
    assert down.files == report.files == 7
    assert _digests_local(tmp_path / "ds") == _digests_local(local_pack)
    # s3 -> s3, and a re-run that finds everything done.
    both = _prefix("both")
    pack(raw, both, storage_options=options, shard_size=SHARD_SIZE, batch_size=2, progress=False)
    again = pack(
        raw, both, storage_options=options, shard_size=SHARD_SIZE, batch_size=2, progress=False
    )
    assert again.shards == [] and sorted(again.already_complete) == sorted(report.shards)
    assert _digests_s3(both, s3w.url) == _digests_local(local_pack)


def test_a_list_file_of_http_urls_packs_as_the_folder_would(
    source: Path, local_pack: Path, tmp_path: Path
) -> None:
    server = LoopbackServer(file_handler(source)).start()
    try:
        files = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
        listing = tmp_path / "urls.txt"
        listing.write_text(
            "# the episodes\n" + "".join(f"{server.url}/{name}\n" for name in reversed(files))
        )
        out = tmp_path / "ds"
        pack(listing, out, shard_size=SHARD_SIZE, batch_size=2, progress=False)
        assert _digests_local(out) == _digests_local(local_pack)
        assert {r.method for r in server.requests} == {"GET"}
        (source / "gone.mp3").write_bytes(b"")  # listed, then deleted from the server
        listing.write_text(f"{server.url}/gone.mp3\n{server.url}/d0/ep00.flac\n")
        (source / "gone.mp3").unlink()
        with pytest.raises(
            PackError, match=r"cannot read http://127\.0\.0\.1:\d+/gone\.mp3: .*404"
        ):
            pack(listing, tmp_path / "other", progress=False)
    finally:
        server.stop()


def test_user_info_of_listed_urls_is_in_no_key_source_or_message(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """URLs of a list file with basic auth, not all of one user: the names
    were made from each URL's host *with its user info*, so a password went
    into the episode keys, ``audio_info.source`` and the skipped lines."""
    server = LoopbackServer(file_handler(source)).start()
    try:
        host = server.url.removeprefix("http://")
        listing = tmp_path / "urls.txt"
        listing.write_text(
            f"http://alice:{SECRET}a@{host}/d0/ep00.flac\n"
            f"http://bob:{SECRET}b@{host}/d1/ep01.mp3\n"
            f"http://{host}/d0/ep02.wav\n"
            f"http://carol:{SECRET}c@{host}/notes.txt\n"
        )
        assert main(["pack", str(listing), str(tmp_path / "ds"), "--no-progress"]) == 0
        said = capsys.readouterr()
    finally:
        server.stop()
    dataset = open_dataset(tmp_path / "ds")
    keys = sorted(dataset.keys())
    assert keys == ["d0/ep00", "d0/ep02", "d1/ep01"]  # one host: named below it
    sources = [dataset.info(key)["source"] for key in keys]
    assert sources == ["d0/ep00.flac", "d0/ep02.wav", "d1/ep01.mp3"]
    assert "skipped notes.txt" in said.err
    assert SECRET not in said.out + said.err


def test_multipart_uploads_store_whole_objects(s3w: Any, tmp_path: Path) -> None:
    """A 12 MB object in 5 MiB parts (S3's smallest), through each server."""
    body = hashlib.sha256(b"seed").digest() * (12_000_000 // 32)
    (tmp_path / "big").write_bytes(body)
    store, root = open_url(
        _prefix("multi"),
        endpoint_url=s3w.url,
        multipart_threshold=6_000_000,
        multipart_part_size=5 << 20,
    )
    path = store.join(root, "big.bin")
    s3w.reset()
    store.put_sync(path, tmp_path / "big")
    writes = [(r.method, "partNumber" in r.path, "uploadId" in r.path) for r in s3w.requests]
    assert writes.count(("PUT", True, True)) == 3
    assert ("POST", False, False) in writes  # started ...
    assert ("POST", False, True) in writes  # ... and completed
    assert bytes(store.reader(path).fetch_many_sync([(0, len(body))])[0]) == body


def test_a_failed_multipart_upload_is_aborted(s3_servers: Any, aws: None, tmp_path: Path) -> None:
    """moto refuses parts under 5 MiB when the upload completes: the upload
    is aborted (no parts left behind) and no object appears."""
    server = s3_servers("moto")
    (tmp_path / "big").write_bytes(b"x" * 3_000_000)
    url = _prefix("abort")
    store, root = open_url(
        url, endpoint_url=server.url, multipart_threshold=1_000_000, multipart_part_size=1 << 20
    )
    with pytest.raises(StorageError, match="EntityTooSmall") as raised:
        store.put_sync(store.join(root, "big.bin"), tmp_path / "big")
    assert url.removeprefix("s3://") in str(raised.value) and SECRET not in str(raised.value)
    _assert_nothing_stored(server.url, f"{root.partition('/')[2]}/big.bin")


@pytest.mark.parametrize(
    ("src", "message"),
    [
        ("s3://nosuchbucket/raw", "cannot list the source s3://nosuchbucket/raw: .*not found"),
        (
            "s3://data/no-such-prefix-at-all",
            "source s3://data/no-such-prefix-at-all holds no files",
        ),
    ],
)
def test_bad_remote_sources_are_one_line_naming_them(
    s3_servers: Any,
    aws: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    src: str,
    message: str,
) -> None:
    server = s3_servers("moto")
    code = main(["pack", src, str(tmp_path / "out"), "--endpoint-url", server.url, "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("streamer pack: error: ")
    assert re.search(message, err[0]), err[0]


def test_s3_keys_are_used_verbatim_double_slashes_too(
    source: Path, moto_endpoint: str, aws: None, tmp_path: Path
) -> None:
    """``raw/dd//y.flac`` (a legal key) was listed, then read as
    ``raw/dd/y.flac``: a 404 that failed the whole pack."""
    client = s3_client(moto_endpoint, "test-key-id", SECRET)
    prefix = f"verbatim-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=prefix)
    files = {"ok": "d0/ep00.flac", "dd//y": "d1/ep01.mp3", "dd/y": "d0/ep02.wav"}
    for key, name in files.items():
        body = (source / name).read_bytes()
        client.put_object(Bucket=prefix, Key=f"raw/{key}{Path(name).suffix}", Body=body)
    report = pack(
        f"s3://{prefix}/raw",
        tmp_path / "ds",
        storage_options={"endpoint_url": moto_endpoint},
        progress=False,
    )
    assert report.files == 3 and report.skipped == []
    dataset = open_dataset(tmp_path / "ds")
    assert sorted(dataset.keys()) == sorted(files)
    for key, name in files.items():
        assert bytes(dataset.blob(key).view()) == (source / name).read_bytes()


def test_bad_outputs_and_list_files_are_one_line(
    source: Path, s3_servers: Any, aws: None, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    server = s3_servers("moto")
    argv = ["pack", str(source), "s3://nosuchbucket/out", "--endpoint-url", server.url]
    assert main([*argv, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "cannot use s3://nosuchbucket/out as OUT" in err and "not found" in err
    (tmp_path / "list.txt").write_bytes(b"\xff\xfe not utf-8")
    assert main(["pack", str(tmp_path / "list.txt"), str(tmp_path / "o"), "--no-progress"]) == 1
    assert "cannot read the list file" in capsys.readouterr().err


def test_a_list_file_mixing_http_and_s3_urls_packs_into_s3(
    source: Path, s3_servers: Any, aws: None, tmp_path: Path
) -> None:
    """``--endpoint-url`` is the object store's: the HTTP URLs of the list go without it."""
    s3 = s3_servers("moto")
    raw = _prefix("listed")
    _upload(source / "d1", raw, s3.url)
    http = LoopbackServer(file_handler(source)).start()
    try:
        listing = tmp_path / "urls.txt"
        lines = [f"{http.url}/d0/ep00.flac", f"{http.url}/d0/ep02.wav", f"{raw}/ep01.mp3"]
        listing.write_text("\n".join(lines) + "\n")
        out = _prefix("from-list")
        options = {"endpoint_url": s3.url}
        report = pack(listing, out, storage_options=options, progress=False)
        assert report.files == 3 and report.manifest_written
        assert verify_dataset(out, storage_options=options).ok
        dataset = open_dataset(out, endpoint_url=s3.url)
        keys = sorted(dataset.keys())
        assert len(keys) == 3 and keys[-1].endswith("ep01")
        assert bytes(dataset.blob(keys[0]).read()) == (source / "d0" / "ep00.flac").read_bytes()
    finally:
        http.stop()


def test_an_interrupted_multipart_upload_is_aborted(s3w: Any, tmp_path: Path) -> None:
    """Ctrl-C while parts go up: the upload is aborted before the process
    exits, so neither the object nor its parts are left."""
    (tmp_path / "big").write_bytes(b"y" * 16_000_000)
    url = _prefix("interrupted")
    code = (
        "import sys\n"
        "from streamer.storage import open_url\n"
        "store, root = open_url(sys.argv[1], endpoint_url=sys.argv[2],"
        " multipart_threshold=6_000_000, multipart_part_size=5 << 20)\n"
        "store.put_sync(store.join(root, 'big.bin'), sys.argv[3])\n"
    )
    s3w.faults.only_ranged = False
    s3w.faults.latency = 0.5  # every request: the parts are still in flight at the signal
    process = subprocess.Popen(
        [sys.executable, "-c", code, url, s3w.url, str(tmp_path / "big")],
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not any("partNumber" in r.path for r in list(s3w.requests)):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode != 0 and b"KeyboardInterrupt" in err
    assert any(r.method == "DELETE" and "uploadId" in r.path for r in s3w.requests)
    s3w.faults.latency = 0.0
    _assert_nothing_stored(s3w.url, f"{url.removeprefix(f's3://{BUCKET}/')}/big.bin")


def _assert_nothing_stored(endpoint: str, key: str) -> None:
    """Neither an object nor an unfinished multipart upload at ``key``
    (asked of the server directly, with boto3)."""
    client = s3_client(endpoint, "test-key-id", SECRET)
    assert not client.list_multipart_uploads(Bucket=BUCKET, Prefix=key).get("Uploads")
    assert not client.list_objects_v2(Bucket=BUCKET, Prefix=key).get("Contents")


def test_an_index_page_that_lists_a_folder_inside_itself_is_one_error(tmp_path: Path) -> None:
    """An HTTP server following a symlink to a folder it is in (nginx's
    autoindex over ``d/up -> ..``) lists it again at every depth: the walk
    recursed until Python's limit, a RecursionError."""

    async def endless(request: Any) -> tuple[int, dict[str, str], bytes]:
        page = b'<html><body><a href="x.flac">x.flac</a><a href="up/">up/</a></body></html>'
        return 200, {"Content-Type": "text/html"}, page

    server = LoopbackServer(endless).start()
    try:
        with pytest.raises(PackError, match="nested more than 100 folders deep"):
            pack(f"{server.url}/src/", str(tmp_path / "out"))
    finally:
        server.stop()
