"""stoker.torch.DataLoader in a job of several ranks: the rank and world size are resolved when
each iteration starts (a loader made before torch.distributed or the launcher said them takes its
share once they do), Lightning's environment (WORLD_SIZE and LOCAL_RANK without RANK), and the
`.sampler` that code written for DistributedSampler calls set_epoch on."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import stoker  # noqa: E402
import stoker.torch  # noqa: E402
from support import LAUNCH  # noqa: E402

PIL = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")

def _ids(loader):
    return [b.sample_ids.tolist() for b in loader]


def test_lightnings_environment_gives_the_rank(folder, clean_env):
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("LOCAL_RANK", "1")
    loader = stoker.torch.DataLoader(folder, 16, batch_size=4)  # stoker.Loader alone would refuse this
    assert loader.loader.sharding == (1, 2) and loader.seed == 0
    clean_env.setenv("WORLD_SIZE", "4")
    clean_env.setenv("NODE_RANK", "1")
    clean_env.setenv("LOCAL_WORLD_SIZE", "2")
    assert stoker.torch.DataLoader(folder, 16, batch_size=4).loader.sharding == (3, 4)
    clean_env.delenv("LOCAL_WORLD_SIZE")
    with pytest.raises(stoker.InvalidArgument, match="NODE_RANK=1 and LOCAL_RANK=1 but neither RANK nor"):
        stoker.torch.DataLoader(folder, 16, batch_size=4)


def test_the_rank_is_resolved_when_iteration_starts(folder, clean_env):
    torch.manual_seed(5)
    loader = stoker.torch.DataLoader(folder, 16, batch_size=4, shuffle=True, return_meta=True)
    assert loader.loader.sharding == (0, 1) and len(loader) == 6
    loader.sampler.set_epoch(2)
    clean_env.setenv("RANK", "1")  # the launcher says the rank after the loader was made
    clean_env.setenv("WORLD_SIZE", "3")
    got = [m["sample_ids"].tolist() for m in loader]
    assert loader.loader.sharding == (1, 3) and loader.seed == 0  # ranks must agree on the order
    want = stoker.Loader(folder, 16, batch_size=4, shuffle=True, seed=0, rank=1, world_size=3,
                         interpolation="bilinear")
    want.set_epoch(2)
    assert got == _ids(want)  # the epoch chosen before carries over
    assert len(loader) == 2 and len(loader.sampler) == 8
    assert (loader.sampler.rank, loader.sampler.num_replicas, loader.sampler.epoch) == (1, 3, 3)
    # given ranks are kept whatever the environment says
    fixed = stoker.torch.DataLoader(folder, 16, batch_size=4, rank=0, world_size=2)
    clean_env.setenv("RANK", "2")
    list(fixed)
    assert fixed.loader.sharding == (0, 2)


def test_a_state_is_loaded_for_the_rank_of_now(folder, clean_env):
    settings = dict(batch_size=2, shuffle=True, return_meta=True)
    first = stoker.torch.DataLoader(folder, 16, seed=0, rank=1, world_size=3, **settings)
    first.set_epoch(4)
    seen = []
    for i, meta in enumerate(first):
        seen.append(meta["sample_ids"].tolist())
        if i == 1:
            state = first.state_dict()  # two batches of epoch 4 delivered
    later = stoker.torch.DataLoader(folder, 16, **settings)  # made before the rank was known
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "3")
    later.load_state_dict(state)
    assert [m["sample_ids"].tolist() for m in later] == seen[2:]
    assert later.loader.sharding == (1, 3)


def test_another_ranks_state_resumes_this_ranks_share_when_the_ranks_follow_the_job(folder, clean_env):
    # Lightning saves rank 0's loader state in its checkpoint and every rank loads that one.
    settings = dict(batch_size=2, shuffle=True, seed=3, return_meta=True)
    ids = {}
    for rank in (0, 1):
        loader = stoker.torch.DataLoader(folder, 16, rank=rank, world_size=2, **settings)
        loader.set_epoch(1)
        ids[rank] = [m["sample_ids"].tolist() for m in loader]
        if rank == 0:
            loader.set_epoch(1)
            it = iter(loader)
            next(it), next(it)
            state = loader.state_dict()  # two batches of epoch 1 delivered, rank 0's
            it.close()
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    following = stoker.torch.DataLoader(folder, 16, **settings)
    following.load_state_dict(state)
    assert [m["sample_ids"].tolist() for m in following] == ids[1][2:]
    assert following.batch_sampler is None  # PyTorch's attribute, which Lightning reads
    given = stoker.torch.DataLoader(folder, 16, rank=1, world_size=2, **settings)
    with pytest.raises(stoker.InvalidArgument, match="it is rank 0 of 2, this loader rank 1 of 2"):
        given.load_state_dict(state)
    clean_env.setenv("WORLD_SIZE", "3")
    with pytest.raises(stoker.InvalidArgument):  # another job's size is refused
        stoker.torch.DataLoader(folder, 16, **settings).load_state_dict(state)


def test_the_sampler_is_what_distributed_sampler_code_expects(folder, clean_env):
    loader = stoker.torch.DataLoader(folder, 16, batch_size=5, shuffle=True, seed=4, rank=1, world_size=2,
                                     drop_remainder=True)
    sampler = torch.utils.data.DistributedSampler(list(range(24)), num_replicas=2, rank=1, shuffle=True, seed=4,
                                                  drop_last=True)
    for name in ("rank", "num_replicas", "shuffle", "seed", "drop_last", "epoch"):
        assert getattr(loader.sampler, name) == getattr(sampler, name), name
    assert len(loader.sampler) == len(sampler) == 12
    orders = {}
    for epoch in (0, 3, 3):
        loader.sampler.set_epoch(epoch)  # what Lightning calls at each epoch
        assert loader.sampler.epoch == epoch
        orders.setdefault(epoch, []).append([i for m in loader for i in m[1].tolist()])
        assert loader.sampler.epoch == epoch + 1  # the next iteration's, as stoker counts
    assert orders[3][0] == orders[3][1] and orders[0][0] != orders[3][0]


WORKER = r'''
import datetime, json, os, sys
import torch, torch.distributed as dist
import stoker, stoker.torch
folder, init, report = sys.argv[1:4]
local = int(os.environ["LOCAL_RANK"])
# Made as a LightningDataModule makes it in a DDP child: WORLD_SIZE and LOCAL_RANK, no RANK, no group yet.
early = stoker.torch.DataLoader(folder, 16, batch_size=3, shuffle=True, return_meta=True, threads=1)
# And one made before the environment said anything (a loader built before the processes started).
saved = {k: os.environ.pop(k) for k in ("WORLD_SIZE", "LOCAL_RANK")}
before = stoker.torch.DataLoader(folder, 16, batch_size=3, shuffle=True, return_meta=True, threads=1)
built = [early.loader.sharding, before.loader.sharding]
os.environ.update(saved)
dist.init_process_group("gloo", init_method=init, rank=local, world_size=2, timeout=datetime.timedelta(seconds=200))
epochs = []
for epoch in range(2):
    row = {"built": built, "rank": dist.get_rank()}
    for name, dl in (("early", early), ("before", before)):
        dl.sampler.set_epoch(epoch)
        metas = list(dl)
        row[name] = {"ids": [i for m in metas for i, p in zip(m["sample_ids"].tolist(), m["padding"].tolist()) if not p],
                     "sharding": dl.loader.sharding, "batches": len(metas)}
    gathered = [None, None]
    dist.all_gather_object(gathered, row)
    epochs.append(gathered)
if dist.get_rank() == 0:
    with open(report, "w") as f:
        json.dump({"epochs": epochs}, f)
dist.barrier()
sys.stdout.flush()
os._exit(0)
'''


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this PyTorch has no torch.distributed")
def test_two_ranks_with_lightnings_environment_see_every_sample_once(folder, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH}
    env.update(WORLD_SIZE="2", NODE_RANK="0", GLOO_SOCKET_IFNAME="lo", PYTHONPATH=os.pathsep.join(sys.path))
    init = "file://" + str(tmp_path / "rendezvous")
    logs = [open(tmp_path / f"rank{r}.log", "w") for r in range(2)]
    ranks = [subprocess.Popen([sys.executable, str(worker), folder, init, str(report)], stdout=f,
                              stderr=subprocess.STDOUT, env={**env, "LOCAL_RANK": str(r)}) for r, f in enumerate(logs)]
    codes = []
    for p in ranks:
        try:
            codes.append(p.wait(timeout=300))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for p in ranks:
        p.kill()
        p.wait()
    for f in logs:
        f.close()
    text = "".join((tmp_path / f"rank{r}.log").read_text() for r in range(2))
    assert codes == [0, 0], text[-6000:]
    r = json.loads(report.read_text())
    for g in r["epochs"][0]:  # as built: from the environment, and 0 of 1 without it
        assert g["built"] == [[g["rank"], 2], [0, 1]]
    for gathered in r["epochs"]:
        for name in ("early", "before"):
            shares = [g[name] for g in gathered]
            assert sorted(s["sharding"][0] for s in shares) == [0, 1] and {s["sharding"][1] for s in shares} == {2}
            assert shares[0]["batches"] == shares[1]["batches"] == 4
            a, b = set(shares[0]["ids"]), set(shares[1]["ids"])
            assert not a & b and sorted(a | b) == list(range(24)), name
    assert r["epochs"][0][0]["early"]["ids"] != r["epochs"][1][0]["early"]["ids"]
