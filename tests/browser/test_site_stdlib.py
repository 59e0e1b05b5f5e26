"""The site ships only the Pyodide modules an import reaches (buildsite/strip.py), and the start-up
modules as bytecode alone: in the tab, every pytrain module still imports (an ImportError may only
name a package Pyodide never had: pytrain imports onnx, torch, flwr... lazily), and numpy's
subpackages, the stdlib the page's flows use and the kept codecs work, the stdlib's second part
(fetched after the first step) included."""
from __future__ import annotations

import pytest

import codecs
import hashlib
import hmac
import json
import unicodedata

import build
from browser_helpers import app_worker, open_ready
from buildsite import strip

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

CHECK = r"""
import importlib, json, pkgutil, codecs
import pytrain
failed = {}
for info in pkgutil.walk_packages(pytrain.__path__, "pytrain."):
    try:
        importlib.import_module(info.name)
    except ImportError as e:
        failed[info.name] = e.name or str(e)
import numpy as np, numpy.random, numpy.fft, numpy.linalg, numpy.ma, numpy.polynomial
import json as _j, re, unicodedata, hashlib, hmac, base64, struct, http.client, zipfile, csv, secrets
checks = [float(np.linalg.norm(np.eye(3))), float(np.ma.masked_array([1.0, 5.0, 3.0], [0, 1, 0]).mean()),
          int(np.random.RandomState(0).randint(10)), hmac.new(b"k", b"m", hashlib.sha256).hexdigest()[:8],
          "\u00e9\u20ac".encode("cp1252").hex(), "b\u00fccher.de".encode("idna").decode(),
          codecs.lookup("utf-8-sig").name, unicodedata.category("\u00e9")]
json.dumps({"failed": failed, "checks": checks, "early": _pt_rest_guard.early})
"""


def _shipped_by_pyodide():
    """Every module Pyodide 0.17.1's own stdlib and numpy packages define (before the build strips them)."""
    names = set()
    for name in ("pyodide.asm", "numpy"):
        js = (build.PYODIDE_NPM / (name + ".js")).read_text(encoding="utf-8")
        names.update(strip.module_name(m.group(1)) for m in strip._FILES.finditer(js))
    return names - {None}


def test_every_pytrain_module_and_the_kept_stdlib_import_in_the_tab(context, site_url):
    page, rec = open_ready(context, site_url)
    worker = app_worker(page)
    out = json.loads(worker.evaluate("(code) => runtime.pyodide.runPython(code)", CHECK))
    # the oracle: the same calls in this CPython
    # (numpy.fft imports, but its pocketfft extension fails on this Chromium with Pyodide 0.17.1:
    # "Cannot convert ... to a BigInt", with or without the strip; pytrain never calls it)
    host = [3 ** 0.5, 2.0, 5, hmac.new(b"k", b"m", hashlib.sha256).hexdigest()[:8], "\u00e9\u20ac".encode("cp1252").hex(),
            "b\u00fccher.de".encode("idna").decode(), codecs.lookup("utf-8-sig").name, unicodedata.category("\u00e9")]
    assert abs(out["checks"][0] - host[0]) < 1e-12 and out["checks"][1:] == host[1:], out["checks"]
    # no pytrain module fails for want of a module Pyodide itself shipped (the strip dropped it)
    ours = _shipped_by_pyodide()
    lost = {mod: name for mod, name in out["failed"].items() if name in ours}
    assert lost == {}, lost
    # no training step ran, so the stdlib's second part came when an import first needed it (the
    # worker's guard fetched and wrote it then: worker/data.js fetchStdlibRestNow)
    rest = json.loads((build.SITE / "config.json").read_text())["bytecode"]["rest"]["modules"]
    assert out["early"] and set(out["early"]) <= set(rest), out["early"]
    assert rec.console_errors == []
