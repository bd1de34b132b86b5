"""The disk tier names an HTTP object without the query parameters that only
authenticate it: URLs signed anew for every job (presigned S3, GCS, B2,
CloudFront, Azure SAS) find what an earlier job (``streamer warmup``) cached
through URLs signed before, while a parameter that selects content
(``versionId``) keeps entries apart and a changed object is still caught."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest
from helpers import SECRET

from streamer.dataset.dataset import Dataset
from streamer.errors import StorageError
from streamer.pipeline.bench import BenchConfig, bench_streamer
from streamer.pipeline.warmup import warmup
from streamer.storage._urls import cache_name
from streamer.storage.loop import run_sync
from testkit.servers import LoopbackServer, file_handler

BLOCK = 4096

#: How each kind of presigned URL authenticates: its query for signing ``n``,
#: every value of which is a credential (``_secrets``).
SIGNED = {
    "s3-sigv4": (
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA{n}%2F20261204%2Fus-east-1%2Fs3"
        "%2Faws4_request&X-Amz-Date=2026120{n}T000000Z&X-Amz-Expires=360{n}"
        "&X-Amz-SignedHeaders=host&X-Amz-Security-Token={s}tok&X-Amz-Signature={s}sig"
    ),
    "s3-sigv2": "AWSAccessKeyId=AKIA{n}{s}&Expires=170000000{n}&Signature={s}sig",
    "gcs-v4": (
        "X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential={s}%40p.iam%2F2026120{n}"
        "&X-Goog-Date=2026120{n}T000000Z&X-Goog-Expires=60{n}&X-Goog-SignedHeaders=host"
        "&X-Goog-Signature={s}sig"
    ),
    "b2": "Authorization={s}token",
    "cloudfront-canned": "Expires=170000000{n}&Signature={s}sig&Key-Pair-Id=K2JC{n}",
    "cloudfront-custom": "Policy={s}policy&Signature={s}sig&Key-Pair-Id=K2JC{n}",
    "azure-sas": (
        "sv=2022-11-0{n}&ss=b&srt=o&sp=r&se=2026-12-0{n}T00%3A00%3A00Z"
        "&st=2026-12-0{n}T00%3A00%3A00Z&spr=https&sig={s}sig"
    ),
}


def _secret(n: int) -> str:
    return f"{SECRET}-{n}"


def signed(url: str, kind: str, n: int) -> str:
    """``url`` signed (as far as these tests' server checks) for the ``n``-th time."""
    query = SIGNED[kind].format(n=n, s=urllib.parse.quote(_secret(n), safe=""))
    return f"{url}{'&' if '?' in url else '?'}{query}"


def signing_server(root: Path) -> LoopbackServer:
    """Files under ``root``, only for a signed request (a signature or token
    in the query, as each kind puts it); ``versionId=N`` serves ``NAME.vN``."""
    files = file_handler(root)
    marks = ("X-Amz-Signature", "Signature", "X-Goog-Signature", "Authorization", "sig")

    async def handle(request):  # type: ignore[no-untyped-def]
        if not any(request.query.get(mark, "").startswith(SECRET) for mark in marks):
            return 403, {}, b"not signed"
        version = request.query.get("versionId")
        if version is not None:
            request = request.clone(rel_url=f"{request.path}.v{version}")
        return await files(request)

    return LoopbackServer(handle).start()


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "served"
    root.mkdir()
    started = signing_server(root)
    yield started, root
    started.stop()


def written_to(directory: Path) -> bytes:
    """Every name and byte under ``directory``."""
    found = []
    for path in directory.rglob("*"):
        found.append(str(path).encode())
        if path.is_file():
            found.append(path.read_bytes())
    return b"\n".join(found)


@pytest.mark.parametrize("kind", sorted(SIGNED))
def test_a_url_signed_anew_reads_what_an_earlier_signing_cached(  # type: ignore[no-untyped-def]
    server, make_store, tmp_path, kind
) -> None:
    """The warmup's URLs and the training job's carry different signatures: the
    job is served by the disk tier alone (it fetched every byte again), and no
    credential of either signing is written to the cache directory."""
    http, root = server
    data = os.urandom(40_000)
    (root / "object.bin").write_bytes(data)
    cache = tmp_path / "cache"
    options = {"block_size": BLOCK, "cache_dir": str(cache)}
    ranges = [(0, 100), (5 * BLOCK + 7, 2 * BLOCK), (39_999, 1)]

    def read(store, url):  # type: ignore[no-untyped-def]
        reader = store.reader(url)
        size, tail = reader.size_sync(), reader.read_tail_sync(1000)
        views = reader.read_many_sync(ranges)
        return size, tail[0], bytes(tail[1]), [bytes(v) for v in views]

    first = make_store("http", **options)
    warmed = read(first, signed(f"{http.url}/object.bin", kind, 1))
    run_sync(first.drain())  # its disk writes done
    assert warmed == (40_000, 39_000, data[-1000:], [data[o : o + n] for o, n in ranges])
    http.reset()
    second = make_store("http", **first._options)  # the next job's: empty memory
    assert read(second, signed(f"{http.url}/object.bin", kind, 2)) == warmed
    assert http.requests == []
    assert second.stats.requests == 0 and second.stats.bytes_fetched == 0
    assert second.stats.disk_hits > 0
    run_sync(second.drain())
    said = written_to(cache)
    for n in (1, 2):
        for form in {_secret(n), urllib.parse.quote(_secret(n), safe="")}:
            assert form.encode() not in said


def test_a_warmed_dataset_behind_signed_urls_serves_a_run_signed_anew(  # type: ignore[no-untyped-def]
    server, make_store, packed, tmp_path
) -> None:
    """``streamer warmup`` through one container SAS, the training run through a
    new one: the run sends no request (it used to fetch the whole run again)."""
    http, root = server
    os.symlink(packed, root / "packed")
    cache = str(tmp_path / "cache")
    config = BenchConfig(duration=0.5, crops=12, seed=3)
    first = make_store("http", cache_dir=cache)
    report = warmup(
        bench_streamer(
            Dataset(signed(f"{http.url}/packed", "azure-sas", 1), store=first), config, workers=0
        )
    )
    assert report.crops == 12 and report.bytes > 0
    run_sync(first.drain())
    http.reset()
    second = make_store("http", **first._options)  # the next job's: empty memory
    dataset = Dataset(signed(f"{http.url}/packed", "azure-sas", 2), store=second)
    crops = list(bench_streamer(dataset, config, workers=0))
    assert len(crops) == 12
    assert http.requests == [] and second.stats.requests == 0


def test_a_parameter_that_selects_the_content_keeps_entries_apart(  # type: ignore[no-untyped-def]
    server, make_store, tmp_path
) -> None:
    """``versionId`` names another object: its bytes are never served from the
    entries of the version cached before, whatever the signatures."""
    http, root = server
    one, two = os.urandom(40_000), os.urandom(40_000)
    (root / "object.bin.v1").write_bytes(one)
    (root / "object.bin.v2").write_bytes(two)
    first = make_store("http", block_size=BLOCK, cache_dir=str(tmp_path / "cache"))
    url = f"{http.url}/object.bin"
    reader = first.reader(signed(f"{url}?versionId=1", "s3-sigv4", 1))
    assert bytes(reader.read_sync(0, 40_000)) == one
    run_sync(first.drain())
    http.reset()
    second = make_store("http", **first._options)  # the next job's: empty memory
    reader = second.reader(signed(f"{url}?versionId=2", "s3-sigv4", 2))
    assert bytes(reader.read_sync(0, 40_000)) == two
    assert second.stats.bytes_fetched == 40_000 and http.ranged()
    again = second.reader(signed(f"{url}?versionId=1", "s3-sigv4", 3))
    requests = second.stats.requests
    assert bytes(again.read_sync(0, 40_000)) == one
    assert second.stats.requests == requests  # version 1: from the disk tier


@pytest.mark.parametrize("size", [40_000, 50_000])
def test_an_object_changed_behind_a_url_signed_anew_is_caught(  # type: ignore[no-untyped-def]
    server, make_store, tmp_path, size
) -> None:
    """The object is replaced (same size: another ETag; or another size)
    between the warmup and the job, which reads it by a URL signed anew: a
    block it must fetch fails with the changed-on-the-server error instead of
    mixing the new bytes with the old blocks, size and tail it was served."""
    http, root = server
    path = root / "object.bin"
    path.write_bytes(b"a" * 40_000)
    first = make_store("http", block_size=BLOCK, cache_dir=str(tmp_path / "cache"))
    reader = first.reader(signed(f"{http.url}/object.bin", "cloudfront-canned", 1))
    assert reader.read_tail_sync(100)[0] == 39_900
    assert bytes(reader.read_sync(0, 10)) == b"a" * 10
    run_sync(first.drain())
    path.write_bytes(b"b" * size)
    os.utime(path, ns=(1, 1))  # another ETag, however fast the rewrite
    second = make_store("http", **first._options)  # the next job's: empty memory
    reader = second.reader(signed(f"{http.url}/object.bin", "cloudfront-canned", 2))
    assert reader.read_tail_sync(100)[0] == 39_900  # from the disk tier: the old version's
    assert bytes(reader.read_sync(0, 10)) == b"a" * 10  # from the disk tier, whole
    with pytest.raises(StorageError, match=r"changed on the server while it was being read"):
        reader.read_sync(20_000, 10)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        # Only what authenticates goes; the rest stays, as given and in order.
        (
            "https://h/b/k.wsds?versionId=3%2B1&X-Amz-Algorithm=A&X-Amz-Credential=c"
            "&X-Amz-Date=d&X-Amz-Expires=1&X-Amz-SignedHeaders=host&X-Amz-Security-Token=t"
            "&X-Amz-Signature=s&partNumber=2",
            "https://h/b/k.wsds?versionId=3%2B1&partNumber=2",
        ),
        ("https://h/k?x-amz-signature=s&x-amz-credential=c", "https://h/k"),
        (
            "https://h/k?generation=7&X-Goog-Signature=s&X-Goog-Credential=c",
            "https://h/k?generation=7",
        ),
        (
            "https://h/k?AWSAccessKeyId=a&Expires=1&Signature=s&response-content-type=x",
            "https://h/k?response-content-type=x",
        ),
        ("https://h/k?GoogleAccessId=a&Expires=1&Signature=s", "https://h/k"),
        (
            "https://h/file/b/k?Authorization=t&b2ContentDisposition=x",
            "https://h/file/b/k?b2ContentDisposition=x",
        ),
        ("https://h/k?Policy=p&Signature=s&Key-Pair-Id=K", "https://h/k"),
        (
            "https://h/c/k?versionid=v&sv=1&sr=b&sp=r&se=e&st=t&spr=https&sig=s&skoid=o",
            "https://h/c/k?versionid=v",
        ),
        # The same names outside their scheme may select content: kept.
        (
            "https://h/k?Signature=s&Expires=1&sp=2&sig=3",
            "https://h/k?Signature=s&Expires=1&sp=2&sig=3",
        ),
        ("https://h/k?page=2&&st=1", "https://h/k?page=2&&st=1"),
        # A password is a credential; the user may select content (a home directory).
        ("https://alice:pw@h:8443/k?a=1", "https://alice@h:8443/k?a=1"),
        ("https://h/k", "https://h/k"),
    ],
)
def test_the_cache_name_drops_only_what_authenticates(url: str, name: str) -> None:
    assert cache_name(url) == name
