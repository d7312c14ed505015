"""stoker.jax: jax.Arrays over stoker's buffers through DLPack, a JAX training step, lifetime."""

import gc

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed in this environment (stoker.jax needs it)")
PIL = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")

import jax.numpy as jnp  # noqa: E402

import stoker  # noqa: E402
import stoker.jax  # noqa: E402


def test_images_are_zero_copy_on_the_cpu(folder):
    loader = stoker.Loader(folder, 16, batch_size=8, augment=stoker.Augment(dtype="float32", rescale=1 / 255))
    for batch in loader:
        assert batch.images.ctypes.data % 64 == 0
        for convert in (jax.dlpack.from_dlpack, jnp.from_dlpack):
            x = convert(batch.images)
            assert isinstance(x, jax.Array) and x.dtype == jnp.float32 and x.shape == (8, 16, 16, 3)
            assert x.unsafe_buffer_pointer() == batch.images.ctypes.data
        np.testing.assert_array_equal(np.asarray(x), batch.images)
    # the adapter, uint8 and float
    for output in ("uint8", "float"):
        jl = stoker.jax.Loader(folder, 16, batch_size=8, output=output)
        pointers = set()
        for images, labels in jl:
            pointers.add(images.unsafe_buffer_pointer())
            assert images.dtype == (jnp.uint8 if output == "uint8" else jnp.float32)
            assert labels.dtype == jnp.int32 and labels.shape == (8,)
        assert len(jl) == 3 and len(pointers) <= 5  # within the prefetch + 1 pooled buffers


def test_float_output_and_normalisation(folder):
    raw = stoker.jax.Loader(folder, 16, batch_size=8, shuffle=False, output="uint8")
    plain = stoker.jax.Loader(folder, 16, batch_size=8, shuffle=False)
    tf = stoker.jax.Loader(folder, 16, batch_size=8, shuffle=False, normalize="tf")
    nchw = stoker.jax.Loader(folder, 16, batch_size=8, shuffle=False, normalize="imagenet", layout="nchw")
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    for (u8, y0), (f, y1), (t, _), (n, _) in zip(raw, plain, tf, nchw):
        np.testing.assert_array_equal(np.asarray(y0), np.asarray(y1))
        x = np.asarray(u8).astype(np.float32)
        np.testing.assert_allclose(np.asarray(f), x / 255, atol=1e-6)
        np.testing.assert_allclose(np.asarray(t), x / 127.5 - 1, atol=1e-5)
        assert n.shape == (8, 3, 16, 16)
        np.testing.assert_allclose(np.asarray(n), ((x / 255 - mean) / std).transpose(0, 3, 1, 2), atol=1e-5)


def test_a_jax_training_step_learns_the_colour(folder):
    loader = stoker.jax.Loader(folder, 8, batch_size=8, seed=2, normalize="imagenet",
                               augment=stoker.Augment(horizontal_flip=True))

    def loss_fn(params, images, labels):
        logits = images.reshape(images.shape[0], -1) @ params["w"] + params["b"]
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    @jax.jit
    def step(params, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss

    params = {"w": jnp.zeros((8 * 8 * 3, 2)), "b": jnp.zeros(2)}
    losses = []
    for epoch in range(4):
        loader.set_epoch(epoch)
        for images, labels in loader:
            params, loss = step(params, images, labels)
            losses.append(float(loss))
    assert len(losses) == 12
    assert losses[-1] < 0.5 * losses[0], losses
    correct = total = 0
    for images, labels in loader:
        logits = images.reshape(images.shape[0], -1) @ params["w"] + params["b"]
        correct += int((logits.argmax(1) == labels).sum())
        total += labels.shape[0]
    assert correct / total >= 0.9


def test_arrays_kept_past_the_next_batch_stay_valid_and_unchanged(folder):
    loader = stoker.jax.Loader(folder, 16, batch_size=4, prefetch=4)
    kept, copies = [], []
    for i, (images, labels) in enumerate(loader):
        if i in (1, 3):
            kept.append(images)
            copies.append(np.array(images, copy=True))
    for _ in loader:
        pass
    for x, c in zip(kept, copies):
        np.testing.assert_array_equal(np.asarray(x), c)


def test_keeping_every_array_raises_a_stoker_error_that_says_why(folder):
    loader = stoker.jax.Loader(folder, 16, batch_size=2, prefetch=2)
    held = []
    with pytest.raises(stoker.Error, match=r"held by the consumer.*jnp.array\(x, copy=True\).*copy=True"):
        for images, _ in loader:
            held.append(images)
    assert len(held) == 3
    del held, images
    gc.collect()
    # deleting the arrays gives the buffers back
    assert sum(1 for _ in loader) == 12


def test_copy_true_gives_independent_arrays(folder):
    loader = stoker.jax.Loader(folder, 16, batch_size=2, prefetch=2, copy=True, shuffle=False)
    held = list(loader)
    assert len(held) == 12
    assert len({images.unsafe_buffer_pointer() for images, _ in held}) == 12
    before = [np.array(images) for images, _ in held]
    for _ in loader:
        pass
    for (images, _), b in zip(held, before):
        np.testing.assert_array_equal(np.asarray(images), b)


def test_batches_runs_epochs_in_a_row(folder):
    seen = [labels.shape[0] for _, labels in stoker.jax.batches(folder, 16, epochs=3, batch_size=8)]
    assert seen == [8] * 9


def test_values_and_targets_are_the_batchs_rows(folder):
    paths = list(stoker.dataset(folder).paths)
    red = np.array(["/red/" in p for p in paths])
    values = np.where(red, 0.75, -1.25).astype(np.float32) + np.arange(24, dtype=np.float32) / 100
    names = [p.rsplit("/", 1)[-1] for p in paths]
    loader = stoker.jax.Loader(paths, 16, batch_size=5, shuffle=True, seed=2, labels=values,
                               targets={"row": np.arange(24, dtype=np.int32), "name": names})
    order = [b.sample_ids.copy() for b in stoker.Loader(paths, 16, batch_size=5, shuffle=True, seed=2)]
    for (images, labels, targets), ids in zip(loader, order):
        assert isinstance(labels, jax.Array) and labels.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(labels), values[ids])
        np.testing.assert_array_equal(np.asarray(labels) > 0, np.asarray(images)[..., 0].mean(axis=(1, 2)) > 0.5)
        assert isinstance(targets["row"], jax.Array)
        np.testing.assert_array_equal(np.asarray(targets["row"]), ids)
        assert targets["name"].tolist() == [names[i] for i in ids]  # strings stay NumPy


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_host_batches_are_the_float32_batch_rounded(folder, dtype):
    settings = dict(batch_size=8, shuffle=True, seed=5, augment=dict(rotation_range=20, horizontal_flip=True))
    full = stoker.jax.Loader(folder, 16, **settings)
    half = stoker.jax.Loader(folder, 16, dtype=dtype, **settings)
    for (a, _), (b, _) in zip(full, half):
        assert b.dtype == getattr(jnp, dtype) and b.shape == a.shape
        np.testing.assert_array_equal(np.asarray(b.astype(jnp.float32)), np.asarray(a.astype(b.dtype).astype(jnp.float32)))
    with pytest.raises(stoker.InvalidArgument, match="dtype 'float16' on the CPU"):
        stoker.jax.Loader(folder, 16, output="uint8", dtype="float16")
