"""Python 3.8 bytecode for the page: pytrain's modules in one zip, and the start-up modules of
pyodide-startup-modules.txt read from Pyodide's own packages (LZ4 chunks decoded) in one bundle."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from buildsite.paths import BUILD, ROOT, STARTUP_MODULES, log
from buildsite.wheel import pytrain_version



#: CPython 3.8, the Python of Pyodide 0.17 (bytecode is version-specific: 3.8.x all share one magic number)
PY38_CANDIDATES = (os.environ.get("PYTRAIN_PY38", ""), str(Path.home() / ".pyenv" / "versions" / "3.8.18" / "bin" / "python"),
                   "python3.8")

# One transform for every module a first visit waits for (the stdlib's, numpy's, pytrain's), in the Python
# 3.8 that compiles them: docstrings emptied (see _PY38_COMPILE_FILES for why emptied, not removed).
_EMPTY_DOCSTRINGS = r"""
import ast
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
def empty_docstrings(tree):
    for node in ast.walk(tree):
        body = getattr(node, "body", None) if isinstance(node, DOCUMENTED) else None
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body[0].value.value = ""
    return tree
"""

# pytrain's docstrings emptied as the stdlib's are (_PY38_COMPILE_FILES): 441 -> 361 KB of brotli a
# first visit waits for; nothing in pytrain reads a docstring (blocks.py sets its ops' __doc__ itself).
_PY38_COMPILE = _EMPTY_DOCSTRINGS + r"""
import importlib.util, json, marshal, sys, zipfile
from importlib._bootstrap_external import _code_to_hash_pyc
root, out, prefix = sys.argv[1:4]
names = json.loads(sys.stdin.read())
with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
    for name in names:
        src = open(root + "/" + name, "rb").read()
        code = compile(empty_docstrings(ast.parse(src, name)), prefix + name, "exec", dont_inherit=True)
        data = _code_to_hash_pyc(code, importlib.util.source_hash(src), False)
        info = zipfile.ZipInfo(name[:-3] + ".pyc", date_time=(2020, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_STORED
        info.external_attr = 0o644 << 16
        zf.writestr(info, data)
"""


def build_python_zip(site: Path, zip_path: str = "/lib/pytrain.zip") -> Optional[Dict[str, object]]:
    """pytrain's modules compiled for Python 3.8 (unchecked-hash .pyc, no sources) in one zip the
    worker imports in place with zipimport: Pyodide then never compiles pytrain's sources. The entries
    are stored, not deflated: the site's brotli twin of the whole zip is 0.41 MB where a deflated
    zip sends 0.70 MB (compressing per file loses what the modules share), and nothing inflates them.

    Needs a CPython 3.8 here (``PYTRAIN_PY38`` or pyenv's 3.8.18); returns None without one, and the
    worker imports the wheel's sources instead. Code objects name ``<zip_path>/pytrain/...py``.
    """
    exe = next((c for c in PY38_CANDIDATES if c and shutil.which(c)), None)
    if exe is None:
        log("python.zip skipped: no CPython 3.8 (set PYTRAIN_PY38); the page imports the wheel's sources")
        return None
    names = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pytrain").rglob("*.py")
                   if "__pycache__" not in p.parts)
    target = site / "wheels" / ("pytrain-%s-py38.zip" % pytrain_version())
    res = subprocess.run([exe, "-I", "-c", _PY38_COMPILE, str(ROOT), str(target), zip_path + "/"],
                         input=json.dumps(names), capture_output=True, text=True)
    if res.returncode != 0:
        log("python.zip skipped: %s failed: %s" % (exe, res.stderr.strip()[-300:]))
        return None
    log("python.zip %s (%d modules, %.0f KB)" % (target.name, len(names), target.stat().st_size / 1024))
    return {"zip": "wheels/" + target.name, "size": target.stat().st_size, "path": zip_path}


PYC_BUNDLE_MAGIC = b"PTPYC001"


def file_bundle(files: Iterable[Tuple[str, bytes]]) -> bytes:
    """Files as one bundle the worker writes into Pyodide's file system (worker/boot.js writeBundle):
    magic b"PTPYC001", uint32 little-endian length of a JSON index ``[[path, offset, length], ...]``,
    the index, then the files' bytes (offsets from the end of the index)."""
    index, body = [], bytearray()
    for path, data in files:
        index.append([path, len(body), len(data)])
        body += data
    head = json.dumps(index, separators=(",", ":")).encode()
    return PYC_BUNDLE_MAGIC + len(head).to_bytes(4, "little") + head + bytes(body)


def _lz4_length(src: bytes, i: int, length: int) -> Tuple[int, int]:
    """A token's 4-bit length, extended by bytes while it is saturated (15, then 255s): (length, next i)."""
    if length == 15:
        while True:
            b = src[i]
            i += 1
            length += b
            if b != 255:
                break
    return length, i


def lz4_block(src: bytes, size: int) -> bytes:
    """Decode one raw LZ4 block (the format emscripten's file packager compresses chunks with)."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        lit, i = _lz4_length(src, i, token >> 4)
        out += src[i:i + lit]
        i += lit
        if i >= n:
            break
        off = src[i] | (src[i + 1] << 8)
        length, i = _lz4_length(src, i + 2, token & 15)
        length += 4
        start = len(out) - off
        if off >= length:
            out += out[start:start + length]
        else:  # an overlapping match repeats the last ``off`` bytes
            for k in range(length):
                out.append(out[start + k])
    return bytes(out[:size])


def _package_array(js: str, name: str) -> List[int]:
    m = re.search(r'\b"?%s"?:\[([0-9e,.+]*)\]' % name, js)   # minified numbers: 1e3 for 1000
    return [int(float(x)) for x in m.group(1).split(",") if x] if m else []


def package_data(js: str, data: bytes) -> bytes:
    """An emscripten file package's data (``numpy.data`` with its loader ``numpy.js``...) with its LZ4
    chunks decoded: every file's bytes at its ``start:end``. ``data`` itself when it is not compressed;
    decoded once per content (pure Python takes ~10-30 s) and kept in build/cache/unpacked/."""
    offsets, sizes, compressed = (_package_array(js, n) for n in ("offsets", "sizes", "successes"))
    if not any(compressed):   # (a plain package, or one buildsite.pyodide/strip rewrote)
        return data
    key = BUILD / "cache" / "unpacked" / (hashlib.sha256(data).hexdigest() + ".data")
    if key.is_file():
        return key.read_bytes()
    chunk = 2048   # emscripten's LZ4.CHUNK_SIZE
    end = max(int(m.group(1)) for m in re.finditer(r'"?end"?:(\d+)', js))
    out = b"".join(lz4_block(data[o:o + n], chunk) if c else data[o:o + n]
                   for o, n, c in zip(offsets, sizes, compressed))[:end]
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_bytes(out)
    return out


def pyodide_package_files(js_path: Path, data_path: Path) -> Dict[str, bytes]:
    """{path in Pyodide's file system: bytes} of the .py files in one emscripten file package
    (``pyodide.asm.js/.data`` for the stdlib, ``numpy.js/.data``...), LZ4 chunks decoded."""
    js = js_path.read_text(encoding="utf-8")
    data = package_data(js, data_path.read_bytes())
    files = [(m.group(1), int(m.group(2)), int(m.group(3))) for m in
             re.finditer(r'"?filename"?:"([^"]+\.py)","?start"?:(\d+),"?end"?:(\d+)', js)]
    return {name: data[a:b] for name, a, b in files}


# The stdlib's and numpy's docstrings were a third of the bundle a first visit waits for (1.16 MB sent,
# 0.78 MB with them emptied). Emptied, not removed as python -OO does: numpy 1.17 hands its dispatchers'
# docstrings to add_docstring, which takes a str only, and code that edits a __doc__ keeps working.
# Asserts stay; Pyodide's own packages keep their docstrings (_pyodide/docstring.py reads them).
_PY38_COMPILE_FILES = _EMPTY_DOCSTRINGS + r"""
import importlib.util, json, sys
from importlib._bootstrap_external import _code_to_hash_pyc
out = {}
for path, src in json.loads(sys.stdin.read()).items():
    src = src.encode("latin-1")
    tree = ast.parse(src, path)
    if "/site-packages/_pyodide/" not in path and "/site-packages/pyodide/" not in path:
        empty_docstrings(tree)
    code = compile(tree, path, "exec", dont_inherit=True)
    out[path] = _code_to_hash_pyc(code, importlib.util.source_hash(src), False).decode("latin-1")
sys.stdout.write(json.dumps(out))
"""


def build_startup_bytecode(site: Path, pyodide_dir: Path, packages: Iterable[str],
                           sourceless: bool = False) -> Optional[Dict[str, object]]:
    """The stdlib and numpy modules of pyodide-startup-modules.txt compiled for Python 3.8 from
    Pyodide's own sources, as unchecked-hash .pyc files (valid whatever the source's mtime) in
    one bundle the worker writes before CPython starts: to their ``__pycache__`` folders, or with
    ``sourceless`` in place of their sources (``json/decoder.pyc``: Python's sourceless loader
    imports it, and the site need not ship ``json/decoder.py``: buildsite.strip.drop_sources).

    The bundle is a :func:`file_bundle` of the .pyc files. Returns None (the page compiles the sources
    itself) without CPython 3.8, the module list or a local Pyodide; else {"file", "size", "sources": the compiled sources' paths,
    "sourceless"}.
    """
    exe = next((c for c in PY38_CANDIDATES if c and shutil.which(c)), None)
    if exe is None or not STARTUP_MODULES.is_file() or not (pyodide_dir / "pyodide.asm.js").is_file():
        log("startup bytecode skipped (needs CPython 3.8, %s and a local Pyodide)" % STARTUP_MODULES.name)
        return None
    wanted = [ln.strip() for ln in STARTUP_MODULES.read_text(encoding="utf-8").splitlines()
              if ln.strip() and not ln.startswith("#")]
    sources: Dict[str, bytes] = {}
    for name in ["pyodide.asm"] + list(packages):
        js, data = pyodide_dir / (name + ".js"), pyodide_dir / (name + ".data")
        if js.is_file() and data.is_file():
            sources.update(pyodide_package_files(js, data))
    found = {path: sources[path].decode("latin-1") for path in wanted if path in sources}
    res = subprocess.run([exe, "-I", "-c", _PY38_COMPILE_FILES], input=json.dumps(found),
                         capture_output=True, text=True)
    if res.returncode != 0:
        log("startup bytecode skipped: %s failed: %s" % (exe, res.stderr.strip()[-300:]))
        return None
    compiled = json.loads(res.stdout)
    files = []
    for path in sorted(compiled):
        folder, fname = path.rsplit("/", 1)
        pyc = path[:-3] + ".pyc" if sourceless else "%s/__pycache__/%s.cpython-38.pyc" % (folder, fname[:-3])
        files.append((pyc, compiled[path].encode("latin-1")))
    target = site / "wheels" / "pyodide-startup-py38.bin"
    target.write_bytes(file_bundle(files))
    log("startup bytecode: %d of %d listed modules, %.0f KB" % (len(compiled), len(wanted), target.stat().st_size / 1024))
    return {"file": "wheels/" + target.name, "size": target.stat().st_size, "sources": sorted(compiled),
            "sourceless": sourceless}
