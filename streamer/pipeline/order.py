"""An epoch's crop order: the same on every rank and worker, from (seed, epoch) alone.

1. Each source's sampler draws its crops from a generator seeded with
   (seed, epoch, source).
2. Locality: the crops are grouped by shard (shards in a seeded random
   order), so a shard's blocks — its footer, seek index, the episodes'
   headers — are fetched once and reused while they are hot. Within a
   shard, each episode's crops (in start order) are spread evenly through
   the shard's stretch of the epoch, at a random phase (``interleave``):
   any run of crops holds episodes in proportion to their crop counts, so
   a batch mixes many episodes at no extra request (the shard's blocks are
   the same ones). ``interleave=False`` keeps an episode's crops back to
   back (episodes in random order).
3. Mixing: with several sources, each gets a share of the epoch proportional
   to its weight (cycling through its crops if the share is larger than what
   it has), and the sources are interleaved evenly through the epoch. A
   source that drew no crop takes no share (with a warning). A share that is
   not whole is rounded down or up at random (seeded by the epoch), so the
   counts add up to the epoch's crops and average the shares over epochs.
4. Shuffling: each crop moves a random distance of less than ``window``
   places, so neighbours are shuffled while a consumer still stays within a
   few shards at a time (``window=0``: pure locality order).

The rank/worker partition (``sharding.py``) then takes contiguous slices of
this one global order, which is why the partitions are disjoint and complete.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .episodes import Episodes
from .samplers import Crops, Sampler

__all__ = ["EpochPlan", "plan_epoch"]

log = logging.getLogger(__name__)

_SAMPLER, _LOCALITY, _SHUFFLE, _SHARES = 0, 1, 2, 3


@dataclass(frozen=True)
class EpochPlan:
    """The ordered crops of an epoch (or of one partition's slice of it)."""

    source: np.ndarray  # int64: index into the Streamer's sources
    episode: np.ndarray  # int64: row of that source's Episodes
    start: np.ndarray
    end: np.ndarray
    fields: np.ndarray | None = None  # object: a sampler's fields per crop (dict or None)

    def __len__(self) -> int:
        return len(self.source)

    def digest(self, sources: Sequence[Episodes], mix: Any = None) -> str:
        """A short digest of the order (which crop at which place): a resume
        point is a place in one order and means other crops in another.

        ``sources`` are the episodes the rows index (the plan's sources, in
        order): their keys are folded in, so another dataset of as many
        episodes of the same durations (the same rows and times) is another
        order, not other audio served at the same places. ``mix`` (a
        ``Mix``'s ``items``: names and weights) is folded in too: the same
        datasets under swapped names plan the same rows, and their crops
        would carry the other item's name."""
        digest = hashlib.blake2b(digest_size=8)
        if mix is not None:
            digest.update(json.dumps(mix).encode())
        for episodes in sources:
            digest.update(episodes.keys_digest)
        for column in (self.source, self.episode, self.start, self.end):
            digest.update(np.ascontiguousarray(column, dtype=np.float64).tobytes())
        return digest.hexdigest()

    def __getitem__(self, part: slice | np.ndarray) -> EpochPlan:
        fields = None if self.fields is None else self.fields[part]
        return EpochPlan(
            self.source[part], self.episode[part], self.start[part], self.end[part], fields
        )


def plan_epoch(
    sources: Sequence[tuple[Episodes, float]],
    sampler: Sampler,
    *,
    seed: int,
    epoch: int,
    window: int,
    max_crops: int | None = None,
    crops_per_epoch: int | None = None,
    interleave: bool = True,
    warn: bool = True,
    names: Sequence[str] | None = None,
) -> EpochPlan:
    """The global order of one epoch (``max_crops``: only its first crops).

    ``warn``: log what the epoch lacks (a mix's source without crops, a
    short ``crops_per_epoch``); every rank and DataLoader worker plans the
    same epoch, so one of them (``Streamer``: the first) says it for all;
    ``names`` (the Mix items' names) say which source it is about.

    ``crops_per_epoch`` fixes the epoch's length whatever the sampler gives:
    fewer are the first of the order; more are further rounds of the
    sampler (new random crops; a deterministic sampler's crops again), each
    ordered as an epoch of its own and appended, the first round being the
    epoch as it would be without the option.

    A round that draws nothing does not end the rounds: a sparse random
    sampler (``per_hour`` over little audio) draws none in many of them.
    Only ``_EMPTY_ROUNDS`` empty rounds in a row do (a sampler that can never
    draw a crop), with a warning that the epoch is short."""
    if max_crops is not None and crops_per_epoch is not None:
        raise ValueError("give max_crops or crops_per_epoch, not both")
    said = _labels(sources, names) if warn else None
    plan = _round(sources, sampler, seed, epoch, window, interleave, (), said)
    if crops_per_epoch is not None:
        rounds, total, empty = [plan], len(plan), int(not len(plan))
        while total < crops_per_epoch and empty < _EMPTY_ROUNDS:
            plan = _round(sources, sampler, seed, epoch, window, interleave, (len(rounds),), None)
            rounds.append(plan)
            total += len(plan)
            empty = 0 if len(plan) else empty + 1
        if total < crops_per_epoch and warn:
            log.warning(
                "crops_per_epoch=%d: %r drew no crop in %d rounds in a row; epoch %d has %d",
                crops_per_epoch,
                sampler,
                empty,
                epoch,
                total,
            )
        plan = _concatenated(rounds)[:crops_per_epoch]
    return plan if max_crops is None else plan[:max_crops]


#: Rounds in a row that draw no crop after which ``crops_per_epoch`` gives
#: up. A sampler averaging 0.1 crops a round draws none 64 times in a row
#: with a chance of e^-6.4 (0.2 %); rounds that draw nothing are over little
#: audio, so they are cheap.
_EMPTY_ROUNDS = 64


def _round(
    sources: Sequence[tuple[Episodes, float]],
    sampler: Sampler,
    seed: int,
    epoch: int,
    window: int,
    interleave: bool,
    round_words: tuple[int, ...],
    said: list[str] | None,
) -> EpochPlan:
    """One draw of the sampler over every source, in epoch order (``said``:
    the sources' labels to name those that drew nothing or too little by,
    for the first round only; None: say nothing)."""
    drawn = []
    for number, (episodes, _) in enumerate(sources):
        crops = sampler.crops(episodes, _rng(seed, epoch, number, _SAMPLER, *round_words))
        order = _locality_order(
            episodes,
            crops.episode,
            crops.start,
            _rng(seed, epoch, number, _LOCALITY, *round_words),
            interleave,
        )
        drawn.append(crops.take(order))
    shares = _shares(
        [len(crops) for crops in drawn],
        [w for _, w in sources],
        _rng(seed, epoch, len(sources), _SHARES, *round_words),
    )
    if said is not None:
        _warn_empty(sources, said, drawn, sampler, epoch)
        _warn_thin(sources, said, drawn, epoch)
    with_fields = any(crops.fields is not None for crops in drawn)
    parts, progress = [], []
    for number, (crops, share) in enumerate(zip(drawn, shares, strict=True)):
        if share == 0:
            continue
        take = crops.take(np.arange(share) % len(crops))
        fields = take.fields if take.fields is not None else np.full(share, None, dtype=object)
        columns = (np.full(share, number), take.episode, take.start, take.end)
        parts.append(columns + ((fields,) if with_fields else ()))
        progress.append((np.arange(share) + 0.5) / share)
    if not parts:
        return _EMPTY
    merged = np.argsort(np.concatenate(progress), kind="stable")
    columns = [np.concatenate(column)[merged] for column in zip(*parts, strict=True)]
    plan = EpochPlan(*columns)
    shuffle = _rng(seed, epoch, len(sources), _SHUFFLE, *round_words)
    return plan[_shuffled(len(plan), window, shuffle)]


def _concatenated(plans: list[EpochPlan]) -> EpochPlan:
    with_fields = any(p.fields is not None for p in plans)
    fields = (
        np.concatenate(
            [p.fields if p.fields is not None else np.full(len(p), None, object) for p in plans]
        )
        if with_fields
        else None
    )
    return EpochPlan(
        np.concatenate([p.source for p in plans]),
        np.concatenate([p.episode for p in plans]),
        np.concatenate([p.start for p in plans]),
        np.concatenate([p.end for p in plans]),
        fields,
    )


_NOTHING = np.zeros(0, dtype=np.int64)
_EMPTY = EpochPlan(_NOTHING, _NOTHING, _NOTHING.astype(float), _NOTHING.astype(float))


def _rng(*words: int) -> np.random.Generator:
    """A generator for these words, a different one for any other words.

    Words in ``[0, 2**32)`` (every seed and epoch up to 4.29e9) are the
    entropy as they are, as plans have always been made. The rest of a word
    (a negative one, or a 64-bit seed such as ``torch.initial_seed()``) is
    told apart in the ``spawn_key``: cut to 32 bits alone, seeds ``s`` and
    ``s + 2**32`` planned the same epoch."""
    low = [w & _WORD for w in words]
    high = [(i, _zigzag(w >> 32)) for i, w in enumerate(words) if not 0 <= w <= _WORD]
    spawn_key = (len(words), *(n for pair in high for n in pair)) if high else ()
    return np.random.default_rng(np.random.SeedSequence(low, spawn_key=spawn_key))


_WORD = 0xFFFFFFFF


def _zigzag(n: int) -> int:
    """A signed integer as a distinct non-negative one (0, -1, 1, -2 -> 0, 1, 2, 3)."""
    return 2 * n if n >= 0 else -2 * n - 1


def _locality_order(
    episodes: Episodes,
    episode: np.ndarray,
    start: np.ndarray,
    rng: np.random.Generator,
    interleave: bool,
) -> np.ndarray:
    shard_rank = rng.permutation(len(episodes.dataset.shard_names))[episodes.shard[episode]]
    episode_rank = rng.permutation(len(episodes))[episode]
    grouped = np.lexsort((start, episode_rank, shard_rank))
    if not interleave or not len(grouped):
        return grouped
    # Each crop's place in its episode (the episode's crops are contiguous in
    # ``grouped``), as a fraction of the episode's crops, at a random phase.
    mine = episode[grouped]
    begins = np.r_[True, mine[1:] != mine[:-1]]
    first = np.maximum.accumulate(np.where(begins, np.arange(len(mine)), 0))
    count = np.bincount(episode, minlength=len(episodes))[mine]
    phase = rng.random(len(episodes))[mine]
    progress = (np.arange(len(mine)) - first + phase) / count
    return grouped[np.lexsort((episode_rank[grouped], progress, shard_rank[grouped]))]


def _shares(sizes: list[int], weights: list[float], rng: np.random.Generator) -> list[int]:
    """Crops each source contributes: all of them alone, else by weight among
    the sources that drew any (a source without crops cannot fill its share:
    kept in the sum, it would only cut the others' shares). The epoch is as
    long as the crops drawn by the sources of weight > 0: one of weight 0 is
    as if absent (its crops counted, the others' were cycled to fill them).

    The shares add up to the crops drawn. A share that is not whole is
    rounded down or up, up with the chance of its fraction (systematic
    sampling at a random offset): rounded alone, the shares lost or added
    crops (2:1:1 of 21 crops: 10 + 5 + 5), and one source got the same
    extra crop in every epoch (5:3:1 of 21: 12/7/2, 57 % instead of 56)."""
    if len(sizes) == 1:
        return sizes
    if any(not np.isfinite(w) or w < 0 for w in weights) or not sum(weights):
        raise ValueError(f"Mix weights must be finite, >= 0 and not all zero, not {weights}")
    drawing = np.array([w if size else 0.0 for size, w in zip(sizes, weights, strict=True)])
    weight = drawing.sum()
    total = sum(size for size, w in zip(sizes, drawing, strict=True) if w)
    if not weight:
        return [0] * len(sizes)
    quota = total * (drawing / weight)
    whole = np.floor(quota)
    extra = int(total - whole.sum())  # crops left: the fractions add up to it
    reach = np.cumsum(quota - whole)
    reach *= extra / reach[-1] if reach[-1] else 0.0  # exactly ``extra`` at the end
    # Source i gets one more crop for each of the points offset, offset + 1,
    # ... that falls in its stretch [reach[i-1], reach[i]) of the fractions.
    passed = np.ceil(reach - rng.random()).astype(np.int64)
    more = np.diff(passed, prepend=0)
    return [int(n) for n in whole.astype(np.int64) + more]


def _labels(sources: Sequence[tuple[Episodes, float]], names: Sequence[str] | None) -> list[str]:
    """How a warning names each source: ``item 'name' at URL``, or the URL
    alone when the item has no name of its own."""
    urls = [episodes.dataset.url for episodes, _ in sources]
    if names is None:
        return urls
    return [
        url if name == url else f"item {name!r} at {url}"
        for url, name in zip(urls, names, strict=True)
    ]


def _warn_empty(
    sources: Sequence[tuple[Episodes, float]],
    said: list[str],
    drawn: list[Crops],
    sampler: Sampler,
    epoch: int,
) -> None:
    """Name each weighted source of a mix that drew no crop for ``epoch``:
    the epoch mixes the others only, not the proportions asked for."""
    if len(sources) == 1:
        return
    for (episodes, weight), label, crops in zip(sources, said, drawn, strict=True):
        if weight > 0 and not len(crops):
            log.warning(
                "Mix: %s (weight %g, %d episodes) has no crop of %r in epoch %d "
                "(no episodes, or none long enough?): the epoch mixes the other "
                "sources only, by their weights",
                label,
                weight,
                len(episodes),
                sampler,
                epoch,
            )


def _warn_thin(
    sources: Sequence[tuple[Episodes, float]], said: list[str], drawn: list[Crops], epoch: int
) -> None:
    """Name each source of a mix whose share of ``epoch`` is under one crop:
    rounded at random, it is missing from most epochs (1e9:1 weights, or a
    weight meant in other units) — what the weights ask, but said."""
    weights = [w if len(crops) else 0.0 for (_, w), crops in zip(sources, drawn, strict=True)]
    weight = sum(weights)
    total = sum(len(crops) for crops, w in zip(drawn, weights, strict=True) if w)
    for label, w in zip(said, weights, strict=True):
        share = total * w / weight if weight else 0.0
        if 0 < share < 1:
            log.warning(
                "Mix: %s (weight %g) has a share of %.2g crops of the %d of epoch %d: "
                "it gives a crop in that fraction of the epochs, none in most",
                label,
                w,
                share,
                total,
                epoch,
            )


def _shuffled(total: int, window: int, rng: np.random.Generator) -> np.ndarray:
    if window <= 1:
        return np.arange(total)
    return np.argsort(np.arange(total) + rng.uniform(0, window, total), kind="stable")
