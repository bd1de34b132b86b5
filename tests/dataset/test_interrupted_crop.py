"""Ctrl-C during ``Dataset.read_crop`` on the main thread (a training loop's
own loop, a notebook) is delivered, never lost: PyAV drops an exception
raised while FFmpeg reads through a Python file object, and the crop then
failed as "past the end" (counted, the loop going on) or the Ctrl-C
vanished. The decoders that read so (MP4, FFmpeg's packet index, the
fallback: this one) hold the signal for the crop and deliver it when done."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from helpers import write_audio

from streamer import open_dataset
from streamer.decode import fallback
from streamer.write.pack import pack


class _InterruptedRead:
    """The file object FFmpeg reads the episode through (only PyAV calls
    it), whose first read is where Ctrl-C lands."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.reads = inner, 0

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        if self.reads == 1:
            signal.raise_signal(signal.SIGINT)
        return self.inner.read(size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("codec", ["mp3", "aac"])
def test_ctrl_c_inside_ffmpegs_read_is_raised_after_the_crop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    write_audio(tmp_path / "src", "a", codec, 44100, 2, 2.0)
    pack(tmp_path / "src", tmp_path / "ds", progress=False, index=False)  # the fallback's path
    dataset = open_dataset(tmp_path / "ds")
    opened = fallback.open_input
    monkeypatch.setattr(fallback, "open_input", lambda source: opened(_InterruptedRead(source)))
    with pytest.raises(KeyboardInterrupt):
        dataset.read_crop("a", 0.5, 1.5)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.undo()
    assert dataset.read_crop("a", 0.5, 1.5).shape == (2, 44100)  # nothing held over
