"""Types: the package is marked typed (py.typed) and the extension has a stub (_stoker.pyi, made
by nanobind's stub generator) that names everything the extension binds."""

import ast
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys

import pytest

import stoker
from stoker import _stoker

HERE = os.path.dirname(stoker.__file__)


def _stub():
    path = os.path.join(HERE, "_stoker.pyi")
    assert os.path.isfile(path), "the stub is not installed beside the package"
    with open(path) as f:
        return path, ast.parse(f.read())


def test_the_package_is_typed_and_the_stub_is_installed():
    assert os.path.isfile(os.path.join(HERE, "py.typed"))
    _stub()


def test_the_stub_names_every_binding():
    _, tree = _stub()
    top = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            top[node.name] = node
        elif isinstance(node, ast.ImportFrom):  # the exceptions, re-exported from stoker
            top.update({a.asname or a.name: node for a in node.names})
        elif isinstance(node, ast.AnnAssign):
            top[node.target.id] = node
    public = [n for n in dir(_stoker) if not n.startswith("_")]
    missing = [n for n in public if n not in top]
    assert not missing, f"bound but not in _stoker.pyi (regenerate it: docs/python.md): {missing}"
    for name in public:
        cls = getattr(_stoker, name)
        if not inspect.isclass(cls) or issubclass(cls, BaseException):
            continue
        members = {n.name for n in top[name].body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        bound = {n for n in vars(cls) if not n.startswith("_")}
        assert bound <= members, f"{name}: not in the stub: {sorted(bound - members)}"


def test_every_augment_setting_says_what_it_does():
    undocumented = [n for n, v in vars(_stoker.AugmentSpec).items()
                    if not n.startswith("_") and not (getattr(v, "__doc__", None) or "").strip()]
    assert not undocumented, undocumented


def generate(out):
    """Writes the stub of the importable stoker._stoker to `out` with nanobind's stub generator;
    cuda_build's value is left out (it is the build's: 'none', 'cuda' or 'emulated')."""
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "stoker._stoker", "-o", str(out)],
                   check=True, timeout=120)
    with open(out) as f:
        text = re.sub(r"(?m)^cuda_build: str = .*$", "cuda_build: str", f.read())
    with open(out, "w") as f:
        f.write(text)


@pytest.mark.skipif(importlib.util.find_spec("nanobind") is None, reason="nanobind's stub generator is not installed")
def test_the_stub_is_what_the_generator_makes_of_this_build(tmp_path):
    path, _ = _stub()
    generate(tmp_path / "_stoker.pyi")
    with open(path) as f:
        assert (tmp_path / "_stoker.pyi").read_text() == f.read(), \
            "python/stoker/_stoker.pyi is stale: regenerate it (docs/python.md)"


if __name__ == "__main__":  # python python/tests/test_types.py: regenerates python/stoker/_stoker.pyi
    generate(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "stoker", "_stoker.pyi"))


@pytest.mark.parametrize("adapter", ["stoker.Loader", "stoker.torch.DataLoader", "stoker.jax.Loader"])
def test_every_argument_is_in_its_docstring(adapter):
    module, name = adapter.rsplit(".", 1)
    if module != "stoker":
        pytest.importorskip(module.split(".")[1])
    cls = getattr(importlib.import_module(module), name)
    doc = inspect.getdoc(cls)
    names = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "unknown")]
    assert [n for n in names if not re.search(rf"\b{n}\b", doc)] == []
