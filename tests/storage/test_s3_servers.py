"""How S3 implementations differ, and that each difference is read right:
ranged answers with status 200 and a whole-object checksum (rclone), 416 to
a suffix range longer than the object, bodies without Content-Length, and
endpoints that ignore Range (a clear one-line error, in the CLI too)."""

from __future__ import annotations

import time
import urllib.parse
from typing import Any

import numpy as np
import pytest
from helpers import S3_KINDS, SECRET

from streamer import open_dataset
from streamer.cli import main
from streamer.errors import StorageError
from streamer.storage import s3
from streamer.storage.loop import run_sync
from streamer.storage.s3 import S3Store
from testkit.servers import LoopbackServer, proxy_handler, s3_client, s3_error

FAST = {"attempts": 2, "backoff": 0.01, "max_backoff": 0.02}


@pytest.fixture(params=S3_KINDS)
def s3_reader(request, s3_servers, s3_uploaded, make_store):  # type: ignore[no-untyped-def]
    """(a new store's reader of random.bin, the proxy in front of that server)."""
    server = s3_servers(request.param)
    server.reset()
    yield (lambda name="random.bin", **o: make_store("s3", server.url, **o).reader(name)), server
    server.reset()


def test_rclone_answers_ranges_with_200_and_a_whole_object_checksum(  # type: ignore[no-untyped-def]
    s3_servers, s3_uploaded, make_store, data
) -> None:
    """What botocore rejects by default (``FlexibleChecksumError``) is read right."""
    server = s3_servers("rclone")
    server.reset()
    reader = make_store("s3", server.url).reader(f"{s3_uploaded}/random.bin", size=len(data))
    assert bytes(reader.read_sync(300_000, 1000)) == data[300_000:301_000]
    (get,) = server.ranged()
    assert get.range.startswith("bytes=262144-")
    assert reader.store.stats.retries == 0


def test_a_suffix_past_a_small_object_reads_it_whole(s3_reader, s3_uploaded, data) -> None:  # type: ignore[no-untyped-def]
    """``bytes=-N`` with N > size: 206 with the whole object from most servers;
    416 naming no size from rclone, after which the object is read by the
    size a HEAD gives: a bounded range, never a blind whole-object GET."""
    open_reader, server = s3_reader
    reader = open_reader(f"{s3_uploaded}/random.bin")
    start, tail = reader.read_tail_sync(2 * len(data))
    assert (start, bytes(tail), reader.size_sync()) == (0, data, len(data))
    asked = [(r.method, r.range) for r in server.requests]
    assert asked[0] == ("GET", f"bytes=-{2 * len(data)}")
    assert asked[1:] in ([], [("HEAD", None), ("GET", f"bytes=0-{len(data) - 1}")])
    assert reader.store.stats.retries == 0 and reader.store.stats.requests == 1


@pytest.mark.parametrize("refuse_head", [0, 403])
def test_an_empty_object_reads_on_every_server(  # type: ignore[no-untyped-def]
    s3_reader, s3_uploaded, refuse_head
) -> None:
    """An empty object: moto answers a suffix with 200 and no Content-Range,
    SeaweedFS with 416 naming size 0, rclone with 416 naming nothing; its
    size comes from HEAD or, HEAD refused, from a 416 to ``bytes=0-0``."""
    open_reader, server = s3_reader
    s3_client(server.handler.upstream, "test-key-id", SECRET).put_object(
        Bucket=s3_uploaded, Key="variants/empty.bin", Body=b""
    )
    store = open_reader(f"{s3_uploaded}/random.bin", **FAST).store
    server.faults.refuse_head = refuse_head  # (opening the reader reset the faults)
    reader = store.reader(f"{s3_uploaded}/variants/empty.bin")
    assert reader.size_sync() == 0
    assert [r.method for r in server.requests] == ["HEAD"] + ["GET"] * bool(refuse_head)
    start, tail = reader.read_tail_sync(1000)
    assert (start, bytes(tail)) == (0, b"")
    assert reader.store.stats.retries == 0


@pytest.mark.parametrize("status", [403, 405, 200])
def test_a_refused_head_gives_the_size_by_a_one_byte_get(
    s3_reader, s3_uploaded, data, status
) -> None:  # type: ignore[no-untyped-def]
    """A bucket policy or proxy that allows GET but not HEAD, or a gateway
    answering HEAD without a Content-Length (chunked; 200: it was a
    ``KeyError`` traceback): the size comes from a one-byte GET's
    Content-Range, at once (no retries); when the GET is refused too, its
    S3 error says why, in one line."""
    open_reader, server = s3_reader
    store = open_reader(f"{s3_uploaded}/random.bin", **FAST).store
    server.faults.refuse_head = status if status != 200 else 0
    server.faults.head_without_length = status == 200
    assert store.reader(f"{s3_uploaded}/random.bin").size_sync() == len(data)
    assert [(r.method, r.range) for r in server.requests] == [("HEAD", None), ("GET", "bytes=0-0")]
    assert store.stats.retries == 0
    server.faults.errors, server.faults.error_status = 1, 403
    server.faults.error_body = s3_error("AccessDenied", "No.")
    with pytest.raises(StorageError) as caught:
        store.reader(f"{s3_uploaded}/big/audio/s.wsds").size_sync()
    message = str(caught.value)
    assert "s3://data/big/audio/s.wsds: HTTP 403" in message and "AccessDenied: No." in message
    assert "\n" not in message and SECRET not in message and "X-Amz" not in message


def test_bodies_without_content_length_are_read_right(s3_reader, s3_uploaded, data) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = s3_reader
    server.faults.chunked = True
    reader = open_reader(f"{s3_uploaded}/random.bin", block_size=64 * 1024)
    assert bytes(reader.read_sync(100_000, 150_000)) == data[100_000:250_000]
    start, tail = reader.read_tail_sync(5000)
    assert (start, bytes(tail)) == (len(data) - 5000, data[-5000:])
    assert all("Content-Length" not in r.headers for r in server.ranged())  # GETs have no body
    assert reader.store.stats.retries == 0


def test_an_endpoint_that_ignores_range_fails_in_one_clear_line(s3_reader, s3_uploaded) -> None:  # type: ignore[no-untyped-def]
    open_reader, server = s3_reader
    reader = open_reader(f"{s3_uploaded}/random.bin", **FAST)
    reader.size_sync()
    reader.store.stats.reset()
    server.faults.ignore_range = True
    with pytest.raises(StorageError) as caught:
        reader.read_sync(0, 10)
    message = str(caught.value)
    assert "s3://data/random.bin" in message and "cannot serve byte ranges" in message
    assert "\n" not in message and SECRET not in message
    assert reader.store.stats.requests == 1  # not retried: it would not change


@pytest.mark.parametrize("kind", S3_KINDS)
def test_cli_over_each_server_and_its_one_line_failure(  # type: ignore[no-untyped-def]
    kind, s3_servers, s3_uploaded, storage_root, tmp_path, monkeypatch, capsys
) -> None:
    """A crop through the CLI from each server; then a server that ignores
    Range: exit 1 and one line on stderr, no traceback."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    server = s3_servers(kind)
    server.reset()
    url, endpoint = f"s3://{s3_uploaded}/packed", ["--endpoint-url", server.url]
    key = next(iter(open_dataset(storage_root / "packed")))
    out = tmp_path / "crop.npy"
    assert main(["crop", url, key, "0.5", "1.5", "-o", str(out), *endpoint]) == 0
    crop = np.load(out)
    assert crop.shape[-1] > 0 and np.abs(crop).max() > 0
    capsys.readouterr()
    server.faults.ignore_range = True
    try:
        code = main(["inspect", url, *endpoint])
    finally:
        server.reset()
    err = capsys.readouterr().err
    assert code == 1, err
    assert "cannot serve byte ranges" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and SECRET not in err


def test_a_presigned_url_refused_as_expired_is_signed_anew(s3_reader, s3_uploaded, data) -> None:  # type: ignore[no-untyped-def]
    """Credentials from the AWS chain refresh; a URL signed with old ones is
    answered 403 ExpiredToken: dropped, signed again, retried (counted)."""
    open_reader, server = s3_reader
    reader = open_reader(f"{s3_uploaded}/random.bin", backoff=0.01)
    assert bytes(reader.read_sync(0, 10)) == data[:10]
    server.faults.errors, server.faults.error_status = 1, 403
    server.faults.error_body = s3_error("ExpiredToken", "The provided token has expired.")
    assert bytes(reader.read_sync(400_000, 10)) == data[400_000:400_010]
    assert reader.store.stats.retries == 1
    server.faults.errors = 1
    server.faults.error_body = s3_error("AccessDenied", "No.")
    with pytest.raises(StorageError, match=r"s3://data/random.bin: HTTP 403 .*AccessDenied: No\."):
        reader.read_sync(650_000, 10)
    assert reader.store.stats.retries == 1  # a refusal is not retried


def test_s3_error_codes_that_mean_try_again_are_retried(s3_reader, s3_uploaded, data) -> None:  # type: ignore[no-untyped-def]
    """S3 answers some transient failures with a 4xx status: 400 RequestTimeout."""
    open_reader, server = s3_reader
    reader = open_reader(f"{s3_uploaded}/random.bin", backoff=0.01)
    reader.size_sync()
    server.faults.errors, server.faults.error_status = 2, 400
    server.faults.error_body = s3_error("RequestTimeout", "Idle.")
    assert bytes(reader.read_sync(5000, 10)) == data[5000:5010]
    assert reader.store.stats.retries == 2


def test_credentials_from_a_profile_sign_the_urls(  # type: ignore[no-untyped-def]
    s3_servers, s3_uploaded, make_store, data, tmp_path, monkeypatch
) -> None:
    """``profile=`` takes the keys from the AWS config files; SeaweedFS checks
    the signature, so the read works only if they signed the presigned URL."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[streamer-test]\naws_access_key_id = test-key-id\naws_secret_access_key = {SECRET}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    server = s3_servers("seaweedfs")
    server.reset()
    store = S3Store(
        "s3", {"endpoint_url": server.url, "profile": "streamer-test", "region_name": "us-east-1"}
    )
    try:
        assert bytes(store.reader(f"{s3_uploaded}/random.bin").read_sync(7, 5)) == data[7:12]
        assert "X-Amz-Credential=test-key-id" in urllib.parse.unquote(server.ranged()[0].path)
    finally:
        run_sync(store._close_on_loop())


def test_anonymous_urls_carry_no_signature(  # type: ignore[no-untyped-def]
    s3_servers, s3_uploaded, moto_endpoint, data
) -> None:
    """``anon=True``: plain URLs. A public object reads (moto, with a
    public-read ACL); a private one is refused in one clear line."""
    admin = s3_client(moto_endpoint, "test-key-id", SECRET)
    admin.create_bucket(Bucket="public")  # of its own: the shared bucket's listings stay
    admin.put_object(Bucket="public", Key="random.bin", Body=data, ACL="public-read")
    for kind, bucket in (("moto", "public"), ("moto", s3_uploaded), ("seaweedfs", s3_uploaded)):
        server = s3_servers(kind)
        server.reset()
        store = S3Store("s3", {"endpoint_url": server.url, "anon": True, "attempts": 1})
        reader = store.reader(f"{bucket}/random.bin", size=len(data))
        try:
            if bucket == "public":
                assert bytes(reader.read_sync(7, 5)) == data[7:12]
            else:
                with pytest.raises(StorageError, match=r"s3://data/random.bin: HTTP 403"):
                    reader.read_sync(7, 5)
        finally:
            run_sync(store._close_on_loop())
        (get,) = server.ranged()
        assert "?" not in get.path and "Authorization" not in get.headers


def test_urls_are_signed_anew_when_their_reuse_time_is_over(  # type: ignore[no-untyped-def]
    s3_servers, s3_uploaded, make_store, storage_root, monkeypatch
) -> None:
    """With no reuse time every GET is presigned anew (and the table of URLs
    pruned past ``MAX_URLS``); SeaweedFS checks every signature."""
    import streamer.storage.s3 as s3_module

    monkeypatch.setattr(s3_module, "URL_REUSE", 0.0)
    monkeypatch.setattr(s3_module, "MAX_URLS", 2)
    server = s3_servers("seaweedfs")
    server.reset()
    store = make_store("s3", server.url, block_size=64 * 1024)
    # Shards of the session's packed dataset: every server holds them.
    shards = sorted((storage_root / "packed").rglob("*.wsds"))
    names = [p.relative_to(storage_root).as_posix() for p in shards][:4]
    for name in names * 2:
        reader = store.reader(f"{s3_uploaded}/{name}")
        size = reader.size_sync()
        expected = (storage_root / name).read_bytes()[: min(size, 100)]
        assert bytes(reader.fetch_many_sync([(0, len(expected))])[0]) == expected
    signatures = {r.path.rpartition("X-Amz-Signature=")[2] for r in server.ranged()}
    assert len(names) == 4 and len(signatures) >= 4


def test_https_endpoints_check_certificates_as_botocore_does(  # type: ignore[no-untyped-def]
    moto_endpoint, s3_uploaded, make_store, data, self_signed, monkeypatch
) -> None:
    """An HTTPS endpoint with a self-signed certificate: refused by default
    (one clear error), read with ``verify=<its certificate>``, with
    ``AWS_CA_BUNDLE`` set, or with ``verify=False``."""
    cert, context = self_signed
    server = LoopbackServer(proxy_handler(moto_endpoint), ssl_context=context).start()
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    try:
        path = f"{s3_uploaded}/random.bin"
        refused = make_store("s3", server.url, give_up_after=30)
        started = time.monotonic()  # not retried: no retry makes it verify
        for read in (
            lambda: refused.reader(path, size=len(data)).read_sync(0, 10),  # a GET
            lambda: refused.reader(path).size_sync(),  # a HEAD, through botocore
        ):
            with pytest.raises(
                StorageError, match=r"^s3://data/random.bin: .*certificate does not"
            ):
                read()
        assert time.monotonic() - started < 5 and refused.stats.retries == 0
        for options in ({"verify": str(cert)}, {"verify": False}):
            reader = make_store("s3", server.url, **options).reader(path, size=len(data))
            assert bytes(reader.read_sync(100, 10)) == data[100:110]
        monkeypatch.setenv("AWS_CA_BUNDLE", str(cert))
        reader = make_store("s3", server.url).reader(path, size=len(data))
        assert bytes(reader.read_sync(200, 10)) == data[200:210]
        assert len(server.ranged()) == 3  # the refused one never got a request through
    finally:
        server.stop()


def test_a_url_signed_for_the_wrong_region_learns_the_region_and_retries(  # type: ignore[no-untyped-def]
    s3_reader, s3_uploaded, data
) -> None:
    """Without ``region_name`` a URL may be signed for another region than
    the bucket's: S3 answers 400 AuthorizationHeaderMalformed (or 301). One
    HEAD of the bucket through botocore (whose redirector remembers the
    region), a new URL, a retry."""
    open_reader, server = s3_reader
    reader = open_reader(f"{s3_uploaded}/random.bin", backoff=0.01)
    reader.size_sync()
    server.reset()
    server.faults.errors, server.faults.error_status = 1, 400
    server.faults.error_body = s3_error(
        "AuthorizationHeaderMalformed",
        "the region 'us-east-1' is wrong; expecting 'eu-west-1'",
        Region="eu-west-1",
    )
    assert bytes(reader.read_sync(9000, 10)) == data[9000:9010]
    assert reader.store.stats.retries == 1
    assert [(r.method, r.path.partition("?")[0]) for r in server.requests][:2] == [
        ("GET", "/data/random.bin"),
        ("HEAD", "/data"),
    ]


def _listing_requests(server: Any) -> list[Any]:
    return [r for r in server.requests if r.method == "GET" and "list-type=2" in r.path]


def test_a_listing_in_pages_is_read_to_the_end_a_request_a_page(  # type: ignore[no-untyped-def]
    s3_any, make_store, s3_uploaded, storage_root, monkeypatch
) -> None:
    """Each page of a long listing is its own request (its own timeout and
    retries): read in one attempt, a prefix of a million keys (a thousand
    pages) outlasted the attempt's timeout and the listing failed. Here
    five pages (the last maybe short), every page slow, the whole listing
    over the timeout."""
    entries = sorted(e.name for e in make_store("s3", s3_any.url).list_sync(s3_uploaded))
    assert {p.name for p in storage_root.iterdir()} <= set(entries)
    per_page = max(1, len(entries) // 5)
    pages = -(-len(entries) // per_page)
    monkeypatch.setattr(s3, "LIST_PAGE_KEYS", per_page)
    s3_any.reset()
    # 0.6 s a page against a 2 s timeout (0.3 s against 1 s once ran out on
    # a loaded CI machine with rclone); the pages together outlast it.
    s3_any.faults.only_ranged, s3_any.faults.latency = False, 0.6
    store = make_store("s3", s3_any.url, timeout=2.0, attempts=1)
    assert pages * 0.6 > 2.0
    assert sorted(e.name for e in store.list_sync(s3_uploaded)) == entries
    assert len(_listing_requests(s3_any)) == pages


def test_a_listing_that_goes_on_without_a_token_fails_clearly(  # type: ignore[no-untyped-def]
    s3_any, make_store, s3_uploaded, monkeypatch
) -> None:
    """A server that says its listing is truncated without a continuation
    token: the first page was taken for the whole listing (botocore's
    paginator stops there), a dataset silently short of shards."""
    monkeypatch.setattr(s3, "LIST_PAGE_KEYS", 1)
    s3_any.faults.drop_continuation = True
    store = make_store("s3", s3_any.url)
    with pytest.raises(StorageError, match="goes on after 1 entries but gives no continuation"):
        store.list_sync(s3_uploaded)


def test_a_key_listed_twice_is_one_entry(s3_any, make_store, s3_uploaded, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Pages that name a key again (overlapping pages): the listing has each
    name once. Twice, a shard listed twice was opened twice and a dataset
    over it held every key of that shard twice."""
    entries = sorted(e.name for e in make_store("s3", s3_any.url).list_sync(s3_uploaded))
    monkeypatch.setattr(s3, "LIST_PAGE_KEYS", 2)
    s3_any.reset()
    s3_any.faults.repeat_listed = True
    store = make_store("s3", s3_any.url)
    assert sorted(e.name for e in store.list_sync(s3_uploaded)) == entries
    assert len(_listing_requests(s3_any)) > 1


@pytest.mark.parametrize("segment", [".", ".."])
def test_a_key_with_a_dot_segment_reads_that_key(moto_endpoint, make_store, segment) -> None:  # type: ignore[no-untyped-def]
    """S3 keys are opaque: ``dots/a/./b`` is not ``dots/a/b``, nor is
    ``dots/a/../b`` ``dots/b``. The GET goes to the URL botocore signed as
    it is: a URL parser's dot-segment removal (RFC 3986) sent it to the
    other key, whose bytes (of the same size here) were read as this one's
    without a word (moto, an anonymous bucket: nothing checks the path
    against the signature; AWS refused it as SignatureDoesNotMatch)."""
    client = s3_client(moto_endpoint, "test-key-id", SECRET)
    client.create_bucket(Bucket="dots")
    key = f"a/{segment}/b/obj.bin"
    client.put_object(Bucket="dots", Key=key, Body=b"the key with a dot!")
    for other in ("a/b/obj.bin", "b/obj.bin"):
        client.put_object(Bucket="dots", Key=other, Body=b"another key, not me")
    store = make_store("s3", moto_endpoint)
    reader = store.reader(f"dots/{key}")
    assert bytes(reader.read_sync(0, reader.size_sync())) == b"the key with a dot!"
