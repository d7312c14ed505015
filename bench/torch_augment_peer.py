#!/usr/bin/env python3
"""PyTorch peer of stoker's CUDA augmentation kernel (bench/gpu_bench, measurement 1), same GPU.

A batch of uint8 images (N, 3, H, W) already on the GPU (torchvision.io decodes to CHW uint8);
per sample a random affine drawn like bench/gpu_bench's spec (rotation +-20 degrees, shift +-10 %
of the size, shear +-10 degrees, zoom 0.8..1.2 per axis, horizontal flip with p 0.5) through
F.affine_grid + F.grid_sample (bilinear, reflection padding, output the input's size), a
per-sample brightness factor in [0.8, 1.2] with clipping to 0..255, normalisation with the
ImageNet mean/std and a cast to bfloat16 (N, 3, H, W) contiguous: the work of stoker's kernel
(u8 in, bf16 NCHW normalised out). Parameters are drawn on the GPU (torch.rand), batched: no
per-sample Python work. Timed with CUDA events on the current stream after a warm-up; the figure
is the median of --reps repetitions of --iters batches.

    python3 bench/torch_augment_peer.py [--size 299] [--batch 256] [--iters 100] [--reps 5]

Prints "torch_peer img/s: <value>" (float32 sampling, the straightforward user code; the line
scripts/gpu_check.sh reads) and "torch_peer img/s (fp16 sampling): <value>" (a faster variant
that samples in half precision, for reference), or "torch_peer skipped: <why>" and exits 2 when
PyTorch or a CUDA device is missing. --device cpu is a dry run for checking the script (tiny
sizes; its lines start with "torch_peer_cpu_dry_run", never parsed as a GPU figure).
"""
import argparse
import math
import sys

from torch_timing import import_torch, measure, report_reference


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=299)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    if min(args.size, args.batch, args.iters, args.reps) < 1:
        ap.error("--size, --batch, --iters and --reps must be >= 1")
    torch = import_torch("torch_peer", args.device)
    if torch is None:
        return 2
    import torch.nn.functional as F
    cuda = args.device == "cuda"
    tag = "torch_peer" if cuda else "torch_peer_cpu_dry_run"
    dev = torch.device(args.device)
    n, s = args.batch, args.size
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    x = torch.randint(0, 256, (n, 3, s, s), dtype=torch.uint8, device=dev, generator=g)
    deg = math.pi / 180

    def rand(lo, hi, *shape):
        return lo + (hi - lo) * torch.rand(*(shape or (n,)), device=dev, generator=g)

    def thetas():
        # Output -> input sampling matrices in normalised coordinates (square image: isotropic):
        # rotation @ shear @ zoom @ flip, plus the shift (2 * 10 % of the size in [-1, 1] units).
        ang, sh = rand(-20 * deg, 20 * deg), rand(-10 * deg, 10 * deg)
        zx, zy = rand(0.8, 1.2), rand(0.8, 1.2)
        flip = torch.where(torch.rand(n, device=dev, generator=g) < 0.5, -1.0, 1.0)
        tx, ty = rand(-0.2, 0.2), rand(-0.2, 0.2)
        zero, one = torch.zeros_like(ang), torch.ones_like(ang)
        rot = torch.stack([torch.cos(ang), -torch.sin(ang), torch.sin(ang), torch.cos(ang)], 1).view(n, 2, 2)
        shear = torch.stack([one, -torch.sin(sh), zero, torch.cos(sh)], 1).view(n, 2, 2)
        zoom_flip = torch.stack([zx * flip, zero, zero, zy], 1).view(n, 2, 2)
        a = rot @ shear @ zoom_flip
        return torch.cat([a, torch.stack([tx, ty], 1).view(n, 2, 1)], 2)  # (n, 2, 3)

    def make_step(dtype):
        mean = (torch.tensor([0.485, 0.456, 0.406], device=dev) * 255.0).view(1, 3, 1, 1).to(dtype)
        std = (torch.tensor([0.229, 0.224, 0.225], device=dev) * 255.0).view(1, 3, 1, 1).to(dtype)

        def step():
            grid = F.affine_grid(thetas().to(dtype), [n, 3, s, s], align_corners=False)
            y = F.grid_sample(x.to(dtype), grid, mode="bilinear", padding_mode="reflection", align_corners=False)
            y.mul_(rand(0.8, 1.2, n, 1, 1, 1).to(dtype)).clamp_(0, 255).sub_(mean).div_(std)
            return y.to(torch.bfloat16)

        return step

    def run(dtype):
        med, lo, hi, wall, out = measure(torch, make_step(dtype), n, args.reps, args.iters, cuda)
        ok = (out.shape == (n, 3, s, s) and out.dtype == torch.bfloat16 and out.is_contiguous()
              and bool(torch.isfinite(out).all()))
        return med, lo, hi, wall, out, ok

    if cuda:
        print(f"# torch {torch.__version__} (CUDA {torch.version.cuda}) on {torch.cuda.get_device_name()}, "
              f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.1f} GiB")
    else:
        print(f"# torch {torch.__version__} on the CPU: a dry run of the script, not a figure")
    med, lo, hi, wall, out, ok = run(torch.float32)
    print(f"# batched per-sample affine_grid + grid_sample (float32) + brightness + clip + normalise -> bf16, "
          f"{n}x3x{s}x{s} u8 in, output {tuple(out.shape)} {out.dtype}; {args.reps} reps x {args.iters} batches, "
          f"img/s by {'CUDA events' if cuda else 'wall clock'} min {lo:.0f} max {hi:.0f}, wall median {wall:.0f}")
    if not ok:
        print(f"{tag} FAILED: the output is not a finite contiguous bf16 ({n}, 3, {s}, {s}) tensor")
        return 1
    print(f"{tag} img/s: {med:.0f}")
    sys.stdout.flush()
    if cuda:
        report_reference(tag, "fp16 sampling", lambda: run(torch.float16))
    return 0


if __name__ == "__main__":
    sys.exit(main())
