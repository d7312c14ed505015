#!/usr/bin/env python3
"""PyTorch peer of stoker's CUDA augmentation kernel (bench/gpu_bench, measurement 1), same GPU.

A batch of uint8 images (N, 3, H, W) already on the GPU; per sample a random affine (rotation
+-20 degrees, shift +-10 %, zoom 0.8..1.2, horizontal flip) through F.affine_grid + F.grid_sample
(bilinear, reflection padding), a per-sample brightness factor in [0.8, 1.2], normalisation with
the ImageNet mean/std and a cast to bfloat16: the same work as stoker's kernel (u8 in, bf16 NCHW
normalised out). Parameters are drawn on the GPU (torch.rand), so the host does no per-sample work.

    python3 bench/torch_augment_peer.py [--size 299] [--batch 256] [--iters 50]

Prints one line "torch_peer img/s: <value>" (and the mode), or "torch_peer skipped: <why>".
"""
import argparse
import math
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=299)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"torch_peer skipped: PyTorch is not installed ({e})")
        return 0
    if not torch.cuda.is_available():
        print(f"torch_peer skipped: PyTorch {torch.__version__} sees no CUDA device")
        return 0
    dev = torch.device("cuda")
    n, s = args.batch, args.size
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    x = torch.randint(0, 256, (n, 3, s, s), dtype=torch.uint8, device=dev, generator=g)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255.0
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255.0

    def step():
        ang = (torch.rand(n, device=dev, generator=g) * 2 - 1) * (20 * math.pi / 180)
        tx = (torch.rand(n, device=dev, generator=g) * 2 - 1) * 0.2  # normalised coords: 10 % of the size
        ty = (torch.rand(n, device=dev, generator=g) * 2 - 1) * 0.2
        z = 0.8 + 0.4 * torch.rand(n, device=dev, generator=g)
        flip = torch.where(torch.rand(n, device=dev, generator=g) < 0.5, -1.0, 1.0)
        cos, sin = torch.cos(ang) / z, torch.sin(ang) / z
        theta = torch.stack([torch.stack([cos * flip, -sin, tx], 1), torch.stack([sin * flip, cos, ty], 1)], 1)
        grid = F.affine_grid(theta, (n, 3, s, s), align_corners=False)
        y = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="reflection", align_corners=False)
        b = 0.8 + 0.4 * torch.rand(n, 1, 1, 1, device=dev, generator=g)
        y = (y * b).clamp_(0, 255)
        return ((y - mean) / std).to(torch.bfloat16)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(args.iters):
        out = step()
    t1.record()
    torch.cuda.synchronize()
    secs = t0.elapsed_time(t1) / 1e3
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}: batched per-sample affine_grid + "
          f"grid_sample + brightness + normalise -> bf16, {n}x3x{s}x{s}, output {tuple(out.shape)}")
    print(f"torch_peer img/s: {args.iters * n / secs:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
