"""stoker.torch.DataLoader takes PyTorch's DataLoader arguments with their meaning: compared with
torch.utils.data.DataLoader where the claim is about PyTorch (shuffle's default, drop_last, seeding
from torch's RNG), and what stoker does with the ones threads make moot or that it refuses."""

import inspect
import re
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed in this environment (stoker.torch needs it)")
pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")

import stoker  # noqa: E402
import stoker.torch  # noqa: E402
from stoker import _loader, _stoker  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch):
    """Each test sees the once-per-process notes as a new process would."""
    monkeypatch.setattr(_loader, "_noted", set())


def order(dl, epoch=0):
    dl.set_epoch(epoch)
    return [int(i) for b in dl.loader for i in b.sample_ids]


def torch_order(n, **kwargs):
    return [int(i) for b in torch.utils.data.DataLoader(range(n), batch_size=4, **kwargs) for i in b]


def test_shuffle_defaults_to_false_as_pytorchs(folder):
    pytorch_default = inspect.signature(torch.utils.data.DataLoader).parameters["shuffle"].default
    assert not pytorch_default  # None (1.13+) or False: no shuffling unless asked
    assert torch_order(24) == list(range(24))
    dl = stoker.torch.DataLoader(folder, 16, batch_size=4)
    assert order(dl, 0) == order(dl, 1) == list(range(24))  # the dataset's order, every epoch
    shuffled = stoker.torch.DataLoader(folder, 16, batch_size=4, shuffle=True)
    assert sorted(order(shuffled)) == list(range(24)) and order(shuffled) != list(range(24))


def test_drop_last_counts_batches_as_pytorch(folder):
    for drop_last in (False, True):
        for batch_size in (5, 7, 24, 25)[:4 if not drop_last else 3]:
            ours = stoker.torch.DataLoader(folder, 16, batch_size=batch_size, drop_last=drop_last)
            theirs = torch.utils.data.DataLoader(range(24), batch_size=batch_size, drop_last=drop_last)
            assert len(ours) == len(theirs), (batch_size, drop_last)
            assert [len(y) for _, y in ours] == [len(b) for b in theirs], (batch_size, drop_last)
    # where PyTorch would give an empty epoch, stoker says so when the loader is made
    assert len(torch.utils.data.DataLoader(range(24), batch_size=25, drop_last=True)) == 0
    with pytest.raises(stoker.InvalidArgument, match="leaves no batch"):
        stoker.torch.DataLoader(folder, 16, batch_size=25, drop_last=True)


def test_torch_manual_seed_makes_runs_repeatable_and_seeds_differ(folder):
    # PyTorch: a shuffled DataLoader's order follows torch's RNG.
    torch.manual_seed(1)
    a = torch_order(24, shuffle=True)
    torch.manual_seed(1)
    assert torch_order(24, shuffle=True) == a
    torch.manual_seed(2)
    assert torch_order(24, shuffle=True) != a

    def run(seed):
        torch.manual_seed(seed)
        dl = stoker.torch.DataLoader(folder, 16, batch_size=4, shuffle=True)
        return dl.seed, order(dl, 0), order(dl, 1)

    s1, first, second = run(1)
    assert run(1) == (s1, first, second)
    s2, other, _ = run(2)
    assert s2 != s1 and other != first
    assert first != second  # a new order each epoch, as PyTorch's
    # the seed is one draw of torch's RNG, as PyTorch's RandomSampler seeds itself
    torch.manual_seed(1)
    assert s1 == int(torch.empty((), dtype=torch.int64).random_().item())
    # given, the seed wins and torch's RNG is left alone
    torch.manual_seed(3)
    state = torch.get_rng_state()
    assert stoker.torch.DataLoader(folder, 16, seed=7).seed == 7
    assert torch.equal(torch.get_rng_state(), state)


def test_a_job_of_several_ranks_agrees_on_seed_zero(folder):
    torch.manual_seed(5)
    ranks = [stoker.torch.DataLoader(folder, 16, batch_size=4, shuffle=True, rank=r, world_size=2) for r in range(2)]
    assert [r.seed for r in ranks] == [0, 0]  # DistributedSampler's default: every rank the same order
    assert sorted(order(ranks[0]) + order(ranks[1])) == list(range(24))


def test_generator_gives_the_seed(folder):
    g = torch.Generator().manual_seed(42)
    a = stoker.torch.DataLoader(folder, 16, batch_size=4, shuffle=True, generator=g)
    b = stoker.torch.DataLoader(folder, 16, batch_size=4, shuffle=True,
                                generator=torch.Generator().manual_seed(42))
    c = stoker.torch.DataLoader(folder, 16, batch_size=4, shuffle=True,
                                generator=torch.Generator().manual_seed(43))
    assert a.seed == b.seed != c.seed and order(a) == order(b) != order(c)
    # drawn from the generator's state, as PyTorch's samplers draw: a used generator gives another
    assert stoker.torch.DataLoader(folder, 16, generator=g).seed != a.seed
    with pytest.raises(TypeError, match="seed or generator"):
        stoker.torch.DataLoader(folder, 16, seed=1, generator=torch.Generator())


def test_num_workers_and_prefetch_factor_are_threads_and_batches_ahead_per_thread(folder):
    dl = stoker.torch.DataLoader(folder, 16, batch_size=2, num_workers=3, prefetch_factor=4)
    assert dl.loader._core.threads == 3
    assert dl._prefetch == 12  # PyTorch: prefetch_factor * num_workers batches in flight
    # num_workers=0 (PyTorch: load in the main process): one decode thread beside the caller's
    serial = stoker.torch.DataLoader(folder, 16, batch_size=2, num_workers=0)
    assert serial.loader._core.threads == 1
    all_cores = stoker.torch.DataLoader(folder, 16, batch_size=2, prefetch_factor=3)
    assert all_cores._prefetch == 3 * _stoker.default_threads() == 3 * all_cores.loader._core.threads
    # the same batches whatever the thread count
    ref = stoker.torch.DataLoader(folder, 16, batch_size=2, threads=2)
    for (x, y), (rx, ry) in zip(serial, ref):
        assert torch.equal(x, rx) and torch.equal(y, ry)
    # holding prefetch_factor * num_workers batches is fine (that many buffers, plus one)
    held = []
    for images, _ in stoker.torch.DataLoader(folder, 16, batch_size=2, num_workers=2, prefetch_factor=2):
        held.append(images)
        if len(held) == 4:
            break
    with pytest.raises(TypeError, match="threads or num_workers"):
        stoker.torch.DataLoader(folder, 16, threads=2, num_workers=2)
    with pytest.raises(TypeError, match="prefetch_factor"):
        stoker.torch.DataLoader(folder, 16, prefetch=8, prefetch_factor=2)
    with pytest.raises(stoker.InvalidArgument, match="num_workers must be >= 0, received -1"):
        stoker.torch.DataLoader(folder, 16, num_workers=-1)
    with pytest.raises(stoker.InvalidArgument, match="prefetch_factor must be >= 1, received 0"):
        stoker.torch.DataLoader(folder, 16, prefetch_factor=0)


def test_what_threads_make_moot_is_accepted_with_one_note(folder):
    with pytest.warns(UserWarning, match="persistent_workers has no effect") as caught:
        stoker.torch.DataLoader(folder, 16, num_workers=2, persistent_workers=True)
        stoker.torch.DataLoader(folder, 16, num_workers=2, persistent_workers=True)
    assert sum("persistent_workers" in str(w.message) for w in caught) == 1  # once per process
    with pytest.warns(UserWarning, match="timeout has no effect"):
        stoker.torch.DataLoader(folder, 16, timeout=30)
    with pytest.warns(UserWarning, match="multiprocessing_context has no effect"):
        stoker.torch.DataLoader(folder, 16, multiprocessing_context="spawn")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyTorch's defaults, spelled out: nothing to say
        stoker.torch.DataLoader(folder, 16, persistent_workers=False, timeout=0, multiprocessing_context=None,
                                sampler=None, batch_sampler=None, collate_fn=None, worker_init_fn=None)


@pytest.mark.parametrize("name, value, alternative", [
    ("sampler", torch.utils.data.SequentialSampler(range(3)), "shuffle="),
    ("batch_sampler", [[0, 1]], "batch_size="),
    ("collate_fn", lambda b: b, "augment=stoker.Augment"),
    ("worker_init_fn", lambda i: None, "seed=/generator="),
])
def test_what_stoker_does_itself_is_refused_naming_the_alternative(folder, name, value, alternative):
    with pytest.raises(TypeError, match=f"does not take {name}") as info:
        stoker.torch.DataLoader(folder, 16, **{name: value})
    assert alternative in str(info.value)


def test_an_unknown_argument_is_named_with_the_accepted_ones(folder):
    with pytest.raises(TypeError) as info:
        stoker.torch.DataLoader(folder, 16, num_worker=4)
    message = str(info.value)
    assert "'num_worker'" in message
    for name in ("num_workers", "prefetch_factor", "pin_memory", "batch_size", "augment", "threads"):
        assert name in message


def test_pin_memory_without_cuda_warns_once_as_pytorch_and_keeps_the_results(folder):
    if _stoker.cuda_build != "none" and _stoker.cuda_device_count() > 0:
        pytest.skip("this build can pin: the warning path needs a build without CUDA or a device")
    ref = stoker.torch.DataLoader(folder, 16, batch_size=8, normalize="imagenet")
    with pytest.warns(UserWarning, match="'pin_memory' argument is set as true but no accelerator is found") as w:
        dl = stoker.torch.DataLoader(folder, 16, batch_size=8, normalize="imagenet", pin_memory=True)
        stoker.torch.DataLoader(folder, 16, pin_memory=True)
    assert len([x for x in w if "pin_memory" in str(x.message)]) == 1
    assert dl.pinned is False and not ref.pinned
    for (x, y), (rx, ry) in zip(dl, ref):
        assert not x.is_pinned()
        assert torch.equal(x, rx) and torch.equal(y, ry)
        assert x.to("cpu", non_blocking=True).data_ptr() == x.data_ptr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stoker.torch.DataLoader(folder, 16, pin_memory=False)


def test_pin_memory_asks_the_binding_for_pinned_buffers(folder, monkeypatch):
    asked = {}
    real = _stoker.Loader

    def spy(dataset, settings, copy=False, pin_memory=False):
        asked["pin_memory"] = pin_memory
        return real(dataset, settings, copy=copy, pin_memory=pin_memory)

    monkeypatch.setattr(_stoker, "Loader", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stoker.torch.DataLoader(folder, 16, pin_memory=True)
    assert asked == {"pin_memory": True}
    stoker.torch.DataLoader(folder, 16)
    assert asked == {"pin_memory": False}


class FakeEvent:
    """torch.cuda.Event's record/query/synchronize, completed by the test."""

    made = []

    def __init__(self):
        self.done = False
        self.waited = False
        FakeEvent.made.append(self)

    def record(self):
        pass

    def query(self):
        return self.done

    def synchronize(self):
        self.waited = self.done = True


def test_a_batch_is_held_until_the_copies_queued_from_it_could_have_completed():
    FakeEvent.made = []
    guard = stoker.torch._HeldUntilCopied(2, FakeEvent)
    a, b, c = object(), object(), object()
    guard.add(a)
    guard.add(b)
    assert [t for _, t in guard.held] == [a, b]  # the copies have not run: both kept
    FakeEvent.made[0].done = True
    guard.add(c)
    assert [t for _, t in guard.held] == [b, c]  # a's copy completed: released
    guard.add(object())  # a third pending one: the host waits for the oldest rather than run out
    assert FakeEvent.made[1].waited and len(guard.held) == 2
    guard.clear()
    assert not guard.held and all(e.done for e in FakeEvent.made)


def test_the_loop_keeps_pinned_batches_until_the_event_passes(folder, monkeypatch):
    # As on a CUDA machine with pinned buffers, with the events faked: the loop's host tensors stay
    # held after the loop rebinds them, until the event recorded when the next batch is asked passes.
    FakeEvent.made = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    dl = stoker.torch.DataLoader(folder, 16, batch_size=4, prefetch=3)
    monkeypatch.setattr(type(dl.loader), "pinned", property(lambda self: True))
    pointers = []
    for images, _ in dl:
        pointers.append(images.data_ptr())
        images = None  # as `images = images.to("cuda", non_blocking=True)` drops the host tensor
    assert len(pointers) == 6 and len(FakeEvent.made) == 6
    assert all(e.done for e in FakeEvent.made)  # every held batch waited for, none left held
    assert sum(e.waited for e in FakeEvent.made) >= 3  # never more than prefetch - 1 held: waited


def test_torch_device_objects_are_taken_where_strings_are(folder):
    dl = stoker.torch.DataLoader(folder, 16, batch_size=4, device=torch.device("cpu"))
    assert dl.device == torch.device("cpu")
    x, _ = next(iter(dl))
    assert x.device == torch.device("cpu")
    assert stoker.Loader(folder, 16, device=torch.device("cpu")).device == "cpu"
    assert _loader._device(torch.device("cuda")) == 0 and _loader._device(torch.device("cuda", 1)) == 1
    assert _loader._device(torch.device("cpu")) is None
    with pytest.raises(stoker.InvalidArgument, match="device must be"):
        stoker.torch.DataLoader(folder, 16, device=torch.device("meta"))
    if _stoker.cuda_device_count() == 0:
        with pytest.raises(stoker.Error):  # a CUDA device object reaches the GPU feed, which says why
            stoker.torch.DataLoader(folder, 16, device=torch.device("cuda", 0))


def test_batch_size_none_gives_the_samples_one_by_one_as_pytorch(folder):
    import torchvision

    reference = torchvision.datasets.ImageFolder(
        str(folder), transform=torchvision.transforms.Compose([torchvision.transforms.Resize((16, 16)),
                                                               torchvision.transforms.ToTensor()]))
    theirs = list(torch.utils.data.DataLoader(reference, batch_size=None))
    dl = stoker.torch.DataLoader(folder, 16, batch_size=None)
    ours = list(dl)
    assert dl.batch_size is None and len(dl) == len(ours) == len(theirs) == 24
    for (image, label), (their_image, their_label) in zip(ours, theirs):
        assert image.shape == their_image.shape == (3, 16, 16)
        assert int(label) == their_label
    padded = stoker.torch.DataLoader(folder, 16, batch_size=None, with_padding=True, return_meta=False)
    assert all(len(sample) == 3 and sample[2].dim() == 0 for sample in padded)
    meta = next(iter(stoker.torch.DataLoader(folder, 16, batch_size=None, return_meta=True)))
    assert meta["images"].shape == (3, 16, 16) and isinstance(meta["paths"], str) and meta["sample_ids"].dim() == 0
    with pytest.raises(ValueError, match=torch_refusal(drop_last=True)):
        stoker.torch.DataLoader(folder, 16, batch_size=None, drop_last=True)


def torch_refusal(**kwargs):
    """The message PyTorch's own DataLoader gives for batch_size=None with these arguments."""
    with pytest.raises(ValueError) as refused:
        torch.utils.data.DataLoader(range(4), batch_size=None, **kwargs)
    return re.escape(str(refused.value).split(" and ")[0])
