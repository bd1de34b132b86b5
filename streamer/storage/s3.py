"""S3-compatible object stores (AWS, Backblaze B2, MinIO, R2, ...).

``s3://bucket/key``. The endpoint comes from the ``endpoint_url`` option
(``--endpoint-url``), else ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``,
else the profile's in the AWS config file (as botocore resolves them);
credentials and region from the options or the standard AWS chain
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_DEFAULT_REGION``, ``~/.aws``). ``b2://bucket/key`` is the same store
with Backblaze B2 defaults (``B2Store``).

The request path was chosen by measuring client CPU per ranged GET
(``benchmarks/bench_s3_client.py``: 256 KiB GETs, 16 in flight, SeaweedFS
on loopback): aiobotocore and s3fs cost 1.4-2.2 ms each, obstore 0.4 ms
(but it refuses a 200 answer to a ranged GET, which rclone's S3 server
sends), a URL presigned by botocore per request 0.8 ms, and one presigned
URL per object reused by plain aiohttp GETs 0.3-0.4 ms. So every GET goes
by a URL that botocore presigned for its object (SigV4; the signature
covers host and path, so any ``Range`` rides on it), signed anew every few
minutes as credentials refresh, over one aiohttp session per store and
process. botocore keeps the rest: the AWS credential chain, endpoints and
addressing styles, presigning, listings, sizes and writes (one PutObject,
or a multipart upload for files over ``multipart_threshold``), all rare.
botocore's own retries are off, so ``retry.py`` alone decides (and
counts). Presigned URLs hold the key id, a session token and a
signature: they are never shown (errors name ``s3://bucket/key``), and
the signature expires within the hour.

Every GET carries exactly one ``Range`` (S3 serves no multi-range
requests), and a suffix range ``bytes=-N`` answers the object's size in the
same round trip.

S3 implementations differ in what a ranged GET gets back, and every answer
below is read right (``tests/storage`` runs against moto, SeaweedFS and
rclone's S3 server):

* 206, or 200 with a ``Content-Range`` (rclone): the range it names;
* 200 without a ``Content-Range``: the endpoint cannot serve ranges, a
  ``StorageError`` saying so (reading whole objects block by block would
  silently cost the object's size per block);
* a whole-object checksum on a ranged answer (rclone): it cannot check a
  range, so the ``Content-Range`` and the body length are checked instead
  (botocore, for what it still reads, validates checksums only "when_required");
* 416 to a suffix range longer than the object (rclone, Ceph): the object
  is smaller than the suffix asked for, so it is read by its size
  (``RemoteStore._suffix``);
* a 206 carrying fewer bytes than asked (a gateway that caps range sizes):
  the rest is asked for anew (``RemoteStore._fetch_from``);
* HEAD refused (a policy or proxy allowing GET only): the size comes from a
  one-byte GET's ``Content-Range``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

import aiohttp
import botocore.exceptions
import botocore.session
import yarl
from aiobotocore.session import get_session
from botocore import UNSIGNED
from botocore.config import Config
from botocore.configprovider import ConfiguredEndpointProvider

from ..errors import StorageError, UnsupportedURLError
from ._urls import redact, register_secret, safe_url
from .base import Entry, NotFound, Source, Stat
from .http import (
    UNSUPPORTED,
    RangeGetStore,
    RangeNotSatisfiable,
    Span,
    describe,
    open_session,
    proxy_for,
    ranged_get,
    tls_failure,
    unresolved_host,
    version_tags,
)
from .loop import run_sync
from .remote import Answer, MissingBucket
from .retry import TransientError, parse_retry_after
from .throttle import is_timeout

__all__ = ["B2Store", "S3Store", "UploadLost"]

log = logging.getLogger("streamer.storage")

_CREDENTIAL_ALIASES = {
    "key": "aws_access_key_id",
    "secret": "aws_secret_access_key",
    "token": "aws_session_token",
}
_CLIENT_OPTIONS = {
    "endpoint_url",
    "verify",
    "region_name",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
}
_OTHER_OPTIONS = {
    "anon",
    "profile",
    "config_kwargs",
    "client_kwargs",
    "multipart_threshold",
    "multipart_part_size",
}
#: Objects stored from a file larger than this go up in parts (S3 takes at
#: most 5 GB in one PutObject; parts also bound the memory a write holds).
#: What a bucket name may hold: S3's rules, with the capitals and
#: underscores of buckets made before them (and of other S3 servers).
_BUCKET = re.compile(r"[A-Za-z0-9._-]{1,255}")
MULTIPART_THRESHOLD = 64 << 20
#: Bytes per part (S3: at least 5 MiB but the last, at most 10,000 parts).
MULTIPART_PART_SIZE = 32 << 20
MAX_PARTS = 10_000
#: Parts of one upload in flight at once: memory held is this times the part size.
PARTS_IN_FLIGHT = 4
#: Times a multipart upload the server forgot (``NoSuchUpload``: restarted) is begun anew.
UPLOAD_RESTARTS = 2
_TRANSIENT_CODES = {
    "SlowDown",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
}
#: Answers that say the store is overloaded (the adaptive limit backs off, ``throttle.py``).
_CONGESTION_CODES = _TRANSIENT_CODES - {"InternalError"}
#: Presigned URLs are valid this long, and reused for a fraction of it.
#: Keys asked for per listing page (S3's own maximum; servers may send fewer).
LIST_PAGE_KEYS = 1000
URL_LIFETIME = 3600
URL_REUSE = 300.0
MAX_URLS = 10_000  # past this many, URLs past their reuse time are dropped
#: Error codes of a request signed with credentials that have since expired.
_EXPIRED_CODES = {"ExpiredToken", "TokenRefreshRequired", "RequestExpired"}
#: Error codes of a URL signed for another region than the bucket's.
_WRONG_REGION_CODES = {"AuthorizationHeaderMalformed", "PermanentRedirect", "IncorrectEndpoint"}
_ERROR_BYTES = 4096  # an error document is read up to this size
#: HEAD answers that mean "not HEAD" (a policy or proxy allowing GET only).
_HEAD_REFUSED = {403, 405, 501}
_NETWORK_ERRORS = (
    botocore.exceptions.HTTPClientError,
    botocore.exceptions.ConnectionError,
    botocore.exceptions.IncompleteReadError,
    aiohttp.ClientError,
    asyncio.IncompleteReadError,
    ConnectionError,
)


class S3Store(RangeGetStore):
    """An S3 endpoint. Store paths are ``bucket/key``.

    Backend options: ``endpoint_url``, ``region_name``, ``key`` / ``secret`` /
    ``token`` (or their ``aws_*`` names), ``profile``, ``anon`` (unsigned
    requests), ``verify`` (``False``, or a CA bundle's path: for every
    request, GETs included), ``config_kwargs`` (merged into
    ``botocore.config.Config``), ``client_kwargs`` (passed to ``create_client``).
    """

    def __init__(self, scheme: str, options: dict[str, Any]) -> None:
        super().__init__(scheme, options)
        backend = {_CREDENTIAL_ALIASES.get(k, k): v for k, v in self.backend_options.items()}
        unknown = backend.keys() - _CLIENT_OPTIONS - _OTHER_OPTIONS
        if unknown:
            raise TypeError(
                f"unknown {scheme}:// options {sorted(unknown)}; known: "
                f"{sorted(_CLIENT_OPTIONS | _OTHER_OPTIONS | set(_CREDENTIAL_ALIASES))}"
            )
        self.multipart_threshold = int(backend.pop("multipart_threshold", MULTIPART_THRESHOLD))
        self.multipart_part_size = int(backend.pop("multipart_part_size", MULTIPART_PART_SIZE))
        if self.multipart_part_size < 1 or self.multipart_threshold < 1:
            raise ValueError("multipart_threshold and multipart_part_size must be positive")
        self._profile = backend.pop("profile", None)
        self._anon = bool(backend.pop("anon", False))
        self._config_kwargs = {**self._default_config(), **backend.pop("config_kwargs", {})}
        self._client_kwargs = {**backend.pop("client_kwargs", {}), **backend}
        endpoint = self._client_kwargs.get("endpoint_url")
        if endpoint:
            _check_endpoint(scheme, endpoint)
        self._at = f" at {safe_url(endpoint)}" if endpoint else ""
        self.url = f"{scheme}://{self._at}"

    def _default_config(self) -> dict[str, Any]:
        """botocore validates a response checksum whenever one is sent, and some
        servers send the whole object's for a ranged GET (which cannot match):
        validate only when required, and check body lengths (``remote.py``).
        URLs are presigned with SigV4, which every region and S3 server takes
        (botocore may otherwise pick the legacy SigV2 for presigning)."""
        return {"response_checksum_validation": "when_required", "signature_version": "s3v4"}

    @classmethod
    def canonical_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """The remote options, with the profile the environment names
        (``AWS_PROFILE``) as the ``profile`` option and the endpoint botocore
        will use (when the options name none: ``_configured_endpoint``) as
        the ``endpoint_url`` option. Stores are shared per canonical options
        and keep their disk-cache entries apart by endpoint
        (``cache_namespace``): a process whose environment names another
        profile or endpoint later (a job runner reusing a process) gets a
        store of that one, and two servers named by profiles never share
        cached bytes (they did: a profile's endpoint was invisible here, and
        one server's blocks were served for the other's, without a request)."""
        canonical = super().canonical_options(options)
        profile = canonical.get("profile") or os.environ.get("AWS_PROFILE")
        if profile:
            canonical["profile"] = profile
        if not canonical.get("endpoint_url") and not canonical.get("client_kwargs", {}).get(
            "endpoint_url"
        ):
            canonical.pop("endpoint_url", None)
            endpoint = cls._configured_endpoint(profile)
            if endpoint:
                canonical["endpoint_url"] = endpoint
        return canonical

    @classmethod
    def _configured_endpoint(cls, profile: str | None) -> str | None:
        """The endpoint botocore configures itself (``_botocore_endpoint``)."""
        settings = tuple(os.environ.get(name) for name in _ENDPOINT_SETTINGS)
        return _botocore_endpoint(profile, settings)

    def display(self, path: str) -> str:
        return f"{self.scheme}://{path}"

    def join(self, path: str, *names: str) -> str:
        """``path/name/...`` as it stands: a key is an opaque string, so the
        folder of ``dd//y.flac`` is ``dd/`` (listed as the name ``""`` under
        ``dd``) and ``y.flac`` is in it, not in ``dd``. (``path_of`` strips
        the ``/`` a URL may end in.)"""
        return "/".join([path, *names])

    def path_of(self, scheme: str, rest: str) -> str:
        bucket = rest.strip("/").partition("/")[0]
        if "@" in bucket or ":" in bucket:
            # ``s3://key:secret@bucket``, the secret perhaps holding a '/'
            # (a bucket of "key:secret-up-to-it"): refused before the bucket
            # name, and with it the secret, can reach botocore's validation
            # message. No bucket name holds either character.
            raise StorageError(
                f"{scheme}:// URLs carry no credentials (user info before '@' in the bucket): "
                "give the key and its secret as store options, or use the AWS credential chain"
            )
        if not _BUCKET.fullmatch(bucket):
            raise StorageError(f"{scheme}://{bucket}: not a bucket name (letters, digits, '.-_')")
        return rest.strip("/")

    def _host(self, path: str) -> str:
        """Buckets fail (and throttle) on their own: one outage gate per bucket."""
        return f"{self.scheme}://{path.partition('/')[0]}{self._at}"

    def _throttle_key(self, path: str) -> str:
        """S3 limits request rates per key prefix: one adaptive limit per bucket
        and first path component (a dataset's root, usually)."""
        bucket, _, key = path.partition("/")
        prefix = key.partition("/")[0] if "/" in key else ""
        return f"{self.scheme}://{bucket}/{prefix}{self._at}"

    # -- client ---------------------------------------------------------------

    async def _connect(self) -> _Clients:
        settings = {
            "retries": {"total_max_attempts": 1, "mode": "standard"},
            "connect_timeout": self.retry.connect_timeout,
            "read_timeout": self.retry.read_timeout,
            "max_pool_connections": self.max_concurrency,
            **self._config_kwargs,
        }
        if self._anon:
            settings["signature_version"] = UNSIGNED
        config = Config(**settings)
        session = get_session()
        if self._profile:
            session.set_config_variable("profile", self._profile)
        if not self._anon:
            await _register_credentials(session, self._client_kwargs)
        client = await session.create_client(
            "s3", config=config, **self._client_kwargs
        ).__aenter__()
        # GETs check certificates as botocore would: ``verify`` option, else AWS_CA_BUNDLE.
        verify = self._client_kwargs.get("verify", os.environ.get("AWS_CA_BUNDLE"))
        http = open_session(self, verify)
        return _Clients(client, http, proxy_for(client.meta.endpoint_url))

    async def _disconnect(self, client: _Clients) -> None:
        await client.http.close()
        await client.s3.__aexit__(None, None, None)

    # -- primitives -----------------------------------------------------------

    async def _ranged(self, client: _Clients, path: str, byte_range: str) -> tuple[Span, Answer]:
        """A GET by presigned URL over aiohttp: a quarter of botocore's client
        CPU per request (``benchmarks/bench_s3_client.py``)."""
        with self._errors(path):  # signing needs credentials: none is an error here
            url = await client.presigned(path)

        async def detail(response: aiohttp.ClientResponse) -> str:
            code, message = _error_of(await response.content.read(_ERROR_BYTES))
            if code in _EXPIRED_CODES or (response.status == 403 and "expired" in message):
                client.forget(path)  # signed with credentials since refreshed: sign anew
                raise TransientError(f"{response.status} {code}: presigned URL expired")
            if code in _WRONG_REGION_CODES or response.status == 301:
                await client.learn_region(path)
                raise TransientError(f"{response.status} {code}: signed for another region")
            if code in _TRANSIENT_CODES:  # 503 SlowDown, and 4xx ones: 400 RequestTimeout
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                cause = redact(f"HTTP {response.status} {code}: {message}")
                congestion = response.status in (429, 503) or code in _CONGESTION_CODES
                raise TransientError(cause, retry_after=retry_after, congestion=congestion)
            return redact(f"{code}: {message}" if code else message)

        return await ranged_get(
            client.http, url, self.display(path), byte_range, detail, client.proxy
        )

    async def _get_stat(self, client: _Clients, path: str) -> Stat:
        """HEAD: the size, and the version its ``ETag``, else its
        ``Last-Modified``, names (as a GET's tags name it: ``version_tags``);
        when it is refused (403, 405, 501: a bucket policy or proxy that
        allows GET but not HEAD), or says no size (a gateway answering it
        chunked), a one-byte GET (``RangeGetStore``), whose refusal, if it
        is one too, says why (HEAD answers carry no S3 error)."""
        bucket, key = _split(path)
        with self._errors(path):
            try:
                response = await client.s3.head_object(Bucket=bucket, Key=key)
            except botocore.exceptions.ClientError as exc:
                if _status(exc) not in _HEAD_REFUSED:
                    raise
                return await super()._get_stat(client, path)
        if "ContentLength" not in response:
            return await super()._get_stat(client, path)
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        tags = version_tags(headers.get("etag"), headers.get("last-modified"))
        return Stat(int(response["ContentLength"]), tags[0] if tags else None)

    async def _list_all(self, path: str) -> list[Entry]:
        """Every page of the listing, each its own retried request: a prefix
        of a million keys is a thousand pages, far longer than one request's
        timeout. A server that says there is more without saying where it
        continues, or that repeats a continuation, is an error, never the
        pages read so far taken for the whole listing."""
        entries: list[Entry] = []
        token: str | None = None
        seen: set[str] = set()
        while True:
            page = functools.partial(self._list_page, path=path, token=token)
            found, token = await self._call(page, f"list {self.display(path)}", path)
            entries += found
            if token is None:
                return entries
            if token in seen:
                raise StorageError(
                    f"{self.display(path)}: the server repeated a continuation of its "
                    f"listing after {len(entries)} entries: it would never end"
                )
            seen.add(token)

    async def _list_page(
        self, client: _Clients, path: str, token: str | None
    ) -> tuple[list[Entry], str | None]:
        """One ``ListObjectsV2`` page: its entries and the token of the next
        page (None: the last)."""
        bucket, key = _split(path)
        prefix = f"{key}/" if key else ""
        more = {} if token is None else {"ContinuationToken": token}
        with self._errors(path):
            page = await client.s3.list_objects_v2(
                Bucket=bucket, Prefix=prefix, Delimiter="/", MaxKeys=LIST_PAGE_KEYS, **more
            )
        entries = [
            Entry(common["Prefix"][len(prefix) :].rstrip("/"), True)
            for common in page.get("CommonPrefixes", [])
        ]
        entries += [
            Entry(item["Key"][len(prefix) :], False, int(item["Size"]), _listed_version(item))
            for item in page.get("Contents", [])
        ]
        if not page.get("IsTruncated"):
            return entries, None
        following = page.get("NextContinuationToken")
        if not following:
            raise StorageError(
                f"{self.display(path)}: the server says its listing goes on after "
                f"{len(entries)} entries but gives no continuation token: the rest "
                "cannot be listed; give the dataset a manifest (`streamer index`)"
            )
        return entries, following

    async def _put(self, client: _Clients, path: str, body: bytes) -> None:
        """One PutObject: S3 makes a new object visible only once it is whole."""
        bucket, key = _split(path)
        with self._errors(path):
            await client.s3.put_object(Bucket=bucket, Key=key, Body=body)

    def put_sync(self, path: str, source: Source) -> None:
        """One PutObject, or, for a file over ``multipart_threshold`` bytes, a
        multipart upload read from the file part by part (``PARTS_IN_FLIGHT``
        at once). Either way the object appears whole or not at all: parts
        are invisible until the upload is completed, and an upload that
        fails or is interrupted (Ctrl-C, SIGTERM) is aborted before this
        returns. One whose process is killed outright stays invisible until
        the bucket's lifecycle rule (``AbortIncompleteMultipartUpload``)
        clears its parts."""
        if not isinstance(source, (str, os.PathLike)):
            return super().put_sync(path, source)
        size = os.path.getsize(source)
        if size <= self.multipart_threshold:
            return super().put_sync(path, source)
        self.check_writable(path)
        for restart in range(UPLOAD_RESTARTS + 1):
            upload = run_sync(self._start_upload(path))
            try:
                run_sync(self._upload_parts(path, os.fspath(source), size, upload))
            except UploadLost:
                # The server forgot the upload (it restarted: rclone keeps uploads
                # in memory): its parts are gone, the object was never completed.
                if restart == UPLOAD_RESTARTS:
                    raise
                log.warning(
                    "%s: the server lost the multipart upload; uploading it again",
                    self.display(path),
                )
            except BaseException:
                with contextlib.suppress(Exception):
                    run_sync(self._abort_upload(path, upload))
                raise
            else:
                return None
        return None

    async def _start_upload(self, path: str) -> str:
        bucket, key = _split(path)
        created = await self._s3(
            path,
            f"start multipart upload of {self.display(path)}",
            lambda s3: s3.create_multipart_upload(Bucket=bucket, Key=key),
        )
        return str(created["UploadId"])

    async def _upload_parts(self, path: str, file: str, size: int, upload: str) -> None:
        """Every part of ``file``, then the upload completed (the object appears)."""
        bucket, key = _split(path)
        shown = self.display(path)
        part_size = max(self.multipart_part_size, -(-size // MAX_PARTS))
        gate = asyncio.Semaphore(PARTS_IN_FLIGHT)
        loop = asyncio.get_running_loop()

        async def part(number: int, offset: int) -> dict[str, Any]:
            length = min(part_size, size - offset)
            async with gate:
                body = await loop.run_in_executor(None, _read_part, file, offset, length)
                answer = await self._s3(
                    path,
                    f"PUT part {number} of {shown} ({length} bytes)",
                    lambda s3: s3.upload_part(
                        Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body
                    ),
                )
            self.stats.bytes_stored += length
            return {"PartNumber": number, "ETag": answer["ETag"]}

        tasks = [
            asyncio.ensure_future(part(number, offset))
            for number, offset in enumerate(range(0, size, part_size), 1)
        ]
        try:
            parts = await asyncio.gather(*tasks)
        finally:  # one failed (or we are cancelled): the others stop before the abort
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._s3(
            path,
            f"complete multipart upload of {shown}",
            lambda s3: s3.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
            ),
        )
        await self._state.get().cache.forget(path)

    async def _abort_upload(self, path: str, upload: str) -> None:
        bucket, key = _split(path)
        await self._s3(
            path,
            f"abort multipart upload of {self.display(path)}",
            lambda s3: s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload),
        )

    async def _s3(self, path: str, what: str, request: Any) -> Any:
        """``request(s3 client)`` with the store's retries and limits, errors translated."""

        async def call(client: _Clients) -> Any:
            with self._errors(path):
                return await request(client.s3)

        return await self._call(call, what, path)

    def _errors(self, path: str) -> _S3Errors:
        return _S3Errors(self.display(path))


def _check_endpoint(scheme: str, endpoint: str) -> None:
    """``UnsupportedURLError`` for an endpoint carrying user info
    (``http://user:password@host``), before any request: every request is
    signed with the store's key (an ``Authorization`` header, or a presigned
    query), which aiohttp refuses to send beside a URL's credentials, so no
    request could ever go, and each failed as an outage, retried for the
    whole time budget. The password is registered with ``redact`` first."""
    parts = urllib.parse.urlsplit(endpoint)
    if "@" not in parts.netloc:
        return
    register_secret(*filter(None, [parts.password, parts.username]))
    raise UnsupportedURLError(
        f"{scheme}:// endpoint {safe_url(endpoint)}: an endpoint URL carries no credentials "
        "(user info before '@'): give the endpoint without them, and the key and its "
        "secret as the store options key and secret or through the AWS credential chain "
        "(AWS_ACCESS_KEY_ID, ...)"
    )


class B2Store(S3Store):
    """Backblaze B2 through its S3-compatible API: ``b2://bucket/key``.

    B2 needs its bucket's regional endpoint (``endpoint_url`` option,
    ``--endpoint-url``, ``B2_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL``); there is
    no default, so a missing one is an error that says where to put it.
    B2 rejects the flexible-checksum headers botocore >= 1.36 sends, so
    checksums are computed and validated only "when_required".
    """

    def _default_config(self) -> dict[str, Any]:
        return {**super()._default_config(), "request_checksum_calculation": "when_required"}

    @classmethod
    def _configured_endpoint(cls, profile: str | None) -> str | None:
        endpoint = os.environ.get("B2_ENDPOINT_URL") or super()._configured_endpoint(profile)
        if not endpoint:
            raise StorageError(
                "b2:// needs the bucket's S3 endpoint (e.g. https://s3.<region>.backblazeb2.com): "
                "pass endpoint_url=... (CLI: --endpoint-url) or set B2_ENDPOINT_URL"
            )
        return endpoint


#: The environment variables that decide which endpoint botocore configures.
_ENDPOINT_SETTINGS = (
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "AWS_CONFIG_FILE",
)


@functools.lru_cache(maxsize=16)
def _botocore_endpoint(profile: str | None, settings: tuple[str | None, ...]) -> str | None:
    """The endpoint botocore resolves for S3 under ``profile``:
    ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, then the profile's
    ``services`` section or ``endpoint_url`` in the AWS config file; None for
    AWS's own (or when configured endpoints are ignored, or the profile does
    not exist: connecting says so). Kept per profile and ``settings`` (the
    values of ``_ENDPOINT_SETTINGS``): a botocore session costs about 20 ms,
    and a store is rebuilt from its options in every process it is sent to
    (an edit of the config file is seen by the next process)."""
    del settings  # a cache key only: botocore reads the environment itself
    session = botocore.session.Session(profile=profile)
    try:
        if session.get_config_variable("ignore_configured_endpoint_urls"):
            return None
        provider = ConfiguredEndpointProvider(
            full_config=session.full_config,
            scoped_config=session.get_scoped_config(),
            client_name="s3",
        )
        return provider.provide()
    except botocore.exceptions.ProfileNotFound:
        return None


class _Clients:
    """A store's clients in one process: aiobotocore signs URLs, lists, writes
    and asks sizes; aiohttp sends every GET, by URL presigned once per object
    (the signature covers the host and path: any ``Range`` may ride on it)."""

    def __init__(self, s3: Any, http: aiohttp.ClientSession, proxy: str | None) -> None:
        self.s3 = s3
        self.http = http
        self.proxy = proxy
        self._urls: dict[str, tuple[yarl.URL, float]] = {}  # path -> (URL, reuse until)

    async def presigned(self, path: str) -> yarl.URL:
        """``path``'s presigned GET URL, signed anew every ``URL_REUSE`` seconds
        (credentials from the AWS chain refresh; an URL must not outlive them).
        Sent as botocore encoded it (``encoded=True``): parsed as a str, its
        dot segments would be removed (RFC 3986), and the key ``a/./b`` or
        ``a/../b`` read as ``a/b`` or ``b``, another object."""
        now = time.monotonic()
        found = self._urls.get(path)
        if found is not None and now < found[1]:
            return found[0]
        if len(self._urls) >= MAX_URLS:  # keep only those still in use
            self._urls = {p: entry for p, entry in self._urls.items() if now < entry[1]}
        bucket, key = _split(path)
        signed = await self.s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=URL_LIFETIME
        )
        url = yarl.URL(signed, encoded=True)
        self._urls[path] = (url, now + URL_REUSE)
        return url

    def forget(self, path: str) -> None:
        self._urls.pop(path, None)

    async def learn_region(self, path: str) -> None:
        """The bucket of ``path`` lives in another region than the URL was
        signed for (no ``region_name`` given): one HEAD of the bucket through
        botocore, whose redirector follows the answer and remembers the
        bucket's region, which the next presigned URL then carries."""
        self.forget(path)
        bucket, _ = _split(path)
        with contextlib.suppress(
            botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, *_NETWORK_ERRORS
        ):
            await self.s3.head_bucket(Bucket=bucket)


class _S3Errors:
    """Turns botocore and network failures into ``TransientError`` / ``StorageError``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, botocore.exceptions.ClientError):
            raise _client_error(self.url, exc) from None
        if isinstance(exc, botocore.exceptions.FlexibleChecksumError):  # bytes changed on the way
            raise TransientError(f"checksum mismatch: {exc}") from None
        if isinstance(exc, _NETWORK_ERRORS):  # botocore's messages name the endpoint URL
            cause = getattr(exc, "kwargs", {}).get("error")  # what aiohttp said, if anything
            failure = tls_failure(cause)
            if failure is not None:  # no retry mends it
                raise StorageError(f"{self.url}: {failure}") from None
            message = redact(f"{type(exc).__name__}: {exc}")
            if isinstance(cause, aiohttp.ClientError):
                message = f"{message} ({describe(cause)})"
            unresolved = unresolved_host(cause if cause is not None else exc)
            raise TransientError(
                message, congestion=is_timeout(exc), unresolved=unresolved
            ) from None
        if isinstance(exc, botocore.exceptions.NoCredentialsError):
            raise StorageError(
                f"{self.url}: no credentials found: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or a profile (AWS_PROFILE, ~/.aws); a public bucket "
                "reads unsigned with the storage option anon=True"
            ) from None
        return False


async def _register_credentials(session: Any, client_kwargs: dict[str, Any]) -> None:
    """Tell ``redact`` the credentials this client signs with, from the options
    or from the AWS chain (environment, profile, ...), so that a log line
    (botocore's DEBUG output prints the key id and session token) or an
    error never shows them. The chain is resolved once per session anyway:
    the client reuses what it found."""
    register_secret(*(client_kwargs.get(name) for name in _CREDENTIAL_ALIASES.values()))
    if "aws_access_key_id" in client_kwargs:
        return
    credentials = await session.get_credentials()
    if credentials is not None:
        frozen = await credentials.get_frozen_credentials()
        register_secret(frozen.access_key, frozen.secret_key, frozen.token)


def _status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _client_error(url: str, exc: botocore.exceptions.ClientError) -> Exception:
    error = exc.response.get("Error", {})
    meta = exc.response.get("ResponseMetadata", {})
    status = _status(exc)
    code = str(error.get("Code") or status)
    message = redact(f"{status} {code}: {error.get('Message') or exc}")
    if (status >= 500 and status not in UNSUPPORTED) or status == 429 or code in _TRANSIENT_CODES:
        headers = meta.get("HTTPHeaders", {})
        retry_after = parse_retry_after(headers.get("retry-after"))
        congestion = status in (429, 503) or code in _CONGESTION_CODES
        return TransientError(message, retry_after=retry_after, congestion=congestion)
    if code == "NoSuchUpload":
        return UploadLost(
            f"{url}: the server no longer knows the multipart upload ({message}): "
            "it was aborted, or the server restarted and lost it"
        )
    if code == "NoSuchBucket":
        return MissingBucket(f"{url}: not found ({message})")
    if status == 404 or code in ("NoSuchKey", "404"):
        return NotFound(f"{url}: not found ({message})")
    if status == 416 or code == "InvalidRange":
        return RangeNotSatisfiable(f"{url}: {message}")
    return StorageError(f"{url}: {message}")


class UploadLost(NotFound):
    """``NoSuchUpload``: the server no longer knows a multipart upload (it
    restarted, or the upload was aborted); ``put_sync`` begins it anew."""


def _error_of(body: bytes) -> tuple[str, str]:
    """(code, message) of an S3 error document (``<Error><Code>...``); empty
    when the body is something else."""
    text = body.decode("utf-8", "replace")
    code, message = (re.search(f"<{tag}>([^<]*)</{tag}>", text) for tag in ("Code", "Message"))
    return (code[1] if code else ""), (message[1] if message else "")


def _read_part(file: str, offset: int, length: int) -> bytes:
    with open(file, "rb") as handle:
        handle.seek(offset)
        body = handle.read(length)
    if len(body) != length:
        raise StorageError(f"{file} changed while it was being stored")
    return body


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    if not bucket:
        raise StorageError("an S3 URL needs a bucket: s3://bucket/key")
    return bucket, key


def _listed_version(item: dict[str, Any]) -> str | None:
    """An object's version as a ``ListObjectsV2`` entry says it
    (``Entry.version``): its ETag, else its ``LastModified`` (JuiceFS's
    gateway lists no ETag unless ``--keep-etag``)."""
    if item.get("ETag"):
        return str(item["ETag"])
    modified = item.get("LastModified")
    return None if modified is None else f"LastModified {modified}"
