"""The real-world corpus's manifest and folder (stdlib only: the fetcher
runs before the project is installed)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "corpus" / "manifest.toml"
#: Where the fetched corpus lives unless ``STREAMER_CORPUS_DIR`` says otherwise.
DEFAULT_DIR = ROOT / ".corpus"


@dataclass(frozen=True)
class Source:
    """A pinned package: ``registry`` is ``pypi`` (sdist) or ``deb`` (Debian)."""

    name: str
    registry: str
    version: str


@dataclass(frozen=True)
class CorpusFile:
    """One manifest entry: ``name`` is its path under the corpus folder."""

    name: str
    source: Source
    path: str
    size: int
    sha256: str
    small: bool = False


def corpus_dir() -> Path:
    """The corpus folder: ``$STREAMER_CORPUS_DIR`` or ``.corpus/`` in the repository."""
    return Path(os.environ.get("STREAMER_CORPUS_DIR") or DEFAULT_DIR)


def load_manifest(path: Path = MANIFEST) -> list[CorpusFile]:
    """Every file the manifest lists, in its order."""
    with open(path, "rb") as file:
        manifest = tomllib.load(file)
    sources = {
        s["name"]: Source(s["name"], s["registry"], s["version"]) for s in manifest["source"]
    }
    return [
        CorpusFile(
            name=f["name"],
            source=sources[f["source"]],
            path=f["path"],
            size=f["size"],
            sha256=f["sha256"],
            small=f.get("small", False),
        )
        for f in manifest["file"]
    ]
