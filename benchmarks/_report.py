"""Shared pieces of the benchmarks: the JSON results file, and uploads to S3."""

from __future__ import annotations

import json
import os
import platform
import time
from typing import Any

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "system": platform.system(),
    }


def write_json(name: str, payload: dict[str, Any]) -> str:
    """Write ``results/<name>-<timestamp>.json`` and return its path."""
    os.makedirs(RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(RESULTS, f"{name}-{stamp}.json")
    with open(path, "w") as file:
        json.dump({"benchmark": name, "machine": machine(), **payload}, file, indent=2)
    return path


def upload_tree(
    endpoint: str,
    folder: str | os.PathLike[str],
    bucket: str,
    prefix: str,
    key_id: str,
    secret: str,
) -> None:
    """Create ``bucket`` on an S3 server and upload every file under ``folder``
    to ``prefix/<relative path>`` (boto3 from the test extra, straight to the server)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=bucket)
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, folder).replace(os.sep, "/")
            client.upload_file(path, bucket, f"{prefix}/{relative}")
