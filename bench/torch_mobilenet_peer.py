#!/usr/bin/env python3
"""PyTorch peer of stoker's cuDNN backend benchmark (bench/trainer_gpu_bench), same GPU, same run.

The same graph as trainer_gpu_bench's backbone (the Keras MobileNetV2 alpha=0.35 .h5 cut at
sequential_9): torchvision's mobilenet_v2(width_mult=0.35).features (every conv up to the last
1x1 conv to 1280 channels + BN + ReLU6, the same layer widths and parameter count as Keras') plus
global average pooling: 224x224x3 -> 1280 features. Random weights (speed does not depend on
them), eval mode, torch.inference_mode, the model and the input in bfloat16 (.to, not autocast),
channels-last, a batch of 256 already on the GPU, torch.backends.cudnn.benchmark on. The
algorithm search and the warm-up (>= 10 batches and >= 0.3 s) are not timed; the figure is the
median of --reps repetitions of --iters batches timed with CUDA events on the current stream.

    python3 bench/torch_mobilenet_peer.py [--batch 256] [--iters 30] [--reps 5] [--size 224]

Prints "torch_mobilenet_peer img/s: <value>" (the model as a user writes it; the line
scripts/gpu_check.sh reads) and "torch_mobilenet_peer img/s (conv+bn folded): <value>" (batch
norm folded into the convs with torch.fx, as stoker's backend does, for reference), or
"torch_mobilenet_peer skipped: <why>" and exits 2 when PyTorch, torchvision or a CUDA device is
missing.

--device cpu [--threads N] is the peer of bench/cpu_backend_bench instead: the same graph in
float32 channels-last on N CPU threads (default: PyTorch's), timed by the wall clock; it prints
"torch_mobilenet_peer_cpu img/s: <value>", never read as a GPU figure.
"""
import argparse
import sys

from torch_timing import import_torch, measure, report_reference


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (--device cpu); 0: PyTorch's default")
    args = ap.parse_args()
    if min(args.batch, args.iters, args.reps, args.size) < 1:
        ap.error("--batch, --iters, --reps and --size must be >= 1")
    torch = import_torch("torch_mobilenet_peer", args.device)
    if torch is None:
        return 2
    try:
        import torchvision
    except ImportError as e:
        print(f"torch_mobilenet_peer skipped: torchvision is not installed ({e})")
        return 2
    cuda = args.device == "cuda"
    tag = "torch_mobilenet_peer" if cuda else "torch_mobilenet_peer_cpu"
    torch.backends.cudnn.benchmark = True
    if not cuda and args.threads > 0:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    dtype = torch.bfloat16 if cuda else torch.float32  # what each backend of stoker's computes in

    def backbone(fold_bn):
        torch.manual_seed(0)
        net = torchvision.models.mobilenet_v2(weights=None, width_mult=0.35)
        model = torch.nn.Sequential(net.features, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
        if fold_bn:
            from torch.fx.experimental.optimization import fuse
            model = fuse(model)  # float32, eval: BatchNorm folded into the preceding conv
        return model.to(dev, dtype=dtype, memory_format=torch.channels_last)

    x = torch.randn(args.batch, 3, args.size, args.size, device=dev).to(dtype)
    x = x.contiguous(memory_format=torch.channels_last)

    def run(model):
        with torch.inference_mode():
            med, lo, hi, wall, y = measure(torch, lambda: model(x), args.batch, args.reps, args.iters, cuda)
            ok = tuple(y.shape) == (args.batch, 1280) and bool(torch.isfinite(y).all())
        return med, lo, hi, wall, y, ok

    if cuda:
        print(f"# torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}), "
              f"torchvision {torchvision.__version__}, {torch.cuda.get_device_name(0)}")
    else:
        print(f"# torch {torch.__version__}, torchvision {torchvision.__version__} on the CPU, "
              f"{torch.get_num_threads()} threads")
    model = backbone(False)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for n, b in model.named_buffers() if n.endswith(("running_mean", "running_var")))
    med, lo, hi, wall, y, ok = run(model)
    print(f"# mobilenet_v2(width_mult=0.35).features + global average pooling, {params + buffers} parameters "
          f"(Keras counts 410208 for the backbone), {str(dtype).replace('torch.', '')} channels-last, input {tuple(x.shape)}, output {tuple(y.shape)} "
          f"{y.dtype}; {args.reps} reps x {args.iters} batches: min {lo:.0f} max {hi:.0f}, wall median {wall:.0f} img/s")
    if not ok:
        print(f"{tag} FAILED: the output is not a finite ({args.batch}, 1280) tensor")
        return 1
    print(f"{tag} img/s: {med:.0f}  ({args.batch * 1000.0 / med:.2f} ms per batch of {args.batch})")
    sys.stdout.flush()
    del model, y
    report_reference(tag, "conv+bn folded", lambda: run(backbone(True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
