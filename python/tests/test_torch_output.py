"""stoker.torch.DataLoader's output options: channels_last images as zero-copy views, float16 and
bfloat16 host batches, and dict batches that say which samples they hold."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import stoker  # noqa: E402
import stoker.torch  # noqa: E402

PIL = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")

AUG = dict(rotation_range=20, horizontal_flip=True, brightness_range=(0.7, 1.3))


def test_channels_last_is_a_view_of_the_nhwc_batch_with_the_same_values(folder):
    settings = dict(batch_size=8, shuffle=True, seed=3, augment=AUG, normalize="imagenet")
    plain = stoker.torch.DataLoader(folder, 16, **settings)
    last = stoker.torch.DataLoader(folder, 16, memory_format=torch.channels_last, **settings)
    raw = stoker.Loader(folder, 16, augment=stoker.Augment(**AUG, dtype="float32", layout="nhwc",
                                                         normalization="torch"),
                        batch_size=8, shuffle=True, seed=3, interpolation="bilinear")
    for (a, la), (b, lb), nhwc in zip(plain, last, raw):
        assert b.shape == a.shape == (8, 3, 16, 16)
        assert b.is_contiguous(memory_format=torch.channels_last) and not b.is_contiguous()
        assert a.is_contiguous()
        torch.testing.assert_close(b, a, rtol=0, atol=1e-5)  # the same images, another memory order
        assert torch.equal(la, lb)
        np.testing.assert_allclose(b.permute(0, 2, 3, 1).numpy(), nhwc.images, atol=1e-5)
    # a conv in channels_last takes them as they are
    conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    assert conv(b).is_contiguous(memory_format=torch.channels_last)


def test_channels_last_images_are_the_buffer_not_a_copy(folder):
    loader = stoker.torch.DataLoader(folder, 16, batch_size=8, memory_format=torch.channels_last)
    for batch in loader.loader:  # the adapter's own conversion of each host batch
        images, _ = loader._host_batch(batch)
        assert images.data_ptr() == batch.images.ctypes.data  # the loader's buffer itself
        assert batch.images.shape == (8, 16, 16, 3) and images.shape == (8, 3, 16, 16)
        assert images.stride() == (16 * 16 * 3, 1, 16 * 3, 3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_host_batches_are_the_float32_batch_rounded(folder, dtype):
    settings = dict(batch_size=8, shuffle=True, seed=5, augment=AUG, normalize="imagenet")
    full = stoker.torch.DataLoader(folder, 16, **settings)
    half = stoker.torch.DataLoader(folder, 16, dtype=dtype, memory_format=torch.channels_last, **settings)
    for (a, _), (b, _) in zip(full, half):
        assert b.dtype == getattr(torch, dtype) and b.device.type == "cpu"
        assert b.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(b, a.to(b.dtype))  # torch's round-to-nearest-even, value for value


def test_dtype_that_the_output_cannot_hold_is_refused(folder):
    with pytest.raises(stoker.InvalidArgument, match="dtype 'float16' on the CPU"):
        stoker.torch.DataLoader(folder, 16, output="uint8", dtype="float16")
    with pytest.raises(stoker.InvalidArgument, match="memory_format must be .* received torch.preserve_format"):
        stoker.torch.DataLoader(folder, 16, memory_format=torch.preserve_format)
    with pytest.raises(stoker.InvalidArgument, match="channels_last needs output='float'"):
        stoker.torch.DataLoader(folder, 16, output="uint8", memory_format=torch.channels_last)


def test_return_meta_gives_dicts_with_sample_ids_and_paths(folder):
    loader = stoker.torch.DataLoader(folder, 16, batch_size=5, shuffle=True, seed=1, return_meta=True,
                                     rank=1, world_size=2, targets=np.arange(24) * 2)
    plain = stoker.Loader(folder, 16, batch_size=5, shuffle=True, seed=1, rank=1, world_size=2)
    red = loader.class_to_idx["red"]
    seen = []
    for meta, batch in zip(loader, plain):
        assert sorted(meta) == ["epoch", "images", "index", "labels", "padding", "paths", "sample_ids", "targets"]
        assert meta["sample_ids"].dtype == torch.int64
        assert meta["sample_ids"].tolist() == batch.sample_ids.tolist()
        assert meta["paths"] == batch.paths
        assert all(os.path.basename(os.path.dirname(p)) == loader.classes[int(c)]
                   for p, c in zip(meta["paths"], meta["labels"]))
        assert torch.equal(meta["targets"], meta["sample_ids"] * 2)
        assert torch.equal(meta["labels"] == red, meta["images"][:, 0].mean(dim=(1, 2)) > 0.5)
        assert meta["padding"].dtype == torch.bool and meta["epoch"] == 0
        seen.append(meta["index"])
    assert seen == list(range(len(loader)))
