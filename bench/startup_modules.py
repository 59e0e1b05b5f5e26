"""Regenerate pyodide-startup-modules.txt: the Python files Pyodide 0.17.1 imports on the web
app's way to its first training step, which build.py precompiles for Python 3.8.

    python build.py && python bench/startup_modules.py

Runs bench/pages/startup_modules.html (the app's start, in Pyodide, in headless Chromium) and
writes every imported .py file under /lib/python3.8 except pytrain's own (those ship in
pytrain's zip), in two groups: Pyodide's own start, then the rest.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from browser import BrowserSession  # noqa: E402

TARGET = HERE.parent / "pyodide-startup-modules.txt"
HEADER = """\
# Python files Pyodide 0.17.1 imports on the web app's way to its first training step: Pyodide's
# own start (its `pyodide` package and the stdlib it needs) and then numpy and the stdlib numpy and
# pytrain import. build.py compiles them for Python 3.8 from Pyodide's own sources
# (wheels/pyodide-startup-py38.bin) and the worker writes them to __pycache__ before Python starts,
# so the page does not compile them on every visit. A missing line only costs time (that module
# compiles from source), an extra one only bytes. Regenerate: python bench/startup_modules.py
"""


def main() -> None:
    with BrowserSession() as s:
        res = s.run_page("/bench/pages/startup_modules.html", timeout_s=300)
    keep = lambda f: f.endswith(".py") and f.startswith("/lib/python3.8/")  # noqa: E731
    boot = sorted(f for f in set(res["boot"]) if keep(f))
    rest = sorted(f for f in set(res["all"]) - set(res["boot"]) if keep(f))
    TARGET.write_text(HEADER + "# Pyodide's start\n" + "\n".join(boot) + "\n# numpy, pytrain's imports\n"
                      + "\n".join(rest) + "\n")
    print(f"wrote {TARGET.name}: {len(boot)} files of Pyodide's start, {len(rest)} after it")


if __name__ == "__main__":
    main()
