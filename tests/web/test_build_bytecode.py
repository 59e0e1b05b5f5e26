"""build.py's precompiled bytecode for the web app: Pyodide's packages read back (LZ4 chunks
decoded) and the bundle of Python 3.8 .pyc files the worker writes before CPython starts."""
from __future__ import annotations

import json
import shutil
import subprocess
import zipfile

import pytest

import build

DIST = build.PYODIDE_NPM
PY38 = next((c for c in build.PY38_CANDIDATES if c and shutil.which(c)), None)
needs_pyodide = pytest.mark.skipif(not (DIST / "numpy.js").is_file(), reason="npm ci has not fetched Pyodide")
needs_py38 = pytest.mark.skipif(PY38 is None, reason="no CPython 3.8 here")


@needs_pyodide
@pytest.mark.parametrize("package", ["numpy", "pyodide.asm"])
def test_package_sources_decode_to_valid_python(package):
    files = build.pyodide_package_files(DIST / (package + ".js"), DIST / (package + ".data"))
    assert len(files) > 50
    for path, src in files.items():
        assert path.startswith("/lib/python3.8/") and path.endswith(".py")
        # a wrong LZ4 decode garbles text: every file must still compile (Pyodide's are all Python 3)
        compile(src, path, "exec", dont_inherit=True)


@needs_pyodide
@needs_py38
def test_bytecode_bundle_holds_unchecked_py38_pyc_of_the_listed_sources(tmp_path):
    (tmp_path / "wheels").mkdir()
    entry = build.build_startup_bytecode(tmp_path, DIST, ["numpy"])
    assert entry is not None
    blob = (tmp_path / entry["file"]).read_bytes()
    assert blob[:8] == build.PYC_BUNDLE_MAGIC and entry["size"] == len(blob)
    n = int.from_bytes(blob[8:12], "little")
    index = json.loads(blob[12:12 + n])
    body = blob[12 + n:]
    listed = [ln for ln in build.STARTUP_MODULES.read_text().splitlines() if ln.startswith("/")]
    assert len(index) >= 0.9 * len(listed)
    sources = build.pyodide_package_files(DIST / "numpy.js", DIST / "numpy.data")
    sources.update(build.pyodide_package_files(DIST / "pyodide.asm.js", DIST / "pyodide.asm.data"))
    # CPython 3.8 itself checks what the worker relies on: its magic number, the unchecked-hash
    # flag (so Pyodide never compares it with a source mtime), the source's hash and file name.
    check = r"""
import importlib.util, json, marshal, sys
bad = []
for path, pyc, src in json.loads(sys.stdin.read()):
    pyc, src = pyc.encode("latin-1"), src.encode("latin-1")
    flags = int.from_bytes(pyc[4:8], "little")
    code = marshal.loads(pyc[16:])
    if pyc[:4] != importlib.util.MAGIC_NUMBER or flags != 1 or pyc[8:16] != importlib.util.source_hash(src) \
            or code.co_filename != path:
        bad.append(path)
print(json.dumps(bad))
"""
    items = []
    for pyc_path, offset, length in index:
        folder, name = pyc_path.split("/__pycache__/")
        source = folder + "/" + name.replace(".cpython-38.pyc", ".py")
        assert source in listed
        items.append([source, body[offset:offset + length].decode("latin-1"), sources[source].decode("latin-1")])
    res = subprocess.run([PY38, "-I", "-c", check], input=json.dumps(items), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == []


@needs_py38
def test_python_zip_imports_pytrain_from_bytecode_alone(tmp_path):
    (tmp_path / "wheels").mkdir()
    entry = build.build_python_zip(tmp_path)
    zpath = tmp_path / entry["zip"]
    with zipfile.ZipFile(zpath) as zf:
        names = zf.namelist()
    assert "pytrain/__init__.pyc" in names and not any(n.endswith(".py") for n in names)
    # Python 3.8 imports pytrain from the zip (zipimport, sourceless) and sees its version.
    res = subprocess.run([PY38, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import pytrain.errors, "
                          "pytrain; print(pytrain.__version__, pytrain.errors.__file__)", str(zpath)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    version, where = res.stdout.split()
    assert version == build.pytrain_version() and where.startswith(str(zpath))
