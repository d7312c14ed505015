"""stoker.torch.DataLoader: tensors over stoker's buffers, normalisation done in C++, a training
loop, epochs and shards, slot lifetime, copies, memory, bad files, the CUDA hand-over."""

import gc
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed in this environment (stoker.torch needs it)")
PIL = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")

import stoker  # noqa: E402
import stoker.torch  # noqa: E402
from support import make_folder, rss_kib  # noqa: E402

def test_float_output_is_nchw_normalised_in_cpp_as_torchvision_would(folder):
    raw = stoker.torch.DataLoader(folder, 16, batch_size=8, shuffle=False, output="uint8")
    plain = stoker.torch.DataLoader(folder, 16, batch_size=8, shuffle=False)
    imagenet = stoker.torch.DataLoader(folder, 16, batch_size=8, shuffle=False, normalize="imagenet")
    custom = stoker.torch.DataLoader(folder, 16, batch_size=8, shuffle=False, normalize=((0.5, 0.5, 0.5), (0.25, 0.5, 1.0)))
    assert len(raw) == len(plain) == 3
    mean = torch.tensor(stoker.torch.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(stoker.torch.IMAGENET_STD).view(1, 3, 1, 1)
    for (u8, y0), (f, y1), (n, y2), (c, _) in zip(raw, plain, imagenet, custom):
        assert u8.dtype == torch.uint8 and u8.shape == (8, 16, 16, 3)
        assert f.dtype == torch.float32 and f.shape == (8, 3, 16, 16) and f.is_contiguous()
        assert y0.dtype == torch.int64 and torch.equal(y0, y1) and torch.equal(y1, y2)
        to_tensor = u8.permute(0, 3, 1, 2).float() / 255  # transforms.ToTensor()
        torch.testing.assert_close(f, to_tensor, atol=1e-6, rtol=0)
        torch.testing.assert_close(n, (to_tensor - mean) / std, atol=1e-5, rtol=0)
        expected = (to_tensor - 0.5) / torch.tensor([0.25, 0.5, 1.0]).view(1, 3, 1, 1)
        torch.testing.assert_close(c, expected, atol=1e-5, rtol=0)


def test_a_plain_training_loop_learns_the_colour(folder):
    torch.manual_seed(0)
    loader = stoker.torch.DataLoader(
        folder, 16, batch_size=8, shuffle=True, seed=1, normalize="imagenet",
        augment=stoker.Augment(horizontal_flip=True, rotation_range=10))
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, accuracy = [], []
    for epoch in range(6):
        loader.set_epoch(epoch)
        total = correct = 0
        epoch_loss = 0.0
        for images, labels in loader:
            logits = model(images)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            epoch_loss += loss.item() * len(labels)
            total += len(labels)
            correct += (logits.argmax(1) == labels).sum().item()
        losses.append(epoch_loss / total)
        accuracy.append(correct / total)
    assert total == 24
    assert losses[-1] < 0.5 * losses[0], losses
    assert accuracy[-1] >= 0.9, accuracy


def test_tensors_are_the_loaders_buffers_not_copies(folder):
    # stoker.Loader + torch.from_dlpack: same memory
    loader = stoker.Loader(folder, 16, batch_size=8)
    for batch in loader:
        t = torch.from_dlpack(batch.images)
        assert t.data_ptr() == batch.images.ctypes.data
        assert np.from_dlpack(batch.images).ctypes.data == batch.images.ctypes.data
        t[0, 0, 0, 0] = 7  # a view: the write shows through the NumPy array
        assert batch.images[0, 0, 0, 0] == 7
    # the adapter's conversion, for both outputs
    for output in ("float", "uint8"):
        dl = stoker.torch.DataLoader(folder, 16, batch_size=8, output=output)
        for batch in dl.loader:
            images, labels = dl._host_batch(batch)
            assert images.data_ptr() == batch.images.ctypes.data
            assert images.data_ptr() % 64 == 0
            assert labels.dtype == torch.int64
    # through iteration: every tensor lies in one of the prefetch + 1 pooled buffers
    dl = stoker.torch.DataLoader(folder, 16, batch_size=2, prefetch=2)
    pointers = {images.data_ptr() for images, _ in dl}
    assert len(dl) == 12 and len(pointers) <= 3


def test_tensors_kept_past_the_next_batch_stay_valid_and_unchanged(folder):
    dl = stoker.torch.DataLoader(folder, 16, batch_size=4, prefetch=4, normalize="imagenet")
    kept, copies = [], []
    for i, (images, labels) in enumerate(dl):
        if i in (0, 2):
            kept.append((images, labels))
            copies.append((images.clone(), labels.clone()))
    for _ in dl:  # another epoch over the remaining buffers
        pass
    for (images, labels), (ci, cl) in zip(kept, copies):
        assert torch.equal(images, ci) and torch.equal(labels, cl)


def test_keeping_every_tensor_raises_a_stoker_error_that_says_why(folder):
    dl = stoker.torch.DataLoader(folder, 16, batch_size=2, prefetch=2)
    held = []
    with pytest.raises(stoker.Error, match=r"held by the consumer.*\.clone\(\) the ones you keep.*copy=True"):
        for images, _ in dl:
            held.append(images)
    assert len(held) == 3
    # a view of a kept tensor holds the buffer just the same
    del held
    gc.collect()
    views = []
    with pytest.raises(stoker.Error, match="prefetch"):
        for images, _ in dl:
            views.append(images[:1])
    # cloning (what the docs say to do) never runs out
    del views
    gc.collect()
    clones = [images.clone() for images, _ in dl]
    assert len(clones) == 12


def test_copy_true_gives_independent_tensors(folder):
    dl = stoker.torch.DataLoader(folder, 16, batch_size=2, prefetch=2, copy=True, shuffle=False)
    held = list(dl)
    assert len(held) == 12
    assert len({images.data_ptr() for images, _ in held}) == 12
    before = [images.clone() for images, _ in held]
    for _ in dl:
        pass
    for (images, _), b in zip(held, before):
        assert torch.equal(images, b)


def test_set_epoch_and_shards_as_with_distributed_sampler(folder):
    def run(dl, epoch):
        dl.set_epoch(epoch)
        return [images.sum().item() for images, _ in dl], [l for _, labels in dl for l in labels.tolist()]

    dl = stoker.torch.DataLoader(folder, 16, batch_size=4, seed=5, augment=stoker.Augment(horizontal_flip=True))
    a, _ = run(dl, 4)
    b, _ = run(dl, 4)
    c, _ = run(dl, 5)
    assert a == b and a != c
    ranks = [stoker.torch.DataLoader(folder, 16, batch_size=4, rank=r, world_size=3, with_padding=True)
             for r in range(3)]
    n = len(ranks[0].loader.dataset)
    per_rank = -(-n // 3)  # padded up: every rank the same count
    assert [len(r) for r in ranks] == [-(-per_rank // 4)] * 3
    ids, padded = [], 0
    for r in ranks:
        r.set_epoch(2)
        for images, labels, padding in r:
            assert images.shape[0] == labels.shape[0] == padding.shape[0]
        r.loader.set_epoch(2)
        for b in r.loader:  # the same epoch through the loader, for the sample ids
            ids += [int(i) for i, p in zip(b.sample_ids, b.padding) if not p]
            padded += int(b.padding.sum())
    assert sorted(ids) == list(range(n))  # every sample once per epoch across the ranks
    assert padded == per_rank * 3 - n
    with pytest.raises(stoker.InvalidArgument, match="rank"):
        stoker.torch.DataLoader(folder, 16, rank=2, world_size=2)


def test_options_that_cannot_work_are_invalid_arguments(folder):
    with pytest.raises(stoker.InvalidArgument, match="output"):
        stoker.torch.DataLoader(folder, 16, output="float16")
    with pytest.raises(stoker.InvalidArgument, match="normalize"):
        stoker.torch.DataLoader(folder, 16, output="uint8", normalize="imagenet")
    with pytest.raises(stoker.InvalidArgument, match="normalize"):
        stoker.torch.DataLoader(folder, 16, normalize="imagenet21k")
    spec = stoker.Augment(horizontal_flip=True)
    stoker.torch.DataLoader(folder, 16, augment=spec, normalize="imagenet")
    assert spec.dtype == "uint8" and spec.normalization is None  # the caller's spec is not changed


def test_a_thousand_batches_of_tensors_do_not_grow_memory(tmp_path):
    folder = make_folder(tmp_path / "tiny", per_class=20, size=8)
    dl = stoker.torch.DataLoader(folder, 8, batch_size=4, normalize="imagenet")

    def run(n):
        done = 0
        while done < n:
            for images, labels in dl:
                (images.mean() + labels.float().mean()).item()
                done += 1
                if done == n:
                    break

    run(200)
    gc.collect()
    before = rss_kib()
    run(1000)
    gc.collect()
    after = rss_kib()
    assert after - before < 1024, f"RSS grew from {before} KiB to {after} KiB over 1,000 batches"


def test_bad_files_under_both_policies(tmp_path):
    root = make_folder(tmp_path / "bad", per_class=3)
    bad = os.path.join(root, "blue", "002_corrupt.jpg")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not really a JPEG " * 20)
    with pytest.raises(stoker.DecodeError) as info:
        for _ in stoker.torch.DataLoader(root, 16, batch_size=2, on_bad_sample="fail"):
            pass
    assert info.value.path == bad
    dl = stoker.torch.DataLoader(root, 16, batch_size=2, on_bad_sample="skip")
    n = sum(len(labels) for _, labels in dl)
    assert n == 6
    assert [(s.path, bool(s.reason)) for s in dl.skipped] == [(bad, True)]
    assert dl.dataset.paths[dl.skipped[0].sample_id] == bad


@pytest.mark.skipif(
    torch.cuda.device_count() == 0 or stoker.cuda_device_count() == 0,
    reason="needs a CUDA device visible to both PyTorch and stoker",
)
def test_cuda_batches_arrive_on_the_current_stream(folder):
    dl = stoker.torch.DataLoader(folder, 16, batch_size=8, device="cuda:0", normalize="imagenet",
                                 augment=stoker.Augment(horizontal_flip=True), shuffle=False)
    ref = stoker.torch.DataLoader(folder, 16, batch_size=8, normalize="imagenet", shuffle=False)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for (images, labels), (cpu_images, cpu_labels) in zip(dl, ref):
            assert images.is_cuda and images.shape == (8, 3, 16, 16) and images.dtype == torch.float32
            assert labels.is_cuda and labels.dtype == torch.int64
            assert torch.equal(labels.cpu(), cpu_labels)
            assert images.float().mean().item() == pytest.approx(cpu_images.mean().item(), abs=0.05)
    half = stoker.torch.DataLoader(folder, 16, batch_size=8, device="cuda:0", dtype="bfloat16", normalize="imagenet")
    images, _ = next(iter(half))
    assert images.dtype == torch.bfloat16
