#!/usr/bin/env python3
"""Throughput of the peers of stoker's augmentation on this machine, one core each.

Keras (tf_keras ImageDataGenerator, the seed's parameters: rotation 30, shifts 0.4, shear 0.4,
zoom 0.25, horizontal flip, brightness [0.5, 1.5]) and torchvision's closest equivalent
(Resize + RandomAffine + RandomHorizontalFlip + ColorJitter(brightness) on PIL images), at
299x299 and 224x224 over the catsdogs photos. Compare with bench/augment_bench (stoker), run on
the same machine. Each part runs in its own interpreter, pinned to one CPU:

    python3 bench/augment_peers.py [--data DIR] [--images N] [--sizes 299 224] [--keras-python P] [--torch-python P]

Defaults: /work/venv-ref/bin/python (tensorflow-cpu + tf-keras from PyPI) for Keras and
/usr/bin/python3 (Debian's python3-torchvision) for torchvision. A part whose packages are
missing is reported as skipped.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "..", "shared", "data", "catsdogs")


def pin_one_core():
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["TF_NUM_INTRAOP_THREADS"] = "1"
    os.environ["TF_NUM_INTEROP_THREADS"] = "1"
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass


def files(data, n):
    out = []
    for cls in ("cat", "dog"):
        d = os.path.join(data, cls)
        if os.path.isdir(d):
            out += [os.path.join(d, f) for f in sorted(os.listdir(d))]
    out.sort()
    step = max(1, len(out) // n)
    return out[::step][:n]


def timed(fn, count, seconds):
    """Calls fn(i) until `seconds` passed and at least `count` calls; returns calls per second."""
    for i in range(4):
        fn(i)
    start = time.perf_counter()
    i = 0
    while i < count or time.perf_counter() - start < seconds:
        fn(i)
        i += 1
    return i / (time.perf_counter() - start)


def part_keras(args):
    size = args.size
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tf_keras
    from tf_keras.preprocessing.image import ImageDataGenerator, img_to_array, load_img

    params = dict(rotation_range=30, width_shift_range=0.4, height_shift_range=0.4, shear_range=0.4,
                  zoom_range=0.25, horizontal_flip=True, brightness_range=[0.5, 1.5])
    rows = []
    gen = ImageDataGenerator(**params)
    # flow_from_directory: PIL decode + resize (nearest) + random_transform, batches of 32.
    it = gen.flow_from_directory(args.data, target_size=(size, size), batch_size=32, class_mode="binary", seed=1)
    next(it)
    start = time.perf_counter()
    n = 0
    while n < args.images or time.perf_counter() - start < args.seconds:
        x, _ = next(it)
        n += len(x)
    rows.append(("keras flow_from_directory (decode+resize+augment)", n / (time.perf_counter() - start)))
    # The augmentation alone on images already decoded and resized (what stoker's bench times).
    names = files(args.data, min(args.images, 100))
    arrays = [img_to_array(load_img(f, target_size=(size, size))) for f in names]
    rows.append(("keras random_transform+standardize (decoded)",
                 timed(lambda i: gen.standardize(gen.random_transform(arrays[i % len(arrays)])), 50, args.seconds)))
    rows.append(("keras load_img(target_size) only (decode+resize)",
                 timed(lambda i: img_to_array(load_img(names[i % len(names)], target_size=(size, size))), 50,
                       args.seconds)))
    return {"versions": "tf_keras " + tf_keras.__version__ + ", numpy " + np.__version__, "rows": rows}


def part_torch(args):
    size = args.size
    import torch
    import torchvision
    from PIL import Image
    from torchvision import transforms as T

    torch.set_num_threads(1)
    decoded = [Image.open(f).convert("RGB") for f in files(args.data, min(args.images, 100))]
    for im in decoded:
        im.load()
    augment = [T.RandomAffine(degrees=30, translate=(0.4, 0.4), scale=(0.75, 1.25), shear=0.4,
                              interpolation=T.InterpolationMode.BILINEAR),
               T.RandomHorizontalFlip(), T.ColorJitter(brightness=0.5)]
    full = T.Compose([T.Resize((size, size))] + augment)
    full_tensor = T.Compose([T.Resize((size, size))] + augment + [T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])
    resized = [T.Resize((size, size))(im) for im in decoded]
    only = T.Compose(augment)
    rows = [
        ("torchvision Resize+RandomAffine+flip+ColorJitter (PIL)", timed(lambda i: full(decoded[i % len(decoded)]), 50, args.seconds)),
        ("torchvision same + ToTensor+Normalize (f32 CHW)", timed(lambda i: full_tensor(decoded[i % len(decoded)]), 50, args.seconds)),
        ("torchvision RandomAffine+flip+ColorJitter (decoded)", timed(lambda i: only(resized[i % len(resized)]), 50, args.seconds)),
        ("torchvision Resize only (PIL bilinear)", timed(lambda i: T.Resize((size, size))(decoded[i % len(decoded)]), 50, args.seconds)),
    ]
    return {"versions": "torch %s, torchvision %s" % (torch.__version__, torchvision.__version__), "rows": rows}


def main():
    ap = argparse.ArgumentParser(description="Keras and torchvision augmentation throughput, one core")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--sizes", type=int, nargs="+", default=[299, 224], help="output sizes (square)")
    ap.add_argument("--size", type=int, default=299, help=argparse.SUPPRESS)  # a part's
    ap.add_argument("--keras-python", default="/work/venv-ref/bin/python")
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    ap.add_argument("--part", choices=["keras", "torch"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part:
        pin_one_core()
        result = part_keras(args) if args.part == "keras" else part_torch(args)
        print("RESULT " + json.dumps(result))
        return
    print("augment_peers: %s, %d images, %s, one core each\n" %
          (os.path.abspath(args.data), args.images, ", ".join("%dx%d" % (n, n) for n in args.sizes)))
    print("%-58s %10s %10s" % ("configuration", "img/s", "ms/img"))
    for size in args.sizes:
        for part, python in (("keras", args.keras_python), ("torch", args.torch_python)):
            cmd = [python, os.path.abspath(__file__), "--part", part, "--data", args.data, "--images", str(args.images),
                   "--seconds", str(args.seconds), "--size", str(size)]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            except (OSError, subprocess.TimeoutExpired) as e:
                print("%-58s skipped (%s)" % (part, e))
                continue
            lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
            if out.returncode != 0 or not lines:
                err = (out.stderr.strip().splitlines() or ["no output"])[-1]
                print("%-58s skipped (%s)" % (part, err[:80]))
                continue
            result = json.loads(lines[-1][len("RESULT "):])
            for name, rate in result["rows"]:
                print("%-58s %10.1f %10.2f" % ("%s [%d]" % (name, size), rate, 1000.0 / rate))
            print("  (%s)" % result["versions"])
    sys.stdout.flush()


if __name__ == "__main__":
    main()
