"""stoker.Loader iterated as PyTorch's DataLoader is: every iteration an epoch of its own, two at
once side by side (zip, an iterator kept while a new loop starts, one per thread), none waiting
for another."""

import threading

import numpy as np
import pytest

import stoker

SETTINGS = dict(batch_size=5, shuffle=True, seed=7, threads=2, prefetch=2)


def epoch_ids(folder, epoch, **settings):
    """The sample ids of each batch of `epoch`, from a loader that runs it alone."""
    with stoker.Loader(folder, 16, **dict(SETTINGS, **settings)) as alone:
        alone.set_epoch(epoch)
        return [b.sample_ids.tolist() for b in alone]


def test_zip_of_a_loader_with_itself_runs_two_whole_epochs(folder):
    loader = stoker.Loader(folder, 16, **SETTINGS)
    pairs = [(a.epoch, a.sample_ids.tolist(), b.epoch, b.sample_ids.tolist()) for a, b in zip(loader, loader)]
    assert len(pairs) == len(loader) == 5
    assert {(p[0], p[2]) for p in pairs} == {(0, 1)}
    assert [p[1] for p in pairs] == epoch_ids(folder, 0)
    assert [p[3] for p in pairs] == epoch_ids(folder, 1)
    # Pixels too: the second iteration's core (made without the cache) gives the same batches.
    cached = stoker.Loader(folder, 16, **SETTINGS, cache="decoded", augment=dict(rotation_range=20))
    twice = [(a.images.copy(), b.images.copy()) for a, b in zip(cached, cached)]
    plain = stoker.Loader(folder, 16, **SETTINGS, augment=dict(rotation_range=20))
    plain.set_epoch(1)
    for (_, second), reference in zip(twice, plain):
        np.testing.assert_array_equal(second, reference.images)
    assert loader.stats()["batches_delivered"] == 10  # both iterations count
    assert loader.epoch == 1


def test_an_iterator_kept_while_a_new_one_starts_goes_on_with_its_own_epoch(folder):
    loader = stoker.Loader(folder, 16, **SETTINGS)
    first = iter(loader)
    head = next(first).sample_ids.tolist()
    second = [b.sample_ids.tolist() for b in loader]  # a new iteration: the next epoch, whole
    rest = [b.sample_ids.tolist() for b in first]
    assert [head] + rest == epoch_ids(folder, 0)
    assert second == epoch_ids(folder, 1)
    assert [b.sample_ids.tolist() for b in loader] == epoch_ids(folder, 2)  # then as before


def test_state_dict_and_load_state_dict_follow_the_latest_iteration(folder):
    loader = stoker.Loader(folder, 16, **SETTINGS)
    older = iter(loader)
    next(older)
    newer = iter(loader)
    next(newer), next(newer)
    state = loader.state_dict()  # the newer iteration's: epoch 1, two batches delivered
    assert "epoch=1 " in state["stoker_loader_state"] and "next_batch=2 " in state["stoker_loader_state"]
    loader.load_state_dict(state)  # checked without disturbing either iteration
    assert sum(1 for _ in older) == 4 and sum(1 for _ in newer) == 3
    assert [b.sample_ids.tolist() for b in loader] == epoch_ids(folder, 1)[2:]


def test_close_stops_every_iteration_under_way(folder):
    loader = stoker.Loader(folder, 16, **SETTINGS)
    first, second = iter(loader), iter(loader)
    next(first), next(second)
    loader.close()
    for it in (first, second):
        with pytest.raises(stoker.Error, match="closed"):
            next(it)
    with pytest.raises(stoker.Error, match="closed"):
        next(iter(loader))


@pytest.mark.parametrize("count", [2, 4])
def test_threads_iterating_one_loader_each_get_an_epoch_of_their_own(folder, count):
    loader = stoker.Loader(folder, 16, **SETTINGS)
    started = threading.Barrier(count, timeout=60)  # every thread is inside its iteration at once
    results, errors = {}, []

    def iterate(name):
        try:
            batches = []
            for b in loader:
                if not batches:
                    started.wait()
                batches.append((b.epoch, b.sample_ids.tolist()))
            results[name] = batches
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=iterate, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join(timeout=120)
        assert not [t for t in threads if t.is_alive()], "an iteration hung"
    finally:
        loader.close()  # wakes a next() still waiting: no thread is left blocked at exit
        for t in threads:
            t.join(timeout=30)
    assert errors == []
    epochs = sorted(batches[0][0] for batches in results.values())
    assert epochs == list(range(count))
    for batches in results.values():
        epoch = batches[0][0]
        assert {e for e, _ in batches} == {epoch}
        assert [ids for _, ids in batches] == epoch_ids(folder, epoch)
