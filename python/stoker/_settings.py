"""The loader's settings as stoker's one table describes them (C++:
pipeline/include/stoker/pipeline/loader_settings.hpp, read through stoker._stoker.loader_settings()).

stoker.Loader, stoker.torch.DataLoader and stoker.jax.Loader take their keyword arguments'
defaults from here, the command's flags come from the same table, and markdown() writes
docs/loader-settings.md (scripts/loader_settings_doc.py)."""

from __future__ import annotations

from typing import Any

from . import _stoker

# name -> dict(name, type, default, help, choices, min, max, flag, differences)
SETTINGS = {s["name"]: s for s in _stoker.loader_settings()}

# Where the defaults are taken (the table's `differences` name them), and what each one is.
WHERE = {
    "command": "`stoker load`, `bench`, `cache build` (the command's flags)",
    "train": "`stoker train`",
    "cache build": "`stoker cache build`",
    "python": "`stoker.Loader`",
    "torch": "`stoker.torch.DataLoader`",
    "jax": "`stoker.jax.Loader`",
}


# Defaults that differ on purpose in one adapter and that the C++ table cannot say, because they
# are no value (the table's defaults are values the command could take): {name: {where: (Python
# value, why)}}. default() and markdown() read them with the table's own differences.
ADAPTER_DIFFERENCES = {
    "seed": {
        "torch": (None, "drawn from torch's RNG when the loader is made (generator= if given), so "
                        "torch.manual_seed makes runs repeatable and different seeds differ, as PyTorch's "
                        "DataLoader; 0 (DistributedSampler's) when the job has several ranks, which must "
                        "agree on the order"),
    },
}


def value(name: str, text: Any) -> Any:
    """A setting's text (the table's spelling) as the Python value the adapters take."""
    if text is None:
        return None
    kind = SETTINGS[name]["type"]
    if kind == "integer":
        return int(text)
    if kind == "boolean":
        return text == "true"
    if kind == "image size":
        return int(text) if "," not in text else tuple(int(v) for v in text.split(","))
    return text


def default(name: str, where: str = "python") -> Any:
    """The default of a setting for `where` ('python', 'torch', 'jax', 'command', 'train',
    'cache build'): its listed difference there, else the table's default (a subcommand: the
    command's)."""
    s = SETTINGS[name]
    if where in ADAPTER_DIFFERENCES.get(name, {}):
        return ADAPTER_DIFFERENCES[name][where][0]
    diff = s["differences"].get(where)
    if diff is None and where in ("train", "cache build"):
        diff = s["differences"].get("command")
    return value(name, diff[0] if diff is not None else s["default"])


def _shown(name: str, text: Any) -> str:
    if text is None:
        return "unset"
    return f"`{value(name, text)!r}`" if SETTINGS[name]["type"] != "boolean" else f"`{text == 'true'}`"


def markdown() -> str:
    """docs/loader-settings.md: every setting, its type, default, valid values and help, and the
    defaults that differ on purpose."""
    lines = [
        "# Loader settings",
        "",
        "<!-- Generated from the settings' table (pipeline/include/stoker/pipeline/loader_settings.hpp) by",
        "     scripts/loader_settings_doc.py; python/tests/test_settings.py fails when this page is stale. -->",
        "",
        "One table describes the loader's settings: the command's flags (`stoker load`, `bench`, `cache build`,",
        "`train`), the keyword arguments of `stoker.Loader`, `stoker.torch.DataLoader` and `stoker.jax.Loader`",
        "and this page come from it, and every value goes through one conversion",
        "(`stoker::loader_options_from`), so the command and Python check values alike. A flag is the name",
        "with dashes (`batch_size` is `--batch-size`); a boolean that is true by default also has `--no-NAME`.",
        "In Python an unset setting is `None`; `label_mode=None` is `'none'` in the framework adapters.",
        "",
        "| setting | flag | type | default | values | what it does |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in SETTINGS.items():
        if s["choices"]:
            values = " ".join(f"`{c}`" for c in s["choices"])
        elif s["min"] is not None:
            values = f"≥ {s['min']}" if s["max"] is None else f"{s['min']}..{s['max']}"
        else:
            values = ""
        default_text = _shown(name, s["default"])
        if s["differences"] or name in ADAPTER_DIFFERENCES:
            default_text += " *"
        lines.append(f"| `{name}` | `{s['flag']}` | {s['type']} | {default_text} | {values} | {s['help']} |")
    lines += [
        "",
        "## Defaults that differ on purpose",
        "",
        "\\* Everywhere else a setting takes the default above.",
        "",
        "| setting | where | default | why |",
        "| --- | --- | --- | --- |",
    ]
    for name, s in SETTINGS.items():
        for where, (text, why) in s["differences"].items():
            lines.append(f"| `{name}` | {WHERE.get(where, where)} | {_shown(name, text)} | {why} |")
        for where, (python_value, why) in ADAPTER_DIFFERENCES.get(name, {}).items():
            lines.append(f"| `{name}` | {WHERE.get(where, where)} | `{python_value!r}` | {why} |")
    lines += [
        "",
        "## Not in the table",
        "",
        "- The data: `--data`, `--data-csv`, `--x-col`, `--y-col`, `--directory`, `--extensions`,",
        "  `--label-field`, `--shard-index` on the command; `source` (a folder, a CSV file, a DataFrame,",
        "  tar shards or a list of paths) in Python, with `stoker.dataset()`'s arguments; `labels` and",
        "  `targets` (values and extra per-sample columns, docs/python.md) in all three; `sample_weights`,",
        "  `num_samples` and `replacement` (a weighted draw per epoch, PyTorch's WeightedRandomSampler) in",
        "  `stoker.Loader` and `stoker.torch.DataLoader`.",
        "- What an adapter hands over: `augment`, `device`, `copy`, `dtype`, `depth` (all three), `output`,",
        "  `normalize` (torch, jax), `layout` (jax), `with_padding` (torch), `pin_memory` (`stoker.Loader`, torch).",
        "- PyTorch's own names in `stoker.torch.DataLoader`: `num_workers` (threads), `prefetch_factor`",
        "  (prefetch per thread), `generator` (seed) and the arguments threads make moot (docs/python.md).",
        "- `cache` in Python also takes `dict(kind=, budget=, file=)`, which sets the three cache settings.",
        "- `--shard-remainder pad|drop` is the command's older spelling of `--drop-remainder`.",
        "- `stoker.keras.ImageDataGenerator` keeps tf_keras' own arguments and defaults (Keras' API).",
        "",
        "## Adding a setting",
        "",
        "Its row in the table (`pipeline/src/loader_settings.cpp`), its conversion in `loader_options_from`",
        "(`EverySettingReachesLoaderOptions` fails without it), its field in `LoaderFlags::members()`",
        "(`apps/loader_flags.hpp`: the flag then follows; the apps tests fail without it), the keyword in",
        "`stoker.Loader`, `stoker.torch.DataLoader` and `stoker.jax.Loader` with `_default(NAME)`",
        "(`python/tests/test_settings.py` fails without it), then `python scripts/loader_settings_doc.py`.",
        "",
    ]
    return "\n".join(lines)
