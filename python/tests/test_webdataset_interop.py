"""Shards that `stoker shard` writes, read by the `webdataset` package itself: every image's bytes
under its key with its `cls` label, split over several shards, shuffled or not. Runs the command
named by $STOKER_CLI (scripts/test_python.sh sets it to build/apps/stoker)."""
import os
import subprocess
from pathlib import Path

import pytest

import stoker


def shard(cli, folder, out, *extra):
    subprocess.run([cli, "shard", "--data", str(folder), "--out", str(out / "train-%06d.tar"), "--max-size", "16KiB",
                    *extra], check=True, capture_output=True, text=True)
    return sorted(str(p) for p in out.glob("train-*.tar"))


@pytest.mark.parametrize("shuffle", [False, True])
def test_stoker_shard_output_reads_with_webdataset(folder, tmp_path, shuffle):
    wds = pytest.importorskip("webdataset")
    cli = os.environ.get("STOKER_CLI", "")
    if not cli or not Path(cli).exists():
        pytest.skip("STOKER_CLI does not name the stoker command")
    files = stoker.dataset(str(folder))
    expected = sorted((Path(p).read_bytes(), label) for p, label in zip(files.paths, files.labels))

    out = tmp_path / ("shuffled" if shuffle else "ordered")
    shards = shard(cli, folder, out, *(["--shuffle", "--seed", "3"] if shuffle else []))
    assert len(shards) >= 2, "16 KiB shards: the images span several"
    samples = list(wds.WebDataset(shards, shardshuffle=False))
    assert len(samples) == len(expected)
    assert len({s["__key__"] for s in samples}) == len(samples)
    assert sorted((s["jpg"], int(s["cls"])) for s in samples) == expected
    assert (out / "classes.txt").read_text().split() == list(files.class_names)
    if not shuffle:
        # In dataset order: the first shard holds the first files.
        assert samples[0]["jpg"] == Path(files.paths[0]).read_bytes()
