"""URLs and text as they may appear in logs, reprs, errors and stats: without credentials.

One redaction serves every message:

* ``safe_url(url)``: a URL we print ourselves, without user info and with
  its query (presigned signatures, B2 tokens) shown as ``?…``;
* ``redact(text)``: any other text (a foreign exception's message, a log
  record): every URL in it through ``safe_url``, the values of credential
  fields (``X-Amz-Credential``, ``X-Amz-Signature``,
  ``X-Amz-Security-Token``, ``Signature``, ``token``, ``sig``,
  ``Authorization``, ``Credential=`` in a signed header, ...) and every
  secret value a store was given or resolved (``register_secret``) replaced
  by ``***``;
* ``cache_name(url)``: the name of the object a URL reads, for caches:
  without the query parameters that only authenticate (presigned
  signatures, tokens) and without a password, so that URLs signed anew
  name the same object;
* ``install_log_redaction()``: passes every record of the loggers that
  print credentials (botocore prints the key id and session token at DEBUG)
  through ``redact`` when the record is made, whatever handler later
  formats it.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import urllib.parse
from typing import Any

__all__ = ["MASK", "cache_name", "install_log_redaction", "redact", "register_secret", "safe_url"]

MASK = "***"
#: Loggers whose records are redacted: the AWS and HTTP clients, fsspec, our own,
#: and asyncio's (an error it finds left unretrieved, with its repr and traceback).
REDACTED_LOGGERS = (
    "aiobotocore",
    "aiohttp",
    "asyncio",
    "boto3",
    "botocore",
    "fsspec",
    "s3fs",
    "s3transfer",
    "streamer",
    "urllib3",
)
#: Shorter values are not registered: replacing them everywhere would garble text.
MIN_SECRET_LENGTH = 6

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>()\[\]{}]+")
#: ``name=value``, ``name: value``, ``'name': b'value'``: the value of a credential field.
_FIELD = re.compile(
    # Not after a letter or digit, so that ``AWS_SECRET_ACCESS_KEY=`` and
    # ``aws_session_token:`` (prefixed by ``_``, a word character) are caught.
    r"(?i)(?<![a-z0-9])(x-amz-credential|x-amz-signature|x-amz-security-token|security-token|"
    r"awsaccesskeyid|signature|credential|session_?token|access_?token|token|sig|"
    r"password|passwd|secret_?access_?key|secret_?key|secret|api_?key)"
    r"(['\"]?\s*[:=]\s*(?:b(?=['\"]))?['\"]?)"
    r"([^\s'\",&;]+)"  # base64 values (AWS secret keys, session tokens) hold '/' and '+'
)
#: An ``Authorization`` header's whole value (``Bearer <token>``, ``Basic <b64>``).
_AUTHORIZATION = re.compile(
    r"(?i)\b(authorization['\"]?\s*[:=]\s*(?:b(?=['\"]))?['\"]?)([^'\"\r\n]+)"
)

#: Query parameters that only authenticate a request, whatever else the query
#: holds (compared in lower case): S3 SigV4, GCS V4 (``X-Goog-*``) and B2
#: (``Authorization``, a download token) presigned URLs.
_AUTH_PARAMETERS = frozenset(
    f"{prefix}-{field}"
    for prefix in ("x-amz", "x-goog")
    for field in ("algorithm", "credential", "date", "expires", "signedheaders", "signature")
) | {"x-amz-security-token", "authorization"}
#: (names present, names dropped): parameters that only authenticate a request
#: when the query is of one signing scheme (the names present say which); in
#: another query the same short names may select content, and are kept. S3
#: SigV2, GCS V2, CloudFront signed URLs (canned or custom policy), Azure SAS
#: (every signed field; ``versionid`` and ``snapshot`` select the content).
_AUTH_SCHEMES = (
    ({"awsaccesskeyid"}, {"awsaccesskeyid", "expires", "signature"}),
    ({"googleaccessid"}, {"googleaccessid", "expires", "signature"}),
    ({"key-pair-id"}, {"key-pair-id", "expires", "policy", "signature"}),
    (
        {"sv", "sig"},
        {
            *("sv", "ss", "srt", "sp", "se", "st", "spr", "sip", "si", "sr", "sig", "sdd"),
            *("skoid", "sktid", "skt", "ske", "sks", "skv", "saoid", "suoid", "scid", "ses"),
        },
    ),
)

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
#: Free in a forked child: a thread of the parent's that was logging holds it there for good.
os.register_at_fork(after_in_child=_secrets_lock._at_fork_reinit)
_installed = False


def safe_url(url: str) -> str:
    """``url`` without user info and with the query replaced by ``?…``.

    Presigned URLs carry their signature (and B2 download URLs their
    authorization token) in the query, basic auth rides in the user info;
    neither may reach a log line.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # not a URL we can take apart: its scheme, then what follows any secret
        scheme, sep, rest = url.split("?", 1)[0].rpartition("://")
        return f"{scheme}{sep}{rest.rsplit('@', 1)[-1]}"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    query = "?…" if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")) + query


@functools.lru_cache(maxsize=4096)
def cache_name(url: str) -> str:
    """The name of the object ``url`` reads, for caches to key it by: ``url``
    without the query parameters that only authenticate the request
    (``_AUTH_PARAMETERS``, ``_AUTH_SCHEMES``) and without a password. Every
    other parameter (``versionId``, ``generation``, ``partNumber``: they
    select the content) stays, as given and in its order: a name may miss
    entries it could have shared, never share another object's.

    Presigned URLs expire and are signed anew for every job: keyed by the
    whole URL, a cache filled through one signing is never found through
    the next, and it would hold every signature it was read by.
    """
    if "?" not in url and "@" not in url:
        return url
    parts = urllib.parse.urlsplit(url)
    fields = parts.query.split("&")
    names = [urllib.parse.unquote_plus(field.partition("=")[0]).lower() for field in fields]
    dropped = _AUTH_PARAMETERS.union(
        *(drop for present, drop in _AUTH_SCHEMES if present.issubset(names))
    )
    query = "&".join(
        field for field, name in zip(fields, names, strict=True) if name not in dropped
    )
    user, at, host = parts.netloc.rpartition("@")
    netloc = f"{user.partition(':')[0]}{at}{host}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def register_secret(*values: str | bytes | None) -> None:
    """Remember credential values (keys, secrets, tokens, header values) so
    ``redact`` hides them wherever they turn up, percent-encoded too (a
    query, a form body)."""
    with _secrets_lock:
        for value in values:
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if value and len(value) >= MIN_SECRET_LENGTH:
                _secrets.add(value)
                _secrets.add(urllib.parse.quote(value, safe=""))
                _secrets.add(urllib.parse.quote(value))
                _secrets.add(urllib.parse.quote_plus(value))


def redact(text: str) -> str:
    """``text`` with known secret values masked (first: a field's mask must
    not leave part of one behind), then URLs made safe and credential fields
    masked."""
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _URL.sub(_safe_match, text)
    text = _AUTHORIZATION.sub(lambda match: match.group(1) + MASK, text)
    return _FIELD.sub(lambda match: match.group(1) + match.group(2) + MASK, text)


def _safe_match(match: re.Match[str]) -> str:
    """A URL found in text, made safe, the punctuation that ends a phrase
    after it (``URL: reason``) kept: it is text, not the URL's."""
    found = match.group()
    url = found.rstrip(".,:;!?")
    if url.endswith("://"):  # a scheme named in prose ("s3://, b2://"): no URL
        return found
    return safe_url(url) + found[len(url) :]


def install_log_redaction() -> None:
    """Redact every record of ``REDACTED_LOGGERS`` as it is made (idempotent).

    A filter on a logger misses its children's records and a handler
    filter only the handlers we add, so the record factory is wrapped: it
    sees every record of every logger, keeps the previous factory's
    behaviour, and rewrites the message (and any traceback text) of the
    listed loggers' records.
    """
    global _installed
    with _secrets_lock:
        if _installed:
            return
        _installed = True
    previous = logging.getLogRecordFactory()

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if record.name.startswith(REDACTED_LOGGERS):
            _redact_record(record)
        return record

    logging.setLogRecordFactory(make_record)


def _redact_record(record: logging.LogRecord) -> None:
    record.msg, record.args = redact(record.getMessage()), None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
