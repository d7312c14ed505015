"""stoker.jax.Loader(sharding=...): global jax.Arrays split over several devices, on the CPU with
four virtual devices (XLA_FLAGS=--xla_force_host_platform_device_count=4, set in a child
process: XLA reads it once, when JAX starts)."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax", reason="JAX is not installed in this environment (stoker.jax needs it)")
PIL = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")


def run_with_four_devices(code, *args):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    return run.stdout


def test_batches_are_global_arrays_split_over_the_devices(folder):
    out = run_with_four_devices("""
        import sys
        import numpy as np
        import jax, jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        import stoker, stoker.jax
        folder = sys.argv[1]
        assert jax.device_count() == 4
        mesh = Mesh(np.array(jax.devices()), ("data",))
        sharding = NamedSharding(mesh, P("data"))
        paths = stoker.dataset(folder).paths
        loader = stoker.jax.Loader(folder, 16, batch_size=8, shuffle=True, seed=3, drop_last=True,
                                   sharding=sharding, targets={"row": np.arange(24, dtype=np.int32)},
                                   return_meta=True)
        plain = stoker.Loader(folder, 16, batch_size=8, shuffle=True, seed=3, drop_last=True,
                              interpolation="bilinear", augment=stoker.Augment(dtype="float32", rescale=1 / 255))
        step = jax.jit(lambda x, y: (x.mean(axis=(1, 2, 3)), y * 2))
        batches = 0
        for meta, want in zip(loader, plain):
            images, labels, rows = meta["images"], meta["labels"], meta["targets"]["row"]
            assert images.shape == (8, 16, 16, 3) and images.sharding == sharding
            assert {s.data.shape for s in images.addressable_shards} == {(2, 16, 16, 3)}
            assert len({s.device for s in images.addressable_shards}) == 4
            assert labels.sharding.spec == P("data") and {s.data.shape for s in labels.addressable_shards} == {(2,)}
            np.testing.assert_allclose(np.asarray(images), want.images, atol=1e-6)
            np.testing.assert_array_equal(np.asarray(labels), want.labels)
            np.testing.assert_array_equal(np.asarray(rows), meta["sample_ids"])
            assert meta["paths"] == [paths[i] for i in meta["sample_ids"]]
            means, doubled = step(images, labels)
            assert means.sharding.spec == P("data")  # the computation stays split over the devices
            batches += 1
        assert batches == 3
        try:
            stoker.jax.Loader(folder, 16, batch_size=6, drop_last=True, sharding=sharding)
        except stoker.InvalidArgument as e:
            assert "sharding: a batch of 6 per process" in str(e), e
        else:
            raise AssertionError("a batch that does not split was taken")
        try:
            stoker.jax.Loader(folder, 16, batch_size=8 * 2 // 2 + 8, sharding=sharding)  # 16: 24 = 16 + 8
        except stoker.InvalidArgument as e:
            assert "drop_last=True" in str(e), e
        else:
            raise AssertionError("a last batch that does not split was taken")
        try:
            stoker.jax.Loader(folder, 16, sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]))
        except stoker.InvalidArgument as e:
            assert "NamedSharding" in str(e) and "SingleDeviceSharding" in str(e), e
        print("ok", batches)
    """, folder)
    assert out.strip() == "ok 3"


WORKER = """
import json, sys
import numpy as np
import jax
folder, address, pid, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
jax.distributed.initialize(coordinator_address=address, num_processes=2, process_id=pid)
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import stoker, stoker.jax
mesh = Mesh(np.array(jax.devices()), ("data",))
sharding = NamedSharding(mesh, P("data"))
loader = stoker.jax.Loader(folder, 16, batch_size=4, shuffle=True, seed=5, drop_last=True, sharding=sharding,
                           return_meta=True)
report = {"sharding": loader.loader.sharding, "devices": jax.device_count(), "local": jax.local_device_count(),
          "ids": [], "shapes": []}
for meta in loader:
    images = meta["images"]
    report["shapes"].append([list(images.shape), sorted({tuple(s.data.shape) for s in images.addressable_shards})])
    # this process's rows of the global array are its own batch
    local = np.concatenate([np.asarray(s.data) for s in sorted(images.addressable_shards, key=lambda s: s.index[0].start)])
    assert local.shape[0] == 4
    report["ids"] += meta["sample_ids"].tolist()
with open(out, "w") as f:
    json.dump(report, f)
jax.distributed.shutdown()
"""


def test_two_jax_processes_take_their_rank_from_jax(folder, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(sys.path))
    outs = [tmp_path / f"p{i}.json" for i in range(2)]
    logs = [open(tmp_path / f"p{i}.log", "w") for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, folder, address, str(i), str(outs[i])], env=env,
                              stdout=logs[i], stderr=subprocess.STDOUT) for i in range(2)]
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=240))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for p in procs:
        p.kill()
        p.wait()
    for f in logs:
        f.close()
    text = "".join((tmp_path / f"p{i}.log").read_text() for i in range(2))
    assert codes == [0, 0], text[-6000:]
    import json

    reports = [json.loads(o.read_text()) for o in outs]
    assert [r["sharding"] for r in reports] == [[0, 2], [1, 2]]  # jax.process_index() / process_count()
    for r in reports:
        assert (r["devices"], r["local"]) == (4, 2)
        assert r["shapes"] == [[[8, 16, 16, 3], [[2, 16, 16, 3]]]] * 3  # global batch 2 x 4, 2 rows per device
    a, b = set(reports[0]["ids"]), set(reports[1]["ids"])
    assert not a & b and sorted(a | b) == list(range(24))
