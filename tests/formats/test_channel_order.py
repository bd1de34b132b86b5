"""7.1 AIFF and CAF whose ``chan`` chunk lists the channels in another order
than FFmpeg's (a custom order): under PyAV 18 the first layout PyAV read
from such a stream or frame was freed twice and the whole process aborted
("double free or corruption") in ``pack``'s probe, the index pass and every
decode. The checks run in a child process, so that an abort fails the test
instead of ending the test run."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
from pathlib import Path

import av
import numpy as np

#: R, L, C, LFE, Ls, Rs, Rls, Rrs (Core Audio labels): not FFmpeg's order.
LABELS = (2, 1, 3, 4, 5, 6, 33, 34)
RATE = 22050
#: A second and a bit, not a whole number of PCM packets.
SAMPLES = RATE + 1234


def _chan(labels: tuple[int, ...] = LABELS) -> bytes:
    """A ``chan`` chunk's body: layout tag 0 (use the channel descriptions)."""
    body = struct.pack(">III", 0, 0, len(labels))
    return body + b"".join(struct.pack(">II3f", label, 0, 0, 0, 0) for label in labels)


def _pcm(form: str) -> bytes:
    """8 channels of noise in FFmpeg's 7.1 order, through PyAV's muxer."""
    rng = np.random.default_rng(8)
    samples = (rng.standard_normal((1, 8 * SAMPLES)) * 3000).astype(np.int16)
    out = io.BytesIO()
    with av.open(out, "w", format=form) as muxer:
        stream = muxer.add_stream("pcm_s16be" if form == "aiff" else "pcm_s16le", rate=RATE)
        stream.layout = "7.1"
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="7.1")
        frame.sample_rate, frame.pts = RATE, 0
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            muxer.mux(packet)
    return out.getvalue()


def custom_order(form: str) -> tuple[bytes, bytes]:
    """The file as PyAV writes it, and with a custom-order ``chan`` chunk
    before its samples (the same samples)."""
    plain = _pcm(form)
    body = _chan()
    if form == "caf":
        at = plain.index(b"data", 8)
        return plain, plain[:at] + b"chan" + struct.pack(">q", len(body)) + body + plain[at:]
    at = plain.index(b"SSND")
    out = plain[:at] + b"CHAN" + struct.pack(">I", len(body)) + body + plain[at:]
    return plain, out[:4] + struct.pack(">I", len(out) - 8) + out[8:]


def check(root: str) -> None:
    """Pack both files with and without an index, and read crops that equal
    the full decode of the files without the chunk (run in a child)."""
    from streamer import open_dataset
    from streamer.formats.ffmpeg import open_input
    from streamer.write.pack import pack

    src = Path(root) / "src"
    src.mkdir()
    reference = {}
    for form in ("aiff", "caf"):
        plain, custom = custom_order(form)
        (src / f"{form}.{form}").write_bytes(custom)
        with open_input(io.BytesIO(plain)) as container:
            frames = container.decode(container.streams.audio[0])
            reference[form] = np.concatenate([f.to_ndarray() for f in frames], axis=1)
    for index in (True, False):
        out = Path(root) / f"out-{index}"
        report = pack(src, out, progress=False, index=index)
        assert report.files == 2 and not report.skipped, report
        dataset = open_dataset(out)
        for form, full in reference.items():
            full = full.reshape(-1, 8).T.astype(np.float32) / 32768  # packed s16
            info = dataset.info(form)
            assert info["channels"] == 8 and round(info["duration"] * RATE) == SAMPLES, info
            if index:
                assert dataset.episode(form).index.ok, dataset.episode(form).index.reason
            for start, end in ((0.0, 0.25), (0.5, SAMPLES / RATE), (0.3, 0.3 + 1 / RATE)):
                got = dataset.read_crop(form, start, end)
                want = full[:, round(start * RATE) : round(end * RATE)]
                np.testing.assert_array_equal(got, want)
        # AIFF has the native PCM index (its samples stay in file order, as FFmpeg's).
        paths = {"index": 3, "generic index": 3} if index else {"fallback from the start": 6}
        assert dataset.decode_stats.paths == paths, dataset.decode_stats
    print("ok")


def test_custom_channel_order_packs_indexes_and_decodes(tmp_path: Path) -> None:
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), os.getcwd()])}
    code = f"import test_channel_order as t; t.check({str(tmp_path)!r})"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), (
        done.returncode,
        done.stderr[-2000:],
    )
