"""Random crops through the pipeline (decode worker processes), as a training
loop would read them.

    python examples/stream_crops.py [DATASET] [CROPS]
"""

import sys

import streamer
from streamer.demo import demo_dataset

url = sys.argv[1] if len(sys.argv) > 1 else demo_dataset()
count = int(sys.argv[2]) if len(sys.argv) > 2 else 16

crops = streamer.Streamer(
    url,
    streamer.RandomCrops(1.0, per_episode=4),
    sample_rate=16000,
    mono=True,
    seed=0,
    max_crops=count,
    workers=2,  # decode processes (default: one per CPU)
)
with crops:  # or: async with crops: async for crop in crops
    for crop in crops:
        print(f"{crop.key:<30} {crop.start:7.2f} .. {crop.end:7.2f} s  {crop.audio.shape}")
