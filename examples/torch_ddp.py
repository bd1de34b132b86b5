"""Distributed training with checkpoints that resume anywhere in an epoch, at
any number of processes: ``torchrun --nproc_per_node=2 examples/torch_ddp.py``.

    torchrun --nproc_per_node=2 examples/torch_ddp.py DATASET CHECKPOINT \\
        [--epochs 2] [--stop-after STEPS] [--consumed-log FILE] \\
        [--label COLUMN] [--supervisions COLUMN]

Each step is a DistributedDataParallel step (gloo: CPU only), so every rank
must have as many batches as the others. ``--stop-after`` saves a checkpoint
after that many steps of this run and exits, as a job that is preempted;
running the script again resumes it, with the same or another number of
processes. ``--consumed-log`` appends each consumed batch (epoch, crops,
the ``--label`` column and the text of the ``--supervisions`` segments that
overlap each crop) to ``FILE.<rank>-of-<world size>``.
"""

import argparse
import datetime
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import streamer
from streamer.demo import demo_dataset
from streamer.torch import CropDataset, collate, gather_state

parser = argparse.ArgumentParser()
parser.add_argument("dataset", nargs="?")
parser.add_argument("checkpoint", nargs="?", default="checkpoint.pt")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--stop-after", type=int)
parser.add_argument("--per-episode", type=int, default=7)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--consumed-log")
parser.add_argument("--label", help="a column each crop carries, e.g. speaker")
parser.add_argument("--supervisions", help="a column of transcript segments")
args = parser.parse_args()

# A short timeout: a rank waiting on another that ran out fails in three minutes, not 30
# (one minute was too short for a loaded 2-core machine starting DataLoader workers).
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=180))
rank, world_size = dist.get_rank(), dist.get_world_size()

data = CropDataset(
    args.dataset or demo_dataset(),
    streamer.RandomCrops(0.5, per_episode=args.per_episode, min_duration=0.1),
    batch_size=args.batch_size,  # the DataLoader's: workers take turns by batches
    sample_rate=16000,
    mono=True,
    seed=1,
    columns=[args.label] if args.label else [],
    supervisions=args.supervisions,
)
loader = torch.utils.data.DataLoader(
    data,
    batch_size=args.batch_size,
    num_workers=2,
    persistent_workers=True,
    collate_fn=collate,
)
model = DistributedDataParallel(torch.nn.Linear(1, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

first_epoch = 0
checkpoint = Path(args.checkpoint)
if checkpoint.exists():  # saved by whatever world size: the data state is the job's
    saved = torch.load(checkpoint, weights_only=True)
    model.module.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    data.load_state_dict(json.loads(saved["data"]))
    first_epoch = data.epoch

log = open(f"{args.consumed_log}.{rank}-of-{world_size}", "a") if args.consumed_log else None  # noqa: SIM115
steps = 0
for epoch in range(first_epoch, args.epochs):
    # Reaches the persistent workers too; right after load_state_dict, the
    # checkpoint's epoch keeps its resume point.
    data.set_epoch(epoch)
    for batch in loader:
        loss = model(batch["audio"].mean(dim=(1, 2))[:, None]).square().mean()
        optimizer.zero_grad()
        loss.backward()  # all-reduce: waits for every rank
        optimizer.step()
        steps += 1
        if log:
            consumed = {"epoch": epoch, "crops": batch["key"], "start": batch["start"].tolist()}
            consumed["labels"] = batch.get(args.label)
            consumed["texts"] = [[seg["text"] for seg in s] for s in batch.get("supervisions", [])]
            print(json.dumps(consumed), file=log, flush=True)
        if steps == args.stop_after:
            state = gather_state(data, batch)  # every rank's progress, merged
            if rank == 0:
                torch.save(
                    {
                        "model": model.module.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "data": json.dumps(state),
                    },
                    checkpoint,
                )
            dist.barrier()
            dist.destroy_process_group()
            raise SystemExit(0)
if rank == 0:
    print(f"done: {args.epochs} epochs, {steps} steps on {world_size} ranks, pid {os.getpid()}")
dist.destroy_process_group()
