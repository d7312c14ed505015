#!/usr/bin/env python3
"""PyTorch peer of stoker's fine-tuning throughput: MobileNetV2 alpha=0.35 unfrozen from block 13.

The model: torchvision.models.mobilenet_v2(width_mult=0.35).features (random weights: speed does
not depend on them) + global average pooling + Linear(1280 -> 1), trained with BCEWithLogitsLoss
and Adam(lr 1e-5, torch's defaults otherwise), batch --batch of 224x224 float32 random tensors
made once before timing (so only compute is timed), on --threads CPU threads (default: all cores),
or with --device cuda on the GPU: channels-last, autocast to bfloat16 (stoker's GPU trainer keeps
bf16 values too), the batch already on the device, CUDA synchronised before each clock read.

What is unfrozen matches the Keras fine-tuning vectors (scripts/keras_reference_gradients.py,
"mobilenet_top" / "adam_step"): every layer at or after Keras' block_13_expand. torchvision's
features[i] and Keras' layer names line up as

    features[0]        Conv1 / bn_Conv1 / Conv1_relu          (3 -> 16, stride 2)
    features[1]        expanded_conv_*  (no expansion)        (16 -> 8)
    features[k], k=2..17   block_{k-1}_expand / _depthwise / _project  (and block_{k-1}_add)
    features[18]       Conv_1 / Conv_1_bn / out_relu          (112 -> 1280)

so Keras' block_13 is features[14]: its expansion 1x1 conv is 32 -> 192 channels, its depthwise
3x3 conv has stride 2 and its projection is 192 -> 56 (Keras alpha=0.35: block_12_add has 32
channels, block_13_project 56; the first block with 56 output channels, both sides). The script
checks these channel counts before it runs.

features[0:14] (up to Keras' block_12_add) is frozen and runs under torch.no_grad(), as a fair
peer would; features[14:] + the head are trained. The whole model stays in eval mode, so every
BatchNormalization uses its running statistics (Keras' fine-tuning semantics: BN called with
training=False) while the unfrozen BNs' weight and bias (Keras' gamma and beta) are trained.

It times --warmup steps untimed, then --steps steps, and the same for the forward pass of the
whole frozen backbone alone (no backward, torch.no_grad: the feature-extraction rate, for
reference). Prints one JSON line:

    {"peer": "torch", "images_per_second": F, "forward_only_images_per_second": F2,
     "threads": N, "batch": B, "steps": K, "trainable_parameters": P, "torch": "...",
     "torchvision": "..."}

    python3 bench/fine_tune_peers.py [--threads N] [--batch 32] [--warmup 3] [--steps 10] [--device cpu|cuda]
"""
import argparse
import contextlib
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description="PyTorch fine-tuning throughput, MobileNetV2 0.35 from block 13")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads; 0: every core this process may use")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()
    if min(args.batch, args.size, args.steps) < 1 or args.warmup < 0:
        ap.error("--batch, --size and --steps must be >= 1, --warmup >= 0")
    try:
        import torch
        import torchvision
    except ImportError as e:
        print(json.dumps({"peer": "torch", "skipped": f"PyTorch or torchvision is not installed ({e})"}))
        return 2

    threads = args.threads
    if threads <= 0:
        try:
            threads = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    net = torchvision.models.mobilenet_v2(weights=None, width_mult=0.35)
    features = net.features
    block13 = features[14]
    convs = [m for m in block13.modules() if isinstance(m, torch.nn.Conv2d)]
    # Keras block_13_expand (32 -> 192), block_13_depthwise (stride 2), block_13_project (192 -> 56).
    assert (convs[0].in_channels, convs[0].out_channels) == (32, 192), convs[0]
    assert convs[1].groups == 192 and convs[1].stride == (2, 2), convs[1]
    assert (convs[2].in_channels, convs[2].out_channels) == (192, 56), convs[2]
    assert features[18][0].out_channels == 1280

    frozen = features[:14]
    top = torch.nn.Sequential(features[14:], torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(1280, 1))
    for p in frozen.parameters():
        p.requires_grad_(False)
    frozen.eval()
    top.eval()  # BN: running statistics; the unfrozen BNs' weight and bias still train
    params = [p for p in top.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-5)
    loss_fn = torch.nn.BCEWithLogitsLoss()

    x = torch.randn(args.batch, 3, args.size, args.size)
    y = (torch.rand(args.batch, 1) < 0.5).float()
    cuda = args.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            print(json.dumps({"peer": "torch", "skipped": "--device cuda but torch sees no GPU"}))
            return 2
        frozen.cuda().to(memory_format=torch.channels_last)
        top.cuda().to(memory_format=torch.channels_last)
        x = x.cuda().to(memory_format=torch.channels_last)
        y = y.cuda()
        params = [p for p in top.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=1e-5)

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()

    def train_step():
        with torch.no_grad(), autocast():
            boundary = frozen(x)
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(top(boundary).float(), y)
        loss.backward()
        opt.step()
        return loss

    backbone = torch.nn.Sequential(features, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()

    def forward_step():
        with torch.no_grad(), autocast():
            return backbone(x)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def rate(step):
        for _ in range(args.warmup):
            step()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        return args.batch * args.steps / (time.perf_counter() - t0)

    train_rate = rate(train_step)
    forward_rate = rate(forward_step)
    print(json.dumps({"peer": "torch", "images_per_second": round(train_rate, 2),
                      "forward_only_images_per_second": round(forward_rate, 2), "threads": threads,
                      "device": torch.cuda.get_device_name() if cuda else "cpu",
                      "batch": args.batch, "steps": args.steps,
                      "trainable_parameters": sum(p.numel() for p in params),
                      "torch": torch.__version__, "torchvision": torchvision.__version__}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
