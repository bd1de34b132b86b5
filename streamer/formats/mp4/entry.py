"""The audio sample entry (``stsd``) of an MP4 track: its codec, channels
and rate as FFmpeg's decoder has them, and the codec's configuration from
the entry's child boxes (the entry's fields and boxes by its version:
``description``; PCM's entries: ``pcm``).

FFmpeg's decoder follows the configuration over the entry's own fields: an
AAC track's channels are its AudioSpecificConfig's (``esds``), a Vorbis
track's its identification header's, an ALAC track's its magic cookie's.
The entry also states what the index needs to place packets: Opus's
pre-skip (``dOps``), and the frame length of every ALAC and FLAC packet but
the last (the cookie, STREAMINFO). An entry FFmpeg's decoder does not open
with (ALAC without its cookie) or whose packets the index cannot place
(FLAC of variable block sizes) has no index.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..reader import NoIndex
from . import pcm
from .description import CHILDREN_AT, audio_format, children, version

__all__ = ["Entry", "sample_entry", "xiph_headers"]


#: Codecs that the sample entry's fourcc names alone.
_CODECS = {
    b"alac": "alac",
    b"Opus": "opus",
    b"fLaC": "flac",
    b"ac-3": "ac3",
    b"ec-3": "eac3",
    b"samr": "amr_nb",
    b"sawb": "amr_wb",
    b".mp3": "mp3",  # QuickTime's (FFmpeg's MOV muxer writes it)
}
#: MPEG-4 object type indications (esds) of ``mp4a`` entries.
_OBJECT_TYPES = {
    0x40: "aac",
    0x66: "aac",
    0x67: "aac",
    0x68: "aac",
    0x69: "mp3",
    0x6B: "mp3",
    0xDD: "vorbis",  # its decoder-specific info: the three headers, Xiph-laced
}


class Entry(NamedTuple):
    codec: str
    channels: int
    sample_rate: int
    config: bytes = b""  # the decoder's extradata (AAC: AudioSpecificConfig)
    #: Samples the decoder drops at the start unless an edit says otherwise
    #: (Opus: the pre-skip of ``dOps``).
    delay: int = 0
    #: Samples each packet but the last decodes to, as the entry states
    #: them (ALAC's cookie, FLAC's STREAMINFO; 0: not stated).
    frame: int = 0


def sample_entry(stsd: bytes) -> Entry:
    """The codec, channels, rate and configuration of ``stsd``'s first
    sample entry, as FFmpeg's decoder takes them."""
    if len(stsd) < 8 + 36 or struct.unpack_from(">I", stsd, 4)[0] < 1:
        raise NoIndex("mp4 track without a sample description")
    size, fourcc = struct.unpack_from(">I4s", stsd, 8)
    entry = stsd[8 : 8 + size]
    if len(entry) < 36:
        raise NoIndex("truncated mp4 sample description")
    channels, _, sample_rate = audio_format(entry)
    if fourcc == b"mp4a":
        object_type, config = _esds(entry)
        if object_type not in _OBJECT_TYPES:
            raise NoIndex(f"unsupported codec in mp4: mp4a object type 0x{object_type:02x}")
        codec = _OBJECT_TYPES[object_type]
        stated = _vorbis_channels(config) if codec == "vorbis" else _aac_channels(config)
        return Entry(codec, stated or channels, sample_rate, config)
    if fourcc == b"alac":
        frame, stated = _alac_cookie(entry)
        return Entry("alac", stated or channels, sample_rate, frame=frame)
    if fourcc == b"fLaC":
        return Entry("flac", channels, sample_rate, frame=_flac_frame(entry))
    if fourcc == b"Opus":
        return Entry("opus", channels, sample_rate, delay=_pre_skip(entry))
    if fourcc in _CODECS:
        return Entry(_CODECS[fourcc], channels, sample_rate)
    if pcm.is_pcm(fourcc):
        return Entry(*pcm.codec(fourcc, entry))
    raise NoIndex(f"unsupported codec in mp4: {fourcc.decode('latin-1')!r}")


def _pre_skip(entry: bytes) -> int:
    """The pre-skip of an ``Opus`` entry's ``dOps`` box (version, channels,
    then the pre-skip, 16 bits big-endian; 0 without one)."""
    at = entry.find(b"dOps", 36)
    return struct.unpack_from(">H", entry, at + 6)[0] if at > 0 and len(entry) >= at + 8 else 0


def _aac_channels(config: bytes) -> int:
    """The channel count an AudioSpecificConfig states (0: left to a program
    config element), which FFmpeg's decoder follows over the sample entry's;
    parametric stereo (object type 29) outputs two."""
    value, total = int.from_bytes(config[:8], "big"), 8 * len(config[:8])
    at = 0

    def bits(n: int) -> int:
        nonlocal at
        at += n
        return (value >> (total - at)) & ((1 << n) - 1) if at <= total else -1

    object_type = bits(5)
    if object_type == 31:
        object_type = 32 + bits(6)
    if bits(4) == 15:
        bits(24)
    layout = bits(4)
    if object_type == 29 and layout == 1:
        return 2
    return (0, 1, 2, 3, 4, 5, 6, 8)[layout] if 0 <= layout < 8 else 0


def _vorbis_channels(config: bytes) -> int:
    """The channel count of the Vorbis identification header (0 if none),
    which FFmpeg's decoder follows: the header packet is ``\x01vorbis``,
    a 4-byte version, then the count."""
    at = config.find(b"\x01vorbis")
    return config[at + 11] if at >= 0 and len(config) > at + 11 else 0


def _alac_cookie(entry: bytes) -> tuple[int, int]:
    """(frame length, channels) of an ``alac`` entry's magic cookie, the
    first ``alac`` child box (in ``wave`` in a ``mov`` file), which FFmpeg's
    decoder takes for its configuration: every packet that states no length
    of its own (all but the last, as encoders write them) decodes to the
    frame length, and the channels are the cookie's (the entry may say 2
    for mono; 0: not stated). Without a whole cookie FFmpeg's decoder does
    not open: no index."""
    start = CHILDREN_AT.get(version(entry), CHILDREN_AT[0])
    for kind, payload in children(entry, start):
        # Version and flags, then ALACSpecificConfig: frame length (32 bits),
        # compatible version, bit depth, pb, mb, kb, channels, ... (24 bytes).
        if kind == b"alac" and len(payload) >= _ALAC_COOKIE:
            return int.from_bytes(payload[4:8], "big"), payload[13]
    raise NoIndex("alac in mp4 without its magic cookie")


#: Bytes of an ``alac`` cookie box's payload FFmpeg's decoder needs (its
#: extradata, the box with its header, is at least 36 bytes).
_ALAC_COOKIE = 28


def _flac_frame(entry: bytes) -> int:
    """The block size of a ``fLaC`` entry's STREAMINFO (in ``dfLa``, after
    its full-box header and the block's 4-byte header; 0 if none): every
    frame but the last has it when the minimum and maximum agree. A stream
    of variable block sizes has no index: its packets' durations are in
    frame headers the index does not read (FFmpeg's and libFLAC's encoders
    never write one)."""
    at = entry.find(b"dfLa", 36)
    if at < 0 or len(entry) < at + 16:
        return 0
    least, most = struct.unpack_from(">HH", entry, at + 12)
    if least != most:
        raise NoIndex("flac in mp4 with variable block sizes")
    return least


def _esds(entry: bytes) -> tuple[int, bytes]:
    """The object type and decoder-specific info (AudioSpecificConfig) of an
    ``mp4a`` entry's ``esds``."""
    at = entry.find(b"esds")
    if at < 4:
        raise NoIndex("mp4a without esds")
    data, i = entry[at + 8 :], 0  # past the box type and full-box header
    object_type = None
    while i < len(data):
        tag = data[i]
        i += 1
        length = 0
        for _ in range(4):
            if i >= len(data):
                break
            length = (length << 7) | (data[i] & 0x7F)
            i += 1
            if not data[i - 1] & 0x80:
                break
        if tag == 0x03:  # ES_Descriptor: id (2), flags (1), optional fields
            flags = data[i + 2] if i + 2 < len(data) else 0
            i += 3 + (2 if flags & 0x80 else 0) + (2 if flags & 0x20 else 0)
            if flags & 0x40:
                i += 1 + (data[i] if i < len(data) else 0)
        elif tag == 0x04 and object_type is None:  # DecoderConfigDescriptor
            object_type = data[i] if i < len(data) else -1
            i += 13  # object type, stream type, buffer size, bit rates: then its descriptors
        elif tag == 0x05 and object_type is not None:  # DecoderSpecificInfo
            return object_type, data[i : i + length]
        else:
            i += length
    if object_type is None:
        raise NoIndex("mp4a esds without a decoder config")
    return object_type, b""


def xiph_headers(config: bytes) -> list[bytes]:
    """Vorbis's three header packets from its decoder-specific info, laced
    as Xiph does: the count less one, the lengths of all but the last (each
    as 255s and a remainder), then the packets."""
    if not config or config[0] != 2:
        raise NoIndex("vorbis in mp4 without its three headers")
    lengths, at = [], 1
    for _ in range(2):
        length = 0
        while at < len(config) and config[at] == 255:
            length, at = length + 255, at + 1
        if at >= len(config):
            raise NoIndex("vorbis in mp4 without its three headers")
        lengths.append(length + config[at])
        at += 1
    first, second = at + lengths[0], at + lengths[0] + lengths[1]
    if second > len(config):
        raise NoIndex("vorbis in mp4 without its three headers")
    return [config[at:first], config[first:second], config[second:]]
