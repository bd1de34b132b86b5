"""One crop at a time: open a dataset, look at an episode, read crops.

    python examples/read_crops.py [DATASET]

DATASET is a path or URL (``s3://bucket/prefix`` with ``--endpoint-url``-style
options passed to ``open_dataset``); without it, the demo dataset (built on
first use, about a minute).
"""

import sys

import streamer
from streamer.demo import demo_dataset

url = sys.argv[1] if len(sys.argv) > 1 else demo_dataset()
dataset = streamer.open_dataset(url)
key = next(iter(dataset))  # keys in shard order; len(dataset) episodes
info = dataset.info(key)  # codec, container, sample_rate, channels, duration, ...
print(f"{len(dataset)} episodes; {key}: {info['codec']}, {info['duration']:.1f} s")

start = min(1.0, info["duration"] / 4)
end = min(start + 1.5, info["duration"])
audio = dataset.read_crop(key, start, end)  # float32 (channels, samples), native rate
print("native:", audio.shape, "at", info["sample_rate"], "Hz")
audio = dataset.read_crop(key, start, end, sample_rate=16000, mono=True)
print("16 kHz mono:", audio.shape)
crop = dataset.crop(key, start, end, sample_rate=16000)  # a Crop: .audio, .sample_rate, .key
print("crop:", crop.key, crop.start, crop.end, crop.sample_rate)

blob = dataset.blob(key)  # the encoded bytes, addressed but not read
print("first bytes of the episode:", bytes(blob.read_range(0, 4)))
