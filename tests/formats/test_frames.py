"""Frames written into a crop's buffer: every sample format, silence, a
buffer that grows and one cut back land where converting each frame and
joining the arrays would put them."""

from __future__ import annotations

import av
import numpy as np
import pytest
from av.audio.plane import AudioPlane

from streamer.decode.resample import downmix
from streamer.formats.frames import SampleBuffer, frame_to_float32

FORMATS = ["u8", "s16", "s32", "flt", "dbl", "u8p", "s16p", "s32p", "fltp", "dblp"]
DTYPES = {"u8": np.uint8, "s16": np.int16, "s32": np.int32, "flt": np.float32, "dbl": np.float64}


def _frame(fmt: str, samples: int, seed: int, layout: str = "stereo") -> av.AudioFrame:
    """A frame of random samples in ``fmt`` (stereo unless ``layout`` says)."""
    dtype = np.dtype(DTYPES[fmt.removesuffix("p")])
    rng = np.random.default_rng(seed)
    channels = av.AudioLayout(layout).nb_channels
    if dtype.kind == "f":
        values = rng.uniform(-1, 1, (channels, samples)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, (channels, samples), dtype=dtype, endpoint=True)
    if not av.AudioFormat(fmt).is_planar:
        values = values.T.reshape(1, -1)
    # Not ``from_ndarray``, which fails on 8-channel planar frames (``frame.planes``
    # lists a ninth plane in PyAV 18 and raises in 19; ``frames._planes`` says why).
    frame = av.AudioFrame(format=fmt, layout=layout, samples=samples)
    for number, row in enumerate(values):
        AudioPlane(frame, number).update(row)
    return frame


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("capacity", [0, 100_000])
def test_frames_and_silence_land_like_a_join(fmt: str, capacity: int) -> None:
    frames = [_frame(fmt, n, seed) for seed, n in enumerate([1024, 960, 7, 1152, 4096])]
    arrays = [frame_to_float32(frame) for frame in frames]
    out = SampleBuffer(2, capacity)  # 0: grows from its smallest size, several times
    out.add_frame(frames[0])
    out.add_silence(300)
    for frame in frames[1:]:
        out.add_frame(frame)
    gap = np.zeros((2, 300), np.float32)
    np.testing.assert_array_equal(out.samples(), np.concatenate([arrays[0], gap, *arrays[1:]], 1))
    out.truncate(1024 + 300 + 5)
    out.add_frame(frames[2])
    want = np.concatenate([arrays[0], gap, arrays[1][:, :5], arrays[2]], 1)
    np.testing.assert_array_equal(out.samples(), want)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("layout", ["stereo", "5.1", "7.1"])
def test_a_mean_buffer_is_the_downmix_of_the_frames_bit_for_bit(fmt: str, layout: str) -> None:
    """A mono crop's buffer sums the channels as frames come out; what it
    holds must be exactly ``downmix`` of the full-width samples, through
    silence, growth, a cut, and ``samples()`` read before more frames come."""
    channels = av.AudioLayout(layout).nb_channels
    frames = [_frame(fmt, n, seed, layout) for seed, n in enumerate([1024, 960, 7, 1152, 4096])]
    wide, mean = SampleBuffer(channels, 0), SampleBuffer(channels, 0, mean=True)
    for out in (wide, mean):
        out.add_frame(frames[0])
        out.add_silence(300)
        out.add_frame(frames[1])
    np.testing.assert_array_equal(mean.samples(), downmix(wide.samples()))
    for out in (wide, mean):
        out.truncate(1024 + 300 + 5)
        for frame in frames[2:]:
            out.add_frame(frame)
    assert mean.samples().shape == (1, wide.samples().shape[1])
    np.testing.assert_array_equal(mean.samples(), downmix(wide.samples()))


@pytest.mark.parametrize("mean", [False, True])
def test_a_frame_of_other_channels_than_the_buffer_is_refused(mean: bool) -> None:
    """A frame of another channel count than the crop's (a stream that
    changes its channels) is an error: never the memory past a frame's last
    plane (PyAV 18), never samples in the wrong rows."""
    buffer = SampleBuffer(2, 0, mean=mean)
    for fmt in ("fltp", "s16p", "s16"):
        for layout in ("mono", "5.1"):
            with pytest.raises(ValueError, match="channels where 2 were expected"):
                buffer.add_frame(_frame(fmt, 1152, 0, layout))


def test_integer_formats_scale_to_the_unit_range() -> None:
    frame = av.AudioFrame.from_ndarray(
        np.array([[0, 128, 255]], dtype=np.uint8), format="u8p", layout="mono"
    )
    np.testing.assert_array_equal(frame_to_float32(frame), [[-1.0, 0.0, 127 / 128]])


def test_an_empty_buffer_is_an_empty_array() -> None:
    assert SampleBuffer(3).samples().shape == (3, 0)
