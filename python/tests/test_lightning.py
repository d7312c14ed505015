"""Lightning itself training on stoker.torch.DataLoader: the example's LightningDataModule
(python/examples/lightning_datamodule.py) with two CPU processes over gloo (strategy "ddp", which
starts the second rank by running the script again). Every training sample once per epoch across
the ranks, and a run stopped mid-epoch, checkpointed by Lightning (the loader's state_dict() goes
into the checkpoint) and resumed with ckpt_path= sees the batches an uninterrupted run sees and
ends with its weights.

Needs the `lightning` package (PyPI's, 2.x, with a torch it supports), which the test
environments of scripts/test_python.sh do not install; run it with one that has it:
    cd python/tests && PYTHONPATH=<stoker's package> <venv>/bin/python -m pytest test_lightning.py
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("lightning", reason="needs PyPI's `lightning` (2.x) and its torch: pip install lightning, "
                                        "then run pytest test_lightning.py with that interpreter")
import torch  # noqa: E402

from support import LAUNCH  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")

# Run as a script: Lightning's "ddp" starts rank 1 by running it again with LOCAL_RANK=1, and both
# ranks then do the three fits in one process group.
DRIVER = r'''
import json, os, sys
import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy
folder, examples, out = sys.argv[1:4]
sys.path.insert(0, examples)
from lightning_datamodule import SmallClassifier, StokerImageData


class Record(Callback):
    """Each training batch's epoch, sample ids and padding, per rank, written when training ends."""

    def __init__(self, tag):
        self.tag, self.batches = tag, []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.batches.append({"epoch": trainer.current_epoch, "loader_epoch": batch["epoch"], "batch_idx": batch_idx,
                             "ids": batch["sample_ids"].tolist(), "padding": batch["padding"].tolist()})

    def on_train_end(self, trainer, module):
        loader = trainer.train_dataloader
        report = {"batches": self.batches, "sharding": list(loader.loader.sharding), "samples": len(loader.dataset),
                  "weights": [p.detach().reshape(-1).tolist() for p in module.parameters()]}
        with open(os.path.join(out, f"{self.tag}-rank{trainer.global_rank}.json"), "w") as f:
            json.dump(report, f)


def run(tag, ckpt_path=None, **settings):
    L.seed_everything(0)
    data = StokerImageData(folder, image_size=24, batch_size=4, num_workers=1, val_fraction=0.25, seed=7,
                           return_meta=True)
    model = SmallClassifier(num_classes=2)
    settings["callbacks"] = [Record(tag)] + settings.get("callbacks", [])
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(process_group_backend="gloo"),
                        max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, default_root_dir=out, **settings)
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return trainer


run("full", enable_checkpointing=False)
# Stopped after 2 of epoch 1's 3 steps, the checkpoint taken at that step (inside the epoch).
checkpoints = os.path.join(out, "checkpoints")
run("part", max_steps=5, callbacks=[ModelCheckpoint(dirpath=checkpoints, filename="mid", every_n_train_steps=5,
                                                    save_top_k=-1)])
# Lightning writes rank 0's loader state into the checkpoint; each rank continues its own share.
run("resumed", ckpt_path=os.path.join(checkpoints, "mid.ckpt"), enable_checkpointing=False)
torch.distributed.barrier()
'''


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this PyTorch has no torch.distributed")
def test_two_ranks_every_sample_once_and_resume_through_a_checkpoint(folder, tmp_path):
    for name in ("010.jpg", "011.jpg"):  # 22 photos: 17 to train on (a quarter of each class held out)
        os.remove(os.path.join(folder, "red", name))
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH and k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONPATH=os.pathsep.join(sys.path), PYTHONUNBUFFERED="1")
    try:
        done = subprocess.run([sys.executable, str(driver), folder, EXAMPLES, str(out)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the two ranks did not finish in 300 s:\n{e.stdout}\n{e.stderr}")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    runs = {}
    for tag in ("full", "part", "resumed"):
        runs[tag] = []
        for rank in range(2):
            with open(out / f"{tag}-rank{rank}.json") as f:
                runs[tag].append(json.load(f))
            assert runs[tag][rank]["sharding"] == [rank, 2]

    # what Lightning put in the checkpoint: rank 0's loader state, 2 batches of epoch 1 delivered
    checkpoint = torch.load(out / "checkpoints" / "mid.ckpt", map_location="cpu", weights_only=False)
    states = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert len(states) == 1
    assert "epoch=1 next_batch=2 rank=0 world_size=2" in states[0]["stoker_loader_state"]

    full = runs["full"]
    n = full[0]["samples"]
    assert n == 17
    for epoch in range(2):
        real, padded = [], []
        for rank in range(2):
            batches = [b for b in full[rank]["batches"] if b["epoch"] == epoch]
            assert len(batches) == 3 and all(b["loader_epoch"] == epoch for b in batches)
            for b in batches:
                real += [i for i, p in zip(b["ids"], b["padding"]) if not p]
                padded += [i for i, p in zip(b["ids"], b["padding"]) if p]
        assert sorted(real) == list(range(n)), epoch  # every sample once; the repeat is marked
        assert len(padded) == 1 and padded[0] in real
    orders = [[i for b in full[0]["batches"] if b["epoch"] == e for i in b["ids"]] for e in range(2)]
    assert orders[0] != orders[1]  # set_epoch gave each epoch its own order

    for rank in range(2):
        whole, part, resumed = (runs[tag][rank]["batches"] for tag in ("full", "part", "resumed"))
        assert len(part) == 5 and [(b["epoch"], b["batch_idx"]) for b in part[3:]] == [(1, 0), (1, 1)]
        # the resumed run continues epoch 1 at its third batch: the batches the full run had there
        assert [(b["epoch"], b["batch_idx"]) for b in resumed] == [(1, 2)]
        assert part + resumed == whole
        # and the training ends where the uninterrupted one did
        for a, b in zip(runs["resumed"][rank]["weights"], full[rank]["weights"]):
            assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)
