"""The shards a pack planned, as each shard it writes records them.

``streamer pack`` writes the dataset manifest only once every planned shard
is in place; a pack killed midway, or a part of a ``shards="i/n"`` /
``files="i/n"`` job that never ran, leaves whole shards and no manifest.
Listed, such a dataset looks whole. So every shard ``pack`` writes carries
in its schema metadata (``PLANNED_KEY``) the plan's shard names, as a count
per name prefix: ``{"shards": 17}`` (``shard-000000`` to ``shard-000016``)
or, for a plan cut by files, ``{"parts": 12, "shards": [5, 4, ...]}``
(``shard-00of12-000000``, ...). A dataset reads its shards' footers anyway,
so finding the planned shards that are missing costs nothing more.

Shards written by other tools (wsds) or by a streamer before this record
have none: nothing is planned, nothing is missing. The names are made here
and only here (``shard_name``), for the plan and for the check.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Collection, Iterable, Mapping

__all__ = [
    "PLANNED_KEY",
    "Incomplete",
    "find_incomplete",
    "planned_record",
    "shard_name",
]

log = logging.getLogger(__name__)

#: Schema metadata key of a packed shard's record of its plan's shard names.
PLANNED_KEY = "streamer.pack.shards"
#: Missing shards an error names before "...".
_SHOWN = 3


def shard_name(number: int, part: tuple[int, int] | None = None) -> str:
    """The name of a plan's shard ``number``; ``part`` ``(p, n)``: of
    partition ``p`` of a plan cut by files into ``n``."""
    if part is None:
        return f"shard-{number:06d}"
    p, n = part
    return f"shard-{p:0{len(str(n))}d}of{n}-{number:06d}"


def planned_record(counts: list[int], parts: int | None = None) -> str:
    """The record of a plan of ``counts[0]`` shards, or (``parts``) of
    ``counts[p]`` shards in each partition ``p`` of a plan cut by files."""
    document: dict[str, object] = {"shards": counts[0] if parts is None else counts}
    if parts is not None:
        document["parts"] = parts
    return json.dumps(document, separators=(",", ":"), sort_keys=True)


def _names(record: bytes) -> set[str]:
    """The shard names ``record`` plans; ``ValueError`` when it is no record."""
    document = json.loads(record)
    counts, parts = document["shards"], document.get("parts")
    if parts is None:
        if not isinstance(counts, int) or isinstance(counts, bool) or counts < 0:
            raise ValueError(f"shards {counts!r} is not a count")
        return {shard_name(j) for j in range(counts)}
    if not isinstance(parts, int) or not isinstance(counts, list) or len(counts) > parts:
        raise ValueError(f"parts {parts!r} and shards {counts!r} do not agree")
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        raise ValueError(f"shards {counts!r} are not counts")
    return {shard_name(j, (p, parts)) for p, count in enumerate(counts) for j in range(count)}


@dataclasses.dataclass(frozen=True)
class Incomplete:
    """Planned shards that are missing: how many were planned, and which
    are missing (sorted)."""

    planned: int
    missing: list[str]

    def summary(self) -> str:
        """How many planned shards are present, and the first missing ones."""
        shown = ", ".join(self.missing[:_SHOWN]) + (", ..." if len(self.missing) > _SHOWN else "")
        present = self.planned - len(self.missing)
        planned = f"{present} of the {self.planned} shards its pack planned are present"
        return f"{planned} (missing: {shown})"

    def message(self, url: str) -> str:
        """The one line that says so, and what to do."""
        return (
            f"{url}: incomplete dataset: {self.summary()}: a pack was interrupted, or a part "
            "of its job failed or never ran; re-run the pack (every part of the job: it "
            "resumes where it stopped), or open it with allow_incomplete=True "
            "(--allow-incomplete) to serve the shards present"
        )


def find_incomplete(
    metadata: Iterable[tuple[str, Mapping[bytes, bytes] | None]],
    present: Collection[str],
    url: str,
) -> Incomplete | None:
    """The planned shards missing from ``present`` (a column directory's
    shard names), by the records in the schema metadata of its shards
    (``metadata``: ``(name, metadata)`` of each shard read; those without a
    record plan nothing); None when none is. Shards of one pack carry one
    record, read once; records that differ (parts planned from listings
    that differ) plan every name any of them has. A record that does not
    plan its own shard's name plans nothing: the shard was renamed since
    (shards of two packs merged under new names), and its record speaks of
    a layout that is gone. A record that cannot be read plans nothing, with
    a warning naming the dataset ``url``."""
    key = PLANNED_KEY.encode()
    holders: dict[bytes, list[str]] = {}
    for name, found in metadata:
        if found and key in found:
            holders.setdefault(found[key], []).append(name)
    planned: set[str] = set()
    for record, names in holders.items():
        try:
            named = _names(record)
        except (ValueError, KeyError, TypeError) as exc:
            text = record[:200].decode(errors="replace")
            log.warning(
                "%s: %s %r is no record of planned shards (%s)", url, PLANNED_KEY, text, exc
            )
            continue
        if any(name in named for name in names):
            planned |= named
    missing = sorted(planned.difference(present))
    return Incomplete(len(planned), missing) if missing else None
