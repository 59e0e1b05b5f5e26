"""buildsite/strip.py: the site's Pyodide packages keep every module an import reaches from pytrain,
the page's start and numpy, drop the rest (tests, build inputs, unreached modules), and the build
refuses a drop list that would remove what pytrain or the start imports."""
from __future__ import annotations

import json
import shutil

import pytest

import build
from buildsite import strip
from buildsite.pyodide import unpack_package

DIST = build.PYODIDE_NPM
needs_pyodide = pytest.mark.skipif(not (DIST / "numpy.js").is_file(), reason="npm ci has not fetched Pyodide")
PY38 = next((c for c in build.PY38_CANDIDATES if c and shutil.which(c)), None)
LIB = "/lib/python3.8/"
SITE_PACKAGES = LIB + "site-packages/"


def _files():
    return {
        LIB + "a.py": b"import b\nfrom pkg import sub\ndef f():\n    import c\n",
        LIB + "b.py": b"",
        LIB + "c.py": b"x = 1\n",
        LIB + "unused.py": b"import b\n",
        SITE_PACKAGES + "pkg/__init__.py": b"from . import core\n",
        SITE_PACKAGES + "pkg/core.py": b"from .sub import thing\n",
        SITE_PACKAGES + "pkg/sub.py": b"thing = 1\n",
        SITE_PACKAGES + "pkg/_ext.so": b"\0asm",
        SITE_PACKAGES + "pkg/tests/__init__.py": b"",
        SITE_PACKAGES + "pkg/tests/test_core.py": b"import pkg._ext\n",
        SITE_PACKAGES + "pkg/tests/data/table.csv": b"1,2\n",
        SITE_PACKAGES + "pkg/include/pkg.h": b"#define X 1\n",
        SITE_PACKAGES + "pkg/LICENSE.txt": b"MIT\n",
        SITE_PACKAGES + "pkg-1.0.egg-info/PKG-INFO": b"Name: pkg\n",
    }


def test_keeps_what_an_import_reaches_and_drops_the_rest():
    plan = strip.Plan(_files(), ["a"], drop=())
    kept = sorted(p for p in _files() if plan.keeps(p))
    assert kept == sorted([LIB + "a.py", LIB + "b.py", LIB + "c.py", SITE_PACKAGES + "pkg/__init__.py",
                           SITE_PACKAGES + "pkg/core.py", SITE_PACKAGES + "pkg/sub.py",
                           SITE_PACKAGES + "pkg/LICENSE.txt", SITE_PACKAGES + "pkg-1.0.egg-info/PKG-INFO"])
    # the extension module only the tests import goes with them
    assert not plan.keeps(SITE_PACKAGES + "pkg/_ext.so")


def test_a_drop_may_cut_an_import_inside_a_function_only():
    plan = strip.Plan(_files(), ["a"], drop=("c",))
    assert plan.keeps(LIB + "a.py") and not plan.keeps(LIB + "c.py")


@pytest.mark.parametrize("drop, named", [(("a",), "a"), (("b",), "b"), (("pkg.sub",), "pkg.sub")])
def test_refuses_to_drop_a_root_or_a_top_level_import(drop, named):
    with pytest.raises(SystemExit, match=r"\b%s\b" % named.replace(".", r"\.")):
        strip.Plan(_files(), ["a"], drop=drop)


def test_the_site_drop_list_spares_every_root():
    roots = strip.pytrain_imports() | strip.startup_modules() | set(strip.KEEP)
    assert "json" in roots and "numpy" in roots and "zipfile" in roots
    assert not [r for r in roots if any(r == d or r.startswith(d + ".") for d in strip.DROP)]


@needs_pyodide
def test_rewritten_packages_hold_the_same_bytes_for_every_kept_file(tmp_path):
    for name in ("pyodide.asm", "numpy"):
        for ext in (".js", ".data"):
            shutil.copyfile(DIST / (name + ext), tmp_path / (name + ext))
    assert unpack_package(tmp_path / "numpy.js", tmp_path / "numpy.data")   # as build.py does first
    originals = {}
    for name in ("pyodide.asm", "numpy"):
        listed, data = strip.read_package((DIST / (name + ".js")).read_text(encoding="utf-8"),
                                          (DIST / (name + ".data")).read_bytes())
        originals.update({p: data[a:b] for p, a, b in listed})
    plan = strip.strip_pyodide(tmp_path, ["numpy"])
    shipped = {}
    for name in ("pyodide.asm", "numpy"):
        js = (tmp_path / (name + ".js")).read_text(encoding="utf-8")
        data = (tmp_path / (name + ".data")).read_bytes()
        assert '"remote_package_size":%d' % len(data) in js
        listed, plain = strip.read_package(js, data)
        shipped.update({p: plain[a:b] for p, a, b in listed})
    assert shipped == {p: b for p, b in originals.items() if plan.keeps(p)}
    # the stdlib's LZ4 loader now reads plain chunks: brotli sees the bytes themselves
    js = (tmp_path / "pyodide.asm.js").read_text(encoding="utf-8")
    assert strip._LZ4.search(js) and '"successes":[0,' in js and '"successes":[1' not in js
    modules = {strip.module_name(p) for p in shipped}
    for name in ("numpy", "numpy.core._multiarray_umath", "numpy.linalg.lapack_lite", "numpy.random.mtrand",
                 "numpy.fft", "numpy.ma", "json", "zipfile", "hashlib", "hmac", "base64", "struct", "csv",
                 "encodings.utf_8", "encodings.cp437", "pyodide", "_pyodide"):
        assert name in modules, name
    assert strip.startup_modules() <= modules
    assert not [p for p in shipped if "/tests/" in p or p.endswith((".h", ".a"))]
    assert "pydoc_data.topics" not in modules and "encodings.cp1006" not in modules


@needs_pyodide
@pytest.mark.skipif(PY38 is None, reason="no CPython 3.8 here")
def test_sourceless_bundle_replaces_the_sources_it_compiles(tmp_path):
    folder = tmp_path / "pyodide"
    folder.mkdir()
    (tmp_path / "wheels").mkdir()
    for name in ("pyodide.asm", "numpy"):
        for ext in (".js", ".data"):
            shutil.copyfile(DIST / (name + ext), folder / (name + ext))
    entry = build.build_startup_bytecode(tmp_path, folder, ["numpy"], sourceless=True)
    blob = (tmp_path / entry["file"]).read_bytes()
    index = json.loads(blob[12:12 + int.from_bytes(blob[8:12], "little")])
    # every .pyc sits where its source was (Python's sourceless loader finds it there)
    assert sorted(p[:-1] for p, _, _ in index) == entry["sources"] and len(index) > 100
    before = {}
    for name in ("pyodide.asm", "numpy"):
        listed, data = strip.read_package((folder / (name + ".js")).read_text(encoding="utf-8"),
                                          (folder / (name + ".data")).read_bytes())
        before.update({p: data[a:b] for p, a, b in listed})
    assert strip.drop_sources(folder, ["numpy"], entry["sources"]) == len(entry["sources"])
    after = {}
    for name in ("pyodide.asm", "numpy"):
        listed, data = strip.read_package((folder / (name + ".js")).read_text(encoding="utf-8"),
                                          (folder / (name + ".data")).read_bytes())
        after.update({p: data[a:b] for p, a, b in listed})
    assert after == {p: b for p, b in before.items() if p not in set(entry["sources"])}
    with pytest.raises(SystemExit, match="found to drop"):   # a source no package holds (any more)
        strip.drop_sources(folder, ["numpy"], entry["sources"][:1])
    # the stdlib's files left but FIRST's move to the second part, byte for byte
    stdlib = {p for p, _, _ in strip.read_package((folder / "pyodide.asm.js").read_text(encoding="utf-8"),
                                                  (folder / "pyodide.asm.data").read_bytes())[0]}
    modules = strip.split_rest(folder, tmp_path / "rest.bin")
    listed, data = strip.read_package((folder / "pyodide.asm.js").read_text(encoding="utf-8"),
                                      (folder / "pyodide.asm.data").read_bytes())
    first = {p: data[a:b] for p, a, b in listed}
    blob = (tmp_path / "rest.bin").read_bytes()
    n = int.from_bytes(blob[8:12], "little")
    moved = {p: blob[12 + n + o:12 + n + o + k] for p, o, k in json.loads(blob[12:12 + n])}
    assert blob[:8] == build.PYC_BUNDLE_MAGIC and first and moved and not set(first) & set(moved)
    assert all(p.startswith(strip.FIRST) for p in first) and not [p for p in moved if p.startswith(strip.FIRST)]
    assert dict(first, **moved) == {p: b for p, b in after.items() if p in stdlib}
    assert modules == sorted(m for m in map(strip.module_name, moved) if m)
    assert "email.parser" in modules and "lzma" not in modules and not [m for m in modules if m.startswith("encodings")]
