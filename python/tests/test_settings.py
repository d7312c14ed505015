"""The loader's settings are described once (stoker._stoker.loader_settings(), the C++ table the
command's flags come from): every adapter takes every setting with the table's default, except
the differences the table lists (and says why), and docs/loader-settings.md is generated from it."""

import importlib
import inspect
import os

import pytest

import stoker
from stoker import _settings, _stoker

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGE = os.path.join(ROOT, "docs", "loader-settings.md")

# Adapter -> (module, class, where its defaults come from)
ADAPTERS = {"python": ("stoker", "Loader"), "torch": ("stoker.torch", "DataLoader"), "jax": ("stoker.jax", "Loader")}


def test_the_table_describes_each_setting():
    settings = _stoker.loader_settings()
    names = [s["name"] for s in settings]
    assert len(names) == len(set(names))
    assert {"batch_size", "image_size", "interpolation", "label_mode", "rank", "world_size", "prefetch"} <= set(names)
    for s in settings:
        assert s["help"] and s["flag"] == "--" + s["name"].replace("_", "-")
        assert s["type"] in ("integer", "boolean", "choice", "text", "byte size", "image size")
        if s["type"] == "choice":
            assert s["default"] in s["choices"]
        for where, (value, why) in s["differences"].items():
            assert where in _settings.WHERE and value != s["default"] and why


@pytest.mark.parametrize("where", sorted(ADAPTERS))
def test_every_adapter_takes_every_setting_with_the_tables_default(where):
    module, name = ADAPTERS[where]
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as e:
        pytest.skip(f"{module}: {e}")
    params = inspect.signature(cls.__init__).parameters
    for s in _stoker.loader_settings():
        assert s["name"] in params, f"{module}.{name} lacks the setting {s['name']}"
        assert params[s["name"]].default == _settings.default(s["name"], where), (where, s["name"])
        if where in s["differences"]:  # a difference on purpose is said in the adapter's docstring
            assert repr(_settings.default(s["name"], where)) in inspect.getdoc(cls), (where, s["name"])


# The defaults an adapter changes on purpose (the table's `differences`, or _settings'
# ADAPTER_DIFFERENCES for those that are no value), each with its reason there; a difference not
# listed here fails, so a new one is a decision.
INTENTIONAL = {
    ("interpolation", "train"),  # Keras' image_dataset_from_directory resizes bilinearly
    ("interpolation", "torch"),  # torchvision's Resize is bilinear
    ("interpolation", "jax"),  # jax.image.resize / tf.image.resize have no nearest default
    ("prefetch", "command"), ("prefetch", "train"), ("prefetch", "cache build"),  # sized to the threads
    ("cache", "cache build"),  # it builds a cache file
    ("shuffle", "torch"),  # PyTorch's DataLoader does not shuffle unless asked
    ("seed", "torch"),  # None: drawn from torch's RNG (torch.manual_seed), 0 with several ranks
}


def test_one_default_everywhere_but_the_listed_differences():
    found = set()
    for s in _stoker.loader_settings():
        values = {where: _settings.default(s["name"], where) for where in _settings.WHERE}
        differing = {w for w, v in values.items() if v != _settings.value(s["name"], s["default"])}
        listed = set(s["differences"]) | set(_settings.ADAPTER_DIFFERENCES.get(s["name"], {}))
        listed |= {"train", "cache build"} if "command" in s["differences"] else set()
        assert differing <= listed, (s["name"], differing)
        found |= {(s["name"], w) for w in differing}
        for where, (_, why) in _settings.ADAPTER_DIFFERENCES.get(s["name"], {}).items():
            assert where in _settings.WHERE and why, (s["name"], where)
    assert found == INTENTIONAL
    assert _settings.default("interpolation", "torch") == "bilinear"
    assert _settings.default("interpolation") == "nearest"
    assert _settings.default("label_mode") == "sparse"
    assert _settings.default("shuffle", "torch") is False and _settings.default("shuffle") is True
    assert _settings.default("seed", "torch") is None and _settings.default("seed", "jax") == 0


def test_values_are_checked_by_the_table(folder):
    with pytest.raises(stoker.InvalidArgument, match="give rank and world_size together"):
        stoker.Loader(folder, 16, rank=1)
    with pytest.raises(stoker.InvalidArgument, match="interpolation must be one of"):
        stoker.Loader(folder, 16, interpolation="cubic")
    with pytest.raises(stoker.InvalidArgument, match="batch_size must be >= 1, received '0'"):
        stoker.Loader(folder, 16, batch_size=0)
    with pytest.raises(stoker.InvalidArgument, match="unknown loader setting 'batch_sise'"):
        _stoker.Loader(stoker.dataset(folder), {"batch_sise": 3})
    loader = stoker.Loader(folder, (16, 20), cache="encoded", cache_budget="1MiB", rank=0, world_size=1)
    assert next(iter(loader)).images.shape[1:] == (16, 20, 3)


def test_the_docs_page_is_current():
    if not os.path.exists(os.path.join(ROOT, "pipeline")):
        pytest.skip("not run from a checkout")
    with open(PAGE, encoding="utf-8") as f:
        committed = f.read()
    assert committed == _settings.markdown(), (
        "docs/loader-settings.md is stale: python scripts/loader_settings_doc.py rewrites it")
