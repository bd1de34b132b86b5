"""S3-compatible object stores (AWS, Backblaze B2, MinIO, R2, ...) over aiobotocore.

``s3://bucket/key``. The endpoint comes from the ``endpoint_url`` option
(``--endpoint-url``), else ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``;
credentials and region from the options or the standard AWS chain
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_DEFAULT_REGION``, ``~/.aws``). ``b2://bucket/key`` is the same store
with Backblaze B2 defaults (``B2Store``).

The aiobotocore client is used directly, one per store and process: every
GET carries exactly one ``Range`` (S3 serves no multi-range requests), and a
suffix range ``bytes=-N`` answers the object's size in the same round trip.
Writes are one PutObject each, which S3 applies atomically (up to 5 GB).
botocore's own retries are off, so ``retry.py`` alone decides (and counts).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp
import botocore.exceptions
from aiobotocore.session import get_session
from botocore import UNSIGNED
from botocore.config import Config

from ..errors import StorageError
from ._bounds import parse_content_range
from ._urls import redact, register_secret, safe_url
from .base import Entry
from .remote import RemoteStore
from .retry import TransientError, parse_retry_after
from .throttle import is_timeout

__all__ = ["B2Store", "S3Store"]

_CREDENTIAL_ALIASES = {
    "key": "aws_access_key_id",
    "secret": "aws_secret_access_key",
    "token": "aws_session_token",
}
_CLIENT_OPTIONS = {
    "endpoint_url",
    "region_name",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
}
_OTHER_OPTIONS = {"anon", "profile", "config_kwargs", "client_kwargs"}
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
_NETWORK_ERRORS = (
    botocore.exceptions.HTTPClientError,
    botocore.exceptions.ConnectionError,
    botocore.exceptions.IncompleteReadError,
    aiohttp.ClientError,
    asyncio.IncompleteReadError,
    ConnectionError,
)


class S3Store(RemoteStore):
    """An S3 endpoint. Store paths are ``bucket/key``.

    Backend options: ``endpoint_url``, ``region_name``, ``key`` / ``secret`` /
    ``token`` (or their ``aws_*`` names), ``profile``, ``anon`` (unsigned
    requests), ``config_kwargs`` (merged into ``botocore.config.Config``),
    ``client_kwargs`` (passed to ``create_client``).
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
        self._profile = backend.pop("profile", None)
        self._anon = bool(backend.pop("anon", False))
        self._config_kwargs = {**self._default_config(), **backend.pop("config_kwargs", {})}
        self._client_kwargs = {**backend.pop("client_kwargs", {}), **backend}
        endpoint = self._client_kwargs.get("endpoint_url") or self._endpoint_from_env()
        if endpoint:
            self._client_kwargs["endpoint_url"] = endpoint
        self._at = f" at {safe_url(endpoint)}" if endpoint else ""
        self.url = f"{scheme}://{self._at}"

    def _default_config(self) -> dict[str, Any]:
        return {}

    def _endpoint_from_env(self) -> str | None:
        return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")

    def display(self, path: str) -> str:
        return f"{self.scheme}://{path}"

    def path_of(self, scheme: str, rest: str) -> str:
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

    async def _connect(self) -> Any:
        config = Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=self.retry.connect_timeout,
            read_timeout=self.retry.read_timeout,
            max_pool_connections=self.max_concurrency,
            **({"signature_version": UNSIGNED} if self._anon else {}),
            **self._config_kwargs,
        )
        session = get_session()
        if self._profile:
            session.set_config_variable("profile", self._profile)
        if not self._anon:
            await _register_credentials(session, self._client_kwargs)
        return await session.create_client("s3", config=config, **self._client_kwargs).__aenter__()

    async def _disconnect(self, client: Any) -> None:
        await client.__aexit__(None, None, None)

    # -- primitives -----------------------------------------------------------

    async def _get_range(self, client: Any, path: str, start: int, end: int) -> bytes:
        _, _, body = await self._get(client, path, f"bytes={start}-{end - 1}")
        return body

    async def _get_tail(self, client: Any, path: str, length: int) -> tuple[int, int, bytes]:
        return await self._get(client, path, f"bytes=-{length}")

    async def _get(self, client: Any, path: str, byte_range: str) -> tuple[int, int, bytes]:
        bucket, key = _split(path)
        with self._errors(path):
            response = await client.get_object(Bucket=bucket, Key=key, Range=byte_range)
            async with response["Body"] as stream:
                body = await stream.read()
        span = parse_content_range(response.get("ContentRange"))
        if span is None:
            raise StorageError(
                f"{self.display(path)}: the endpoint ignored Range {byte_range} "
                "(no Content-Range in the answer); it cannot serve byte ranges"
            )
        return span[0], span[2], body

    async def _get_size(self, client: Any, path: str) -> int:
        bucket, key = _split(path)
        with self._errors(path):
            response = await client.head_object(Bucket=bucket, Key=key)
        return int(response["ContentLength"])

    async def _list(self, client: Any, path: str) -> list[Entry]:
        bucket, key = _split(path)
        prefix = f"{key}/" if key else ""
        entries = []
        with self._errors(path):
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix, Delimiter="/"
            )
            async for page in pages:
                for common in page.get("CommonPrefixes", []):
                    entries.append(Entry(common["Prefix"][len(prefix) :].rstrip("/"), True))
                for item in page.get("Contents", []):
                    entries.append(Entry(item["Key"][len(prefix) :], False, int(item["Size"])))
        return entries

    async def _put(self, client: Any, path: str, body: bytes) -> None:
        """One PutObject: S3 makes a new object visible only once it is whole."""
        bucket, key = _split(path)
        with self._errors(path):
            await client.put_object(Bucket=bucket, Key=key, Body=body)

    def _errors(self, path: str) -> _S3Errors:
        return _S3Errors(self.display(path))


class B2Store(S3Store):
    """Backblaze B2 through its S3-compatible API: ``b2://bucket/key``.

    B2 needs its bucket's regional endpoint (``endpoint_url`` option,
    ``--endpoint-url``, ``B2_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL``); there is
    no default, so a missing one is an error that says where to put it.
    B2 rejects the flexible-checksum headers botocore >= 1.36 sends, so
    checksums are computed and validated only "when_required".
    """

    def _default_config(self) -> dict[str, Any]:
        return {
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
        }

    def _endpoint_from_env(self) -> str | None:
        endpoint = os.environ.get("B2_ENDPOINT_URL") or super()._endpoint_from_env()
        if not endpoint:
            raise StorageError(
                "b2:// needs the bucket's S3 endpoint (e.g. https://s3.<region>.backblazeb2.com): "
                "pass endpoint_url=... (CLI: --endpoint-url) or set B2_ENDPOINT_URL"
            )
        return endpoint


class _S3Errors:
    """Turns botocore and network failures into ``TransientError`` / ``StorageError``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, botocore.exceptions.ClientError):
            raise _client_error(self.url, exc) from None
        if isinstance(exc, _NETWORK_ERRORS):  # botocore's messages name the endpoint URL
            message = redact(f"{type(exc).__name__}: {exc}")
            raise TransientError(message, congestion=is_timeout(exc)) from None
        if isinstance(exc, botocore.exceptions.NoCredentialsError):
            raise StorageError(f"{self.url}: no credentials found ({exc})") from None
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


def _client_error(url: str, exc: botocore.exceptions.ClientError) -> Exception:
    error = exc.response.get("Error", {})
    meta = exc.response.get("ResponseMetadata", {})
    status = int(meta.get("HTTPStatusCode") or 0)
    code = str(error.get("Code") or status)
    message = redact(f"{status} {code}: {error.get('Message') or exc}")
    if status >= 500 or status == 429 or code in _TRANSIENT_CODES:
        headers = meta.get("HTTPHeaders", {})
        retry_after = parse_retry_after(headers.get("retry-after"))
        congestion = status in (429, 503) or code in _CONGESTION_CODES
        return TransientError(message, retry_after=retry_after, congestion=congestion)
    if status == 404 or code in ("NoSuchKey", "NoSuchBucket", "404"):
        return StorageError(f"{url}: not found ({message})")
    return StorageError(f"{url}: {message}")


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    if not bucket:
        raise StorageError("an S3 URL needs a bucket: s3://bucket/key")
    return bucket, key
