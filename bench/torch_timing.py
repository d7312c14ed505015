"""What the PyTorch peers (torch_augment_peer.py, torch_mobilenet_peer.py) share: importing torch
with a clear skip, and one way of timing a step."""
import statistics
import time


def import_torch(tag, device):
    """torch, or None after printing "<tag> skipped: <why>" (not installed, or no CUDA device)."""
    try:
        import torch
    except ImportError as e:
        print(f"{tag} skipped: PyTorch is not installed ({e})")
        return None
    if device == "cuda" and not torch.cuda.is_available():
        print(f"{tag} skipped: PyTorch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device")
        return None
    return torch


def measure(torch, step, images_per_step, reps, iters, cuda):
    """Warm-up (>= 10 steps and >= 0.3 s, bounded; cuDNN's algorithm search happens there), then
    `reps` runs of `iters` steps. Returns (median, min, max) img/s -- by CUDA events on the current
    stream on a GPU, by the wall clock on the CPU --, the median by the wall clock, and the last
    step's output."""
    t0 = time.perf_counter()
    for i in range(500):
        out = step()
        if i >= 9 and time.perf_counter() - t0 > 0.3:
            break
    if cuda:
        torch.cuda.synchronize()
    rates, walls = [], []
    for _ in range(reps):
        w0 = time.perf_counter()
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        for _ in range(iters):
            out = step()
        if cuda:
            e1.record()
            e1.synchronize()
            rates.append(iters * images_per_step / (e0.elapsed_time(e1) / 1e3))
        walls.append(iters * images_per_step / (time.perf_counter() - w0))
    if not cuda:
        rates = walls
    return statistics.median(rates), min(rates), max(rates), statistics.median(walls), out


def report_reference(tag, label, run):
    """Prints "<tag> img/s (<label>): ..." for a reference variant; run() returns what the peer's
    own run() does, (median, min, max, wall median, output, ok). A reference figure only: its
    failure is printed as a comment and must not hide the main figure."""
    try:
        med, lo, hi, wall, _, ok = run()
        print(f"{tag} img/s ({label}): {med:.0f}  (min {lo:.0f} max {hi:.0f}, wall median {wall:.0f}"
              f"{'' if ok else '; OUTPUT CHECK FAILED'})")
    except Exception as e:
        print(f"# {label} variant failed: {type(e).__name__}: {e}")
