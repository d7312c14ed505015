#!/usr/bin/env python3
"""The peers of stoker's loader, as users run them, measured like `stoker bench` measures stoker.

    python3 loader_peers.py --framework torch|keras --data DIR --image-size 299 --batch-size 64 \
        --workers N [--augment] [--repeat 3] [--min-seconds 1]

torch: torchvision ImageFolder + DataLoader(num_workers=N, pin_memory=False, shuffle=True) with
       Resize((S, S)) [+ RandomAffine(30, translate=(0.4, 0.4), scale=(0.75, 1.25), shear=0.4)
       + RandomHorizontalFlip + ColorJitter(brightness=0.5)] + PILToTensor (uint8, like stoker).
keras: tf_keras ImageDataGenerator.flow_from_directory (one thread: the plain iterator has no
       workers) with the seed's parameters when --augment (rotation 30, shifts 0.4, shear 0.4,
       zoom 0.25, horizontal flip, brightness [0.5, 1.5]), nearest resize (Keras' default).

Prints one JSON object: {"framework", "augment", "workers", "img_per_s" (median of --repeat timed
runs after one warm-up epoch; a run is whole epochs until at least --min-seconds have passed, as
`stoker bench` times), "runs"}. Exits 3 with a message when the framework is not installed.
"""
import argparse
import json
import os
import statistics
import sys
import time


def torch_epochs(args):
    try:
        import torch
        import torchvision
        from torchvision import transforms as T
    except ImportError as e:
        print(f"torch/torchvision not installed: {e}", file=sys.stderr)
        sys.exit(3)
    torch.set_num_threads(1)
    size = args.image_size
    steps = [T.Resize((size, size))]
    if args.augment:
        steps += [T.RandomAffine(30, translate=(0.4, 0.4), scale=(0.75, 1.25), shear=0.4),
                  T.RandomHorizontalFlip(), T.ColorJitter(brightness=0.5)]
    steps.append(T.PILToTensor())
    dataset = torchvision.datasets.ImageFolder(args.data, transform=T.Compose(steps))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, persistent_workers=args.workers > 0)

    def epoch():
        n = 0
        for x, _ in loader:
            n += len(x)
        return n
    return epoch


def keras_epochs(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        from tf_keras.preprocessing.image import ImageDataGenerator
    except ImportError as e:
        print(f"tf_keras not installed: {e}", file=sys.stderr)
        sys.exit(3)
    params = {}
    if args.augment:
        params = dict(rotation_range=30, width_shift_range=0.4, height_shift_range=0.4, shear_range=0.4,
                      zoom_range=0.25, horizontal_flip=True, brightness_range=[0.5, 1.5])
    it = ImageDataGenerator(**params).flow_from_directory(
        args.data, target_size=(args.image_size, args.image_size), batch_size=args.batch_size,
        class_mode="binary", shuffle=True, seed=1)

    def epoch():
        n = 0
        for _ in range(len(it)):
            x, _ = next(it)
            n += len(x)
        return n
    return epoch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", choices=["torch", "keras"], required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--augment", action="store_true")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=1.0)
    args = p.parse_args()
    epoch = torch_epochs(args) if args.framework == "torch" else keras_epochs(args)
    epoch()  # warm-up: page cache, worker start-up

    def timed_run():
        start = time.perf_counter()
        images = 0
        while True:
            images += epoch()
            elapsed = time.perf_counter() - start
            if elapsed >= args.min_seconds:
                return images / elapsed

    runs = [timed_run() for _ in range(args.repeat)]
    print(json.dumps({"framework": args.framework, "augment": args.augment, "workers": args.workers,
                      "img_per_s": statistics.median(runs), "runs": runs}))


if __name__ == "__main__":
    main()
