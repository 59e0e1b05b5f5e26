"""Fixtures for every test under tests/. Tests live in folders by subject (ops, autodiff, api,
training, compat, cli, web, flower, browser); the shared harnesses in tests/helpers/. Every folder is
on sys.path, so a test imports a harness or another test's helpers by module name."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

#: one thread for OpenBLAS (numpy's matmul) and torch in pytest and the processes it starts
#: (``PYTRAIN_TEST_THREADS`` to change): the suite's tensors are small, and a pool of threads beside other work
#: (another stream, Chromium, other jobs) spins waiting for a core: test_architectures' ResNet-18 run took 22 CPU s
#: with two threads each at load 8 against 9 with one, a tiny Hugging Face model's 10 steps 2 s at load 13 against
#: 0.04 s. Set before numpy or torch start their pools.
_THREADS = os.environ.get("PYTRAIN_TEST_THREADS", "1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, _THREADS)

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
def _one_torch_thread():
    """torch's intra-op pool as ``_THREADS`` says, whichever test imported torch (a set-up that imported it
    before this file could not read OMP_NUM_THREADS)."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads") and torch.get_num_threads() != int(_THREADS):
        torch.set_num_threads(int(_THREADS))


@pytest.fixture(autouse=True)
def _reseed_grad_harness(request):
    """Each test draws the same data from grad_harness.RNG whatever ran before it (or was deselected)."""
    import grad_harness

    grad_harness.reseed(request.node.name)


#: under pytest-xdist (``PYTRAIN_TEST_STREAMS=2 python build.py test``), the longest test files first (the last CI's
#: durations, longest first), then the folders of the other long files, so that the last files handed out are short ones
#: and neither stream ends long after the other. xdist hands each stream two files at the start, then one more each time
#: one ends: the first four listed here go two to each stream (so the random walk's two seeds run at once).
_LONGEST_FILES = ("browser/test_page_random_walk_1.py", "browser/test_page_random_walk_2.py", "browser/test_webgpu.py",
                  "flower/test_flower.py", "browser/test_federation.py")
_LONG_FIRST = ("browser", "flower")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        def rank(item) -> int:
            if item.path.parent.parent == _HERE:
                name = "%s/%s" % (item.path.parent.name, item.path.name)
                if name in _LONGEST_FILES:
                    return _LONGEST_FILES.index(name)
                folder = item.path.parent.name
                if folder in _LONG_FIRST:
                    return len(_LONGEST_FILES) + _LONG_FIRST.index(folder)
            return len(_LONGEST_FILES) + len(_LONG_FIRST)
        items.sort(key=rank)
