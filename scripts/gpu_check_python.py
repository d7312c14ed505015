"""The Python package's device batches on a real GPU, for scripts/gpu_check.sh (part `python`).

1. stoker.Loader(device='cuda') with the CUDA augmentation delivers bf16 NCHW batches that
   torch.from_dlpack takes without a copy (the tensor's pointer is the feed's slot).
2. The DLPack stream protocol: batches consumed on a side torch stream that is made slow
   (torch.cuda._sleep before each read) give the same per-batch sums as a plain synchronous run;
   a slot refilled before the consumer's stream read it would change them.
3. GPU vs CPU: the same (seed, epoch) through the CPU loader in float32 matches within bf16 rounding.
4. Resuming: a device loader's state_dict() after two batches, loaded into a new one, gives the
   rest of the uninterrupted epoch (the same per-batch sums).
5. stoker.torch.DataLoader(pin_memory=True): page-locked host batches whose non_blocking copies
   to the GPU equal the pageable loader's batches.
6. Warm throughput into torch at 299x299 (decoded cache), images per second.
Prints `python_gpu ...` lines that gpu_check.sh puts in its summary; exits non-zero on a failure.
"""

import argparse
import sys
import time

import numpy as np
import torch

import stoker


def spec(size, dtype):
    return stoker.Augment(rotation_range=30, width_shift_range=0.2, height_shift_range=0.2, shear_range=0.2,
                          zoom_range=0.2, horizontal_flip=True, brightness_range=(0.7, 1.3), dtype=dtype,
                          layout="nchw", normalization="tf", height=size, width=size)


def sums(loader, stream=None, sleep_cycles=0):
    out = []
    for b in loader:
        if stream is None:
            x = torch.from_dlpack(b.images)
            out.append(x.float().sum().item())
        else:
            with torch.cuda.stream(stream):
                if sleep_cycles:
                    torch.cuda._sleep(sleep_cycles)  # the consumer is late: the slot must wait for it
                x = torch.from_dlpack(b.images)
                out.append(x.float().sum())  # stays queued on `stream`
    torch.cuda.synchronize()
    return [float(v) for v in out]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--size", type=int, default=299)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    failures = 0
    print(f"python_gpu: stoker {stoker.cuda_build} build, {stoker.cuda_device_count()} device(s), "
          f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")

    gpu = stoker.Loader(a.data, a.size, a.batch, seed=3, augment=spec(a.size, "float32"), device="cuda",
                        dtype="bfloat16", shuffle=True)
    gpu.set_epoch(0)
    b = next(iter(gpu))
    x = torch.from_dlpack(b.images)
    zero_copy = x.data_ptr() == b.images.data_ptr and x.is_cuda and x.dtype == torch.bfloat16
    print(f"python_gpu zero-copy: {zero_copy} ({tuple(x.shape)}, {x.dtype}, {x.device})")
    failures += not zero_copy
    del x, b

    gpu.set_epoch(1)
    plain = sums(gpu)
    gpu.set_epoch(1)
    late = sums(gpu, torch.cuda.Stream(), sleep_cycles=50_000_000)
    same = plain == late
    print(f"python_gpu stream protocol: {'ok' if same else 'FAILED'} ({len(plain)} batches, slow side stream)")
    failures += not same

    cpu = stoker.Loader(a.data, a.size, a.batch, seed=3, augment=spec(a.size, "float32"), shuffle=True)
    cpu.set_epoch(2)
    gpu.set_epoch(2)
    worst = 0.0
    for bc, bg in zip(cpu, gpu):
        ref = torch.from_numpy(np.asarray(bc.images))
        got = torch.from_dlpack(bg.images).float().cpu()
        worst = max(worst, (ref - got).abs().max().item())
    agree = worst <= 0.05  # bf16 keeps 8 bits: |x| <= 1 rounds by <= 2^-8; a grey level is 0.0078
    print(f"python_gpu GPU vs CPU: max |diff| {worst:.4f} ({'ok' if agree else 'FAILED'}, bound 0.05)")
    failures += not agree

    def device_loader():
        return stoker.Loader(a.data, a.size, a.batch, seed=3, augment=spec(a.size, "float32"), device="cuda",
                             dtype="bfloat16", shuffle=True)

    whole = device_loader()
    whole.set_epoch(4)
    reference = sums(whole)
    first = device_loader()
    first.set_epoch(4)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    first.close()
    resumed = device_loader()
    resumed.load_state_dict(state)
    rest = sums(resumed)
    same = rest == reference[2:]
    print(f"python_gpu resume: {'ok' if same else 'FAILED'} ({len(rest)} of {len(reference)} batches after 2)")
    failures += not same

    # Pinned host batches: page-locked, and a non_blocking copy of each, dropped at once as the usual
    # loop does, equals the batch read back on the host (the loader keeps a buffer until the copy
    # queued on torch's current stream has passed).
    import stoker.torch
    pinned = stoker.torch.DataLoader(a.data, a.size, batch_size=a.batch, seed=3, pin_memory=True, num_workers=4)
    plain = stoker.torch.DataLoader(a.data, a.size, batch_size=a.batch, seed=3, num_workers=4)
    is_pinned, worst = True, 0.0
    for (xp, _), (xh, _) in zip(pinned, plain):
        is_pinned &= xp.is_pinned()
        on_device = xp.to("cuda", non_blocking=True)
        worst = max(worst, (on_device.cpu() - xh).abs().max().item())
    ok = is_pinned and worst == 0.0
    print(f"python_gpu pinned host batches: {'ok' if ok else 'FAILED'} (pinned {is_pinned}, max |diff| {worst})")
    failures += not ok

    warm = stoker.Loader(a.data, a.size, 256, augment=spec(a.size, "float32"), device="cuda", dtype="bfloat16",
                         cache="decoded", threads=0)
    for _ in warm:  # the cold epoch fills the decoded cache
        pass
    n, t0 = 0, time.perf_counter()
    for _ in range(3):
        for b in warm:
            x = torch.from_dlpack(b.images)
            n += x.shape[0]
    torch.cuda.synchronize()
    rate = n / (time.perf_counter() - t0)
    print(f"python_gpu warm img/s into torch at {a.size}: {rate:.0f} (bf16 NCHW, CUDA augmentation, batch 256)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
