"""The plan of a pack: which source files go into which shard.

The plan is made from the source listing alone (names and sizes, sorted),
so every process that lists the same SRC makes the same plan, and a pack
fanned out over machines needs no coordinator: each run takes its part.

* Whole run: files in order fill shards of about ``shard_size`` bytes
  (a shard ends at the first batch of ``batch_size`` files that reaches
  it), ``shard-000000``, ...
* ``shards="i/n"``: the same shards; this run takes those numbered
  ``j % n == i``.
* ``files="i/n"``: this run takes the files numbered ``j % n == i`` and
  cuts them into shards of its own, named by the partition
  (``shard-03of12-000000``): no two partitions share a name, and a re-run
  of a partition names its shards as the first run did.

Two files with one key (``a/b.flac``, ``a/b.wav``) or with keys that are
one text in two Unicode normalisations (``café`` as Linux and as macOS
write it): a file with an audio extension keeps the key over one without
(``utt1.wav`` over its transcript ``utt1.txt``), else the first in order;
the other is left out of the plan with the reason, whichever runs pack
them. Each planned shard has a fingerprint (its files, their
sizes and the batch size), stored in its schema metadata, which tells a
re-run that a shard already in OUT is this plan's and complete.
"""

from __future__ import annotations

import hashlib
import posixpath
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from .index import parse_part
from .sources import SourceFile

__all__ = ["AUDIO_EXTENSIONS", "Plan", "PlannedShard", "make_plan"]

#: Extensions of audio files (and of media containers that carry audio): of
#: two files with one key, one of these keeps it over any other, so a
#: transcript or label file beside its audio (``utt1.txt``) never takes the
#: audio's key. The plan is made from names alone; probing comes later.
# fmt: off
AUDIO_EXTENSIONS = frozenset({
    "3gp", "aac", "ac3", "aif", "aifc", "aiff", "amr", "ape", "au", "caf", "dff", "dsf",
    "eac3", "flac", "m4a", "m4b", "mka", "mkv", "mov", "mp2", "mp3", "mp4", "mpc", "oga",
    "ogg", "opus", "ra", "snd", "spx", "tta", "voc", "w64", "wav", "wave", "weba", "webm",
    "wma", "wv",
})
# fmt: on


@dataclass(frozen=True)
class PlannedShard:
    """One shard of the plan: its name, files in order, and fingerprint."""

    name: str
    files: tuple[SourceFile, ...]
    fingerprint: str

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass
class Plan:
    """The shards of every partition (``every``) and of this run (``mine``)."""

    every: list[PlannedShard]
    mine: list[PlannedShard]
    #: Files left out of the plan (their key is taken): (source, reason).
    #: Reported by one run only: the whole run, or partition 0.
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    #: Whether this run reports what the plan leaves out (the one that does).
    reports: bool = True


def make_plan(
    files: Sequence[SourceFile],
    *,
    shard_size: int,
    batch_size: int,
    shards: str | None = None,
    by_files: str | None = None,
) -> Plan:
    """The plan for ``files`` (sorted by ``source``), and this run's part:
    ``shards`` or ``by_files`` is an ``i/n`` spec (as ``--shards``)."""
    if shards and by_files:
        raise ValueError("partition by shards or by files, not both")
    unique, duplicates = _unique_keys(files)
    if by_files:
        part, count = parse_part(by_files, "--files")
        width = len(str(count))
        every: list[PlannedShard] = []
        mine: list[PlannedShard] = []
        for p in range(count):
            cut = _cut(unique[p::count], shard_size, batch_size, f"shard-{p:0{width}d}of{count}-")
            every.extend(cut)
            if p == part:
                mine = cut
        return Plan(every, mine, duplicates if part == 0 else [], part == 0)
    every = _cut(unique, shard_size, batch_size, "shard-")
    if not shards:
        return Plan(every, list(every), duplicates)
    part, count = parse_part(shards, "--shards")
    return Plan(every, every[part::count], duplicates if part == 0 else [], part == 0)


def _unique_keys(files: Sequence[SourceFile]) -> tuple[list[SourceFile], list[tuple[str, str]]]:
    """``files`` with one file per key (in order), and the others with the reason."""
    owner: dict[str, SourceFile] = {}
    for file in files:
        held = owner.setdefault(_identity(file.key), file)
        if _is_audio_name(file.source) and not _is_audio_name(held.source):
            owner[_identity(file.key)] = file
    unique, duplicates = [], []
    for file in files:
        held = owner[_identity(file.key)]
        if held is file:
            unique.append(file)
            continue
        reason = f"key {file.key!r} is already taken by {held.source}"
        if held.key != file.key:
            reason += " (the same text in another Unicode normalisation)"
        duplicates.append((file.source, reason))
    return unique, duplicates


def _identity(key: str) -> str:
    """What makes two keys one: their text, however its Unicode is composed."""
    return unicodedata.normalize("NFC", key)


def _is_audio_name(source: str) -> bool:
    return posixpath.splitext(source)[1][1:].lower() in AUDIO_EXTENSIONS


def _cut(
    files: Sequence[SourceFile], shard_size: int, batch_size: int, prefix: str
) -> list[PlannedShard]:
    """Consecutive runs of ``files`` of at least ``shard_size`` bytes, cut
    at the first record batch boundary (``batch_size`` files) past the size;
    the last shard takes the rest."""
    shards: list[PlannedShard] = []
    current: list[SourceFile] = []
    total = 0
    for file in files:
        current.append(file)
        total += file.size
        if total >= shard_size and len(current) % batch_size == 0:
            shards.append(_shard(f"{prefix}{len(shards):06d}", current, batch_size))
            current, total = [], 0
    if current:
        shards.append(_shard(f"{prefix}{len(shards):06d}", current, batch_size))
    return shards


def _shard(name: str, files: list[SourceFile], batch_size: int) -> PlannedShard:
    digest = hashlib.sha256(f"{name}\n{batch_size}\n".encode())
    for file in files:
        digest.update(f"{file.source}\t{file.size}\n".encode())
    return PlannedShard(name, tuple(files), digest.hexdigest()[:32])
