"""stoker.torch.DataLoader with labels beyond one class index and extra per-sample columns: the
tensors are what torch's default_collate makes of the same samples' values, in the order the
loader made the batch."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import stoker  # noqa: E402
import stoker.torch  # noqa: E402
from support import make_folder  # noqa: E402

PIL = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")

try:
    from torch.utils.data import default_collate
except ImportError:  # torch < 1.11
    from torch.utils.data._utils.collate import default_collate


@pytest.fixture
def samples(tmp_path):
    files = stoker.dataset(make_folder(tmp_path / "images"))
    paths = list(files.paths)
    return paths, np.array([os.sep + "red" + os.sep in p for p in paths])


def _order(paths, **settings):
    """The sample ids of each batch, from a stoker.Loader with the same order settings."""
    return [b.sample_ids.copy() for b in stoker.Loader(paths, 16, **settings)]


def _assert_same(ours, theirs):
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(theirs)
        for name in theirs:
            _assert_same(ours[name], theirs[name])
    elif isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor) and ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert torch.equal(ours, theirs)
    else:
        assert type(ours) is type(theirs) and ours == theirs


@pytest.mark.filterwarnings("ignore:In future, it will be an error for .np.bool_. scalars")
def test_labels_and_targets_are_default_collates_tensors_of_the_batchs_samples(samples):
    paths, red = samples
    values = np.where(red, 0.75, -1.25) + np.arange(24) / 1000.0  # float64, not integers
    columns = {"age": np.arange(24) * 3, "weight": np.linspace(0, 1, 24, dtype=np.float32),
               "seen": np.arange(24) % 2 == 0, "id": [f"s{i}" for i in range(24)],
               "box": np.arange(24 * 4, dtype=np.float32).reshape(24, 4)}
    settings = dict(batch_size=5, shuffle=True, seed=11)
    loader = stoker.torch.DataLoader(paths, 16, labels=values, targets=columns, **settings)
    batches = list(zip(loader, _order(paths, **settings)))
    assert len(batches) == 5
    for (images, labels, targets), ids in batches:
        # what a map-style Dataset returning (value, {column: value}) per sample gives with
        # PyTorch's own DataLoader: default_collate of the samples in this batch's order
        items = [(values[i], {k: (np.asarray(v)[i] if not isinstance(v, list) else v[i]) for k, v in columns.items()})
                 for i in ids]
        want_labels, want_targets = default_collate(items)
        _assert_same(labels, want_labels)
        _assert_same(targets, want_targets)
        assert labels.dtype == torch.float64  # never truncated to an integer class
        assert torch.equal(labels > 0, images[:, 0].mean(dim=(1, 2)) > 0.5)  # red: the label is this image's


def test_multi_hot_labels_feed_bce_and_rows_of_values_mse(samples):
    paths, red = samples
    tags = [["red", "warm"] if r else ["blue"] for r in red]
    loader = stoker.torch.DataLoader(paths, 16, batch_size=6, shuffle=True, labels=tags)
    assert loader.classes == ["blue", "red", "warm"]
    for images, labels in loader:
        assert labels.dtype == torch.float32 and labels.shape == (len(images), 3)
        is_red = images[:, 0].mean(dim=(1, 2)) > 0.5
        assert torch.equal(labels[:, 1].bool(), is_red) and torch.equal(labels[:, 0].bool(), ~is_red)
        torch.nn.functional.binary_cross_entropy_with_logits(torch.zeros_like(labels), labels)

    rows = np.stack([red * 2.0, 1.0 - red], axis=1).astype(np.float32)
    model = torch.nn.Linear(3, 2)
    for images, labels in stoker.torch.DataLoader(paths, 16, batch_size=8, labels=rows):
        assert labels.dtype == torch.float32 and labels.shape == (8, 2)
        torch.nn.functional.mse_loss(model(images.mean(dim=(2, 3))), labels).backward()


def test_class_labels_stay_int64_and_padding_comes_last(samples):
    paths, red = samples
    loader = stoker.torch.DataLoader(paths, 16, batch_size=4, labels=red.astype(int), targets=np.arange(24),
                                     rank=0, world_size=5, with_padding=True)
    for images, labels, targets, padding in loader:
        assert labels.dtype == torch.int64 and targets.dtype == torch.int64 and padding.dtype == torch.bool
        assert torch.equal(labels, torch.from_numpy(red.astype(np.int64))[targets])


@pytest.mark.skipif(not stoker.cuda_device_count(), reason="needs a CUDA device")
def test_values_arrive_on_the_device(samples):
    paths, _ = samples
    loader = stoker.torch.DataLoader(paths, 16, batch_size=4, labels=np.arange(24) * 0.5, device="cuda")
    images, labels = next(iter(loader))
    assert labels.device == images.device and labels.dtype == torch.float64
