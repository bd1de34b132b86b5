"""The sample tables of an MP4 audio track: every sample's byte offset,
size and decode time, in numpy, from ``moov``'s ``stsz``/``stz2``,
``stsc``, ``stco``/``co64`` and ``stts``, then a fragmented file's ``trun``
samples (``fragments``).

Native timeline: the audio track's decode timestamps from ``stts``, in the
track's media timescale (``mdhd``; ``timescale`` in the index), starting at 0
with the first sample, before the edit list is applied. Sample ``k`` starts
at byte ``chunk offset + sizes of the samples before it in its chunk``.
PCM (``pcm``): the packets FFmpeg's demuxer cuts from the chunks stand for
the samples.

Every count is bounded by the bytes that could hold it before anything is
allocated: a table's entry count by its box, the number of samples by
``stsz`` (4 bytes each) or, for a constant sample size, by the file's length,
and the sample counts that ``stts`` and ``stsc`` expand are clipped to that
number, so a lying count in a small file costs nothing (a count its box
cannot hold is ``Overclaimed``).
"""

from __future__ import annotations

import struct

import numpy as np

from ..reader import NoIndex
from . import pcm
from .boxes import Moov, Track
from .entry import Entry
from .fragments import Defaults, fragment_samples

__all__ = [
    "Overclaimed",
    "decode_times",
    "offsets_and_sizes",
    "sample_offsets",
    "sample_sizes",
    "table",
    "track_samples",
    "whole_samples",
]


class Overclaimed(NoIndex):
    """A sample table whose entry count its box cannot hold: a damaged or
    hostile header (a file cut short fails earlier, its box running past the
    end). ``str()`` is the countable reason; ``probe`` names the numbers (FFmpeg
    refuses 2^28 stts entries as "Cannot allocate memory", which reads like the
    machine's fault)."""

    def __init__(self, name: str, count: int, room: int) -> None:
        super().__init__(f"mp4 {name} claims more entries than its box holds")
        self.name, self.count, self.room = name, count, room


def table(payload: bytes, entry: str, name: str) -> np.ndarray:
    """A full box's ``count`` entries of big-endian ``entry`` structs, zero-copy,
    after checking the count fits in the box (no allocation from a lying count)."""
    if len(payload) < 8:
        raise NoIndex(f"truncated mp4 {name}")
    count = struct.unpack_from(">I", payload, 4)[0]
    return np.frombuffer(
        payload, dtype=entry, count=_held(payload, 8, count, entry, name), offset=8
    )


def _held(payload: bytes, at: int, count: int, entry: str, name: str) -> int:
    """``count``, once checked that the ``entry`` structs from ``at`` fit in ``payload``."""
    room = (len(payload) - at) // np.dtype(entry).itemsize
    if count > room:
        raise Overclaimed(name, count, room)
    return count


def sample_sizes(track: dict[bytes, bytes], length: int) -> np.ndarray:
    """Every sample's size; a constant size lists no more samples than a
    file of ``length`` bytes holds (the rest of a truncated file's are gone)."""
    if b"stsz" in track:
        payload = track[b"stsz"]
        if len(payload) < 12:
            raise NoIndex("truncated mp4 stsz")
        size, count = struct.unpack_from(">II", payload, 4)
        if size:
            return np.full(min(count, length // size), size, dtype=np.int64)
        return np.frombuffer(payload, ">u4", _held(payload, 12, count, ">u4", "stsz"), 12).astype(
            np.int64
        )
    if b"stz2" in track:
        payload = track[b"stz2"]
        if len(payload) < 12:
            raise NoIndex("invalid mp4 stz2")
        field, count = payload[7], struct.unpack_from(">I", payload, 8)[0]
        if field not in (4, 8, 16) or 12 + (count * field + 7) // 8 > len(payload):
            raise NoIndex("invalid mp4 stz2")
        if field == 4:
            packed = np.frombuffer(payload, np.uint8, (count + 1) // 2, 12)
            return np.stack([packed >> 4, packed & 15], axis=1).ravel()[:count].astype(np.int64)
        return np.frombuffer(payload, f">u{field // 8}", count, 12).astype(np.int64)
    raise NoIndex("mp4 track without sample sizes")


def _chunk_offsets(track: dict[bytes, bytes]) -> np.ndarray:
    if b"stco" in track:
        return table(track[b"stco"], ">u4", "stco").astype(np.int64)
    if b"co64" in track:
        return table(track[b"co64"], ">u8", "co64").astype(np.int64)
    raise NoIndex("mp4 track without chunk offsets")


def sample_offsets(track: dict[bytes, bytes], length: int) -> tuple[np.ndarray, np.ndarray]:
    """(byte offset, size) of every sample, from stsc/stsz/stco, all in numpy,
    for a file of ``length`` bytes."""
    sizes = sample_sizes(track, length)
    chunks = _chunk_offsets(track)
    stsc = table(track.get(b"stsc", b""), ">u4,>u4,>u4", "stsc")
    if not len(stsc) or not len(chunks) or not len(sizes):
        raise NoIndex("empty mp4 sample tables")
    first_chunk = stsc["f0"].astype(np.int64)
    per_chunk_entry = stsc["f1"].astype(np.int64)
    entry_of_chunk = np.searchsorted(first_chunk, np.arange(1, len(chunks) + 1), side="right") - 1
    if entry_of_chunk[0] < 0:
        raise NoIndex("invalid mp4 stsc")
    per_chunk = per_chunk_entry[entry_of_chunk]
    chunk_first = np.concatenate([[0], np.cumsum(per_chunk)])[:-1]
    # Only the samples stsz lists are placed: a lying per-chunk count expands to no more.
    used = np.clip(len(sizes) - chunk_first, 0, per_chunk)
    if used.sum() < len(sizes):
        raise NoIndex("mp4 chunks hold fewer samples than stsz lists")
    chunk_of_sample = np.repeat(np.arange(len(chunks)), used)
    before = np.concatenate([[0], np.cumsum(sizes)])[:-1]  # bytes of all earlier samples
    within = before - before[np.minimum(chunk_first, len(sizes) - 1)][chunk_of_sample]
    return chunks[chunk_of_sample] + within, sizes


def decode_times(track: dict[bytes, bytes], count: int) -> np.ndarray:
    """Decode timestamp of every sample and the end of the last, from stts
    (whose runs are clipped to ``count`` samples before they are expanded)."""
    stts = table(track.get(b"stts", b""), ">u4,>u4", "stts")
    runs = stts["f0"].astype(np.int64)
    ends = np.cumsum(runs)
    last = int(np.searchsorted(ends, count, side="left"))
    if last == len(runs):
        raise NoIndex("mp4 stts covers fewer samples than stsz lists")
    runs = runs[: last + 1]
    runs[last] -= ends[last] - count
    deltas = np.repeat(stts["f1"][: last + 1].astype(np.int64), runs)
    times = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(deltas, out=times[1:])
    return times


def whole_samples(
    offsets: np.ndarray, sizes: np.ndarray, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """The samples up to the first that is not all in a file of ``length``
    bytes (a truncated file)."""
    whole = (offsets >= 0) & (offsets + sizes <= length)
    count = int(np.argmin(whole)) if not whole.all() else len(sizes)
    return offsets[:count], sizes[:count]


def offsets_and_sizes(
    track: dict[bytes, bytes], entry: Entry, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """(byte offset, size) of every packet FFmpeg's demuxer reads from
    ``moov``'s tables: its samples, or a PCM track's cut chunks (``pcm``)."""
    if entry.codec in pcm.BYTES:
        return _pcm_packets(track, entry, length)[:2]
    return sample_offsets(track, length)


def _pcm_packets(
    track: dict[bytes, bytes], entry: Entry, length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``pcm.packets`` of a PCM track: offsets, sizes, decode times."""
    stsz = track.get(b"stsz", b"")
    constant = struct.unpack_from(">I", stsz, 4)[0] if len(stsz) >= 12 else 0
    return pcm.packets(
        table(track.get(b"stts", b""), ">u4,>u4", "stts"),
        table(track.get(b"stsc", b""), ">u4,>u4,>u4", "stsc"),
        _chunk_offsets(track),
        constant or None,
        pcm.BYTES[entry.codec] * entry.channels,
        length,
    )


def track_samples(
    audio: Track, entry: Entry, movie: Moov, moofs: list[tuple[int, bytes]], length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Every sample's offset and size, decode times (one more: the end), and
    how many of the samples ``moov``'s tables list (the fragments' follow).
    PCM: the packets FFmpeg cuts from its chunks; in fragments, FFmpeg's
    packets are the ``trun`` samples as they are (``_check_fragment_pcm``)."""
    track = audio.leaves
    is_pcm = entry.codec in pcm.BYTES
    if is_pcm and not moofs:
        offsets, sizes, times = _pcm_packets(track, entry, length)
        return offsets, sizes, times, len(sizes)
    if is_pcm and sample_sizes(track, length).size:
        raise NoIndex("fragmented mp4 with PCM in moov's tables too")
    if not moofs:
        offsets, sizes = sample_offsets(track, length)
        return offsets, sizes, decode_times(track, len(sizes)), len(sizes)
    if sample_sizes(track, length).size:
        offsets, sizes = sample_offsets(track, length)
        times = decode_times(track, len(sizes))
    else:
        offsets = sizes = np.zeros(0, np.int64)
        times = np.zeros(1, np.int64)
    track_id = _track_id(audio)
    defaults = movie.trex.get(track_id, Defaults(0, 0))
    fragments = fragment_samples(moofs, track_id, defaults, int(times[-1]), length)
    if is_pcm:
        _check_fragment_pcm(fragments.sizes, fragments.times, entry)
    return (
        np.concatenate([offsets, fragments.offsets]),
        np.concatenate([sizes, fragments.sizes]),
        np.concatenate([times[:-1], fragments.times]),
        len(sizes),
    )


def _check_fragment_pcm(sizes: np.ndarray, times: np.ndarray, entry: Entry) -> None:
    """Refuse fragment PCM samples FFmpeg's decode does not place where
    their decode times do: FFmpeg's demuxer hands each ``trun`` sample over
    as one packet (it cuts only ``moov``'s chunks into 1024 frames), whose
    frames its decoder counts from the bytes, one packet after another, so
    each sample must hold the frames of its duration, and each fragment
    start (``tfdt``) where the one before ended."""
    frame = pcm.BYTES[entry.codec] * entry.channels
    if (sizes % frame).any() or (np.diff(times) != sizes // frame).any():
        raise NoIndex("fragmented mp4 with PCM samples whose sizes are not their durations")


def _track_id(track: Track) -> int:
    tkhd = track.leaves.get(b"tkhd", b"")
    at = 20 if tkhd[:1] == b"\x01" else 12
    return struct.unpack_from(">I", tkhd, at)[0] if len(tkhd) >= at + 4 else -1
