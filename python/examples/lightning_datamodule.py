"""Lightning on stoker's loader: a LightningDataModule whose dataloaders are
stoker.torch.DataLoader, and a small classifier, on one process or several (DDP).

    python lightning_datamodule.py --data photos/ --devices 2 --epochs 3

`--data` is a folder of class folders (torchvision's ImageFolder layout); a quarter of each class
is held out for validation (stoker.dataset's validation_split, Keras' split). Each rank reads its
share of every epoch: the loaders follow the rank of the job when an epoch starts
(torch.distributed, which Lightning initialises before it asks for the dataloaders), and
Lightning's `set_epoch` on `loader.sampler` chooses the epoch's order, as with a
DistributedSampler; Lightning injects no sampler into them. The training loader's `state_dict()`
goes into Lightning's checkpoints, so `trainer.fit(..., ckpt_path=...)` continues an epoch where
the checkpoint was taken, with the same batches as a run that was not interrupted.
"""

import argparse

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F

import stoker
import stoker.torch


class StokerImageData(L.LightningDataModule):
    """Training and validation loaders over one folder of class folders."""

    def __init__(self, data: str, image_size: int = 64, batch_size: int = 32, num_workers: int = 4,
                 val_fraction: float = 0.25, seed: int = 0, return_meta: bool = False):
        super().__init__()
        self.save_hyperparameters()

    def _loader(self, subset: str, **kwargs) -> stoker.torch.DataLoader:
        h = self.hparams
        source = stoker.dataset(h.data, validation_split=h.val_fraction, subset=subset)
        return stoker.torch.DataLoader(
            source, h.image_size, batch_size=h.batch_size, num_workers=h.num_workers, seed=h.seed,
            normalize="imagenet", pin_memory=torch.cuda.is_available(), return_meta=h.return_meta, **kwargs)

    def train_dataloader(self) -> stoker.torch.DataLoader:
        # Every rank must draw the same order: the seed is given (or pass generator=).
        return self._loader("training", shuffle=True,
                            augment=stoker.Augment(random_resized_crop=True, horizontal_flip=True))

    def val_dataloader(self) -> stoker.torch.DataLoader:
        return self._loader("validation", shuffle=False)


def images_and_labels(batch):
    """(images, labels) of a batch: a tuple, or return_meta=True's dict."""
    if isinstance(batch, dict):
        return batch["images"], batch["labels"]
    return batch[0], batch[1]


class SmallClassifier(L.LightningModule):
    def __init__(self, num_classes: int, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def training_step(self, batch, batch_idx):
        images, labels = images_and_labels(batch)
        loss = F.cross_entropy(self(images), labels)
        self.log("train_loss", loss, prog_bar=True, batch_size=len(labels))
        return loss

    def validation_step(self, batch, batch_idx):
        images, labels = images_and_labels(batch)
        logits = self(images)
        self.log("val_loss", F.cross_entropy(logits, labels), sync_dist=True, batch_size=len(labels))
        self.log("val_acc", (logits.argmax(1) == labels).float().mean(), sync_dist=True, prog_bar=True,
                 batch_size=len(labels))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a folder of class folders")
    parser.add_argument("--devices", type=int, default=1, help="processes (DDP over gloo on the CPU, NCCL on GPUs)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--num-workers", type=int, default=4, help="stoker's decode threads per rank")
    parser.add_argument("--ckpt-path", default=None, help="a checkpoint to resume from")
    args = parser.parse_args()

    L.seed_everything(0)
    data = StokerImageData(args.data, args.image_size, args.batch_size, args.num_workers)
    classes = stoker.dataset(args.data).class_names
    model = SmallClassifier(len(classes))
    trainer = L.Trainer(accelerator=args.accelerator, devices=args.devices,
                        strategy="ddp" if args.devices > 1 else "auto", max_epochs=args.epochs)
    trainer.fit(model, datamodule=data, ckpt_path=args.ckpt_path)


if __name__ == "__main__":
    main()
