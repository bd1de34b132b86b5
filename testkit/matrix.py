"""Every (audio encoder, muxer) pair the installed FFmpeg writes, as files.

The corpus (``tests/corpus``) is other encoders' files; this is the other
axis: every audio encoder PyAV has, into every muxer that takes it, plus
multichannel layouts and unusual rates for the codecs that have them. Each
pair that FFmpeg writes and decodes back (at least a second of audio) is
kept, named ``<encoder>--<muxer>[--<rate>-<layout>].<ext>``; the others
are what the muxer refuses and are left out.

``python -m testkit.matrix FOLDER`` writes them (about 400 files, 30 MB, in
two minutes); ``python -m benchmarks.corpus_sweep FOLDER`` sweeps them;
``tests/formats/test_encoder_matrix.py`` (``slow``) does both.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import av
import numpy as np

from streamer.synth import signal
from testkit.corpus import full_decode

__all__ = ["MUXERS", "Case", "cases", "write", "write_all"]

#: Muxer -> the file extension its files get (``corpus_sweep`` and ``pack``
#: take any; the extension only names the file).
MUXERS = {
    "wav": "wav", "w64": "w64", "aiff": "aiff", "caf": "caf", "au": "au",
    "matroska": "mka", "webm": "webm", "ogg": "ogg", "mp4": "mp4", "mov": "mov",
    "ipod": "m4a", "3gp": "3gp", "3g2": "3g2", "ismv": "ismv", "f4v": "f4v",
    "psp": "psp", "flv": "flv", "nut": "nut", "avi": "avi", "asf": "wma",
    "mpegts": "ts", "mpeg": "mpg", "vob": "vob", "adts": "aac", "latm": "latm",
    "ac3": "ac3", "eac3": "eac3", "mp3": "mp3", "mp2": "mp2", "flac": "flac",
    "opus": "opus", "oga": "oga", "wv": "wv", "tta": "tta", "voc": "voc",
    "ircam": "sf", "amr": "amr", "g722": "g722", "sbc": "sbc", "adx": "adx",
    "rso": "rso", "dfpwm": "dfpwm", "aptx": "aptx", "spdif": "spdif", "swf": "swf",
    "avm2": "avm2", "mmf": "mmf", "ast": "ast", "argo_asf": "asf2", "kvag": "kvag",
    "alp": "alp", "apm": "apm", "wsaud": "aud", "daud": "daud", "smjpeg": "mjpg",
    "gxf": "gxf", "mxf": "mxf",
}  # fmt: skip
#: Encoders left out: one that writes nothing audible, and twins of another
#: (the fixed-point AC-3 and MP2 encoders, FFmpeg's experimental mp3 one).
SKIPPED = frozenset({"anull", "comfortnoise", "ac3_fixed", "mp2fixed", "mp3"})
#: (rate, channels) of the encoders not in ``SHAPES``.
DEFAULT_SHAPE = (44100, 2)
#: Encoder -> (rate, channels) it takes; the others get ``DEFAULT_SHAPE``.
SHAPES = {
    "g722": (16000, 1), "g723_1": (8000, 1), "g726": (8000, 1), "g726le": (8000, 1),
    "libopencore_amrnb": (8000, 1), "real_144": (8000, 1), "nellymoser": (22050, 1),
    "adpcm_swf": (22050, 1), "adpcm_yamaha": (22050, 1), "roq_dpcm": (22050, 1),
    "dfpwm": (48000, 1), "sbc": (48000, 2), "aptx": (48000, 2), "aptx_hd": (48000, 2),
    "adpcm_argo": (22050, 1), "adpcm_ima_ws": (22050, 1), "adpcm_ima_alp": (22050, 1),
    "adpcm_ima_ssi": (22050, 1), "adpcm_ima_apm": (22050, 1), "adpcm_ima_amv": (22050, 1),
    "pcm_s24daud": (96000, 6), "libopus": (48000, 2), "opus": (48000, 2),
    "pcm_bluray": (48000, 2), "pcm_dvd": (48000, 2),
}  # fmt: skip
#: Encoder -> the bit rate it must be given (it has no default).
BIT_RATES = {"wmav1": 64000, "wmav2": 64000, "nellymoser": 32000, "g723_1": 6300,
             "libopencore_amrnb": 12200}  # fmt: skip
#: (encoder, muxer, rate, layout): multichannel and unusual rates.
VARIANTS = [
    *(
        (encoder, muxer, 48000, layout)
        for layout in ("5.1", "quad", "2.1")
        for encoder, muxer in (
            ("flac", "flac"), ("flac", "ogg"), ("flac", "matroska"), ("alac", "ipod"),
            ("aac", "ipod"), ("aac", "adts"), ("ac3", "ac3"), ("eac3", "eac3"),
            ("libopus", "ogg"), ("libopus", "webm"), ("vorbis", "ogg"),
            ("pcm_s16le", "wav"), ("pcm_s24le", "wav"), ("pcm_f32le", "w64"),
            ("wavpack", "wv"), ("tta", "tta"), ("pcm_s16be", "aiff"), ("alac", "caf"),
            ("mp2", "mp2"),
        )
    ),
    ("flac", "flac", 192000, "stereo"), ("flac", "flac", 88200, "stereo"),
    ("flac", "ogg", 192000, "stereo"), ("alac", "ipod", 96000, "stereo"),
    ("pcm_s24le", "wav", 192000, "stereo"), ("wavpack", "wv", 192000, "stereo"),
    ("tta", "tta", 96000, "stereo"), ("aac", "ipod", 96000, "stereo"),
    ("aac", "ipod", 7350, "stereo"), ("aac", "ipod", 8000, "stereo"),
    ("aac", "adts", 11025, "stereo"), ("libmp3lame", "mp3", 8000, "stereo"),
    ("libmp3lame", "mp3", 11025, "stereo"), ("libmp3lame", "mp3", 24000, "stereo"),
    ("libopus", "ogg", 8000, "stereo"), ("libopus", "ogg", 12000, "stereo"),
    ("vorbis", "ogg", 8000, "stereo"), ("vorbis", "ogg", 96000, "stereo"),
    ("ac3", "ac3", 32000, "stereo"), ("mp2", "mp2", 16000, "stereo"),
    ("pcm_s16le", "wav", 8000, "stereo"),
]  # fmt: skip
CHANNELS = {"mono": 1, "stereo": 2, "2.1": 3, "quad": 4, "5.1": 6}
LAYOUTS = {channels: layout for layout, channels in CHANNELS.items()}

Case = tuple[str, str, int, str]  # (encoder, muxer, rate, layout)


def cases() -> list[Case]:
    """Every pair of an installed audio encoder and a muxer of ``MUXERS``, at
    the encoder's shape (``SHAPES``), then the ``VARIANTS``."""
    found = []
    for name in sorted(av.codecs_available):
        try:
            codec = av.Codec(name, "w")
        except (av.FFmpegError, ValueError):
            continue  # a decoder only
        if codec.type != "audio" or name in SKIPPED:
            continue
        rate, channels = SHAPES.get(name, DEFAULT_SHAPE)
        found += [(name, muxer, rate, LAYOUTS[channels]) for muxer in MUXERS]
    return found + VARIANTS


def write(case: Case, seconds: float = 7.0) -> bytes | None:
    """``seconds`` of the test signal through the case's encoder and muxer;
    None when FFmpeg will not write it, or not decode a second of it back."""
    encoder, muxer, rate, layout = case
    channels = CHANNELS[layout]
    out = io.BytesIO()
    try:
        with av.open(out, "w", format=muxer) as container:
            _encode(
                container, encoder, rate, layout, signal(seconds, rate, channels, seed=channels)
            )
    except (av.FFmpegError, ValueError, TypeError, NotImplementedError):
        return None
    data = out.getvalue()
    reference = full_decode(data)  # the one a sweep compares with
    return data if reference.whole and reference.audio.shape[1] >= rate else None


def _encode(container, encoder: str, rate: int, layout: str, samples: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    options = {"strict": "experimental"} | ({"aac_pns": "0"} if encoder == "aac" else {})
    stream = container.add_stream(encoder, rate=rate, options=options)
    stream.layout = layout
    sample_format = stream.codec_context.codec.audio_formats[0].name
    stream.codec_context.format = sample_format
    if encoder in BIT_RATES:
        stream.bit_rate = BIT_RATES[encoder]
    size = stream.codec_context.frame_size or 1024
    convert = av.AudioResampler(format=sample_format, layout=layout, rate=rate)
    for start in range(0, samples.shape[1], size):
        block = np.ascontiguousarray(samples[:, start : start + size])
        frame = av.AudioFrame.from_ndarray(block, format="fltp", layout=layout)
        frame.sample_rate, frame.pts = rate, start
        for converted in convert.resample(frame):
            container.mux(stream.encode(converted))
    container.mux(stream.encode(None))


def write_all(folder: Path, seconds: float = 7.0) -> list[Path]:
    """Every case FFmpeg writes and decodes, into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for case in cases():
        data = write(case, seconds)
        if data is None:
            continue
        encoder, muxer, rate, layout = case
        shaped = (
            ""
            if (rate, CHANNELS[layout]) == SHAPES.get(encoder, DEFAULT_SHAPE)
            else f"--{rate}-{layout}"
        )
        path = folder / f"{encoder}--{muxer}{shaped}.{MUXERS[muxer]}"
        path.write_bytes(data)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m testkit.matrix", description=__doc__)
    parser.add_argument("folder", type=Path, help="where the files go")
    parser.add_argument("--seconds", type=float, default=7.0, help="each file's length")
    args = parser.parse_args()
    print(f"{len(write_all(args.folder, args.seconds))} files in {args.folder}")


if __name__ == "__main__":
    main()
