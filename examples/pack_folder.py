"""Pack a folder of audio files into a dataset (audio/, audio_info/ and
seek_index/), then read a crop from it.

    python examples/pack_folder.py SRC OUT
"""

import sys

import streamer

src, out = sys.argv[1], sys.argv[2]
report = streamer.pack(src, out, shard_size=512 << 20, progress=False)
print(f"packed {report.files} files into {len(report.shards)} shards; skipped {report.skipped}")

dataset = streamer.open_dataset(out)
key = next(iter(dataset))
print(key, dataset.read_crop(key, 0.0, 0.5).shape)
