"""Batches for PyTorch: ``streamer.torch.CropDataset`` in a ``DataLoader``
(needs the ``torch`` extra: ``pip install 'streamer-audio[torch]'``).

    python examples/torch_loader.py [DATASET]
"""

import sys

import torch

import streamer
from streamer.demo import demo_dataset
from streamer.torch import CropDataset, collate

url = sys.argv[1] if len(sys.argv) > 1 else demo_dataset()
data = CropDataset(
    url, streamer.RandomCrops(1.0, per_episode=2), batch_size=4, sample_rate=16000, mono=True
)
loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=2, collate_fn=collate)
for epoch in range(2):
    data.set_epoch(epoch)
    for batch in loader:
        print(epoch, tuple(batch["audio"].shape), batch["lengths"].tolist())
