"""The README's Python snippets, run as written (from the repository root, whose data/ they use).

Each snippet follows a `<!-- readme-test: NAME -->` line; NAME is the framework it needs (skipped
with a message where that framework is not installed)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
README = os.path.join(ROOT, "README.md")
NEEDS = {"keras": "keras", "torch": "torch"}


def snippets():
    text = open(README, encoding="utf-8").read()
    return dict(re.findall(r"<!-- readme-test: (\w+) -->\n```python\n(.*?)```", text, re.S))


def test_the_readme_has_its_snippets():
    assert set(snippets()) == set(NEEDS)


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_readme_snippet_runs_as_written(name):
    pytest.importorskip(NEEDS[name], reason=f"the README's {name} snippet needs {NEEDS[name]}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", snippets()[name]], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
