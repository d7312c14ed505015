#!/usr/bin/env python3
"""PyTorch peer of stoker's cuDNN backend benchmark (bench/trainer_gpu_bench), same GPU, same run.

torchvision's mobilenet_v2(width_mult=0.35) feature extractor plus global average pooling (the
frozen backbone: 224x224 -> 1280 features; random weights, speed does not depend on them), eval
mode, torch.inference_mode, bfloat16, channels-last, a batch of 256 already on the GPU.

    python3 bench/torch_mobilenet_peer.py [--batch 256] [--iters 30] [--size 224]

Prints "torch_mobilenet_peer img/s: <value>", or "torch_mobilenet_peer skipped: <why>".
"""
import argparse
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    try:
        import torch
        import torchvision
    except ImportError as e:
        print(f"torch_mobilenet_peer skipped: PyTorch/torchvision not installed ({e})")
        return 0
    if not torch.cuda.is_available():
        print(f"torch_mobilenet_peer skipped: PyTorch {torch.__version__} sees no CUDA device")
        return 0
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    net = torchvision.models.mobilenet_v2(width_mult=0.35)
    backbone = torch.nn.Sequential(net.features, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    backbone = backbone.eval().to(dev, dtype=torch.bfloat16, memory_format=torch.channels_last)
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev, dtype=torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        for _ in range(5):
            y = backbone(x)
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        t = time.perf_counter()
        start.record()
        for _ in range(args.iters):
            y = backbone(x)
        end.record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
    ms = start.elapsed_time(end)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, {torch.cuda.get_device_name(0)}, "
          f"output {tuple(y.shape)}, cudnn {torch.backends.cudnn.version()}")
    print(f"torch_mobilenet_peer img/s: {args.batch * args.iters / (ms / 1000.0):.0f}  "
          f"({ms / args.iters:.2f} ms per batch of {args.batch}; wall {args.batch * args.iters / wall:.0f} img/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
