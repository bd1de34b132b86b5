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
