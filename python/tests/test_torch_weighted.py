"""stoker.torch.DataLoader's weighted sampling against PyTorch's own WeightedRandomSampler: on the
same weights the two draw with the same frequencies (each within a statistical bound of the
weights, and of each other), zero weights never come up, without replacement no index repeats and
the first draws follow torch.multinomial's law; a WeightedRandomSampler given as sampler= is
translated (weights, num_samples, replacement, generator), and ranks share the global draw."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed in this environment (stoker.torch needs it)")
pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")

import stoker  # noqa: E402
import stoker.torch  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_env")  # one process, whatever ran pytest

# 24 samples (the `folder` fixture): four of weight 0, the others 1..
WEIGHTS = [0.0 if i in (3, 7, 8, 20) else 1.0 + (i % 6) for i in range(24)]
P = np.array(WEIGHTS) / sum(WEIGHTS)


def ids(dl, epoch=0):
    dl.set_epoch(epoch)
    return [int(i) for b in dl.loader for i in b.sample_ids]


def chi_square(counts, p):
    counts, p = np.asarray(counts, dtype=float), np.asarray(p, dtype=float)
    expected = counts.sum() * p
    keep = p > 0
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum())


def two_sample_chi_square(a, b):
    """Pearson's statistic of two count vectors of equal totals drawn from one law."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = (a + b) > 0
    return float((((a - b) ** 2)[keep] / (a + b)[keep]).sum())


def loader(folder, **kwargs):
    args = dict(batch_size=500, seed=11, cache="decoded", label_mode=None, output="uint8")
    args.update(kwargs)
    return stoker.torch.DataLoader(folder, 16, **args)


def test_frequencies_agree_with_torchs_sampler_on_the_same_weights(folder):
    draws = 30000
    ours = np.bincount(ids(loader(folder, sample_weights=WEIGHTS, num_samples=draws)), minlength=24)
    sampler = torch.utils.data.WeightedRandomSampler(WEIGHTS, draws, generator=torch.Generator().manual_seed(11))
    theirs = np.bincount(list(sampler), minlength=24)
    assert ours.sum() == theirs.sum() == draws
    for zero in (3, 7, 8, 20):
        assert ours[zero] == 0 and theirs[zero] == 0
    # 19 degrees of freedom: above 60 with probability 3e-6; the seeds are fixed, so no flicker.
    assert chi_square(ours, P) < 60, ours
    assert chi_square(theirs, P) < 60, theirs
    assert two_sample_chi_square(ours, theirs) < 60, (ours, theirs)
    # The bound has power: a uniform draw over the same samples is far outside it.
    assert chi_square(ours, (P > 0) / (P > 0).sum()) > 500


def test_without_replacement_no_index_repeats_and_the_first_draws_follow_torch(folder):
    for num_samples in (1, 10, 20):
        sampler = torch.utils.data.WeightedRandomSampler(WEIGHTS, num_samples, replacement=False)
        theirs = list(sampler)
        ours = ids(loader(folder, sample_weights=WEIGHTS, num_samples=num_samples, replacement=False))
        for drawn in (ours, theirs):
            assert len(drawn) == num_samples and len(set(drawn)) == num_samples
            assert not {3, 7, 8, 20} & set(drawn)
    # The first two of each epoch's draws, over 3000 epochs: the first by weight, the second by
    # the weights left (torch.multinomial without replacement), for stoker as for torch.
    weights = [1.0, 2.0, 3.0, 4.0, 5.0] + [0.0] * 19
    p = np.array(weights) / sum(weights)
    p_second = np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(5) if i != j) for j in range(24)])
    dl = loader(folder, sample_weights=weights, num_samples=2, replacement=False, batch_size=2)
    generator = torch.Generator().manual_seed(5)
    ours, theirs = np.zeros((2, 24)), np.zeros((2, 24))
    for epoch in range(3000):
        a = ids(dl, epoch)
        b = torch.multinomial(torch.tensor(weights, dtype=torch.float64), 2, False, generator=generator).tolist()
        for k in range(2):
            ours[k, a[k]] += 1
            theirs[k, b[k]] += 1
    for counts in (ours, theirs):
        assert counts[:, 5:].sum() == 0
        # 4 degrees of freedom: above 30 with probability 5e-6.
        assert chi_square(counts[0], p) < 30 and chi_square(counts[1], p_second) < 30, counts
    assert two_sample_chi_square(ours[1], theirs[1]) < 30


def test_a_weighted_random_sampler_is_translated(folder):
    def sampler(num_samples, replacement=True, seed=None):
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        return torch.utils.data.WeightedRandomSampler(torch.tensor(WEIGHTS), num_samples, replacement, generator)

    dl = loader(folder, sampler=sampler(37, seed=1), batch_size=5, seed=None)
    theirs = torch.utils.data.DataLoader(range(24), sampler=sampler(37), batch_size=5)
    assert len(dl) == len(theirs) == 8  # num_samples is honoured
    drawn = ids(dl)
    assert len(drawn) == 37 and not {3, 7, 8, 20} & set(drawn)
    assert len(dl.sampler) == 37
    # The sampler's generator gives the seed, as generator= does: the same state, the same draw.
    assert ids(loader(folder, sampler=sampler(37, seed=1), batch_size=5, seed=None)) == drawn
    assert ids(loader(folder, sampler=sampler(37, seed=2), batch_size=5, seed=None)) != drawn
    assert ids(loader(folder, sample_weights=WEIGHTS, num_samples=37, batch_size=5, seed=None,
                      generator=torch.Generator().manual_seed(1))) == drawn
    once = ids(loader(folder, sampler=sampler(20, replacement=False, seed=1), seed=None))
    assert len(once) == len(set(once)) == 20
    # Without a generator of its own the seed comes from torch's RNG (or seed=), as before.
    torch.manual_seed(4)
    a = ids(loader(folder, sampler=sampler(30), seed=None))
    torch.manual_seed(4)
    assert ids(loader(folder, sampler=sampler(30), seed=None)) == a
    assert ids(loader(folder, sampler=sampler(30), seed=9)) == ids(
        loader(folder, sample_weights=WEIGHTS, num_samples=30, seed=9))


def test_what_the_translation_refuses_names_the_reason(folder):
    weighted = torch.utils.data.WeightedRandomSampler(WEIGHTS, 10)
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        loader(folder, sampler=weighted, shuffle=True)
    with pytest.raises(TypeError, match="not both"):
        loader(folder, sampler=weighted, sample_weights=WEIGHTS)
    seeded = torch.utils.data.WeightedRandomSampler(WEIGHTS, 10, generator=torch.Generator().manual_seed(1))
    with pytest.raises(TypeError, match="the sampler's generator gives the seed"):
        loader(folder, sampler=seeded, seed=3)
    for other in (torch.utils.data.RandomSampler(range(24)), torch.utils.data.SubsetRandomSampler([1, 2])):
        with pytest.raises(TypeError, match="does not take sampler") as info:
            loader(folder, sampler=other)
        assert "shuffle=" in str(info.value) and "sample_weights=" in str(info.value)
    with pytest.raises(stoker.InvalidArgument, match="23 weights for 24 samples"):
        loader(folder, sampler=torch.utils.data.WeightedRandomSampler(WEIGHTS[:23], 10))
    with pytest.raises(stoker.InvalidArgument, match="more than the 20 samples whose weight is above 0"):
        loader(folder, sample_weights=WEIGHTS, num_samples=21, replacement=False)
    with pytest.raises(stoker.InvalidArgument, match="negative"):
        loader(folder, sample_weights=torch.tensor([-1.0] + WEIGHTS[1:]))


def test_ranks_of_a_job_share_the_global_draw(folder):
    whole = ids(loader(folder, sample_weights=WEIGHTS, num_samples=45, batch_size=4))
    shares = []
    for rank in range(2):
        dl = loader(folder, sample_weights=WEIGHTS, num_samples=45, batch_size=4, rank=rank, world_size=2,
                    with_padding=True)
        assert len(dl.sampler) == 23 and len(dl) == 6
        dl.set_epoch(0)
        shares.append([(int(i), bool(p)) for b in dl.loader for i, p in zip(b.sample_ids, b.padding)])
    together = [shares[k % 2][k // 2] for k in range(46)]
    assert [i for i, _ in together] == whole + whole[:1]
    assert [k for k, (_, pad) in enumerate(together) if pad] == [45]  # the wrapped repeat, marked
