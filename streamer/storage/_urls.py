"""URLs as they may appear in logs, reprs and errors: without credentials."""

from __future__ import annotations

import urllib.parse

__all__ = ["safe_url"]


def safe_url(url: str) -> str:
    """``url`` without user info and with the query replaced by ``?…``.

    Presigned URLs carry their signature (and B2 download URLs their
    authorization token) in the query, basic auth rides in the user info;
    neither may reach a log line.
    """
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    query = "?…" if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")) + query
