"""Fixtures for every test under tests/. Tests live in folders by subject (ops, autodiff, api,
training, compat, cli, web, flower, browser); the shared harnesses in tests/helpers/. Every folder is
on sys.path, so a test imports a harness or another test's helpers by module name."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
for _folder in sorted(p for p in _HERE.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


def pytest_configure(config):
    if os.environ.get("PYTRAIN_TEST_IDLE"):  # where the suite waits (tests/helpers/idle_timing.py)
        import idle_timing

        config.pluginmanager.register(idle_timing, "idle_timing")


@pytest.fixture(scope="session")
def lm():
    """A tiny GPT-2 and its tokenizer.json, exported at ``tiny_lm.LENGTH`` tokens (tests/helpers/tiny_lm.py), made
    once for the text tests (they deep-copy its torch model before training it)."""
    for needed in ("torch", "transformers", "tokenizers"):
        pytest.importorskip(needed)
    from tiny_lm import LENGTH, tiny_gpt2

    return tiny_gpt2(length=LENGTH)


@pytest.fixture(autouse=True)
def _reseed_grad_harness(request):
    """Each test draws the same data from grad_harness.RNG whatever ran before it (or was deselected)."""
    import grad_harness

    grad_harness.reseed(request.node.name)


#: under pytest-xdist (``PYTRAIN_TEST_STREAMS=2 python build.py test``), the folders of the longest test files first,
#: so that the last files handed out are short ones and neither stream ends long after the other
_LONG_FIRST = ("browser", "flower")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        def rank(item) -> int:
            folder = item.path.parent.name if item.path.parent.parent == _HERE else ""
            return _LONG_FIRST.index(folder) if folder in _LONG_FIRST else len(_LONG_FIRST)
        items.sort(key=rank)
