"""What ``python build.py test`` installs (test packages, torchvision, chromium) before running the suite."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, List

from buildsite.paths import ROOT, log
from buildsite.pyodide import ensure_node_modules
from buildsite.site import build, needs_build



#: what the test suite needs from PyPI (torch 2.13.0 is the CPU build this machine provides)
TEST_REQUIREMENTS = ["numpy", "onnx", "onnxruntime", "scikit-learn", "pytest", "vermin", "playwright",
                     "Pillow", "torch==2.13.0", "onnxscript", "transformers", "peft",
                     "brotli"]  # the site's .br twins (buildsite/compress.py) and the server tests that decode them
#: torchvision's model definitions for tests/training/test_architectures.py, installed with --no-deps so that
#: pip keeps torch 2.13.0's CPU build (its C ops do not load beside it; tests/helpers/torch_zoo.py copes)
TORCHVISION = "torchvision==0.28.0"


def _missing_modules(modules: Iterable[str]) -> List[str]:
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is None]


def ensure_python_packages(requirements: Iterable[str], modules: Iterable[str]) -> None:
    """pip-install ``requirements`` unless every module in ``modules`` already imports."""
    if _missing_modules(modules):
        log("installing Python packages: %s" % " ".join(requirements))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q"] + list(requirements), check=True)


def ensure_chromium() -> None:
    """Debian's chromium for the browser tests (playwright cannot download its own here)."""
    if Path("/usr/bin/chromium").exists():
        return
    if shutil.which("apt-get") is None:
        log("no /usr/bin/chromium and no apt-get: the browser tests will be skipped")
        return
    log("installing Debian's chromium for the browser tests")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    subprocess.run(sudo + ["apt-get", "update", "-q"], check=True)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-q", "chromium"], check=True,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def run_tests(pytest_args: List[str]) -> int:
    """Install what the suite needs, build the site, run every test (browser tests included)."""
    ensure_python_packages(TEST_REQUIREMENTS, ["numpy", "onnx", "onnxruntime", "sklearn", "pytest",
                                               "vermin", "playwright", "PIL", "torch", "onnxscript",
                                               "transformers", "peft", "brotli"])
    if _missing_modules(["torchvision"]):
        log("installing %s (--no-deps)" % TORCHVISION)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", TORCHVISION], check=True)
    ensure_chromium()
    ensure_node_modules()
    if needs_build():
        build()
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + pytest_args,
                           cwd=str(ROOT))
