"""A known secret never shows up in logs, reprs, error messages or tracebacks."""

from __future__ import annotations

import asyncio
import base64
import gc
import logging
import os
import subprocess
import sys
import traceback
import urllib.parse

import numpy as np
import pytest
from helpers import S3_KINDS, SECRET, everything_said

from streamer import open_dataset
from streamer.dataset.dataset import Dataset
from streamer.errors import LayoutError, StorageError, StreamerError, UnsupportedURLError
from streamer.storage._urls import redact, register_secret


def failures(reader) -> list[BaseException]:  # type: ignore[no-untyped-def]
    """Errors from a read that exhausts its retries, and from a missing object."""
    found = []
    for action in (
        lambda: reader.read_sync(0, 10),
        lambda: reader.store.reader(reader.path + "x").size_sync(),
    ):
        with pytest.raises(StorageError) as caught:
            action()
        found.append(caught.value)
    return found


def test_s3_secret_from_options_stays_secret(s3, s3_uploaded, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    options = {"endpoint_url": s3.url, "key": "test-key-id", "secret": SECRET}
    dataset = open_dataset(f"s3://{s3_uploaded}/packed", **options, attempts=2, backoff=0.01)
    blob = dataset.blob(next(iter(dataset)))
    reader = dataset.store.reader(f"{s3_uploaded}/random.bin")
    s3.faults.errors = 10
    errors = failures(reader)
    said = everything_said(caplog, dataset, dataset.store, reader, blob, errors=errors)
    assert "503" in said and "not found" in said and "random.bin" in said
    assert SECRET not in said


def test_s3_secret_from_the_environment_stays_secret(s3, s3_uploaded, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.url)
    dataset = open_dataset(f"s3://{s3_uploaded}/packed", attempts=2, backoff=0.01)
    assert len(dataset) > 0
    reader = dataset.store.reader(f"{s3_uploaded}/random.bin")
    s3.faults.errors = 10
    said = everything_said(caplog, dataset, dataset.store, reader, errors=failures(reader))
    assert s3.url in said
    assert SECRET not in said


def test_http_signatures_tokens_and_passwords_stay_secret(http, caplog, make_store) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    store = make_store(
        "http", headers={"Authorization": f"Bearer {SECRET}"}, attempts=2, backoff=0.01
    )
    host = http.url.removeprefix("http://")
    presigned = f"{http.url}/random.bin?X-Amz-Signature={SECRET}&token={SECRET}"
    reader = store.reader(presigned)
    assert reader.size_sync() == 700_001
    assert http.requests[-1].headers["Authorization"] == f"Bearer {SECRET}"  # it was sent
    http.faults.errors = 10
    errors = failures(reader)
    http.faults.ignore_range = True
    with pytest.raises(StorageError) as ignored:
        store.reader(presigned, size=700_001).read_sync(0, 1)
    http.reset()
    basic = make_store("http", attempts=1)
    dataset = Dataset(f"http://user:{SECRET}@{host}/packed", store=basic)
    assert len(dataset) > 0 and "Authorization" in http.requests[0].headers
    with pytest.raises(StorageError) as missing:
        basic.reader(f"http://user:{SECRET}@{host}/nope").size_sync()
    said = everything_said(
        caplog, reader, store, dataset, errors=[*errors, ignored.value, missing.value]
    )
    assert f"{http.url}/random.bin?…" in said
    assert SECRET not in said


def test_a_redirect_to_another_host_gets_the_range_but_no_credentials(  # type: ignore[no-untyped-def]
    http, storage_root, caplog, make_store
) -> None:
    """An HTTP front that redirects every GET to presigned object storage on
    another host: the Range follows, the store's ``headers`` (all of them
    credentials, an API key as much as ``Authorization``) do not, and the
    presigned query shows up nowhere."""
    from testkit.servers import LoopbackServer

    data = (storage_root / "random.bin").read_bytes()
    signed = f"X-Amz-Signature={SECRET}&token={SECRET}"

    async def redirect(request):  # type: ignore[no-untyped-def]
        return 302, {"Location": f"http://localhost:{http.port}{request.path}?{signed}"}, b""

    front = LoopbackServer(redirect).start()
    try:
        caplog.set_level(logging.DEBUG)
        headers = {"Authorization": f"Bearer {SECRET}", "X-Api-Key": f"key-{SECRET}"}
        store = make_store("http", headers=headers, block_size=4096, attempts=1)
        reader = store.reader(f"{front.url}/random.bin")
        assert bytes(reader.read_sync(5000, 10_000)) == data[5000:15_000]
        assert [r.range for r in front.ranged()] == ["bytes=0-0", "bytes=4096-16383"]
        assert all(r.headers["X-Api-Key"] == f"key-{SECRET}" for r in front.ranged())
        assert [r.range for r in http.ranged()] == ["bytes=0-0", "bytes=4096-16383"]
        assert all(r.path.endswith(signed) for r in http.ranged())
        sent = [name.lower() for r in http.requests for name in r.headers]
        assert "authorization" not in sent and "x-api-key" not in sent
        http.faults.errors, http.faults.echo_reason = 1, True
        with pytest.raises(StorageError) as refused:
            reader.read_sync(200_000, 10)
        assert SECRET not in everything_said(caplog, reader, store, errors=[refused.value])
    finally:
        front.stop()


def test_punctuation_after_a_url_made_safe_is_kept() -> None:
    said = redact(f"http://h/a.wsds?X-Amz-Signature={SECRET}: ignored; see http://u:p@h/b.")
    assert said == "http://h/a.wsds?…: ignored; see http://h/b."
    assert (
        redact("remote URLs (s3://, b2://, http://...)") == "remote URLs (s3://, b2://, http://...)"
    )


def test_a_redirect_within_the_origin_keeps_the_urls_basic_auth(  # type: ignore[no-untyped-def]
    storage_root, caplog, make_store
) -> None:
    """A server behind basic auth that redirects within itself (``latest/``
    to ``v3/``): the URL's user and password go with the redirect, as the
    store's ``headers`` do (aiohttp drops the user info from the URL it
    redirects from: every such dataset answered 401); never to another host."""
    from testkit.servers import LoopbackServer, file_handler

    files = file_handler(storage_root)
    basic = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()

    async def handle(request):  # type: ignore[no-untyped-def]
        if request.headers.get("Authorization") != basic:
            return 401, {}, b"who are you"
        if request.path.startswith("/latest/"):
            return 302, {"Location": request.path.replace("/latest/", "/packed/", 1)}, b""
        return await files(request)

    server = LoopbackServer(handle).start()
    try:
        caplog.set_level(logging.DEBUG)
        host = server.url.removeprefix("http://")
        dataset = Dataset(f"http://user:{SECRET}@{host}/latest", store=make_store("http"))
        local = open_dataset(storage_root / "packed")
        key = next(iter(local))
        assert np.array_equal(dataset.read_crop(key, 0.1, 0.3), local.read_crop(key, 0.1, 0.3))
        redirected = [r for r in server.requests if r.path.startswith("/packed/")]
        assert redirected and all(r.headers["Authorization"] == basic for r in redirected)
        assert SECRET not in everything_said(caplog, dataset)
    finally:
        server.stop()


# -- one redaction for every form a credential takes -----------------------------------

#: The marker in each credential form (distinct values, one marker to hunt for).
KEY_ID, SECRET_KEY, TOKEN = f"AKID{SECRET}", f"KEY{SECRET}", f"TOKEN{SECRET}"


def said_by(errors: list[BaseException]) -> str:
    """What an error shows, every way: str, repr, args, fields, traceback."""
    said = []
    for error in errors:
        said += [str(error), repr(error), repr(error.args), repr(vars(error))]
        said.append("".join(traceback.format_exception(error)))
    return "\n".join(said)


def test_redact_masks_every_credential_form() -> None:
    register_secret(TOKEN)
    samples = [
        f"GET https://h.example/k?X-Amz-Credential={SECRET}%2F2026&X-Amz-Signature={SECRET}",
        f"see http://user:{SECRET}@host:8080/data/ for details",
        f"'Authorization': b'AWS4-HMAC-SHA256 Credential={SECRET}/2026/us-east-1/s3/aws4_request, "
        f"SignedHeaders=host, Signature={SECRET}', 'X-Amz-Security-Token': b'{SECRET}'",
        f"x-amz-security-token:{SECRET}\nhost:127.0.0.1",
        f"Authorization: Bearer {SECRET}",
        f"token={SECRET}&sig={SECRET}",
        f"a session token {TOKEN} turned up as a bare value",
    ]
    for sample in samples:
        masked = redact(sample)
        assert SECRET not in masked, masked
    assert redact(samples[1]) == "see http://host:8080/data/ for details"
    assert redact(samples[4]) == "Authorization: ***"
    assert redact("GET s3://bucket/key bytes=0-9: 503 SlowDown") == (
        "GET s3://bucket/key bytes=0-9: 503 SlowDown"  # nothing else is touched
    )


def test_redact_masks_whole_base64_credentials_and_their_url_encoded_forms() -> None:
    """AWS secret keys and session tokens are base64: ``/`` and ``+`` in
    them. A field's value was masked up to its first ``/`` (the rest, the
    marker here, stayed), and a registered secret percent-encoded (as in a
    query or a form body) was not recognised."""
    token = f"IQoJb3Jp/Z2lu+{SECRET}/tail=="
    key = f"wJalrXUtnFEMI/K7MDENG+{SECRET}x"
    register_secret(token, key)
    samples = [
        f"'X-Amz-Security-Token': b'{token}'",
        f"x-amz-security-token:{token}\nhost:127.0.0.1",
        f"token: {token}",
        f"aws_secret_access_key={key}",
        f"signed with {urllib.parse.quote(key, safe='')} and {urllib.parse.quote_plus(token)}",
        f"body: secret%3D{urllib.parse.quote(key)}",
    ]
    for sample in samples:
        masked = redact(sample)
        assert SECRET not in masked and "tail==" not in masked, masked


def test_a_header_token_is_redacted_without_its_scheme(make_store) -> None:  # type: ignore[no-untyped-def]
    """A server may quote the token of ``Authorization: Bearer TOKEN`` alone
    ("invalid token TOKEN"): the store registered the whole header value
    only, so the bare token went through."""
    token = f"bearer-only-{SECRET[::-1]}"
    make_store("http", headers={"Authorization": f"Bearer {token}", "X-Api-Key": "k3y-0123456"})
    assert redact(f"401 invalid token {token} for k3y-0123456") == "401 invalid token *** for ***"


def test_a_url_password_is_redacted_bare_and_as_basic_auth(http) -> None:  # type: ignore[no-untyped-def]
    """``http://user:PASSWORD@host/``: aiohttp sends ``Basic base64(user:PASSWORD)``.
    A server's message quoting the password or that credential alone (no
    ``Authorization:`` before it) went through."""
    import base64

    password = f"pw-{SECRET[::-1]}-url"
    host = http.url.removeprefix("http://")
    assert len(open_dataset(f"http://user:{password}@{host}/packed")) > 0
    basic = base64.b64encode(f"user:{password}".encode()).decode()
    said = redact(f"401: credential {basic} (password {password}) refused")
    assert said == "401: credential *** (password ***) refused"


def test_a_dataset_url_with_credentials_fails_without_showing_them(http) -> None:  # type: ignore[no-untyped-def]
    """The listing error of a dataset opened by a presigned or user:password URL
    (issue 13: its LayoutError carried the raw URL)."""
    host = http.url.removeprefix("http://")
    query = f"X-Amz-Credential={SECRET}&X-Amz-Signature={SECRET}&X-Amz-Security-Token={SECRET}"
    errors = []
    for url in (
        f"http://user:{SECRET}@{host}/nope?{query}",
        f"http://{host}/nope/?{query}",
    ):
        with pytest.raises(LayoutError) as caught:
            open_dataset(url)
        errors.append(caught.value)
    assert "cannot be listed" in str(errors[0]) and host in str(errors[0])
    assert SECRET not in said_by(errors)


def test_a_reason_phrase_echoing_the_url_is_redacted(http, make_store) -> None:  # type: ignore[no-untyped-def]
    """Servers may repeat the request line in their status line's reason
    phrase ("403 Refused /data?token=..."): it is server text, redacted."""
    http.go_down(3600, status=403)
    http.faults.echo_reason = True
    store = make_store("http", attempts=1)
    query = f"X-Amz-Credential={SECRET}&X-Amz-Signature={SECRET}&token={SECRET}"
    # CDN tokens under names of their own (Akamai, Alibaba/Tencent, CloudFront's Policy)
    query += f"&hdnts=exp%3D1700000000~acl%3D/*~hmac%3D{SECRET}&auth_key=1700000000-0-0-{SECRET}"
    query += f"&Policy={SECRET}Zm9v"
    errors = []
    for url in (f"{http.url}/random.bin?{query}", f"{http.url}/packed?{query}"):
        with pytest.raises(StorageError) as caught:
            store.reader(url).size_sync()
        errors.append(caught.value)
    with pytest.raises(StorageError) as listing:  # refused, not missing: the store's error
        Dataset(f"{http.url}/packed?{query}", store=store)
    assert "403 Refused /" in str(errors[0])
    assert SECRET not in said_by([*errors, listing.value])


def test_botocore_debug_output_is_redacted(s3, s3_uploaded, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Key id, secret key and session token from the environment, at DEBUG:
    botocore prints the key id and the token; the log records carry ***."""
    caplog.set_level(logging.DEBUG)
    for name, value in (
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_SESSION_TOKEN", TOKEN),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", s3.url),
    ):
        monkeypatch.setenv(name, value)
    # Options of its own: a new store, whose client signs with these variables.
    dataset = open_dataset(f"s3://{s3_uploaded}/packed", attempts=2, backoff=0.011)
    blob = dataset.blob(next(iter(dataset)))
    assert len(bytes(blob.read_range(0, 100))) == 100
    sent = s3.requests[-1]
    assert f"X-Amz-Security-Token={TOKEN}" in urllib.parse.unquote(sent.path)  # GETs are presigned
    reader = dataset.store.reader(f"{s3_uploaded}/random.bin")
    s3.faults.errors = 10
    errors = failures(reader)
    botocore = [r.getMessage() for r in caplog.records if r.name.startswith("botocore")]
    assert any("X-Amz-Security-Token" in m and "***" in m for m in botocore)
    said = everything_said(caplog, dataset, dataset.store, reader, blob) + said_by(errors)
    assert SECRET not in said


@pytest.mark.parametrize("kind", S3_KINDS)
def test_presigned_urls_stay_secret(kind, s3_servers, s3_uploaded, make_store, caplog) -> None:  # type: ignore[no-untyped-def]
    """GETs go by presigned URL, whose query holds the key id and a signature
    good for an hour: neither reaches a log, repr or error, whether the
    server answers, fails (503) or refuses (403)."""
    caplog.set_level(logging.DEBUG)
    server = s3_servers(kind)
    server.reset()
    caplog.clear()  # what the fixtures said setting up (boto3's own uploads), if they ran here
    store = make_store("s3", server.url, attempts=2, backoff=0.01)
    reader = store.reader(f"{s3_uploaded}/random.bin")
    assert len(bytes(reader.read_sync(600_000, 10))) == 10  # a block failures() does not read
    (get,) = server.ranged()
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(get.path).query)
    signature = query["X-Amz-Signature"][0]
    assert query["X-Amz-Credential"][0].startswith("test-key-id/")
    server.faults.errors = 10
    errors = failures(reader)
    server.go_down(3600, status=403)
    with pytest.raises(StorageError) as refused:
        store.reader(f"{s3_uploaded}/packed/audio/shard-000000.wsds").read_tail_sync(100)
    server.reset()
    said = everything_said(caplog, store, reader, errors=[*errors, refused.value])
    assert "503" in said and "403" in said and "random.bin" in said
    assert signature not in said and "test-key-id" not in said and SECRET not in said


def run_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``streamer -vv ARGV`` in a new process (DEBUG logging on stderr)."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "streamer.cli", "-vv", *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def test_the_cli_keeps_credentials_off_stderr(http, s3, s3_uploaded) -> None:  # type: ignore[no-untyped-def]
    """``streamer -vv inspect URL`` against servers that refuse everything (403):
    an HTTP URL with user:password and a presigned query, and an S3 dataset
    with the marker in every AWS variable."""
    host = http.url.removeprefix("http://")
    http.go_down(3600, status=403)
    url = f"http://user:{SECRET}@{host}/packed?X-Amz-Signature={SECRET}&token={SECRET}"
    over_http = run_cli("inspect", url)
    s3.go_down(3600, status=403)
    aws = {
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_SESSION_TOKEN": TOKEN,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    over_s3 = run_cli("inspect", f"s3://{s3_uploaded}/packed", "--endpoint-url", s3.url, env=aws)
    for done in (over_http, over_s3):
        assert done.returncode == 1 and "streamer inspect: error:" in done.stderr
        assert "403" in done.stderr and SECRET not in done.stderr + done.stdout
    assert "DEBUG botocore" in over_s3.stderr  # its debug output was there, redacted


@pytest.mark.parametrize("scheme", ["s3", "b2"])
@pytest.mark.parametrize("secret", [SECRET_KEY, SECRET_KEY[:10] + "/" + SECRET_KEY[10:]])
def test_an_s3_url_with_user_info_is_refused_without_showing_it(scheme, secret, s3) -> None:  # type: ignore[no-untyped-def]
    """``s3://key:secret@bucket/...`` put the secret in the bucket name, which
    botocore's parameter check quoted back in its message; a secret with a
    '/' (half of AWS's) made the bucket "key:secret-up-to-it"."""
    url = f"{scheme}://{KEY_ID}:{secret}@bucket/packed"
    with pytest.raises(StorageError, match="carry no credentials") as caught:
        open_dataset(url, endpoint_url=s3.url)
    assert SECRET not in said_by([caught.value]) and KEY_ID not in said_by([caught.value])
    done = run_cli("inspect", url, "--endpoint-url", s3.url)
    assert done.returncode == 1 and "carry no credentials" in done.stderr
    assert SECRET not in done.stderr + done.stdout and KEY_ID not in done.stderr + done.stdout
    assert secret[:10] not in done.stderr + done.stdout


def test_a_bucket_name_no_bucket_has_is_a_storage_error(s3) -> None:  # type: ignore[no-untyped-def]
    """botocore's own parameter check raised outside ``StreamerError``."""
    with pytest.raises(StorageError, match=r"s3://no\*such: not a bucket name"):
        open_dataset("s3://no*such/packed", endpoint_url=s3.url)


def test_no_credentials_is_one_line_naming_the_url(s3, s3_uploaded, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No AWS credentials anywhere: the command says which URL and where
    credentials come from, in one line (signing a GET raised botocore's bare
    NoCredentialsError, naming nothing)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    url = f"s3://{s3_uploaded}/packed"
    command = [sys.executable, "-m", "streamer.cli", "inspect", url, "--endpoint-url", s3.url]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no credentials found" in lines[0] and url in lines[0], lines


def test_an_empty_remote_source_is_named_without_its_credentials(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Packing an HTTP folder that lists no files, by a URL with user:password
    and a token: ``pack`` and a pack job's ``pack_parts`` said "no files" with
    the raw URL; a job's ``describe`` passed any foreign message on as it was."""
    from streamer import jobs
    from streamer.errors import PackError
    from streamer.write.pack import pack
    from testkit.servers import LoopbackServer, file_handler

    (tmp_path / "empty").mkdir()
    server = LoopbackServer(file_handler(tmp_path)).start()
    try:
        host = server.url.removeprefix("http://")
        src = f"http://user:{SECRET}@{host}/empty/?token={SECRET}"
        with pytest.raises(StreamerError, match="no files to pack") as parts:
            jobs.pack_parts(src, 2)
        with pytest.raises(PackError, match="holds no files") as whole:
            pack(src, tmp_path / "out", progress=False)
    finally:
        server.stop()
    assert f"http://{host}/empty/?…" in str(parts.value)
    foreign = jobs.describe(ValueError(f"cannot open {src}: 'Authorization': 'Bearer {SECRET}'"))
    assert foreign.startswith(f"ValueError: cannot open http://{host}/empty/?…"), foreign
    assert SECRET not in said_by([parts.value, whole.value]) + foreign


def test_the_traceback_of_minus_v_is_redacted() -> None:
    """``-v`` prints the traceback: the frames' exception messages, chained
    causes included, are redacted like the error line (the traceback went
    out as Python formats it: here the URL as typed, password and token)."""
    url = f"http://user:{SECRET}@127.0.0.1:1/run.timing.json?token={SECRET}"
    done = run_cli("timing", "report", url)
    assert done.returncode == 1 and "Traceback" in done.stderr
    assert (
        "FileNotFoundError" in done.stderr and "http://127.0.0.1:1/run.timing.json?…" in done.stderr
    )
    assert SECRET not in done.stderr + done.stdout


@pytest.mark.parametrize(
    "line",
    [
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG/bPxRfiCY",
        "aws_secret_access_key = wJalrXUtnFEMIK7MDENG/bPxRfiCY",
        "AWS_SESSION_TOKEN=wJalrXUtnFEMIK7MDENG/bPxRfiCY",
        "{'secret_key': 'wJalrXUtnFEMIK7MDENG/bPxRfiCY'}",
    ],
)
def test_redact_masks_environment_style_credential_names(line: str) -> None:
    """An environment dump (a Modal or Kubernetes pod's ``env``) names keys
    with an ``AWS_`` prefix: ``\\bsecret`` never matched after the ``_``."""
    from streamer.storage import redact

    assert "wJalrXUtnFEMIK7MDENG" not in redact(line)


def test_asyncio_error_records_are_redacted(make_store, caplog) -> None:  # type: ignore[no-untyped-def]
    """asyncio logs what it finds wrong itself ("Task exception was never
    retrieved", a callback's error) at ERROR with the exception's repr and
    traceback: a store error's URL kept its password and token there."""
    make_store("http")  # a network store redacts the loggers' records
    url = f"http://user:{SECRET}@127.0.0.1:1/x?token={SECRET}"

    async def fail() -> None:
        raise StorageError(f"GET {url}: refused")

    async def main() -> None:
        asyncio.ensure_future(fail())  # noqa: RUF006 (its error is left unretrieved)
        await asyncio.sleep(0.01)
        gc.collect()

    caplog.set_level(logging.ERROR, logger="asyncio")
    asyncio.run(main())
    assert "never retrieved" in caplog.text and "http://127.0.0.1:1/x?…" in caplog.text
    assert SECRET not in caplog.text


def test_an_endpoint_with_user_info_fails_at_once_without_showing_it(s3) -> None:  # type: ignore[no-untyped-def]
    """``--endpoint-url http://user:password@host``: every request is signed
    with the store's key, which aiohttp refuses to send beside a URL's
    credentials, so none could ever go; each failed as an outage, retried
    for the whole budget (30 s on the command line, 300 s in a training
    run). Refused before any request, in one line (exit 2), as is a URL's
    user info beside an ``Authorization`` header of an HTTP store."""
    endpoint = s3.url.replace("://", f"://eve:{SECRET}@")
    with pytest.raises(UnsupportedURLError, match="an endpoint URL carries no credentials") as e:
        keys = {"key": "test-key-id", "secret": SECRET, "give_up_after": 2}
        open_dataset("s3://data/packed", endpoint_url=endpoint, **keys)
    assert SECRET not in said_by([e.value]) and s3.requests == []
    done = run_cli("inspect", "s3://data/packed", "--endpoint-url", endpoint)  # -vv
    assert done.returncode == 2 and SECRET not in done.stderr
    assert "inspect: error: s3:// endpoint http://127.0.0.1:" in done.stderr.splitlines()[-1]
    with pytest.raises(UnsupportedURLError, match="user info and the Authorization header"):
        open_dataset(f"http://u:{SECRET}@127.0.0.1:1/x", headers={"Authorization": "Bearer t"})
