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
(``utt1.wav`` over its transcript ``utt1.txt``), else the first in order.
The others ride along with it as its alternates, in that order: the plan
is made from names, and a file that turns out unreadable or not audio
when packed hands the key to the next (``pack.py``); the ones not packed
are reported then, by the run that packs the key. Each planned shard has
a fingerprint, stored in its schema metadata, which tells a re-run that a
shard already in OUT is this plan's and complete: its name, the batch
size, where SRC is (``Origin.root``), and its files, their alternates,
their sizes and what the listing says of their version (``Origin.stamps``:
a local file's mtime, a store object's ETag or mtime). So a shard of
another SRC whose files have the same names and sizes, or one packed
before a file was rewritten in place at its size, is not this plan's
(unless its store says no version: a server naming no ``ETag`` nor
``Last-Modified``).
Nothing in it depends on the host, so every run that lists the same SRC
makes the same fingerprints.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..dataset.planned import planned_record, shard_name
from .index import parse_part
from .sources import SourceFile, is_remote_url, name_text, open_store

__all__ = [
    "AUDIO_EXTENSIONS",
    "FINGERPRINT_VERSION",
    "Origin",
    "Plan",
    "PlannedShard",
    "make_plan",
    "source_origin",
    "taken",
]

#: The version of the fingerprints ``make_plan`` makes, their prefix
#: (``3:<hex>``). Version 1 (bare hex: streamer before SRC and file
#: versions were part of it) hashed names, sizes and the batch size alone;
#: version 2 SRC too, and local files' mtimes, but no remote file's
#: version (a remote file rewritten at its size went unseen).
#: ``PlannedShard.packed_by`` still takes a shard of an older version for
#: this plan's when what that version hashed is the plan's: a job begun by
#: an older streamer finishes, its shards taken on what they say.
FINGERPRINT_VERSION = 3

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
class Origin:
    """Where the files of a plan come from, as its fingerprints record it:
    ``root`` names SRC (``source_origin``), ``stamps`` maps a file's
    ``source`` to its version as the listing tells it (a local file's
    ``st_mtime_ns``; a remote file's ``SourceFile.version``, when its
    listing tells one)."""

    root: str = ""
    stamps: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedShard:
    """One shard of the plan: its name, files in order, and fingerprint;
    ``alternates`` maps a file's ``source`` to the other files of its key,
    in the order they take it should it not be audio. ``legacy``: the
    fingerprints older versions gave it (``FINGERPRINT_VERSION``), oldest
    first."""

    name: str
    files: tuple[SourceFile, ...]
    fingerprint: str
    alternates: Mapping[str, tuple[SourceFile, ...]] = field(default_factory=dict)
    legacy: tuple[str, ...] = ()

    def packed_by(self, fingerprint: str | None) -> bool:
        """Whether a shard carrying ``fingerprint`` is this planned shard:
        it carries this plan's, or an older version's of this plan (such a
        shard says nothing of what that version did not hash: taken on
        what it says, as then)."""
        return fingerprint is not None and (
            fingerprint == self.fingerprint or fingerprint in self.legacy
        )

    @property
    def bytes(self) -> int:
        """Bytes of its files and their alternates (each read, or reported, once)."""
        others = (f for files in self.alternates.values() for f in files)
        return sum(f.size for f in self.files) + sum(f.size for f in others)


@dataclass
class Plan:
    """The shards of every partition (``every``) and of this run (``mine``)."""

    every: list[PlannedShard]
    mine: list[PlannedShard]
    #: Files whose key another file holds in the plan (``alternates``):
    #: (source, reason). What ``strict`` refuses, by one run only: the
    #: whole run, or partition 0.
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    #: Whether this run reports what the plan leaves out (the one that does).
    reports: bool = True
    #: Every partition's shard names, as each shard records them
    #: (``dataset.planned``): a dataset missing some of them is incomplete.
    record: str = ""


def make_plan(
    files: Sequence[SourceFile],
    *,
    shard_size: int,
    batch_size: int,
    shards: str | None = None,
    by_files: str | None = None,
    origin: Origin | None = None,
) -> Plan:
    """The plan for ``files`` (sorted by ``source``), and this run's part:
    ``shards`` or ``by_files`` is an ``i/n`` spec (as ``--shards``);
    ``origin`` (``source_origin``) goes into every fingerprint."""
    if shards and by_files:
        raise ValueError("partition by shards or by files, not both")
    origin = origin or Origin()
    unique, alternates, duplicates = _unique_keys(files)
    if by_files:
        part, count = parse_part(by_files, "--files")
        every: list[PlannedShard] = []
        mine: list[PlannedShard] = []
        counts = []
        for p in range(min(count, len(unique))):  # the partitions past the files have none
            cut = _cut(unique[p::count], alternates, shard_size, batch_size, (p, count), origin)
            every.extend(cut)
            counts.append(len(cut))
            if p == part:
                mine = cut
        record = planned_record(counts, count)
        return Plan(every, mine, duplicates if part == 0 else [], part == 0, record)
    every = _cut(unique, alternates, shard_size, batch_size, None, origin)
    record = planned_record([len(every)])
    if not shards:
        return Plan(every, list(every), duplicates, record=record)
    part, count = parse_part(shards, "--shards")
    return Plan(every, every[part::count], duplicates if part == 0 else [], part == 0, record)


def _unique_keys(
    files: Sequence[SourceFile],
) -> tuple[list[SourceFile], dict[str, tuple[SourceFile, ...]], list[tuple[str, str]]]:
    """``files`` with one file per key (in order: an audio name's first,
    else the first); the others of each key by the source of the one kept,
    in the order they would keep it; and those others in order, each with
    the reason it is not packed unless the one kept is not audio."""
    same: dict[str, list[SourceFile]] = {}
    for file in files:
        same.setdefault(_identity(file.key), []).append(file)
    owner: dict[str, SourceFile] = {}
    alternates: dict[str, tuple[SourceFile, ...]] = {}
    for identity, group in same.items():
        owner[identity], *others = sorted(group, key=lambda f: not _is_audio_name(f.source))
        if others:
            alternates[owner[identity].source] = tuple(others)
    unique, duplicates = [], []
    for file in files:
        held = owner[_identity(file.key)]
        if held is file:
            unique.append(file)
        else:
            duplicates.append((file.source, taken(file, held)))
    return unique, alternates, duplicates


def taken(file: SourceFile, held: SourceFile) -> str:
    """Why ``file`` is not packed: ``held`` has its key."""
    reason = f"key {file.key!r} is already taken by {held.source}"
    if held.key != file.key:
        reason += " (the same text in another Unicode normalisation)"
    return reason


def _identity(key: str) -> str:
    """What makes two keys one: their text, however its Unicode is composed."""
    return unicodedata.normalize("NFC", key)


def _is_audio_name(source: str) -> bool:
    return posixpath.splitext(source)[1][1:].lower() in AUDIO_EXTENSIONS


def _cut(
    files: Sequence[SourceFile],
    alternates: Mapping[str, tuple[SourceFile, ...]],
    shard_size: int,
    batch_size: int,
    part: tuple[int, int] | None,
    origin: Origin,
) -> list[PlannedShard]:
    """Consecutive runs of ``files`` of at least ``shard_size`` bytes, cut
    at the first record batch boundary (``batch_size`` files) past the size;
    the last shard takes the rest. ``part``: the partition they are of, when
    cut by files (their names say so)."""
    shards: list[PlannedShard] = []
    current: list[SourceFile] = []
    total = 0
    for file in files:
        current.append(file)
        total += file.size
        if total >= shard_size and len(current) % batch_size == 0:
            name = shard_name(len(shards), part)
            shards.append(_shard(name, current, alternates, batch_size, origin))
            current, total = [], 0
    if current:
        name = shard_name(len(shards), part)
        shards.append(_shard(name, current, alternates, batch_size, origin))
    return shards


def _shard(
    name: str,
    files: list[SourceFile],
    alternates: Mapping[str, tuple[SourceFile, ...]],
    batch_size: int,
    origin: Origin,
) -> PlannedShard:
    mine = {f.source: alternates[f.source] for f in files if f.source in alternates}
    header = f"{origin.root}\n{name}\n{batch_size}\n"
    digest = hashlib.sha256(f"streamer.pack.plan {FINGERPRINT_VERSION}\n{header}".encode())
    version_2 = hashlib.sha256(f"streamer.pack.plan 2\n{header}".encode())
    version_1 = hashlib.sha256(f"{name}\n{batch_size}\n".encode())
    for file in files:
        for other, tab in ((file, ""), *((o, "\t") for o in mine.get(file.source, ()))):
            line = f"{tab}{other.source}\t{other.size}"
            stamp = origin.stamps.get(other.source, "")
            digest.update(f"{line}\t{stamp}\n".encode())
            # Version 2 hashed no remote file's version, version 1 no version at all.
            version_2.update(f"{line}\t{'' if other.store.is_remote else stamp}\n".encode())
            version_1.update(f"{line}\n".encode())
    fingerprint = f"{FINGERPRINT_VERSION}:{digest.hexdigest()[:32]}"
    legacy = (version_1.hexdigest()[:32], f"2:{version_2.hexdigest()[:32]}")
    return PlannedShard(name, tuple(files), fingerprint, mine, legacy)


def source_origin(
    src: str, files: Sequence[SourceFile], storage_options: Mapping[str, Any] | None = None
) -> Origin:
    """What the fingerprints of a plan of ``files``, listed from ``src``, say
    of where they come from. ``root``: a store prefix's URL as its store
    shows it (no credentials, no query, no endpoint: ``s3://bucket/raw``),
    a local folder's absolute path with its symlinks resolved, and for a
    list file a digest of every file's place (URL, or resolved path), so
    copies of the list file agree. ``stamps``: each local file's mtime in
    nanoseconds, one ``stat`` each (unstat-able: none; reading it says
    why); a remote file's version as its listing says it (an S3 object's
    ETag), or, for one the listing does not size (an HTTP index page's, a
    list file's remote URLs), as its size request does (``Stat``). A file
    whose store says none has no stamp: rewritten at its size between
    runs, it goes unseen.

    Parts of one job on several machines agree when each sees SRC at one
    place: the same URL, or a shared file system mounted at one path (a
    symlink to it is resolved); mounted at different paths, their shards
    are not each other's and the job fails rather than mix them."""
    if not is_remote_url(src) and os.path.isfile(src):
        places = "\n".join(_place(f) for f in files)
        root = "list " + hashlib.sha256(places.encode()).hexdigest()
    elif is_remote_url(src):
        store, path = open_store(src, storage_options)
        root = store.display(path)
    else:
        root = "file://" + name_text(os.path.realpath(open_store(src, None)[1]))
    stamps = {f.source: stamp for f in files if (stamp := _stamp(f)) is not None}
    return Origin(root, stamps)


def _place(file: SourceFile) -> str:
    """Where a file of a list file is: its URL (safe to show), or its resolved path."""
    if file.store.is_remote:
        return file.url
    return "file://" + name_text(os.path.realpath(file.path))


def _stamp(file: SourceFile) -> str | None:
    """A file's version: a remote one's as its listing says it, a local
    one's mtime in nanoseconds (None: unsaid, or it cannot be stat'ed)."""
    if file.store.is_remote:
        return file.version
    try:
        return str(os.stat(file.path).st_mtime_ns)
    except OSError:
        return None
