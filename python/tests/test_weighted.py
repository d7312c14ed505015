"""stoker.Loader's weighted sampling (sample_weights=, num_samples=, replacement=): each epoch draws
by weight from (seed, epoch), zero weights never come up, without replacement no sample repeats,
len() follows num_samples, ranks share one draw, a state_dict() continues the same draw and is
refused by a loader with other weights, and bad weights are refused naming the reason."""

import math

import numpy as np
import pytest

import stoker

pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")

pytestmark = pytest.mark.usefixtures("clean_env")  # one process, whatever ran pytest


def ids(loader, epoch=0):
    loader.set_epoch(epoch)
    return [int(i) for b in loader for i in b.sample_ids]


def weighted_loader(folder, weights, **kwargs):
    args = dict(batch_size=8, seed=3, cache="decoded", label_mode="none")
    args.update(kwargs)
    return stoker.Loader(folder, 16, sample_weights=weights, **args)


def chi_square(counts, p):
    counts, p = np.asarray(counts, dtype=float), np.asarray(p, dtype=float)
    expected = counts.sum() * p
    keep = p > 0
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum())


def test_the_draw_follows_the_weights_and_is_a_function_of_seed_and_epoch(folder):
    weights = [0.0 if i % 5 == 0 else float(i) for i in range(24)]  # 5 zero weights
    loader = weighted_loader(folder, weights, num_samples=12000, batch_size=500)
    assert len(loader) == 24  # batches of num_samples, not of the dataset's 24 samples
    first = ids(loader, 0)
    assert len(first) == 12000
    assert first == ids(loader, 0)  # the same epoch again: the same draw
    assert first != ids(loader, 1)
    counts = np.bincount(first, minlength=24)
    assert all(counts[i] == 0 for i in range(0, 24, 5)), counts
    # 18 degrees of freedom: above 60 with probability 3e-6 (and the seed is fixed).
    assert chi_square(counts, np.array(weights) / sum(weights)) < 60
    assert ids(weighted_loader(folder, weights, num_samples=12000, seed=4), 0) != first
    # shuffle does not apply to a draw
    assert ids(weighted_loader(folder, weights, num_samples=12000, shuffle=False), 0) == first


def test_any_sequence_of_numbers_is_taken(folder):
    weights = [1, 2, 0, 4] * 6
    reference = ids(weighted_loader(folder, np.array(weights, dtype=np.float32)))
    assert ids(weighted_loader(folder, weights)) == reference
    assert ids(weighted_loader(folder, tuple(float(w) for w in weights))) == reference
    assert ids(weighted_loader(folder, np.array(weights, dtype=np.int64)[::-1][::-1])) == reference
    assert len(reference) == 24 and 2 not in reference


def test_without_replacement_each_sample_at_most_once(folder):
    weights = [0.0, 0.0] + [1.0 + i for i in range(22)]
    loader = weighted_loader(folder, weights, num_samples=20, replacement=False)
    for epoch in range(5):
        drawn = ids(loader, epoch)
        assert len(drawn) == 20 and len(set(drawn)) == 20 and not {0, 1} & set(drawn)
    everything = ids(weighted_loader(folder, weights, replacement=False, num_samples=22))
    assert sorted(everything) == list(range(2, 24))


def test_ranks_share_the_draw(folder):
    weights = [float(1 + i % 4) for i in range(24)]
    whole = ids(weighted_loader(folder, weights, num_samples=25, batch_size=4))
    shares = []
    for rank in range(2):
        loader = weighted_loader(folder, weights, num_samples=25, batch_size=4, rank=rank, world_size=2)
        assert len(loader) == 4  # 13 each (25 padded to 26), batches of 4
        loader.set_epoch(0)
        batches = list(loader)
        shares.append(([int(i) for b in batches for i in b.sample_ids],
                       [bool(p) for b in batches for p in b.padding]))
    together = [shares[k % 2][0][k // 2] for k in range(26)]
    assert together == whole + whole[:1]  # padded by wrapping, as DistributedSampler
    assert shares[1][1][-1] and sum(shares[0][1] + shares[1][1]) == 1  # the one repeat is marked


def test_a_state_continues_the_draw_and_other_weights_refuse_it(folder):
    weights = [float(i % 3) for i in range(24)]
    loader = weighted_loader(folder, weights, num_samples=40)
    whole = ids(loader, 2)
    loader.set_epoch(2)
    it = iter(loader)
    head = [int(i) for _ in range(2) for i in next(it).sample_ids]
    state = loader.state_dict()
    it.close()
    again = weighted_loader(folder, weights, num_samples=40)
    again.load_state_dict(state)
    assert head + [int(i) for b in again for i in b.sample_ids] == whole
    other = [w + 1 for w in weights]
    for different in (weighted_loader(folder, other, num_samples=40), weighted_loader(folder, weights, num_samples=41),
                      weighted_loader(folder, weights, num_samples=10, replacement=False),
                      stoker.Loader(folder, 16, batch_size=8, seed=3, cache="decoded", label_mode="none")):
        with pytest.raises(stoker.InvalidArgument, match="sample weights"):
            different.load_state_dict(state)


@pytest.mark.parametrize("kwargs, reason", [
    (dict(sample_weights=[1.0] * 23), "23 weights for 24 samples"),
    (dict(sample_weights=[1.0] * 23 + [-1.0]), "the weight of sample 23 is negative"),
    (dict(sample_weights=[1.0] * 23 + [math.nan]), "sample 23 is nan"),
    (dict(sample_weights=[math.inf] + [1.0] * 23), "sample 0 is inf"),
    (dict(sample_weights=[0.0] * 24), "every weight is 0"),
    (dict(sample_weights=[1.0] * 24, num_samples=25, replacement=False), "more than the 24 samples"),
    (dict(sample_weights=[0.0] + [1.0] * 23, replacement=False), "the 23 samples whose weight is above 0"),
    (dict(sample_weights=[1.0] * 24, num_samples=0), "num_samples must be >= 1"),
    (dict(sample_weights=[1.0] * 24, num_samples=2.5), "num_samples must be a whole number"),
    (dict(sample_weights=[1.0] * 24, replacement="no"), "replacement must be True or False"),
    (dict(sample_weights=np.ones((4, 6))), "1-D"),
    (dict(sample_weights="heavy"), "not a sequence of numbers"),
    (dict(sample_weights=[1.0] * 24, shard_mode="fixed", rank=0, world_size=2), "shard_mode interleaved"),
    (dict(num_samples=10), "num_samples needs sample_weights"),
    (dict(replacement=False), "replacement=false needs sample_weights"),
])
def test_bad_weights_are_refused_naming_the_reason(folder, kwargs, reason):
    with pytest.raises(stoker.InvalidArgument, match=reason):
        stoker.Loader(folder, 16, **kwargs)
