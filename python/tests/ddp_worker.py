"""One rank of the DistributedDataParallel run in test_distributed.py (launched by torchrun).

Trains a tiny model with DDP (gloo, CPU) on stoker.torch.DataLoader, which takes its rank and
world size from torch.distributed; each epoch all-gathers the sample ids every rank saw, and
rank 0 checks that every sample was seen once (padding repeats aside) and writes a report."""

import datetime
import faulthandler
import json
import sys

import torch
import torch.distributed as dist

import stoker
import stoker.torch


def main(folder, report):
    # A rank that cannot reach the other fails within a minute, and a hang prints every thread's stack.
    faulthandler.dump_traceback_later(120, exit=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    dl = stoker.torch.DataLoader(folder, 16, batch_size=4, seed=3, threads=1, normalize="imagenet")
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(4, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    epochs = []
    for epoch in range(2):
        dl.set_epoch(epoch)
        dl.loader.set_epoch(epoch)
        ids = [int(i) for b in dl.loader for i, p in zip(b.sample_ids, b.padding) if not p]
        steps = 0
        for images, labels in dl:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()  # DDP all-reduces the gradients: every rank must take the same steps
            opt.step()
            steps += 1
        gathered = [None] * world
        dist.all_gather_object(gathered, {"rank": rank, "ids": ids, "steps": steps, "sharding": dl.loader.sharding})
        epochs.append(gathered)
    if rank == 0:
        with open(report, "w") as f:
            json.dump({"world": world, "samples": len(dl.loader.dataset), "epochs": epochs}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
