"""The container parsers under hypothesis: real encoded files, mutated.

For every mutation: the matching format's parser raises nothing but
``NoIndex`` (any other exception is a parser bug), ``extract`` raises
nothing and returns either "no index" with a reason or an index that
``check_index`` accepts for the bytes it was built from, read from a
seekable or a forward-only stream alike, within bounded memory. The default
suite runs a short derandomized pass; ``-m slow`` a long random one
(``STREAMER_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import functools
import io
import struct

import pytest
from _fuzz import CI, LONG, Unseekable, fuzz, marked_positions, mutated, peak_memory
from _index_support import encoded
from hypothesis import strategies as st

from streamer.formats import FORMATS, extract
from streamer.formats.ogg.pages import ogg_crc
from streamer.formats.reader import NoIndex, Reader
from streamer.index.checks import check_index

#: (codec, sample rate, channels) of each seed file; short, so that a
#: mutation lands in the headers often.
SEEDS = {
    "mp3": ("mp3", 44100, 1),
    "vorbis": ("vorbis", 44100, 2),
    "opus": ("opus", 48000, 1),
    "flac": ("flac", 22050, 1),
    "aac": ("aac", 44100, 2),
    "alac": ("alac", 44100, 1),
    "wav": ("wav", 16000, 1),
    # PCM in QuickTime MOV, in chunks of odd sizes with bytes between them.
    "pcm-mov": ("pcm_s16be", 8000, 1),
    # AIFF-C (A-law) and Wave64 through FFmpeg's muxers.
    "aiff": ("pcm_alaw", 8000, 2),
    "w64": ("pcm_s24le", 8000, 2),
}
#: Where each container keeps the counts, sizes and offsets its parser reads.
MARKERS = (
    b"stsz", b"stz2", b"stts", b"stsc", b"stco", b"co64", b"elst", b"mdhd", b"mvhd",
    b"stsd", b"mp4a", b"esds", b"alac", b"moov", b"trak", b"mdat", b"ftyp",
    b"twos", b"wave", b"enda",
    b"OggS", b"\x01vorbis", b"\x05vorbis", b"OpusHead",
    b"fLaC", b"\xff\xf8", b"\xff\xf9",
    b"RIFF", b"fmt ", b"data", b"FORM", b"COMM", b"SSND", b"FVER", b"riff", b"wave",
    b"ID3", b"Xing", b"Info", b"LAME", b"\xff\xfb", b"\xff\xf3",
)  # fmt: skip
#: Memory one parse of a seed-sized file may take (1 MiB read chunks, tables).
MEMORY_LIMIT = 24 << 20


@functools.cache
def seed(name: str) -> bytes:
    codec, rate, channels = SEEDS[name]
    if name == "pcm-mov":
        from tests.formats.test_mp4_pcm import pcm, rechunked

        return rechunked(pcm(codec, channels, frames=4800, rate=rate), [1000, 7, 2500], 40)
    if name in ("aiff", "w64"):
        from tests.formats.test_pcm_containers import pcm as contained

        return contained(codec, name, channels, rate, 4800)
    return encoded(codec, rate, channels, seconds=0.6)


def files(name: str) -> st.SearchStrategy[bytes]:
    data = seed(name)
    damaged = mutated(data, marked_positions(data, MARKERS, range(-4, 48)))
    if data.startswith(b"OggS"):
        # Half with their page CRCs made right again, so the damage gets past them.
        return damaged | damaged.map(with_page_crcs)
    return damaged


def with_page_crcs(data: bytes) -> bytes:
    """Every structurally whole Ogg page's CRC recomputed."""
    out = bytearray(data)
    at = out.find(b"OggS")
    while at >= 0 and at + 27 <= len(out):
        end = at + 27 + out[at + 26]
        end += sum(out[at + 27 : end])
        if end <= len(out):
            struct.pack_into("<I", out, at + 22, 0)
            struct.pack_into("<I", out, at + 22, ogg_crc(bytes(out[at:end])))
        at = out.find(b"OggS", at + 4)
    return bytes(out)


def check_parsers(data: bytes) -> None:
    """The format's own parser raises only ``NoIndex``; ``extract`` nothing,
    seekable or not, and what it calls ok passes ``check_index``."""
    found = next((f for f in FORMATS if f.matches(data[:16])), None)
    with peak_memory() as peak:
        if found is not None:
            try:
                found.build_index(Reader(io.BytesIO(data)), density=float("inf"))
            except NoIndex as exc:
                assert str(exc)
        for stream in (io.BytesIO(data), Unseekable(data)):
            index = extract(stream)  # type: ignore[arg-type]
            if index.ok:
                assert check_index(index, len(data)) is None
            else:
                assert index.reason
        assert peak() < MEMORY_LIMIT


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(SEEDS))
def test_mutated_files_never_break_the_parsers(name: str) -> None:
    fuzz(CI, files(name), check_parsers)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", sorted(SEEDS))
def test_mutated_files_never_break_the_parsers_long(name: str) -> None:
    fuzz(LONG, files(name), check_parsers)


@pytest.mark.timeout(120)
def test_random_bytes_after_every_magic() -> None:
    """Garbage behind each container's magic: sniffed, then rejected cleanly."""
    heads = [seed(name)[:12] for name in SEEDS] + [b"ID3\x04\x00\x00\x00\x00\x00\x00"]
    garbage = st.tuples(st.sampled_from(heads), st.binary(max_size=4096)).map(lambda p: p[0] + p[1])
    fuzz(CI, garbage, check_parsers)
