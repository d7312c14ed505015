"""torchrun --nproc_per_node 2 on the CPU (gloo): DistributedDataParallel trains on stoker's loader,
each rank on its own share of every epoch (ddp_worker.py).

Debian 12's torch 1.13 ships a torchrun that fails on Python 3.11 before starting any worker
(torch.distributed.elastic's Std.from_str returns None there); with it, the two ranks are started
here with the environment torchrun gives its workers (RANK, WORLD_SIZE, LOCAL_RANK), meeting
through a file instead of MASTER_ADDR/MASTER_PORT; stoker reads the rank and world size from
torch.distributed either way."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the distributed test needs PyTorch")
if not torch.distributed.is_available():
    pytest.skip("this PyTorch has no torch.distributed", allow_module_level=True)

from PIL import Image  # noqa: E402  (after the skips)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_works(env):
    probe = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port",
                            str(free_port()), "-m", "platform"], env=env, capture_output=True, text=True, timeout=120)
    return probe.returncode == 0


def run_two_ranks(worker, env, logs):
    """Rank 0 and 1 as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK), each writing to a log
    file (a full pipe would block a rank inside a collective), meeting through a file rather than a
    port (a free port can be taken by another process before rank 0 listens on it); a rank still
    running after 300 s is killed. Returns (both exited with 0, both logs)."""
    logs.mkdir()
    env = {**env, "WORLD_SIZE": "2", "GLOO_SOCKET_IFNAME": "lo",
           "STOKER_TEST_INIT_METHOD": "file://" + str(logs / "rendezvous")}
    files = [open(logs / f"rank{r}.log", "w") for r in range(2)]
    ranks = [subprocess.Popen([sys.executable, *worker], stdout=f, stderr=subprocess.STDOUT, text=True,
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r, f in enumerate(files)]
    ok = True
    for p in ranks:
        try:
            ok &= p.wait(timeout=300) == 0
        except subprocess.TimeoutExpired:
            ok = False
    for p in ranks:
        p.kill()
        p.wait()
    for f in files:
        f.close()
    text = "\n".join(f"--- rank {r}:\n" + (logs / f"rank{r}.log").read_text() for r in range(2))
    return ok, text


def test_two_ranks_under_torchrun_see_every_sample_once_per_epoch(tmp_path):
    rng = np.random.default_rng(0)
    images = tmp_path / "images"
    for c, name in enumerate(["blue", "red"]):
        (images / name).mkdir(parents=True)
        for i in range(11):  # 22 samples, 11 per rank
            px = rng.integers(0, 60, (20, 20, 3), dtype=np.uint8)
            px[..., 2 - 2 * c] += 150
            Image.fromarray(px).save(images / name / f"{i}.png")
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    worker = [os.path.join(os.path.dirname(__file__), "ddp_worker.py"), str(images), str(report)]
    if torchrun_works(env):
        port = str(free_port())  # after the probe: not a port it has just used
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", port, *worker]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=360)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    else:
        ok, logs = run_two_ranks(worker, env, tmp_path / "ranks")
        assert ok, logs[-8000:]
    r = json.loads(report.read_text())
    assert r["world"] == 2
    for gathered in r["epochs"]:
        assert sorted(g["sharding"][0] for g in gathered) == [0, 1]
        assert all(g["sharding"][1] == 2 for g in gathered)
        per_rank = [set(g["ids"]) for g in gathered]
        assert not (per_rank[0] & per_rank[1]), "a sample on both ranks"
        assert sorted(per_rank[0] | per_rank[1]) == list(range(r["samples"]))
        assert gathered[0]["steps"] == gathered[1]["steps"] > 0
    assert r["epochs"][0][0]["ids"] != r["epochs"][1][0]["ids"], "a new permutation each epoch"
