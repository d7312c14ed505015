"""Labels beyond one class index (float values, rows of values, multi-hot), extra per-sample
columns, and how CSV files and DataFrames type their labels. Every batch must carry the rows of
the samples it actually holds: the tests give each sample values that say which image it is
(its colour, its file) and check them against the pixels and the paths."""

import importlib.util
import os

import numpy as np
import pytest

import stoker
from support import make_folder

PIL = pytest.importorskip("PIL.Image", reason="the tests write their images with Pillow")
needs_pandas = pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed")


@pytest.fixture
def samples(tmp_path):
    """(paths, is_red) of 24 images in dataset order: 12 red, 12 blue."""
    files = stoker.dataset(make_folder(tmp_path / "images"))
    paths = list(files.paths)
    return paths, np.array([os.sep + "red" + os.sep in p for p in paths])


def _red(images):
    return images[..., 0].mean(axis=(1, 2)) > 128


def test_float_labels_come_back_unchanged_with_the_samples_the_loader_made(samples):
    paths, red = samples
    # +0.75 for red, -1.25 for blue, plus a per-sample fraction: nothing an int could hold
    values = np.where(red, 0.75, -1.25) + np.arange(len(paths)) / 1000.0
    loader = stoker.Loader(paths, 16, batch_size=5, shuffle=True, seed=4, labels=values)
    seen = []
    for batch in loader:
        assert batch.labels.dtype == np.float64 and batch.labels.shape == (len(batch),)
        np.testing.assert_array_equal(batch.labels, values[batch.sample_ids])
        np.testing.assert_array_equal(batch.labels > 0, _red(batch.images))  # the label is this image's
        assert batch.labels.flags.owndata  # a gathered copy: holds no batch buffer
        seen += batch.sample_ids.tolist()
    assert sorted(seen) == list(range(len(paths))) and seen != sorted(seen)  # shuffled, all once
    assert loader.labels is not None and loader.class_names == []


def test_rows_of_values_and_multi_hot_labels(samples):
    paths, red = samples
    rows = np.stack([red * 1.5, np.arange(len(paths), dtype=np.float64), -np.ones(len(paths))], axis=1)
    rows = rows.astype(np.float32)
    for batch in stoker.Loader(paths, 16, batch_size=7, shuffle=True, seed=1, labels=rows):
        assert batch.labels.dtype == np.float32 and batch.labels.shape == (len(batch), 3)
        np.testing.assert_array_equal(batch.labels[:, 1], batch.sample_ids)
        np.testing.assert_array_equal(batch.labels[:, 0] > 0, _red(batch.images))

    # Keras' multi-label form: a list of class names per sample -> multi-hot float32 rows
    tags = [["red", "warm"] if r else ["blue"] for r in red]
    loader = stoker.Loader(paths, 16, batch_size=6, shuffle=True, seed=2, labels=tags)
    assert loader.class_names == ["blue", "red", "warm"]
    for batch in loader:
        assert batch.labels.dtype == np.float32 and batch.labels.shape == (len(batch), 3)
        is_red = _red(batch.images)
        np.testing.assert_array_equal(batch.labels, np.stack([~is_red, is_red, is_red], axis=1).astype(np.float32))
    # indices work alike, with class_names giving the width
    data = stoker.dataset(paths, [[0, 2], [1]] * 12, class_names=["a", "b", "c", "d"])
    np.testing.assert_array_equal(data.labels[:2], [[1, 0, 1, 0], [0, 1, 0, 0]])


def test_targets_follow_the_batch_through_padding_and_skipped_samples(samples, tmp_path):
    paths, red = samples
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg")
    paths = paths + [str(bad)]
    names = [os.path.basename(os.path.dirname(p)) + "/" + os.path.basename(p) for p in paths]
    targets = {"row": np.arange(len(paths)) * 10, "name": names, "weight": np.linspace(0, 1, len(paths))}
    loader = stoker.Loader(paths, 16, batch_size=4, shuffle=True, seed=9, rank=1, world_size=4,
                           on_bad_sample="skip", targets=targets, labels=list(red) + [False])
    seen_padding = False
    for batch in loader:
        ids = batch.sample_ids
        assert isinstance(batch.targets, dict) and sorted(batch.targets) == ["name", "row", "weight"]
        np.testing.assert_array_equal(batch.targets["row"], ids * 10)
        assert batch.targets["name"].tolist() == [names[i] for i in ids]
        assert [p.endswith(n) for p, n in zip(batch.paths, batch.targets["name"])] == [True] * len(batch)
        np.testing.assert_array_equal(batch.targets["weight"], targets["weight"][ids])
        # labels given as booleans are classes: the C++ loader's int32 class indices, untouched
        assert batch.labels.dtype == np.int32 and batch.labels_are_classes
        np.testing.assert_array_equal(batch.labels, red[ids].astype(np.int32))
        seen_padding |= bool(batch.padding.any())
        assert len(ids) < 4 or len(batch) == 4
    assert seen_padding, "25 samples over 4 ranks: rank 1 pads its share"
    # the bad file is in no batch of any rank, and every rank's targets stay aligned
    for rank in range(4):
        for batch in stoker.Loader(paths, 16, batch_size=4, rank=rank, world_size=4, on_bad_sample="skip",
                                   targets=np.arange(len(paths))):
            np.testing.assert_array_equal(batch.targets, batch.sample_ids)
            assert len(paths) - 1 not in batch.sample_ids.tolist()


def test_integer_labels_are_class_indices_as_given_and_strings_sort(samples, tmp_path):
    paths, _ = samples
    ints = [i % 12 for i in range(24)]
    data = stoker.dataset(paths, ints)
    assert data.class_names == [str(i) for i in range(12)] and data.labels == ints
    text = [str(i) for i in ints]  # names: sorted as strings, as Keras sorts y_col's classes
    data = stoker.dataset(paths, text)
    assert data.class_names == sorted(set(text)) and data.class_names[:3] == ["0", "1", "10"]


def _write_csv(path, header, rows, delimiter=","):
    with open(path, "w") as f:
        f.write(delimiter.join(header) + "\n")
        for row in rows:
            f.write(delimiter.join(str(v) for v in row) + "\n")
        f.write("\n")  # a blank line at the end is skipped
    return str(path)


def test_csv_labels_are_read_as_the_numbers_they_spell(samples, tmp_path):
    paths, red = samples
    rel = [os.path.relpath(p, tmp_path) for p in paths]
    csv = _write_csv(tmp_path / "classes.csv", ["filename", "class"], [(p, i % 12) for i, p in enumerate(rel)])
    data = stoker.dataset(csv)
    # class 10 is class 10 (a string sort would make "10" the third class)
    assert data.labels == [i % 12 for i in range(24)]
    assert data.class_names == [str(i) for i in range(12)]
    assert data.paths == paths  # relative paths against the file's folder

    values = np.where(red, 2.5, -0.5) + np.arange(24) / 100
    csv = _write_csv(tmp_path / "values.tsv", ["path", "y", "note"],
                     [(p, repr(float(v)), f"n{i}") for i, (p, v) in enumerate(zip(rel, values))], delimiter="\t")
    data = stoker.dataset(csv, x_col="path", y_col="y", targets=["note"])
    assert data.labels.dtype == np.float64
    np.testing.assert_array_equal(data.labels, values)
    for batch in stoker.Loader(data, 16, batch_size=8, shuffle=True, seed=3):
        np.testing.assert_array_equal(batch.labels > 0, _red(batch.images))
        assert batch.targets["note"].tolist() == [f"n{i}" for i in batch.sample_ids]

    names = _write_csv(tmp_path / "names.csv", ["filename", "class"], [(p, "red" if r else "blue")
                                                                       for p, r in zip(rel, red)])
    assert stoker.dataset(names).class_names == ["blue", "red"]
    with pytest.raises(stoker.DatasetError, match="no column 'label' .*columns: filename, class"):
        stoker.dataset(names, y_col="label")


@needs_pandas
def test_a_csv_file_and_the_dataframe_read_from_it_give_the_same_labels(samples, tmp_path):
    import pandas as pd

    paths, red = samples
    for name, column in {"ints": [i % 12 for i in range(24)], "floats": np.where(red, 0.5, 1.5).tolist(),
                         "names": ["red" if r else "blue" for r in red]}.items():
        csv = _write_csv(tmp_path / f"{name}.csv", ["filename", "class"], list(zip(paths, column)))
        from_file, from_frame = stoker.dataset(csv), stoker.dataset(pd.read_csv(csv))
        assert from_file.class_names == from_frame.class_names, name
        np.testing.assert_array_equal(from_file.labels, from_frame.labels)


@needs_pandas
def test_dataframe_floats_are_not_truncated_and_columns_come_along(samples):
    import pandas as pd

    paths, red = samples
    df = pd.DataFrame({"filename": paths, "class": np.where(red, 0.9, 0.1), "age": np.arange(24),
                       "score": np.arange(24) * 0.5, "id": [f"s{i}" for i in range(24)]})
    loader = stoker.Loader(stoker.dataset(df, targets=["age", "id"]), 16, batch_size=6, shuffle=True, seed=0)
    for batch in loader:
        np.testing.assert_array_equal(batch.labels, np.where(_red(batch.images), 0.9, 0.1))
        np.testing.assert_array_equal(batch.targets["age"], batch.sample_ids)
        assert batch.targets["id"].tolist() == [f"s{i}" for i in batch.sample_ids]
    # a DataFrame of columns as targets, and y_col naming several columns (one row each)
    data = stoker.dataset(df, y_col=["class", "score"], targets=df[["age"]])
    assert data.labels.shape == (24, 2) and data.labels.dtype == np.float64
    np.testing.assert_array_equal(data.targets["age"], np.arange(24))


def test_a_split_keeps_values_with_their_samples(samples):
    paths, red = samples
    values = np.arange(len(paths), dtype=np.float64) + 0.5
    parts = {}
    for subset in ("training", "validation"):
        data = stoker.dataset(paths, values, validation_split=0.25, subset=subset, targets={"path": paths})
        assert data.targets["path"].tolist() == data.paths
        np.testing.assert_array_equal(data.labels, [paths.index(p) + 0.5 for p in data.paths])
        parts[subset] = data.paths
    assert len(parts["validation"]) == 6 and sorted(parts["training"] + parts["validation"]) == sorted(paths)
    # classes split per class, as before; the targets follow
    data = stoker.dataset(paths, red.astype(int), validation_split=0.25, subset="validation",
                          targets=np.arange(len(paths)))
    assert sorted(data.targets.tolist()) == sorted(paths.index(p) for p in data.paths)
    assert sum(paths.index(p) in np.flatnonzero(red) for p in data.paths) == 3


def test_bad_labels_and_targets_are_errors_that_name_them(samples, folder):
    paths, _ = samples
    with pytest.raises(stoker.InvalidArgument, match="labels: 3 values for 24 samples"):
        stoker.Loader(paths, 16, labels=[0.5, 1.5, 2.5])
    with pytest.raises(stoker.InvalidArgument, match=r"targets\['w'\]: 2 values for 24 samples"):
        stoker.Loader(paths, 16, targets={"w": [1, 2]})
    with pytest.raises(stoker.InvalidArgument, match="label_mode='categorical'.*float64"):
        stoker.Loader(paths, 16, labels=np.zeros(24), label_mode="categorical")
    with pytest.raises(stoker.InvalidArgument, match="labels: .* brings its own labels"):
        stoker.Loader(folder, 16, labels=np.zeros(24))
    with pytest.raises(stoker.InvalidArgument, match="targets: 23 values for 24 samples"):
        stoker.Loader(folder, 16, targets=np.zeros(23))
    with pytest.raises(stoker.InvalidArgument, match="column name .* needs a CSV file or DataFrame"):
        stoker.Loader(paths, 16, targets="age")
    with pytest.raises(stoker.InvalidArgument, match="class indices must be >= 0"):
        stoker.dataset(paths, [-3] * 24)
    with pytest.raises(stoker.InvalidArgument, match=r"labels: .*\['b'\] are not in class_names"):
        stoker.dataset(paths, [["a"], ["b"]] * 12, class_names=["a"])


def test_a_folders_samples_take_targets_in_the_order_of_its_paths(folder):
    files = stoker.dataset(folder).paths
    loader = stoker.Loader(folder, 16, batch_size=5, shuffle=True, seed=6, targets={"path": files})
    for batch in loader:
        assert batch.targets["path"].tolist() == batch.paths
        np.testing.assert_array_equal(batch.labels, [loader.class_names.index(p.split(os.sep)[-2])
                                                     for p in batch.paths])


def test_label_mode_none_drops_values_but_keeps_targets(samples):
    paths, _ = samples
    batch = next(iter(stoker.Loader(paths, 16, batch_size=4, labels=np.ones(24), targets=np.arange(24),
                                    label_mode=None)))
    assert batch.labels is None
    np.testing.assert_array_equal(batch.targets, batch.sample_ids)
