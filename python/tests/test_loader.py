"""stoker.Loader with NumPy only: zero-copy views, slot lifetime, copies, the GIL, memory, bad
files. No framework needed, so these run in every venv."""

import gc
import importlib.util
import os
import threading
import time

import numpy as np
import pytest

import stoker
from support import make_folder, rss_kib  # noqa: E402

PIL = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")

def test_batches_are_aligned_views_and_dlpack_is_zero_copy(folder):
    loader = stoker.Loader(folder, 16, batch_size=8, shuffle=False)
    for batch in loader:
        images = batch.images
        assert images.shape == (8, 16, 16, 3) and images.dtype == np.uint8
        assert not images.flags.owndata
        assert images.ctypes.data % 64 == 0
        assert np.from_dlpack(images).ctypes.data == images.ctypes.data
        assert batch.labels.dtype == np.int32 and batch.labels.shape == (8,)
        assert set(batch.labels.tolist()) <= {0, 1}
        # the classes differ in colour: red's red channel is high, blue's low
        red = batch.labels == loader.class_names.index("red")
        assert (images[red][..., 0].mean(axis=(1, 2)) > 150).all()
        assert (images[~red][..., 0].mean(axis=(1, 2)) < 100).all()


def test_views_kept_past_the_next_batch_stay_valid_and_unchanged(folder):
    loader = stoker.Loader(folder, 16, batch_size=4, prefetch=4, shuffle=True, seed=3)
    kept, copies = [], []
    for i, batch in enumerate(loader):
        if i < 2:  # keep two batches (fewer than the pool) for the whole epoch
            kept.append(batch.images)
            copies.append(batch.images.copy())
    assert len(kept) == 2 and len(loader) == 6
    for view, copy in zip(kept, copies):
        np.testing.assert_array_equal(view, copy)
    # and after another epoch that reused every other buffer
    for _ in loader:
        pass
    for view, copy in zip(kept, copies):
        np.testing.assert_array_equal(view, copy)


def _run_with_timeout(fn, seconds=30):
    result = {}

    def body():
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            result["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s: the loader hangs"
    return result


def test_holding_every_buffer_is_an_error_that_says_so_not_a_hang(folder):
    loader = stoker.Loader(folder, 16, batch_size=2, prefetch=2)
    held = []

    def hold_all():
        for batch in loader:
            held.append(batch.images)

    result = _run_with_timeout(hold_all)
    assert isinstance(result.get("error"), stoker.Error), result
    message = str(result["error"])
    assert "held" in message and "prefetch" in message
    assert len(held) == 3  # prefetch + 1 buffers


def test_copy_true_gives_independent_arrays(folder):
    loader = stoker.Loader(folder, 16, batch_size=2, prefetch=2, copy=True, shuffle=False)
    held = [(b.images, b.labels) for b in loader]  # 12 batches, more than the 3 buffers
    assert len(held) == 12
    pointers = {images.ctypes.data for images, _ in held}
    assert len(pointers) == 12
    for images, labels in held:
        assert images.flags.owndata and labels.flags.owndata
    before = [images.copy() for images, _ in held]
    for _ in loader:  # a second epoch does not touch them
        pass
    for (images, _), b in zip(held, before):
        np.testing.assert_array_equal(images, b)


def test_set_epoch_chooses_order_reproducibly(folder):
    loader = stoker.Loader(folder, 16, batch_size=6, shuffle=True, seed=7)

    def order(epoch):
        loader.set_epoch(epoch)
        return [i for b in loader for i in b.sample_ids.tolist()]

    first, again, other = order(2), order(2), order(3)
    assert first == again
    assert sorted(first) == list(range(24))
    assert first != other
    assert loader.epoch == 3


def test_half_precision_on_the_cpu_is_the_float32_output_rounded(folder):
    aug = dict(rotation_range=20, horizontal_flip=True, brightness_range=(0.7, 1.3), contrast=0.3, rescale=1 / 255)

    loaders = []  # kept alive with their batches

    def first_batch(dtype):
        loaders.append(stoker.Loader(folder, 16, batch_size=8, seed=5, shuffle=False, augment=aug, dtype=dtype))
        return next(iter(loaders[-1])).images

    f32 = first_batch("float32")
    f16 = first_batch("float16")
    assert f16.dtype == np.float16 and f16.shape == f32.shape
    np.testing.assert_array_equal(f16, f32.astype(np.float16))  # NumPy rounds to nearest even, as stoker
    if importlib.util.find_spec("torch"):
        import torch

        bf16 = torch.from_dlpack(first_batch("bfloat16"))
        assert bf16.dtype == torch.bfloat16
        assert torch.equal(bf16, torch.from_numpy(f32).to(torch.bfloat16))
    with pytest.raises(stoker.InvalidArgument, match="needs augment"):
        stoker.Loader(folder, 16, dtype="float16")


def test_random_resized_crops_decode_only_their_box_and_give_the_whole_decodes_images(tmp_path):
    pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")
    folder = make_folder(tmp_path / "images", per_class=6, size=96)
    aug = dict(random_resized_crop=True, horizontal_flip=True)

    def run(cache):
        loader = stoker.Loader(folder, 32, batch_size=4, seed=3, shuffle=False, augment=aug, cache=cache)
        images = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            images += [b.images.copy() for b in loader]
        return np.concatenate(images), loader.stats()

    parts, parts_stats = run(None)
    whole, whole_stats = run("decoded")  # the cache keeps whole images, so they are decoded whole
    np.testing.assert_array_equal(parts, whole)
    assert parts_stats["samples_decoded_in_part"] > 12
    assert whole_stats["samples_decoded_in_part"] == 0


def test_state_dict_resumes_mid_epoch_with_the_same_batches(folder):
    aug = dict(rotation_range=20, horizontal_flip=True, brightness_range=(0.7, 1.3), dtype="float32")

    def make(threads):
        return stoker.Loader(folder, 16, batch_size=5, seed=11, augment=aug, threads=threads)

    whole = make(2)
    whole.set_epoch(2)
    reference = [(b.sample_ids.copy(), b.images.copy()) for b in whole]
    assert len(reference) == len(whole) >= 4
    for k in range(len(reference) + 1):
        first = make(2)
        first.set_epoch(2)
        it = iter(first)
        for _ in range(k):
            next(it)
        state = first.state_dict()
        del it
        second = make(1)  # another process, another thread count
        second.load_state_dict(state)
        rest = [(b.sample_ids.copy(), b.images.copy()) for b in second]
        assert len(rest) == len(reference) - k
        for (ids, px), (ref_ids, ref_px) in zip(rest, reference[k:]):
            np.testing.assert_array_equal(ids, ref_ids)
            np.testing.assert_array_equal(px, ref_px)
        assert second.epoch == 2
        assert [b.index for b in second][:1] == [0]  # then the next epoch, from its start
    other = stoker.Loader(folder, 16, batch_size=4, seed=11, augment=aug)
    with pytest.raises(stoker.InvalidArgument, match="cannot resume"):
        other.load_state_dict(state)


def test_webdataset_shards_written_by_tarfile_load_like_their_folder(folder, tmp_path):
    import io
    import tarfile

    files = stoker.dataset(folder)
    names = list(files.class_names)
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "classes.txt").write_text("\n".join(names) + "\n")
    order = list(zip(files.paths, files.labels))
    for s, fmt in enumerate([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]):
        with tarfile.open(shards / f"train-{s:03d}.tar", "w", format=fmt) as tar:
            for i, (path, label) in enumerate(order[s::2]):
                key = f"{s}_{i:04d}_" + "x" * (120 if i == 0 else 1)  # a long name: PAX / GNU headers
                for ext, data in (("jpg", open(path, "rb").read()), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        with tarfile.open(shards / "train-001.tar" if s else shards / "train-000.tar") as check:
            assert len(check.getnames()) == 2 * len(order[s::2])
    pattern = str(shards / "train-{000..001}.tar")
    from_shards = stoker.Loader(pattern, 16, batch_size=64, shuffle=False)
    assert from_shards.class_names == names and len(from_shards.dataset) == len(order)
    from_folder = stoker.Loader(stoker.dataset([p for s in range(2) for p, _ in order[s::2]],
                                               [l for s in range(2) for _, l in order[s::2]], names),
                                16, batch_size=64, shuffle=False)
    a, b = next(iter(from_shards)), next(iter(from_folder))
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.paths[0].endswith(".jpg") and "train-000.tar" in a.paths[0]

    # A sample without its label: named, or skipped and listed.
    with tarfile.open(shards / "train-002.tar", "w") as tar:
        info = tarfile.TarInfo("lonely.jpg")
        data = open(order[0][0], "rb").read()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    three = str(shards / "train-{000..002}.tar")
    with pytest.raises(stoker.DatasetError, match="lonely"):
        stoker.Loader(three, 16)
    skipping = stoker.Loader(three, 16, on_bad_sample="skip")
    assert len(skipping.dataset) == len(order)
    assert [k for _, k, _ in skipping.skipped_at_index] == ["lonely"]


def test_next_releases_the_gil_while_it_waits_for_slow_decodes(tmp_path):
    root = tmp_path / "large"
    os.makedirs(root / "a")
    rng = np.random.default_rng(1)
    base = rng.integers(0, 256, (2000, 2000, 3), dtype=np.uint8)
    for i in range(6):
        PIL.fromarray(np.roll(base, i * 37, axis=1)).save(root / "a" / f"{i}.jpg", quality=95)
    loader = stoker.Loader(str(root), 64, batch_size=6, shuffle=False, threads=1, prefetch=1)

    stamps = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    try:
        time.sleep(0.05)
        it = iter(loader)
        t0 = time.perf_counter()
        batch = next(it)  # decodes six 4-megapixel JPEGs on one thread
        t1 = time.perf_counter()
    finally:
        stop.set()
        counter.join()
    assert len(batch) == 6
    wait = t1 - t0
    assert wait > 0.08, f"the decode was too quick ({wait:.3f} s) for the test to mean anything"
    # A thread that held the GIL in next() would let the counter run only at the edges of the call
    # (the interpreter's switch interval is 5 ms): look at the middle half of the wait.
    middle = [s for s in stamps if t0 + wait / 4 < s < t1 - wait / 4]
    assert len(middle) > 100, f"the counter ran {len(middle)} times in the middle of a {wait:.3f} s wait"


def test_a_thousand_batches_do_not_grow_memory(tmp_path):
    folder = make_folder(tmp_path / "tiny", per_class=20, size=8)
    loader = stoker.Loader(folder, 8, batch_size=4, prefetch=4)  # 10 batches per epoch

    def run(batches):
        done = 0
        while done < batches:
            for batch in loader:
                s = int(batch.images.sum()) + int(batch.labels.sum())
                assert s >= 0
                _ = batch.paths
                done += 1
                if done == batches:
                    break

    run(200)  # warm-up: pools, caches, allocator arenas
    gc.collect()
    before = rss_kib()
    run(1000)
    gc.collect()
    after = rss_kib()
    assert after - before < 1024, f"RSS grew from {before} KiB to {after} KiB over 1,000 batches"


@pytest.fixture
def folder_with_bad_file(tmp_path):
    root = make_folder(tmp_path / "bad", per_class=3)
    bad = os.path.join(root, "red", "001_corrupt.jpg")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 this is not a JPEG " * 20)
    return root, bad


def test_a_corrupt_file_fails_with_a_decode_error_naming_it(folder_with_bad_file):
    root, bad = folder_with_bad_file
    loader = stoker.Loader(root, 16, batch_size=2, on_bad_sample="fail")
    with pytest.raises(stoker.DecodeError) as info:
        for _ in loader:
            pass
    assert info.value.path == bad
    assert bad in str(info.value)
    assert info.value.reason


def test_a_corrupt_file_is_skipped_and_listed(folder_with_bad_file):
    root, bad = folder_with_bad_file
    loader = stoker.Loader(root, 16, batch_size=2, on_bad_sample="skip", shuffle=False)
    seen = [p for b in loader for p in b.paths]
    assert len(seen) == 6 and bad not in seen
    assert len(loader.skipped) == 1
    skipped = loader.skipped[0]
    assert isinstance(skipped, stoker.SkippedSample)
    assert skipped.path == bad and skipped.reason
    assert loader.dataset.paths[skipped.sample_id] == bad


@pytest.mark.parametrize("adapter, framework", [("stoker.torch", "torch"), ("stoker.jax", "jax")])
def test_an_adapter_without_its_framework_is_an_import_error_with_a_hint(adapter, framework):
    if importlib.util.find_spec(framework) is not None:
        pytest.skip(f"{framework} is installed here; the adapter's own tests cover it")
    with pytest.raises(ImportError, match=f"pip install {framework}"):
        importlib.import_module(adapter)

