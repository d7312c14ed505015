"""stoker.Loader misused as real programs misuse it: Ctrl-C while a batch is awaited, close() from
another thread, a loader inherited by a child of fork(), a state saved after leaving an epoch early."""

import gc
import os
import sys
import threading
import time

import numpy as np
import pytest

import stoker
from support import error_in_forked_child, interrupted_during

PIL = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")


@pytest.fixture(scope="module")
def slow_image(tmp_path_factory):
    """A 6000x6000 PNG of one colour: a few kilobytes on disk, about a second to decode and resize
    with lanczos, so that a loader's batch of them is seconds away."""
    path = tmp_path_factory.mktemp("slow") / "big.png"
    PIL.new("RGB", (6000, 6000), (10, 200, 30)).save(path)
    return str(path)


@pytest.fixture(scope="module")
def bigger_image(tmp_path_factory):
    """A 9000x9000 PNG: seconds to decode, so that a new epoch waits for the abandoned one's sample."""
    path = tmp_path_factory.mktemp("slower") / "bigger.png"
    PIL.new("RGB", (9000, 9000), (10, 200, 30)).save(path)
    return str(path)


def slow_loader(path, samples=8):
    data = stoker.dataset([path] * samples, labels=[0] * samples)
    return stoker.Loader(data, 32, batch_size=4, threads=1, prefetch=1, shuffle=False, dct_scaling=False,
                         interpolation="lanczos")


def test_ctrl_c_while_waiting_for_a_batch_raises_keyboard_interrupt_promptly(slow_image):
    what, delay, then = interrupted_during(
        f"""
        from test_loader_robustness import slow_loader
        loader = slow_loader({slow_image!r})
        it = iter(loader)
        """, "next(it)",
        # The loader is still usable: the next iteration starts the next epoch.
        then="print('next epoch', len(next(iter(loader))))\nloader.close()")
    # The batch is seconds away; the poll of Python's signal handlers is every 20 ms.
    assert what == "interrupted", f"the batch came first ({delay} s after SIGINT): Ctrl-C waited for it"
    assert delay < 0.5, f"KeyboardInterrupt came {delay:.3f} s after SIGINT"
    assert then == ["next epoch 4"]


def test_ctrl_c_while_a_new_epoch_waits_for_the_last_ones_samples_is_prompt(bigger_image):
    # A new epoch first waits for the samples of the abandoned one being decoded (a 9000x9000 PNG:
    # seconds); Ctrl-C there is as prompt as while waiting for a batch.
    what, delay, then = interrupted_during(
        f"""
        from test_loader_robustness import slow_loader
        loader = slow_loader({bigger_image!r}, samples=8)
        loader._core.begin_epoch(0)  # its first sample is being decoded
        time.sleep(0.1)
        """, "next(iter(loader))  # the epoch begins again: waits for the sample in flight", after=0.2,
        then="print('next epoch', len(next(iter(loader))))")
    assert what == "interrupted", f"the batch came first ({delay} s after SIGINT)"
    assert delay < 0.5, f"KeyboardInterrupt came {delay:.3f} s after SIGINT"
    assert then == ["next epoch 4"]


def test_ctrl_c_while_a_restored_state_waits_for_the_last_epochs_samples_is_prompt(bigger_image):
    # load_state_dict() begins the saved epoch: it too first waits for the samples of the
    # abandoned epoch being decoded, and Ctrl-C there is as prompt.
    what, delay, _ = interrupted_during(
        f"""
        from test_loader_robustness import slow_loader
        loader = slow_loader({bigger_image!r}, samples=8)
        loader._core.begin_epoch(0)  # its first sample is being decoded
        state = loader._core.state()
        time.sleep(0.1)
        """, "loader._core.resume(state)", after=0.2)
    assert what == "interrupted", f"the wait ended first ({delay} s after SIGINT)"
    assert delay < 0.5, f"KeyboardInterrupt came {delay:.3f} s after SIGINT"


def test_close_from_another_thread_while_next_waits_raises_a_clear_error(slow_image):
    loader = slow_loader(slow_image)
    it = iter(loader)
    closer = threading.Timer(0.3, loader.close)
    closer.start()
    t0 = time.monotonic()
    with pytest.raises(stoker.Error, match="closed"):
        next(it)
    closer.join()
    # It returned when close() stopped the loader (the sample being decoded finished first), not
    # after the batch.
    assert time.monotonic() - t0 < 10
    with pytest.raises(stoker.Error, match="closed"):
        next(iter(loader))
    with pytest.raises(stoker.Error, match="closed"):
        loader.stats()
    loader.close()  # again: nothing to do


def test_close_races_with_next_many_times(folder):
    # Either a batch, the end of the epoch or the 'closed' error: never a crash or a hang.
    for i in range(30):
        loader = stoker.Loader(folder, 16, batch_size=2, threads=2, prefetch=2)
        it = iter(loader)
        outcome = []

        def consume():
            try:
                for _ in it:
                    pass
                outcome.append("end")
            except stoker.Error as e:
                outcome.append(str(e))

        t = threading.Thread(target=consume)
        t.start()
        time.sleep(0.0005 * i)
        loader.close()
        t.join(timeout=30)
        assert not t.is_alive(), "next() hung after close()"
        assert outcome == ["end"] or "closed" in outcome[0], outcome


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_loader_used_in_a_child_of_fork_raises_a_clear_error(folder):
    # The loader, an iterator and a batch in flight in the parent's threads when it forks; after
    # its error the child lets go of them (their destructors must not wait for threads it lacks).
    parent = [stoker.Loader(folder, 16, batch_size=2, threads=2, prefetch=4)]
    parent.append(iter(parent[0]))
    parent.append(next(parent[1]))

    def use():
        try:
            next(iter(parent[0]))
        finally:
            parent.clear()
            gc.collect()

    message = error_in_forked_child(use)
    assert message.startswith("Error: ") and "fork" in message, message
    loader, it, held = parent  # the parent's loader is unaffected
    assert sum(len(b) for b in it) + len(held) == 24


def test_state_dict_after_leaving_an_epoch_early_continues_as_the_loader_would(folder):
    def make():
        return stoker.Loader(folder, 16, batch_size=5, seed=3, augment=dict(horizontal_flip=True))

    for k in range(1, 4):
        original = make()
        for i, _ in enumerate(original):  # epoch 0, left after k batches
            if i + 1 == k:
                break
        state = original.state_dict()
        restored = make()
        restored.load_state_dict(state)
        # The restored loader says the same again before it iterates.
        assert restored.state_dict() == state
        expect = [(b.epoch, b.index, b.sample_ids.copy(), b.images.copy()) for b in original]
        got = [(b.epoch, b.index, b.sample_ids.copy(), b.images.copy()) for b in restored]
        assert [e[:2] for e in got] == [e[:2] for e in expect]
        assert expect[0][:2] == (1, 0)  # a `for` after leaving epoch 0 starts epoch 1
        for (_, _, ids, px), (_, _, ref_ids, ref_px) in zip(got, expect):
            np.testing.assert_array_equal(ids, ref_ids)
            np.testing.assert_array_equal(px, ref_px)


def test_state_dict_inside_the_loop_continues_the_epoch(folder):
    original = stoker.Loader(folder, 16, batch_size=5, seed=3)
    for i, _ in enumerate(original):
        if i == 1:
            state = original.state_dict()  # two batches delivered, the loop still running
    restored = stoker.Loader(folder, 16, batch_size=5, seed=3)
    restored.load_state_dict(state)
    assert [b.index for b in restored] == [2, 3, 4]


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS keeps file names in UTF-8")
def test_names_that_are_not_utf8_cross_as_os_fsdecode_gives_them(tmp_path):
    # A class folder and a file named in Latin-1 (b"caf\xe9"): Python's own file functions give
    # such names as str with surrogate escapes (PEP 383); stoker gives and takes the same, so
    # open() finds the file and os.fsencode gives its bytes back. Messages show the bytes as \xNN.
    root = tmp_path / "data"
    for name in (b"caf\xe9s", b"dogs"):
        os.makedirs(os.path.join(os.fsencode(root), name))
    PIL.new("RGB", (8, 8), (200, 10, 10)).save(os.fsdecode(os.path.join(os.fsencode(root), b"caf\xe9s", b"x.png")))
    PIL.new("RGB", (8, 8), (10, 10, 200)).save(os.fsdecode(os.path.join(os.fsencode(root), b"dogs", b"d\xe9.png")))
    data = stoker.dataset(str(root))
    assert data.class_names == [os.fsdecode(b"caf\xe9s"), "dogs"]
    assert sorted(os.listdir(root)) == sorted(data.class_names)
    for path in data.paths:
        assert os.path.isfile(path), path
    assert os.fsencode(data.paths[1]).endswith(b"/d\xe9.png")
    batch = next(iter(stoker.Loader(data, 8, batch_size=2, shuffle=False)))
    assert batch.paths == data.paths
    # The names given back are taken back: a list dataset, and class names chosen by the caller.
    again = stoker.dataset(data.paths, labels=[0, 1], class_names=data.class_names)
    assert again.paths == data.paths and again.class_names == data.class_names
    assert len(stoker.dataset(str(root), classes=[os.fsdecode(b"caf\xe9s")])) == 1
    # A file that is not an image: the error names it readably, and its path is the file's.
    bad = os.path.join(os.fsencode(root), b"dogs", b"bad\xff.png")
    with open(bad, "wb") as f:
        f.write(b"not an image")
    with pytest.raises(stoker.DecodeError) as e:
        for _ in stoker.Loader(str(root), 8, batch_size=3, shuffle=False):
            pass
    assert "bad\\xff.png" in str(e.value)
    assert os.fsencode(e.value.path) == bad
