"""Ogg Vorbis and Opus: ``pages`` parses pages for both sides, ``parse``
indexes pages and granules, ``decode`` decodes the packets of planned pages."""

from __future__ import annotations

import dataclasses
from typing import BinaryIO

from ...index.table import SeekIndex
from ..base import PackagedFormat
from ..ffmpeg import OPUS_HELD_BACK
from ..job import CropPlan
from ..reader import Reader
from . import decode, pages, parse

__all__ = ["FORMAT", "Ogg"]


class Ogg(PackagedFormat):
    container = "ogg"
    codecs = frozenset(decode.PREROLL_SECONDS)
    parse = parse
    decoding = decode

    def refine_plan(self, index: SeekIndex, plan: CropPlan) -> CropPlan:
        """Never start on the last seek point of a link (of the stream): output
        is placed by the granule of a page other than the link's last (whose
        granule may trim it), so an earlier page must be decoded too.

        A chain's plan reads the headers of the link it starts in only, and,
        past a link's first seek point, the pages since the seek point before
        (the last granule position there places the link on the timeline).

        An Opus crop that ends within ``OPUS_HELD_BACK`` of the seek point
        where its data ends reads on to the next: the decoder may hold that
        many samples back until it has more packets.
        """
        if index.codec == "opus":
            plan = plan.reaching_past(index, OPUS_HELD_BACK)
        links = [offset for offset, _ in index.header]
        point = plan.point
        following = int(index.byte_pos[point + 1]) if point + 1 < len(index.byte_pos) else None
        if point > 0 and (
            following is None or _link(links, following) != _link(links, plan.data[0])
        ):
            plan = plan.starting_at(index, point - 1)
        if len(links) == 1:
            return plan
        link = _link(links, plan.data[0])
        header = (index.header[link],)
        if plan.point and _link(links, int(index.byte_pos[plan.point - 1])) == link:
            previous = int(index.byte_pos[plan.point - 1])
            header += ((previous, plan.data[0] - previous),)
        return dataclasses.replace(plan, header=header)

    def first_damage(self, stream: BinaryIO) -> tuple[int, int] | None:
        """The first page whose CRC fails (``pages.first_damaged_page``): a
        crop over it counts it, FFmpeg's decode drops it and closes the gap."""
        damage = pages.first_damaged_page(Reader(stream))
        return None if damage is None else (damage.offset, damage.end - damage.offset)


def _link(links: list[int], offset: int) -> int:
    """The chain link (by its first page's offset) holding ``offset``."""
    return max(n for n, start in enumerate(links) if start <= offset)


FORMAT = Ogg()
