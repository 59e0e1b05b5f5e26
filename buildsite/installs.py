"""What ``python build.py test`` installs (test packages, torchvision, chromium) before running the suite."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from buildsite.paths import BUILD, ROOT, log
from buildsite.pyodide import ensure_node_modules
from buildsite.site import build, needs_build
from buildsite.streams import stream_options



#: what the test suite needs from PyPI (torch 2.13.0 is the CPU build this machine provides)
TEST_REQUIREMENTS = ["numpy", "onnx", "onnxruntime", "scikit-learn", "pytest", "vermin", "playwright",
                     "Pillow", "torch==2.13.0", "onnxscript", "transformers", "peft",
                     "brotli",  # the site's .br twins (buildsite/compress.py) and the server tests that decode them
                     "cryptography",  # SecAgg+'s and the native nodes' keys (tests/flower, the tab's WebCrypto test)
                     "ziglang",  # its clang has standard relaxed SIMD: the FMA kernels' fresh build (test_wasm_gemm)
                     "pytest-xdist"]  # PYTRAIN_TEST_STREAMS=2 or auto (buildsite/streams.py)
#: the module each of TEST_REQUIREMENTS installs, in the same order
TEST_MODULES = ["numpy", "onnx", "onnxruntime", "sklearn", "pytest", "vermin", "playwright", "PIL", "torch",
                "onnxscript", "transformers", "peft", "brotli", "cryptography", "ziglang", "xdist"]
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


def _apt_install(packages: Sequence[str], why: str) -> bool:
    """``apt-get install`` Debian's ``packages``; False (and a log line) where there is no apt-get."""
    if shutil.which("apt-get") is None:
        log("no apt-get to install %s: %s will be skipped" % (" ".join(packages), why))
        return False
    log("installing Debian's %s for %s" % (" ".join(packages), why))
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    subprocess.run(sudo + ["apt-get", "update", "-q"], check=True)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends"] + list(packages), check=True,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    return True


def ensure_chromium() -> None:
    """Debian's chromium for the browser tests (playwright cannot download its own here)."""
    if not Path("/usr/bin/chromium").exists():
        _apt_install(["chromium"], "the browser tests")


def ensure_clang() -> None:
    """Debian's clang and lld: tests/web/test_wasm_gemm.py builds web/kernels' wasm from its C as well as
    testing the committed one (llvm-objdump, which clang brings, checks it spills nothing to the C stack)."""
    if shutil.which("clang") is None or shutil.which("wasm-ld") is None:
        _apt_install(["clang", "lld"], "the kernels' fresh wasm build (tests/web/test_wasm_gemm.py)")


#: CPython 3.8 + numpy 1.17.5, the offline Pyodide's Python and numpy (tests/api/test_python38_numpy117.py
#: and the tests that run pytrain there); made from a python3.8 on the machine (pyenv's)
PY38_VENV = BUILD / "py38-numpy117"


def python38() -> Optional[str]:
    """A CPython 3.8 interpreter (pyenv's, or python3.8 on PATH), or None."""
    pyenv = Path(os.path.expanduser("~/.pyenv/versions"))
    candidates = sorted(pyenv.glob("3.8*/bin/python3.8")) if pyenv.is_dir() else []
    on_path = shutil.which("python3.8")
    if on_path and "shims" not in on_path:  # pyenv's shim refuses unless 3.8 is selected
        candidates.append(Path(on_path))
    return str(candidates[0]) if candidates else None


def ensure_py38_venv() -> Optional[Path]:
    """PY38_VENV's python (made once: a venv of python38() with numpy 1.17.5), or None without a Python 3.8."""
    exe = python38()
    if exe is None:
        return None
    py = PY38_VENV / "bin" / "python"
    if not py.exists():
        log("making %s (Python 3.8 + numpy 1.17.5)" % PY38_VENV)
        subprocess.run([exe, "-m", "venv", str(PY38_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "numpy==1.17.5"], check=True)
    return py


#: flwr's venv (tests/flower, the federation's browser tests, bench/flower_scale.py): flwr and Ray for its
#: Simulation Engine, beside this interpreter's packages
FLWR_VENV = BUILD / "venv-flwr"
FLWR_VERSION = "1.42.0"


def ensure_flwr_venv() -> Optional[Path]:
    """FLWR_VENV with flwr[simulation] FLWR_VERSION (made or completed on first use: a minute or two), or
    None on a Python older than flwr needs (3.11)."""
    py = FLWR_VENV / "bin" / "python"
    check = "import flwr, ray; assert flwr.__version__ == %r" % FLWR_VERSION
    if py.exists() and subprocess.run([str(py), "-c", check], capture_output=True, timeout=120).returncode == 0:
        return FLWR_VENV
    if sys.version_info < (3, 11):
        return None
    log("installing flwr[simulation]==%s in %s" % (FLWR_VERSION, FLWR_VENV))
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(FLWR_VENV)], check=True, timeout=300)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "flwr[simulation]==" + FLWR_VERSION], check=True,
                   timeout=1200)
    return FLWR_VENV


#: onnxruntime-web 1.19's public types (and its Tensor.fromImage, the browser tests' oracle) and the compiler
#: that checks web/pytrain-ort.d.ts against them (tests/web/test_ort_types.py)
ORT_TYPES_NPM = {"onnxruntime-common": "1.19.2", "typescript": "5.9.3"}

#: transformers.js itself, the oracle of the "Your text" download (tests/browser/test_transformers_js.py): it loads
#: the folder the tab writes and generates in headless Chromium (its onnxruntime-web and wasm files served locally)
TRANSFORMERS_JS_NPM = {"@huggingface/transformers": "4.3.1"}

#: where tests install the npm packages they need (gitignored, under build/): one folder per use
NPM_TEST_FOLDERS = BUILD / "npm"


def npm_install(folder: Path, no_save: Sequence[str] = ()) -> None:
    """``npm install`` the dependencies of ``folder``'s package.json from the registry (again only when
    package.json changes), then ``npm install --no-save`` the ``no_save`` specs (packages or folders) into it."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed: install Node.js/npm to install the packages of %s" % folder)
    manifest = (folder / "package.json").read_text(encoding="utf-8")
    done = folder / "node_modules" / ".pytrain-installed"
    if not (done.is_file() and done.read_text(encoding="utf-8") == manifest):
        log("npm install in %s" % folder)
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=str(folder), check=True)
        done.write_text(manifest, encoding="utf-8")
    if no_save:
        subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error"] + list(no_save),
                       cwd=str(folder), check=True)


def ensure_npm_folder(name: str, dependencies: Dict[str, str]) -> Path:
    """``build/npm/<name>/`` with exactly ``dependencies`` ({package: pinned version}) npm-installed from
    the registry; reinstalled when the pins change. Returns the folder (its node_modules inside)."""
    folder = NPM_TEST_FOLDERS / name
    manifest = json.dumps({"name": "pytrain-test-" + name, "private": True, "dependencies": dependencies},
                          indent=2, sort_keys=True) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    pkg = folder / "package.json"
    # one install at a time: two test streams (buildsite/streams.py) may want the same folder at once
    with open(str(folder.parent / (name + ".lock")), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # no install scripts: the tests use the packages' files, and some scripts download more (onnxruntime-node's
        # fetch binaries from nuget.org, which the registry-only network here refuses)
        (folder / ".npmrc").write_text("ignore-scripts=true\n", encoding="utf-8")
        if not pkg.is_file() or pkg.read_text(encoding="utf-8") != manifest:
            pkg.write_text(manifest, encoding="utf-8")
        npm_install(folder)
    return folder


def _ensure_test_venvs() -> None:
    """Made here rather than by the first test that needs them: no test's verdict depends on which ran first."""
    if ensure_py38_venv() is None:
        log("no Python 3.8 here (pyenv install 3.8): the tests on Python 3.8 + numpy 1.17.5 will be skipped")
    if ensure_flwr_venv() is None:
        log("flwr %s needs Python >= 3.11: the Flower tests will be skipped" % FLWR_VERSION)


def run_tests(pytest_args: List[str]) -> int:
    """Install what the suite needs (so that only tests needing what this machine cannot have skip), build
    the site, run every test (browser tests included); ``-rs`` prints every skip's reason."""
    ensure_python_packages(TEST_REQUIREMENTS, TEST_MODULES)
    if _missing_modules(["torchvision"]):
        log("installing %s (--no-deps)" % TORCHVISION)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", TORCHVISION], check=True)
    ensure_chromium()
    ensure_clang()
    ensure_node_modules()
    # the venvs (pip: downloads, unpacking) are made beside the site build (brotli on every core)
    with ThreadPoolExecutor(max_workers=1) as pool:
        venvs = pool.submit(_ensure_test_venvs)
        if needs_build():
            build()
        venvs.result()
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
                           + stream_options(pytest_args) + pytest_args, cwd=str(ROOT))
