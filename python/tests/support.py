"""What several test files share: folders of generated class images, the process's RSS."""

import os

import numpy as np

# Two classes that differ in colour: a model learns them in a few steps.
COLOURS = {"blue": (30, 40, 210), "red": (210, 40, 30)}


def make_folder(root, per_class=12, size=32, seed=0, ext="jpg"):
    """A folder of class folders (COLOURS plus noise), written with Pillow; returns its path."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name, colour in COLOURS.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            noise = rng.integers(-25, 26, (size, size, 3))
            a = np.clip(np.array(colour)[None, None, :] + noise, 0, 255).astype(np.uint8)
            Image.fromarray(a).save(os.path.join(root, name, f"{i:03d}.{ext}"))
    return str(root)


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")
