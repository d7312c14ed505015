"""Device batches (Loader(device='cuda')) through DLPack, on the emulated CUDA device.

scripts/test_python.sh builds a second wheel with STOKER_CUDA_EMULATION (device memory is host
memory, kernels run on the host), so the feed, the CUDA augmentation and the DLPack export run
here without a GPU; a consumer written with ctypes takes the capsules as torch or jax would.
On a real GPU the same path is checked with torch (scripts/gpu_check_python.py)."""

import ctypes
import gc
import os
import threading

import numpy as np
import pytest

import stoker
from support import error_in_forked_child, interrupted_during

pytestmark = pytest.mark.skipif(stoker.cuda_build != "emulated",
                                reason="needs the emulated-device build (scripts/test_python.sh makes one)")

KDL_CUDA = 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Consumed:
    """What a DLPack consumer does: takes the tensor out of the capsule, renames the capsule, and
    calls the deleter when it is done with the memory."""

    def __init__(self, capsule, stream=1):
        self.stream = stream
        address = _api.PyCapsule_GetPointer(capsule, b"dltensor")
        _api.PyCapsule_SetName(capsule, b"used_dltensor")
        self.managed = DLManagedTensor.from_address(address)
        t = self.managed.dl_tensor
        self.device = (t.device.device_type, t.device.device_id)
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.strides = tuple(t.strides[i] for i in range(t.ndim))
        self.dtype = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
        self.data = t.data

    def array(self):
        # Emulated device memory is host memory: read it as work on the consumer's stream sees it.
        stoker._stoker.stream_synchronize(self.stream)
        n = int(np.prod(self.shape))
        code, bits, _ = self.dtype
        if (code, bits) == (2, 32):
            raw = np.ctypeslib.as_array((ctypes.c_float * n).from_address(self.data))
            return raw.reshape(self.shape).copy()
        if (code, bits) == (4, 16):  # bfloat16: the top half of a float32
            raw = np.ctypeslib.as_array((ctypes.c_uint16 * n).from_address(self.data))
            return (raw.astype(np.uint32) << 16).view(np.float32).reshape(self.shape)
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(self.data))
        return raw.reshape(self.shape).copy()

    def done(self):
        self.managed.deleter(ctypes.pointer(self.managed))


def write_ppm(path, pixels):
    h, w, _ = pixels.shape
    path.write_bytes(b"P6\n%d %d\n255\n" % (w, h) + pixels.astype(np.uint8).tobytes())


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(0)
    for c, name in enumerate(["a", "b"]):
        (tmp_path / name).mkdir()
        for i in range(10):
            base = np.zeros((40 + i, 50, 3), np.uint8)
            base[..., c] = 200
            write_ppm(tmp_path / name / f"{i:02d}.ppm", base + rng.integers(0, 40, base.shape, dtype=np.uint8))
    return tmp_path


def augment(size):
    return stoker.Augment(rotation_range=20, horizontal_flip=True, brightness_range=(0.8, 1.2), dtype="float32",
                          layout="nchw", normalization="tf", height=size, width=size)


def test_device_batch_is_a_dlpack_cuda_tensor_over_the_slot(folder):
    loader = stoker.Loader(folder, 32, batch_size=4, augment=augment(32), device="cuda", dtype="bfloat16")
    batch = next(iter(loader))
    assert batch.images.__dlpack_device__() == (KDL_CUDA, 0)
    t = Consumed(batch.images.__dlpack__(stream=None))
    assert t.device == (KDL_CUDA, 0)
    assert t.shape == (4, 3, 32, 32) == batch.images.shape
    assert t.strides == (3 * 32 * 32, 32 * 32, 32, 1)
    assert t.dtype == (4, 16, 1)
    assert t.data == batch.images.data_ptr
    assert batch.labels.dtype == np.int32 and batch.labels.shape == (4,)
    t.done()


def test_device_pixels_match_the_cpu_executor(folder):
    # The device path resizes on the CPU (the loader's interpolation) and augments that on the
    # GPU; the reference: the same resized images through the CPU Augmenter, same draws.
    resized = stoker.Loader(folder, 32, batch_size=4, seed=5, interpolation="bilinear")
    gpu = stoker.Loader(folder, 32, batch_size=4, seed=5, augment=augment(32), device="cuda",
                        interpolation="bilinear")
    cpu = stoker.Augmenter(augment(32))
    worst = 0.0
    n = 0
    for br, bg in zip(resized, gpu):
        t = Consumed(bg.images.__dlpack__(stream=1), stream=1)
        np.testing.assert_array_equal(br.sample_ids, bg.sample_ids)
        np.testing.assert_array_equal(br.labels, bg.labels)
        ref = cpu.apply_batch(br.images, seed=5, epoch=0, sample_ids=list(br.sample_ids))
        worst = max(worst, float(np.abs(t.array() - ref).max()))
        n += len(bg)
        t.done()
    assert n == 20
    assert worst <= 2 / 255 + 1e-5  # the CPU and CUDA executors agree within one grey level


def test_a_consumed_tensor_keeps_its_slot_until_its_deleter_runs(folder):
    loader = stoker.Loader(folder, 32, batch_size=2, augment=augment(32), device="cuda", prefetch=1, depth=2,
                           shuffle=False)
    it = iter(loader)
    first = next(it)
    held = Consumed(first.images.__dlpack__())
    expected = held.array()
    del first
    gc.collect()
    # The feed has two slots: the consumed tensor holds one; the batches after it cycle through the other.
    for _ in range(3):
        b = next(it)
        del b
    np.testing.assert_array_equal(held.array(), expected)
    held.done()


def test_holding_every_slot_is_an_error_not_a_hang(folder):
    loader = stoker.Loader(folder, 32, batch_size=2, augment=augment(32), device="cuda", prefetch=1, depth=2)
    it = iter(loader)
    kept = [next(it), next(it)]
    with pytest.raises(stoker.Error, match="slot"):
        next(it)
    del kept


def test_stream_arguments(folder):
    loader = stoker.Loader(folder, 32, batch_size=4, augment=augment(32), device="cuda")
    b = next(iter(loader))
    for stream in (None, 1, -1):
        Consumed(b.images.__dlpack__(stream=stream)).done()
    with pytest.raises(ValueError, match="ambiguous"):
        b.images.__dlpack__(stream=0)
    with pytest.raises(BufferError):
        b.images.__dlpack__(copy=True)


def test_unknown_device_is_named(folder):
    with pytest.raises(stoker.InvalidArgument, match="cuda:3"):
        stoker.Loader(folder, 32, augment=augment(32), device="cuda:3")


def test_state_dict_of_a_device_loader_resumes_with_the_same_batches(folder):
    def make():
        return stoker.Loader(folder, 32, batch_size=4, seed=3, augment=augment(32), device="cuda")

    def pixels(batch):
        t = Consumed(batch.images.__dlpack__(stream=1), stream=1)
        a = t.array()
        t.done()
        return a

    whole = make()
    whole.set_epoch(1)
    reference = [(b.sample_ids.copy(), pixels(b)) for b in whole]
    assert len(reference) == 5
    for stop in (0, 2, 5):
        first = make()
        first.set_epoch(1)
        it = iter(first)
        for _ in range(stop):
            next(it)
        state = first.state_dict()
        first.close()
        second = make()
        second.load_state_dict(state)
        rest = [(b.sample_ids.copy(), pixels(b)) for b in second]
        assert len(rest) == len(reference) - stop
        for (ids, px), (want_ids, want_px) in zip(rest, reference[stop:]):
            np.testing.assert_array_equal(ids, want_ids)
            np.testing.assert_array_equal(px, want_px)


# Misused as real programs misuse it, as the host loader is (test_loader_robustness.py): Ctrl-C
# while a batch is awaited, close() from another thread, the loader inherited by a child of fork().

@pytest.fixture(scope="module")
def slow_image(tmp_path_factory):
    """A 6000x6000 PNG of one colour: a few kilobytes on disk, seconds to decode and resize with
    lanczos, so that a batch of them is seconds away."""
    PIL = pytest.importorskip("PIL.Image", reason="the slow image is written with Pillow")
    path = tmp_path_factory.mktemp("slow") / "big.png"
    PIL.new("RGB", (6000, 6000), (10, 200, 30)).save(path)
    return str(path)


def slow_device_loader(path, samples=8):
    data = stoker.dataset([path] * samples, labels=[0] * samples)
    return stoker.Loader(data, 32, batch_size=4, threads=1, prefetch=1, shuffle=False, dct_scaling=False,
                         interpolation="lanczos", augment=augment(32), device="cuda", depth=2)


def test_ctrl_c_while_a_device_batch_is_awaited_raises_keyboard_interrupt_promptly(slow_image):
    what, delay, _ = interrupted_during(
        f"""
        from test_device_batches import slow_device_loader
        loader = slow_device_loader({slow_image!r})
        it = iter(loader)
        """, "next(it)", then="loader.close()")
    assert what == "interrupted", f"the batch came first ({delay} s after SIGINT): Ctrl-C waited for it"
    assert delay < 0.5, f"KeyboardInterrupt came {delay:.3f} s after SIGINT"


def test_close_from_another_thread_while_a_device_batch_is_awaited_raises_a_clear_error(slow_image):
    loader = slow_device_loader(slow_image)
    it = iter(loader)
    closer = threading.Timer(0.3, loader.close)
    closer.start()
    with pytest.raises(stoker.Error, match="closed"):
        next(it)
    closer.join()
    with pytest.raises(stoker.Error, match="closed"):
        next(iter(loader))
    loader.close()  # again: nothing to do


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_device_loader_used_in_a_child_of_fork_raises_a_clear_error(folder):
    loader = stoker.Loader(folder, 32, batch_size=4, augment=augment(32), device="cuda")
    it = iter(loader)
    next(it)
    message = error_in_forked_child(lambda: next(iter(loader)))
    assert message.startswith("Error: ") and "fork" in message and "CUDA context" in message, message
    assert sum(len(b) for b in it) == 16  # the parent's loader is unaffected
