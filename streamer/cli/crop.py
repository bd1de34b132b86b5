"""``streamer crop URL KEY START END -o FILE``: one crop, to .npy or .wav."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import uuid
import wave
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from ..dataset import Dataset, open_dataset
from ..errors import DataError
from ..index.checks import MAX_DURATION
from ..write.sources import name_text
from ._options import (
    UsageError,
    add_allow_incomplete_argument,
    add_quality_argument,
    add_url_arguments,
    sample_rate,
    seconds,
    storage_options,
    writable_file,
)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("crop", help="decode one crop to a .npy or .wav file")
    add_url_arguments(parser)
    add_allow_incomplete_argument(parser)
    parser.add_argument("key", metavar="KEY", type=name_text, help="episode key")
    parser.add_argument("start", metavar="START", type=seconds, help="start, seconds")
    parser.add_argument("end", metavar="END", type=seconds, help="end, seconds")
    parser.add_argument(
        "--sample-rate", type=sample_rate, help="resample to this rate (1000-768000 Hz)"
    )
    add_quality_argument(parser)
    parser.add_argument("--mono", action="store_true", help="mean of the channels")
    parser.add_argument("--pad", action="store_true", help="zero-pad a crop past the end")
    parser.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="FILE.npy (float32) or FILE.wav"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    if not args.output.endswith((".npy", ".wav")):
        raise UsageError(f"-o must end in .npy or .wav, not {args.output!r}")
    if args.end <= args.start:
        raise UsageError(f"END must be after START ({args.start:g} .. {args.end:g})")
    if args.end > MAX_DURATION:
        raise UsageError(f"END {args.end:g} is past any audio (at most {MAX_DURATION:g} s)")
    options = storage_options(args)
    writable_file(args.output)  # before decoding
    dataset = open_dataset(args.url, allow_incomplete=args.allow_incomplete, **options)
    _check_size(dataset, args)
    crop = dataset.crop(
        args.key,
        args.start,
        args.end,
        args.sample_rate,
        args.mono,
        pad=args.pad,
        resample_quality=args.resample_quality,
    )
    audio, rate = crop.audio, crop.sample_rate
    if args.output.endswith(".npy"):
        write_whole(args.output, lambda file: np.save(file, audio))
    else:
        write_whole(args.output, lambda file: write_wav(file, audio, rate))
    served = ", ".join(dataset.decode_stats.paths)  # which path served it: index or fallback
    print(
        f"{args.output}: {audio.shape[0]} channel(s) x {audio.shape[1]} samples at {rate} Hz "
        f"(served by: {served})"
    )
    return 0


#: The most sample bytes a WAV file holds (its sizes are 32-bit).
WAV_MAX_BYTES = 0xFFFFFFFF - 36


def _check_size(dataset: Dataset, args: argparse.Namespace) -> None:
    """Refuse (``UsageError``), before decoding, a crop too long for a WAV
    file or for this machine's memory (the crop is held whole, as float32):
    ``--pad`` to an END hours away (or a long crop at a high
    ``--sample-rate``) decoded it all, then failed to allocate (329 GiB) or
    to write it. END past any audio is refused by the crop itself. Unknown
    from ``audio_info`` (no such key, no row, a damaged shard): left to the
    crop. A store that fails is not: the crop would wait it out again."""
    try:
        info = dataset.info(args.key)
        rate = args.sample_rate or int(info["sample_rate"])
        channels = 1 if args.mono else int(info["channels"])
        duration = float(info["duration"])
    except (KeyError, TypeError, ValueError, DataError):
        return
    end = args.end if args.pad or not math.isfinite(duration) else min(args.end, duration)
    if not (math.isfinite(end * rate) and rate > 0 and channels > 0):
        return
    samples = max(0, round(end * rate) - round(args.start * rate))
    shape = f"{channels} channel(s) x {samples} samples at {rate} Hz"
    if args.output.endswith(".wav") and samples * channels * 2 > WAV_MAX_BYTES:
        raise UsageError(
            f"a WAV file holds at most 4 GiB of 16-bit samples; this crop is "
            f"{samples * channels * 2 / 2**30:.1f} GiB ({shape}): write a shorter crop"
        )
    memory = _physical_memory()
    if memory is not None and samples * channels * 4 > memory:
        raise UsageError(
            f"this crop needs {samples * channels * 4 / 2**30:.1f} GiB of memory ({shape}), "
            f"more than this machine's {memory / 2**30:.1f} GiB: write a shorter crop"
        )


def _physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def write_whole(path: str, write: Callable[[BinaryIO], object]) -> None:
    """``write`` into a new file beside ``path``, renamed over it once whole:
    a write that fails half way (disk full, a file size limit, Ctrl-C)
    leaves what ``path`` held before, and no partial file. ``OSError``
    naming ``path`` when it cannot be written."""
    temp = os.path.join(
        os.path.dirname(os.path.abspath(path)),
        f".{os.path.basename(path)}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial",
    )
    try:
        with open(temp, "xb") as file:
            write(file)
        os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError):  # numpy's own says "55125 requested and 16352 written"
            reason = exc.strerror or str(exc)
            raise OSError(exc.errno or 0, f"cannot write the crop ({reason})", path) from exc
        raise


def write_wav(path: str | BinaryIO, audio: np.ndarray, rate: int) -> None:
    """16-bit PCM WAV (the .npy keeps the exact float32 samples)."""
    pcm = (np.clip(audio, -1.0, 32767 / 32768) * 32768).round().astype("<i2")
    with wave.open(path, "wb") as file:
        file.setnchannels(audio.shape[0])
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(pcm.T.tobytes())
