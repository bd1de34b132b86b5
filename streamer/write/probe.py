"""What an audio file is, as far as FFmpeg (PyAV) can tell from its header."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import BinaryIO

import av

from ..formats.ffmpeg import open_input
from ..formats.mp4 import parse as mp4
from ..formats.mp4.tables import Overclaimed
from ..storage.files import RangeFile

__all__ = ["AudioInfo", "MemoryFile", "ProbeError", "probe"]


class MemoryFile(RangeFile):
    """Bytes in memory as a file PyAV can open, without a copy. ``source``
    (the file's name) is not shown to FFmpeg, whose format probe would weigh
    its extension besides the bytes: a crop has the blob's bytes only, so a
    file FFmpeg recognises by its name alone (an Ogg file behind junk) would
    be packed and never decode."""

    def __init__(self, data: memoryview, source: str) -> None:
        super().__init__(len(data))
        self._data = data
        self.source = source

    def _read_at(self, position: int, size: int) -> memoryview:
        return self._data[position : position + size]


class ProbeError(Exception):
    """The file is not audio PyAV can open; ``str()`` is the reason."""


@dataclass(frozen=True)
class AudioInfo:
    """One row of ``audio_info/`` (the content hash is added by the writer)."""

    codec: str
    container: str
    sample_rate: int
    channels: int
    duration: float


def probe(path: str | os.PathLike[str] | BinaryIO) -> AudioInfo:
    """Open ``path`` (or a file object) with PyAV and describe its first audio
    stream. Tags that are not UTF-8 (an ID3v1 title in Latin-1: common in
    mp3s from the wild) are ignored: PyAV would refuse the whole file over them."""
    source = path if hasattr(path, "read") else os.fspath(path)  # type: ignore[arg-type]
    start = 0 if isinstance(source, str) else source.tell()
    if _size(source) == 0:
        # FFmpeg's raw-stream demuxers (picked by the name: .mp3, .flac,
        # .aac, .ac3) seek to -1 in an empty file, and what the file object
        # raises comes through PyAV as a traceback on stderr.
        raise ProbeError("empty file")
    try:
        with open_input(source) as container:
            if not container.streams.audio:
                raise ProbeError("no audio stream")
            stream = container.streams.audio[0]
            context = stream.codec_context
            if context is None:  # e.g. 36-bit PCM in WAV: FFmpeg has no decoder for it
                raise ProbeError("no decoder for its audio stream")
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                # The container's span runs from its earliest stream's start:
                # an audio track that starts later (after a video's first
                # frame) is that much shorter.
                duration = container.duration / av.time_base - _late_by(container, stream)
            else:
                duration = float("nan")
            if not context.sample_rate or not context.channels:
                # FFmpeg's probe takes random bytes named .mp3 for an mp3 stream.
                raise ProbeError(
                    f"not audio: sample rate {context.sample_rate}, {context.channels} channels"
                )
            if _empty(container, stream):
                raise ProbeError(_empty_reason(len(container.streams.audio)))
            return AudioInfo(
                codec=context.codec.canonical_name,
                container=container.format.name,
                sample_rate=int(context.sample_rate),
                channels=int(context.channels),
                duration=duration,
            )
    except ProbeError:
        raise
    except av.FFmpegError as exc:
        table = _overclaimed(source, start)
        if table is not None:
            raise ProbeError(
                f"damaged MP4 header: its {table.name} box claims {table.count} entries "
                f"but holds {table.room}; re-encode or remux the file "
                f"(FFmpeg refused it: {exc.strerror})"
            ) from exc
        raise ProbeError(f"not audio PyAV can open ({exc.strerror})") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ProbeError(f"not audio PyAV can open ({exc})") from exc


def _overclaimed(source: str | BinaryIO, start: int) -> Overclaimed | None:
    """The MP4 sample table whose entry count its box cannot hold, when that is
    why FFmpeg refused the file: it says "Cannot allocate memory" for 2^28 or
    more stts entries, as if the machine had run out. The file starts at
    ``start`` (a file object's position when it was handed over)."""
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(open(source, "rb")) if isinstance(source, str) else source
        stream.seek(start)
        if not mp4.matches(stream.read(8)):
            return None
        stream.seek(start)
        try:
            mp4.parse(stream)
        except Overclaimed as exc:
            return exc
        except Exception:  # any other fault: FFmpeg's own words stand
            return None
    return None


def _empty_reason(streams: int) -> str:
    """Why a file whose first audio stream (of ``streams``) holds no packets is not packed."""
    if streams == 1:
        return "its audio stream is empty (no packets)"
    return (
        "its first audio stream is empty (no packets): streamer serves the first "
        f"audio stream, as FFmpeg picks it, of the {streams} the file has"
    )


def _empty(container: av.container.InputContainer, stream: av.AudioStream) -> bool:
    """Whether ``stream`` holds no packet (demuxed up to its first): an
    empty first track of an MP4 whose audio is in a second, say. Its full
    decode is nothing whatever the header's duration says (3.05 s was
    recorded, and every crop planned over it failed). A demuxer error
    before the first packet is left to the decode to report."""
    try:
        return not any(packet.size for packet in container.demux(stream))
    except av.FFmpegError:
        return False


def _late_by(container: av.container.InputContainer, stream: av.AudioStream) -> float:
    """Seconds from the container's start to ``stream``'s (0 when unknown)."""
    if stream.start_time is None or stream.time_base is None or container.start_time is None:
        return 0.0
    return max(
        float(stream.start_time * stream.time_base) - container.start_time / av.time_base, 0.0
    )


def _size(source: str | BinaryIO) -> int:
    """The bytes of a path, or those from a file object's position to its end."""
    if isinstance(source, str):
        return os.path.getsize(source)
    position = source.tell()
    try:
        return source.seek(0, os.SEEK_END) - position
    finally:
        source.seek(position)
