#!/usr/bin/env python3
"""Reference outputs of Pillow's Image.resize for the C++ test of stoker::pil_resize.

Writes tests/pipeline/vectors/pil_resize/: sources.txt + sources.u8 (the source images, raw uint8
HWC, concatenated in the order listed) and cases.txt + expected.u8 (one line per resize: source,
filter, output size, box; the outputs concatenated in that order). The sources are seeded noise
mixed with gradients and saturated pixels, so bicubic and lanczos overshoot and clip.

    python3 scripts/pil_reference_resize.py   # needs numpy and Pillow
"""
import pathlib

import numpy as np
import PIL
from PIL import Image

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "pipeline" / "vectors" / "pil_resize"
FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}
MODES = {1: "L", 3: "RGB", 4: "CMYK"}  # CMYK: four channels resampled independently (no alpha)


def source(rng, h, w, c):
    y, x = np.mgrid[0:h, 0:w]
    ramp = (x * 255 // max(1, w - 1) + y * 97 // max(1, h - 1)) % 256
    noise = rng.integers(0, 256, size=(h, w, c))
    img = np.where(rng.random((h, w, 1)) < 0.5, noise, ramp[..., None])
    img[rng.random((h, w)) < 0.1] = 255
    img[rng.random((h, w)) < 0.1] = 0
    return img.astype(np.uint8)


def main():
    rng = np.random.default_rng(20240613)
    sources = [("rgb13x21", 13, 21, 3), ("rgb1x17", 1, 17, 3), ("rgb17x1", 17, 1, 3), ("rgb1x1", 1, 1, 3),
               ("rgb40x31", 40, 31, 3), ("rgb75x100", 75, 100, 3), ("l23x19", 23, 19, 1),
               ("cmyk19x23", 19, 23, 4)]
    sizes = [(7, 5), (19, 27), (1, 1), (1, 9), (9, 1), (13, 10), (5, 21), (3, 2), (28, 28)]
    OUT.mkdir(parents=True, exist_ok=True)
    images = {}
    with open(OUT / "sources.txt", "w") as st, open(OUT / "sources.u8", "wb") as sb:
        st.write(f"# name height width channels (Pillow {PIL.__version__}, numpy {np.__version__})\n")
        for name, h, w, c in sources:
            a = source(rng, h, w, c)
            images[name] = a
            st.write(f"{name} {h} {w} {c}\n")
            sb.write(a.tobytes())
    cases = 0
    with open(OUT / "cases.txt", "w") as ct, open(OUT / "expected.u8", "wb") as cb:
        ct.write("# source filter out_height out_width box_x0 box_y0 box_x1 box_y1\n")
        for name, h, w, c in sources:
            im = Image.fromarray(images[name][..., 0] if c == 1 else images[name], MODES[c])
            boxes = [(0, 0, w, h)]
            if h > 2 and w > 2:
                boxes.append((0, h // 4, w, h - h // 4))  # a keep_aspect_ratio-like crop
            if c == 3 and h > 2 and w > 2:
                boxes.append((1, 2, w - 1, h - 1))  # an off-centre box
            own = [(h, w), (h, w + 3), (h + 2, w)] if h * w <= 400 else [(h, w // 3), (h // 4, w)]
            for fname, f in FILTERS.items():
                for box in boxes:
                    for oh, ow in sizes + own:
                        got = np.asarray(im.resize((ow, oh), f, box=box)).reshape(oh, ow, c)
                        ct.write(f"{name} {fname} {oh} {ow} {box[0]} {box[1]} {box[2]} {box[3]}\n")
                        cb.write(got.tobytes())
                        cases += 1
    print(f"{cases} cases in {OUT}")


if __name__ == "__main__":
    main()
