"""One rank of the DistributedDataParallel run in test_distributed.py (launched by torchrun).

Trains a tiny model with DDP (gloo, CPU) on stoker.torch.DataLoader, which takes its rank and
world size from torch.distributed; each epoch all-gathers the sample ids every rank saw, and
rank 0 checks that every sample was seen once (padding repeats aside) and writes a report."""

import datetime
import faulthandler
import json
import os
import sys

# A hang anywhere, the imports included (a cold page cache on a loaded 2-core machine makes
# `import torch` take minutes), prints every thread's stack before the test gives up on the rank.
faulthandler.dump_traceback_later(280, exit=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import stoker  # noqa: E402
import stoker.torch  # noqa: E402


def main(folder, report):
    # torchrun's workers rendezvous through MASTER_ADDR/MASTER_PORT (env://); the test's own
    # launcher passes a file (STOKER_TEST_INIT_METHOD=file://...): no port another process can take.
    init = os.environ.get("STOKER_TEST_INIT_METHOD", "env://")
    dist.init_process_group("gloo", init_method=init, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=datetime.timedelta(seconds=240))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    dl = stoker.torch.DataLoader(folder, 16, batch_size=4, shuffle=True, seed=3, threads=1, normalize="imagenet")
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
    # Out without running destructors: in torch 1.13 (Debian's) the DDP reducer's destructor
    # destroys the gloo process group, which waits with the GIL held for a worker thread that is
    # releasing the last collective's tensor and waits for the GIL (gdb, CI 2026-12-03:
    # ~ProcessGroupGloo from ~Reducer against ProcessGroupGloo::runLoop in ~TensorImpl), a hang
    # in one run of a few.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
