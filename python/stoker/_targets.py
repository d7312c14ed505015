"""Per-sample labels that are not one class index, and extra per-sample columns.

The C++ loader knows one integer class per sample. Everything else a sample carries (float
regression values, multi-hot rows, several columns of a table) stays here, in NumPy arrays in
dataset order, and each batch takes its rows by the batch's `sample_ids`: the samples the loader
actually put in that batch, in that order (shuffled, sharded, padded or with bad samples
skipped alike).

How labels are read (stoker.dataset(), stoker.Loader(labels=...), the adapters):
  - integers: class indices, used as given (class names '0'..'max' unless class_names);
  - strings: class names, indexed in sorted order (Keras' flow_from_dataframe) or class_names';
  - lists/tuples/sets of class names or indices per sample: multi-label, a multi-hot float32
    row per sample (Keras' flow_from_dataframe with list-valued y_col);
  - floats (1-D), or any 2-D array: values passed through unchanged, dtype included (a float
    column is never truncated to int).
A CSV file is read as pandas' read_csv reads it: a column whose cells are all integers holds
integers, one with any other number (or an empty cell) floats, else strings; so numeric labels
in a CSV file are the numbers they spell (class 10 is class 10, not the second in a string
sort), as in a DataFrame read from that file."""

from __future__ import annotations

import csv
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _stoker

Columns = Union[np.ndarray, Dict[str, np.ndarray]]


def _is_table(value: Any) -> bool:
    return hasattr(value, "columns") and hasattr(value, "__getitem__")  # a pandas DataFrame


class Labelled:
    """A dataset whose samples carry more than one class index: `dataset` (the samples and class
    names the C++ loader sees), `labels` (per-sample values in dataset order, or None when the
    labels are the dataset's classes) and `targets` (extra per-sample columns: an array or a dict
    of arrays, or None). stoker.dataset() returns one when labels or targets need it; stoker.Loader
    and the adapters take it as a source."""

    def __init__(self, dataset: _stoker.Dataset, labels: Optional[np.ndarray], targets: Optional[Columns]):
        self.dataset = dataset
        self.labels = labels
        self.targets = targets

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def paths(self) -> List[str]:
        return self.dataset.paths

    @property
    def class_names(self) -> List[str]:
        return list(self.dataset.class_names)

    def __repr__(self) -> str:
        what = []
        if self.labels is not None:
            what.append(f"labels {self.labels.dtype} {tuple(self.labels.shape[1:])}")
        if isinstance(self.targets, dict):
            what.append(f"targets {sorted(self.targets)}")
        elif self.targets is not None:
            what.append(f"targets {self.targets.dtype} {tuple(self.targets.shape[1:])}")
        return f"<stoker dataset: {len(self)} samples, {', '.join(what) or 'classes'}>"


def gather(columns: Optional[Columns], ids: np.ndarray) -> Optional[Columns]:
    """The rows `ids` of an array or of each array of a dict (new arrays: they hold no buffer)."""
    if columns is None:
        return None
    if isinstance(columns, dict):
        return {name: column[ids] for name, column in columns.items()}
    return columns[ids]


class LabelledBatch:
    """A host or device batch with its labels and targets gathered by sample id. Every other
    attribute (images, sample_ids, padding, paths, epoch, index, ...) is the loader's batch's."""

    __slots__ = ("_batch", "labels", "targets", "labels_are_classes")

    def __init__(self, batch: Any, labelled: Labelled):
        self._batch = batch
        ids = np.asarray(batch.sample_ids, dtype=np.int64)
        if labelled.labels is not None:
            self.labels = gather(labelled.labels, ids)
        else:
            self.labels = batch.labels
        self.targets = gather(labelled.targets, ids)
        # False when `labels` are values given as they are (not the loader's class indices).
        self.labels_are_classes = labelled.labels is None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __len__(self) -> int:
        return len(self._batch)

    def __repr__(self) -> str:
        return repr(self._batch)


# ---- reading labels


_INT = re.compile(r"^\s*[-+]?\d+\s*$")


def _cell(text: str) -> Any:
    """A CSV cell as read_csv reads it: int, float (empty: NaN) or the text."""
    if _INT.match(text):
        return int(text)
    if text.strip() == "":
        return float("nan")
    try:
        return float(text)
    except ValueError:
        return text


def csv_column(values: Sequence[str]) -> np.ndarray:
    """A CSV column's cells as one typed array: int64 when every cell is an integer, float64 when
    every cell is a number (an empty cell is NaN), else the strings."""
    cells = [_cell(v) for v in values]
    if any(isinstance(c, str) for c in cells):
        return np.array(list(values), dtype=object)
    if all(isinstance(c, int) for c in cells):
        return np.array(cells, dtype=np.int64)
    return np.array(cells, dtype=np.float64)


def read_csv(path: str, x_col: str, columns: Sequence[str], directory: Optional[str]) -> Tuple[List[str], dict]:
    """(paths, {column: array}) of a .csv/.tsv file with a header row: the paths from `x_col`
    (relative ones against `directory`, else the file's folder), each of `columns` as csv_column()
    types it. Blank lines are skipped; a missing column or a short row is a DatasetError."""
    delimiter = "\t" if path.lower().endswith(".tsv") else ","
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f, delimiter=delimiter))
    except OSError as e:
        raise _stoker.DatasetError(f"{path}: cannot open CSV file ({e.strerror})") from None
    if not rows or not rows[0]:
        raise _stoker.DatasetError(f"{path}: empty CSV file (no header row)")
    header = rows[0]

    def index(name: str) -> int:
        if name not in header:
            raise _stoker.DatasetError(f"{path}: no column {name!r} (columns: {', '.join(header)})")
        return header.index(name)

    wanted = [index(x_col)] + [index(c) for c in columns]
    body = []
    for line, row in enumerate(rows[1:], start=2):
        if not row or row == [""]:
            continue
        if len(row) <= max(wanted):
            raise _stoker.DatasetError(f"{path}:{line}: {len(row)} fields, expected at least {max(wanted) + 1}")
        if row[wanted[0]] == "":
            raise _stoker.DatasetError(f"{path}:{line}: empty {x_col!r}")
        body.append(row)
    if not body:
        raise _stoker.DatasetError(f"{path}: no rows after the header")
    base = os.fspath(directory) if directory else os.path.dirname(path)
    paths = [os.path.join(base, r[wanted[0]]) for r in body]
    return paths, {c: csv_column([r[i] for r in body]) for c, i in zip(columns, wanted[1:])}


def _as_array(value: Any, name: str) -> np.ndarray:
    if _is_table(value):
        return value.to_numpy()
    if hasattr(value, "to_numpy"):  # a pandas Series
        return value.to_numpy()
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except ValueError as e:
        raise _stoker.InvalidArgument(f"{name}: not an array of one value (or row) per sample: {e}") from None


def _multi_hot(labels: list, class_names: Optional[Sequence[str]]) -> Tuple[np.ndarray, List[str]]:
    """Rows of class names or indices -> (float32 (N, K) multi-hot, class names)."""
    items = {v for row in labels for v in row}
    if all(isinstance(v, str) for v in items):
        names = list(class_names) if class_names is not None else sorted(items)
        index = {n: i for i, n in enumerate(names)}
        missing = sorted(items - set(index))
        if missing:
            raise _stoker.InvalidArgument(f"labels: {missing[:5]} are not in class_names")
    elif all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
        top = max(items, default=-1)
        if any(v < 0 for v in items):
            raise _stoker.InvalidArgument(f"labels: multi-label class indices must be >= 0, received {min(items)}")
        names = list(class_names) if class_names is not None else [str(i) for i in range(top + 1)]
        if top >= len(names):
            raise _stoker.InvalidArgument(f"labels: class index {top} but {len(names)} class names")
        index = {i: i for i in range(len(names))}
    else:
        raise _stoker.InvalidArgument("labels: each sample's list must hold class names (str) or class indices "
                                      f"(int), received {sorted(map(repr, items))[:5]}")
    out = np.zeros((len(labels), len(names)), dtype=np.float32)
    for row, values in enumerate(labels):
        for v in values:
            out[row, index[v]] = 1.0
    return out, names


def read_labels(labels: Any, count: int, class_names: Optional[Sequence[str]]
                ) -> Tuple[Optional[List[int]], List[str], Optional[np.ndarray]]:
    """(class indices or None, class names, values or None) of `count` samples' labels, read as the
    module docstring says. Class indices go to the C++ dataset; values are kept as given."""
    if labels is None:
        return None, list(class_names or []), None
    if not _is_table(labels) and not hasattr(labels, "to_numpy") and not isinstance(labels, np.ndarray):
        labels = list(labels)
        if labels and all(isinstance(v, (list, tuple, set, frozenset)) for v in labels):
            _check_count(len(labels), count, "labels")
            values, names = _multi_hot(labels, class_names)
            return None, names, values
    array = _as_array(labels, "labels")
    if array.ndim == 0:
        raise _stoker.InvalidArgument(f"labels: one value per sample, received a scalar {labels!r}")
    _check_count(len(array), count, "labels")
    if array.ndim == 1 and array.dtype == object and all(isinstance(v, (list, tuple, set, frozenset)) for v in array):
        values, names = _multi_hot(list(array), class_names)
        return None, names, values
    if array.ndim == 1 and (array.dtype.kind in "US" or (array.dtype.kind == "O" and all(isinstance(v, str) for v in array))):
        text = [str(v) for v in array]
        names = list(class_names) if class_names is not None else sorted(set(text))
        index = {name: i for i, name in enumerate(names)}
        missing = sorted(set(text) - set(index))
        if missing:
            raise _stoker.DatasetError(f"labels {missing[:5]} are not in class_names")
        return [index[v] for v in text], names, None
    if array.ndim == 1 and array.dtype.kind in "iub":
        ints = array.astype(np.int64)
        if len(ints) and ints.min() < -1:
            raise _stoker.InvalidArgument(f"labels: class indices must be >= 0 (-1: unlabelled), received {ints.min()}")
        top = int(ints.max(initial=-1))
        names = list(class_names) if class_names is not None else [str(i) for i in range(top + 1)]
        return ints.tolist(), names, None
    if array.dtype.kind in "fciub":
        return None, list(class_names or []), array
    raise _stoker.InvalidArgument(
        f"labels: class indices (int), class names (str), lists of them per sample (multi-label) or "
        f"numbers (float, or one row per sample), received an array of {array.dtype} with shape {array.shape}")


def read_targets(targets: Any, count: int, table: Any = None) -> Optional[Columns]:
    """Extra per-sample columns: a dict {name: column}, a DataFrame (a dict of its columns), a
    Series or array (one array), or, for a table source (`table`: {column: array} of a CSV file
    or a DataFrame), a column name or a list of names. Each column has one value (or row) per
    sample and keeps its dtype."""
    if targets is None:
        return None
    names = [targets] if isinstance(targets, str) else targets
    if table is not None and isinstance(names, (list, tuple)) and names and all(isinstance(n, str) for n in names):
        missing = [n for n in names if n not in table]
        if missing:
            raise _stoker.InvalidArgument(f"targets: no column {missing[0]!r} in the source (columns: "
                                          f"{', '.join(map(str, table))})")
        return {n: table[n] for n in names}
    if isinstance(targets, str):
        raise _stoker.InvalidArgument(f"targets: a column name ({targets!r}) needs a CSV file or DataFrame as "
                                      "the source; give the values otherwise")
    if _is_table(targets):
        targets = {str(c): targets[c] for c in targets.columns}
    if isinstance(targets, dict):
        out = {}
        for name, column in targets.items():
            out[str(name)] = _column(column, count, f"targets[{name!r}]")
        return out
    return _column(targets, count, "targets")


def _column(values: Any, count: int, name: str) -> np.ndarray:
    array = _as_array(values, name)
    if array.ndim == 0:
        raise _stoker.InvalidArgument(f"{name}: one value per sample, received a scalar {values!r}")
    _check_count(len(array), count, name)
    return array


def _check_count(got: int, count: int, name: str) -> None:
    if got != count:
        raise _stoker.InvalidArgument(f"{name}: {got} values for {count} samples")


def split_rows(classes: Optional[List[int]], class_names: List[str], count: int, split: dict) -> np.ndarray:
    """The rows (dataset order) that a validation_split/subset keeps: the C++ split itself, run on
    the row numbers as paths, so that values and targets follow the samples exactly."""
    if split["subset"] == "all":
        return np.arange(count)
    rows = _stoker.dataset_from_list([str(i) for i in range(count)], classes or [], class_names, **split)
    return np.array([int(p) for p in rows.paths], dtype=np.int64)


def labelled(paths: List[str], labels: Any, class_names: Optional[Sequence[str]], split: dict,
             targets: Any = None, table: Any = None) -> Union[_stoker.Dataset, Labelled]:
    """The dataset of `paths` with `labels` and `targets` read as this module says: a plain
    stoker Dataset when the labels are classes and there are no targets, else a Labelled."""
    classes, names, values = read_labels(labels, len(paths), class_names)
    extra = read_targets(targets, len(paths), table)
    if values is None and extra is None:
        return _stoker.dataset_from_list(paths, classes or [], names, **split)
    rows = split_rows(classes, names, len(paths), split)
    data = _stoker.dataset_from_list(paths, classes or [], names, **split)
    return Labelled(data, None if values is None else values[rows], gather(extra, rows))


def table_labels(table: dict, y_col: Any) -> Optional[np.ndarray]:
    """The labels of a table's column `y_col`, or of a list of columns (one row per sample)."""
    if y_col is None or (not isinstance(y_col, str) and not list(y_col)):
        return None
    if isinstance(y_col, str):
        return table[y_col]
    return np.stack([table[c] for c in y_col], axis=1)


def check_label_mode(data: Optional[Labelled], dataset: _stoker.Dataset, label_mode: Optional[str]
                     ) -> Tuple[Optional[Labelled], Optional[str]]:
    """(what the batches gather, the C++ loader's label_mode) for `data` and the label_mode given.
    With labels given as values the C++ loader makes none ('none'); label_mode None (or 'none')
    leaves the batches without labels, 'sparse' (the default) passes the values through, and
    'categorical' is taken for multi-hot rows (they are that form already). Samples without any
    label (a list of paths alone) give batches without labels under the default 'sparse'."""
    if data is None or data.labels is None:
        if label_mode == "sparse" and not dataset.class_names:
            return data, "none"  # nothing to index: every sample is unlabelled
        return data, label_mode
    if label_mode in (None, "none"):
        return (None if data.targets is None else Labelled(data.dataset, None, data.targets)), "none"
    multi_hot = data.labels.dtype == np.float32 and data.labels.ndim == 2
    if label_mode == "sparse" or (label_mode == "categorical" and multi_hot):
        return data, "none"
    raise _stoker.InvalidArgument(
        f"label_mode={label_mode!r} makes labels from class indices, but labels= here are values given as "
        f"they are ({data.labels.dtype}, shape {data.labels.shape[1:]}): leave label_mode at 'sparse' "
        "(they are passed through unchanged) or set it to None")
