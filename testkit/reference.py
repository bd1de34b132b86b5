"""The reference every exactness test and benchmark compares crops with.

"The full decode" (docs/decoding.md): every sample FFmpeg's decoder outputs
for the first audio stream, in order from its first frame, at the rate the
decoder outputs (frames are counted, never placed by timestamp). Tags that
are not UTF-8 are ignored, as streamer's own FFmpeg opens ignore them.
"""

from __future__ import annotations

import io

import av
import numpy as np

from streamer.formats.frames import frame_to_float32

__all__ = ["full_decode"]


def full_decode(data: bytes) -> tuple[np.ndarray, int]:
    """The full decode of an encoded file, float32 ``(channels, samples)``,
    and its sample rate; raises what FFmpeg raises on bytes it cannot decode."""
    with av.open(io.BytesIO(data), metadata_errors="ignore") as container:
        stream = container.streams.audio[0]
        frames = list(container.decode(stream))
        rate = frames[0].sample_rate if frames else stream.codec_context.sample_rate
        return np.concatenate([frame_to_float32(f) for f in frames], axis=1), rate
