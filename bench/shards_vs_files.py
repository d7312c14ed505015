#!/usr/bin/env python3
"""Tar shards against the same images as loose files, read by `stoker load`, cold and warm.

    python3 bench/shards_vs_files.py [--data ../shared/data/catsdogs] [--repeat 3] [--threads 1 2]
                                     [--open-samples 25000]

1. Writes the folder as WebDataset shards with `stoker shard` (16 MiB each) into a scratch folder.
2. For each repeat, thread count and source (interleaved, so drift hits both alike): drops the
   page cache (`/proc/sys/vm/drop_caches` as root, else posix_fadvise(DONTNEED) on every file),
   runs one epoch (cold), then three epochs and keeps the last two (warm).
3. Opening a large shard set: --open-samples samples (the folder's photos repeated through
   symlinks, sharded at 64 MiB): the time to index it (`shards: ... indexed in T ms`) cold and warm,
   by a scan and from the shard index file, against listing the same samples as a folder
   (`folder: ... listed in T ms`).

Prints a table of medians and the ratios shards / loose files. Needs build/apps/stoker.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOKER = os.path.join(ROOT, "build", "apps", "stoker")
EPOCH = re.compile(r"^epoch (\d+): (\d+) images in [\d.]+ s = (\d+) img/s", re.M)
INDEXED = re.compile(r"shards: \d+ indexed in ([\d.]+) ms")
LISTED = re.compile(r"folder: \d+ files listed in ([\d.]+) ms")


def drop_page_cache(paths):
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return
    except OSError:
        pass
    for top in paths:  # not root: evict each file's pages
        walk = [(top, [], [top])] if os.path.isfile(top) else os.walk(top)
        for folder, _, files in walk:
            for name in files:
                path = os.path.join(folder, name)
                try:
                    fd = os.open(path, os.O_RDONLY)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
                except OSError:
                    pass


def load(data, threads, epochs, *extra):
    out = subprocess.run([STOKER, "load", "--data", data, "--epochs", str(epochs), "--image-size", "224",
                          "--batch-size", "64", "--threads", str(threads), *extra],
                         check=True, capture_output=True, text=True).stdout
    return out, [int(m.group(3)) for m in EPOCH.finditer(out)]


def shard(folder, pattern, max_size):
    out = subprocess.run([STOKER, "shard", "--data", folder, "--out", pattern, "--max-size", max_size],
                         check=True, capture_output=True, text=True).stdout
    folder = os.path.dirname(pattern)
    shards = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".tar"))
    listing = os.path.join(folder, "shards.txt")
    with open(listing, "w") as f:
        f.write("\n".join(shards) + "\n")
    return listing, len(shards), out.strip().splitlines()[-1]


def throughput(args, scratch):
    listing, count, summary = shard(args.data, os.path.join(scratch, "shards", "train-%06d.tar"), "16MiB")
    print(f"stoker shard: {summary}")
    sources = {"loose files": args.data, f"{count} shards": listing}
    cold = {(s, t): [] for s in sources for t in args.threads}
    warm = {(s, t): [] for s in sources for t in args.threads}
    for _ in range(args.repeat):
        for t in args.threads:
            for name, data in sources.items():
                drop_page_cache([args.data, os.path.dirname(listing)])
                cold[(name, t)] += load(data, t, 1)[1]
                warm[(name, t)] += load(data, t, 3)[1][1:]
    print(f"\nimg/s, 224x224, batch 64, median of {args.repeat} runs (warm: epochs 1-2 of each)")
    print(f"{'source':<14} {'threads':>7} {'cold':>8} {'warm':>8}")
    for t in args.threads:
        for name in sources:
            print(f"{name:<14} {t:>7} {statistics.median(cold[(name, t)]):>8.0f} "
                  f"{statistics.median(warm[(name, t)]):>8.0f}")
        files, tar = list(sources)
        print(f"{'ratio':<14} {t:>7} {statistics.median(cold[(tar, t)]) / statistics.median(cold[(files, t)]):>7.2f}x "
              f"{statistics.median(warm[(tar, t)]) / statistics.median(warm[(files, t)]):>7.2f}x")


def open_time(args, scratch):
    # The folder's photos repeated to n samples, through symlinks (the shards hold real copies).
    folder = os.path.join(scratch, "many")
    photos = []
    for cls in sorted(os.listdir(args.data)):
        for f in sorted(os.listdir(os.path.join(args.data, cls))):
            photos.append((cls, os.path.join(args.data, cls, f)))
    for i in range(args.open_samples):
        cls, src = photos[i % len(photos)]
        os.makedirs(os.path.join(folder, cls), exist_ok=True)
        os.symlink(os.path.abspath(src), os.path.join(folder, cls, f"{i:06d}.jpg"))
    listing, count, summary = shard(folder, os.path.join(scratch, "many-shards", "train-%06d.tar"), "64MiB")
    print(f"\nstoker shard: {summary}")
    index_file = os.path.join(scratch, "many-shards", "index")
    load(listing, 1, 0, "--shard-index", index_file)  # written once
    rows = []
    for state in ("cold", "warm"):
        for _ in range(args.repeat):
            if state == "cold":
                drop_page_cache([os.path.dirname(listing)])
            out, _ = load(listing, 1, 0)
            rows.append((state, "shards", float(INDEXED.search(out).group(1))))
            if state == "cold":
                drop_page_cache([os.path.dirname(listing)])
            out, _ = load(listing, 1, 0, "--shard-index", index_file)
            assert "from the shard index" in out, out
            rows.append((state, "index", float(INDEXED.search(out).group(1))))
            if state == "cold":
                drop_page_cache([folder])
            out, _ = load(folder, 1, 0)
            rows.append((state, "folder", float(LISTED.search(out).group(1))))
    print(f"opening {args.open_samples} samples ({count} shards), ms, median of {args.repeat}:")
    for state in ("cold", "warm"):
        for kind in ("shards", "index", "folder"):
            v = statistics.median(r[2] for r in rows if r[0] == state and r[1] == kind)
            what = {"shards": "the scan: every member's header, every label member",
                    "index": "from the shard index file (--shard-index)",
                    "folder": "listing the same samples as loose files"}[kind]
            print(f"  {state} {kind:<7} {v:8.1f}   ({what})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "catsdogs"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--open-samples", type=int, default=25000)
    args = p.parse_args()
    if not os.access(STOKER, os.X_OK):
        sys.exit(f"{STOKER} not built (cmake --build build --target stoker_cli)")
    scratch = tempfile.mkdtemp(prefix="stoker-shards-")
    try:
        throughput(args, scratch)
        if args.open_samples > 0:
            open_time(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
