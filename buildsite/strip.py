"""Ship only what can run: Pyodide's file packages (the stdlib's ``pyodide.asm.data``, whose loader
is inside ``pyodide.asm.js``, and ``numpy.data``) rewritten without the modules no import reaches.

What is kept: every module an import statement (anywhere in a module: at the top, in a function, in
a ``try``) reaches from the roots (what pytrain imports, the start-up modules of
pyodide-startup-modules.txt, numpy, Pyodide's own package, KEEP), minus DROP. Data files go with
their package (tests' data with the tests), minus C headers and static libraries (build inputs).
The build refuses (SystemExit naming the module) a DROP that removes a root or a module a kept
module imports at its top level.

The stdlib's LZ4 package keeps its loader: it is rewritten with every 2048-byte chunk stored
plain (emscripten's ``successes`` 0), which its LZ4 reader copies instead of decompressing, so
brotli sees the plain bytes (an LZ4-compressed package hides the redundancy brotli would find).

Once the start-up modules' sources are left out (their bytecode bundle replaces them:
:func:`drop_sources`), :func:`split_rest` moves what neither the start nor the first training step
imports out of the stdlib's package into a second bundle the worker fetches after that step.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from buildsite.bytecode import file_bundle, package_data
from buildsite.paths import ROOT, STARTUP_MODULES, log

#: imported by name at run time, which no import statement shows: the codecs
#: (encodings.search_function imports encodings.<name>), sysconfig's data module; and the stdlib
#: the page's flows use (federation: hashlib, hmac, base64, struct, http; text: unicodedata, json, re)
KEEP = ("encodings", "encodings.aliases", "encodings.ascii", "encodings.latin_1", "encodings.utf_8",
        "encodings.utf_8_sig", "encodings.utf_16", "encodings.utf_16_le", "encodings.utf_16_be", "encodings.utf_32",
        "encodings.utf_32_le", "encodings.utf_32_be", "encodings.utf_7", "encodings.cp437", "encodings.cp1252",
        "encodings.iso8859_15", "encodings.charmap", "encodings.idna", "encodings.punycode",
        "encodings.raw_unicode_escape", "encodings.unicode_escape", "encodings.base64_codec",
        "encodings.hex_codec", "encodings.zlib_codec", "encodings.bz2_codec", "encodings.quopri_codec",
        "encodings.uu_codec", "encodings.rot_13", "encodings.undefined", "_sysconfigdata__emscripten_",
        "json", "re", "unicodedata", "hashlib", "hmac", "base64", "struct", "http.client", "email.parser",
        "zipfile", "csv", "io", "zlib", "secrets", "numpy", "pyodide", "_pyodide")
#: cut off although an import statement reaches them, since only a function the page never calls
#: imports them: pydoc's help topics (pydoc.help imports them in a try, ImportError handled)
DROP = ("pydoc_data",)
#: build inputs, not run-time files
BUILD_ONLY = (".h", ".a", ".c", ".f", ".f90", ".pyx", ".pxd")

_PREFIXES = ("/lib/python3.8/site-packages/", "/lib/python3.8/")
_FILES = re.compile(r'\{"?filename"?:"([^"]+)","?start"?:(\d+),"?end"?:(\d+)(?:,"?audio"?:(\d+))?\}')
_META = re.compile(r'loadPackage\(\{"?files"?:\[(.*?)\],"?remote_package_size"?:(\d+),"?package_uuid"?:"([^"]*)"\}\)')
_LZ4 = re.compile(r'compressedData=\{"?data"?:null,"?cachedOffset"?:\d+,"?cachedIndexes"?:\[([^\]]*)\],'
                  r'"?cachedChunks"?:\[[^\]]*\],"?offsets"?:\[[^\]]*\],"?sizes"?:\[[^\]]*\],"?successes"?:\[[^\]]*\]\}')
CHUNK = 2048   # emscripten's LZ4.CHUNK_SIZE


def module_name(path: str) -> Optional[str]:
    """The module a package file defines (``/lib/python3.8/json/__init__.py`` -> ``json``), or None."""
    rel = next((path[len(p):] for p in _PREFIXES if path.startswith(p)), None)
    if rel is None or not rel.endswith((".py", ".so")):
        return None
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def imported_names(source: bytes, module: str, is_package: bool) -> Tuple[Set[str], Set[str]]:
    """(every module name an import statement in ``source`` may import, those at its top level)."""
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    names: Set[str] = set()
    top: Set[str] = set()
    for node in ast.walk(tree):
        found: List[str] = []
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            found = [base] + [base + "." + a.name for a in node.names]
        names.update(found)
        if found and node in tree.body:
            top.update(found)
    return names, top


def pytrain_imports() -> Set[str]:
    """Every absolute module name pytrain's sources import."""
    out: Set[str] = set()
    for path in sorted((ROOT / "pytrain").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                out.add(node.module)
                out.update(node.module + "." + a.name for a in node.names)
    return out


def startup_modules() -> Set[str]:
    """The modules of pyodide-startup-modules.txt (the page's way to its first step imports them)."""
    if not STARTUP_MODULES.is_file():
        return set()
    lines = [ln.strip() for ln in STARTUP_MODULES.read_text(encoding="utf-8").splitlines()]
    return {m for m in (module_name(ln) for ln in lines if ln and not ln.startswith("#")) if m}


class Plan:
    """Which files of one or more file packages to keep, from the modules' import statements."""

    def __init__(self, files: Dict[str, bytes], roots: Iterable[str], drop: Iterable[str] = DROP) -> None:
        self.files = files
        self.modules = {m: p for p, m in ((p, module_name(p)) for p in files) if m}
        self.drop = tuple(drop)
        required = {r for r in roots if r in self.modules}
        bad = sorted(r for r in required if self._dropped(r))
        if bad:
            raise SystemExit("buildsite.strip: DROP %s would remove %s, which pytrain or the page's start imports"
                             % (list(self.drop), ", ".join(bad)))
        self.kept = self._reach(required)

    def _dropped(self, module: str) -> bool:
        return any(module == d or module.startswith(d + ".") for d in self.drop)

    def _reach(self, roots: Set[str]) -> Set[str]:
        kept: Set[str] = set()
        todo = sorted(roots)
        while todo:
            parts = todo.pop().split(".")
            for i in range(1, len(parts) + 1):   # importing a.b.c imports a and a.b
                name = ".".join(parts[:i])
                if name not in self.modules or name in kept or self._dropped(name):
                    continue
                kept.add(name)
                path = self.modules[name]
                if not path.endswith(".py"):
                    continue
                try:
                    names, top = imported_names(self.files[path], name, path.endswith("/__init__.py"))
                except SyntaxError as e:
                    raise SystemExit("buildsite.strip: %s (kept) does not parse: %s" % (path, e))
                lost = sorted(t for t in top if t in self.modules and self._dropped(t))
                if lost:
                    raise SystemExit("buildsite.strip: DROP removes %s, which %s imports at its top level"
                                     % (", ".join(lost), name))
                todo.extend(names)
        return kept

    def _package_of(self, path: str) -> Optional[str]:
        """The module of the package folder holding ``path`` (the nearest one up), None outside any."""
        folder = path.rsplit("/", 1)[0]
        while True:
            name = module_name(folder + "/__init__.py")
            if name is not None and name in self.modules:
                return name
            if "/" not in folder.strip("/"):
                return None
            folder = folder.rsplit("/", 1)[0]

    def keeps(self, path: str) -> bool:
        """True when ``path`` ships: a reached module, or a data file of a reached package (not a build input)."""
        name = module_name(path)
        if name is not None and name in self.modules:
            return name in self.kept
        package = self._package_of(path)
        return (package is None or package in self.kept) and not path.endswith(BUILD_ONLY)


def read_package(js: str, data: bytes) -> Tuple[List[Tuple[str, int, int]], bytes]:
    """(files as (path, start, end), the package's plain bytes) of an emscripten file package."""
    meta = _META.search(js)
    if meta is None:
        raise SystemExit("buildsite.strip: no file package metadata found")
    return [(m.group(1), int(m.group(2)), int(m.group(3))) for m in _FILES.finditer(meta.group(1))], package_data(js, data)


def rewrite_package(js_path: Path, data_path: Path, keeps: Callable[[str], bool]) -> Tuple[int, int]:
    """Rewrite one file package (its loader ``js_path``, its ``data_path``) with only the files
    ``keeps(path)`` accepts, uncompressed (an LZ4 package keeps its loader, every chunk stored plain).
    Returns (files kept, files before)."""
    js = js_path.read_text(encoding="utf-8")
    files, data = read_package(js, data_path.read_bytes())
    out, listed = bytearray(), []
    for path, start, end in files:
        if keeps(path):
            listed.append({"filename": path, "start": len(out), "end": len(out) + end - start, "audio": 0})
            out += data[start:end]
    lz4 = _LZ4.search(js)
    if lz4 is not None:   # the LZ4 reader wants whole chunks and its decompression cache after them
        caches = len([x for x in lz4.group(1).split(",") if x])
        out += bytes(-len(out) % CHUNK)
        chunks = len(out) // CHUNK
        table = {"data": None, "cachedOffset": len(out), "cachedIndexes": [-1] * caches,
                 "cachedChunks": [None] * caches, "offsets": [i * CHUNK for i in range(chunks)],
                 "sizes": [CHUNK] * chunks, "successes": [0] * chunks}
        out += bytes(caches * CHUNK)
        js = js[:lz4.start()] + "compressedData=" + json.dumps(table, separators=(",", ":")) + js[lz4.end():]
    meta = _META.search(js)
    files_json = json.dumps(listed, separators=(",", ":"))[1:-1]
    js = (js[:meta.start()] + 'loadPackage({"files":[%s],"remote_package_size":%d,"package_uuid":"%s"})'
          % (files_json, len(out), meta.group(3)) + js[meta.end():])
    if len(re.findall(r'"?remote_package_size"?:\d+', js)) != 1:
        raise SystemExit("buildsite.strip: %s: not the one file package expected" % js_path.name)
    data_path.write_bytes(bytes(out))
    js_path.write_text(js, encoding="utf-8")
    return len(listed), len(files)


def strip_pyodide(folder: Path, packages: Iterable[str]) -> Plan:
    """Rewrite the stdlib's package and ``packages``' (numpy...) in the site's Pyodide ``folder``
    with only what can run; logs what each keeps."""
    names = ["pyodide.asm"] + list(packages)
    files: Dict[str, bytes] = {}
    for name in names:
        listed, data = read_package((folder / (name + ".js")).read_text(encoding="utf-8"),
                                    (folder / (name + ".data")).read_bytes())
        files.update({path: data[a:b] for path, a, b in listed})
    plan = Plan(files, pytrain_imports() | startup_modules() | set(KEEP))
    for name in names:
        before = (folder / (name + ".data")).stat().st_size
        kept, total = rewrite_package(folder / (name + ".js"), folder / (name + ".data"), plan.keeps)
        log("pyodide: %s.data keeps %d of %d files, %.1f MB uncompressed (was %.1f MB)"
            % (name, kept, total, (folder / (name + ".data")).stat().st_size / 1e6, before / 1e6))
    return plan


def drop_sources(folder: Path, packages: Iterable[str], sources: Iterable[str]) -> int:
    """Remove ``sources`` (.py paths the sourceless bytecode bundle replaces) from the stdlib's and
    ``packages``' file packages in ``folder``; returns how many were removed."""
    gone = set(sources)
    if not all(p.endswith(".py") for p in gone):
        raise SystemExit("buildsite.strip: only .py sources can be dropped for their bytecode")
    removed = 0
    for name in ["pyodide.asm"] + list(packages):
        kept, total = rewrite_package(folder / (name + ".js"), folder / (name + ".data"), lambda p: p not in gone)
        removed += total - kept
    if removed != len(gone):
        raise SystemExit("buildsite.strip: %d sources compiled, %d found to drop" % (len(gone), removed))
    return removed


#: what stays in the stdlib's package a first visit waits for once :func:`drop_sources` has left out
#: the start-up sources: the codecs (looked up by name anywhere, a training step too), Pyodide's own
#: packages, and lzma, which pytrain's start imports (pytrain.checkpoint.zip_format) although it
#: fails there (no _lzma in Pyodide 0.17), so pyodide-startup-modules.txt does not list it
FIRST = ("/lib/python3.8/encodings/", "/lib/python3.8/site-packages/", "/lib/python3.8/lzma.py")


def split_rest(folder: Path, target: Path) -> List[str]:
    """Move every file of the stdlib's package in ``folder`` but FIRST's into a file bundle at ``target``
    (buildsite.bytecode.file_bundle, the worker writes it into the file system after the first step);
    returns the names of the modules moved (the worker's import guard fetches them at once if imported before)."""
    js_path, data_path = folder / "pyodide.asm.js", folder / "pyodide.asm.data"
    files, data = read_package(js_path.read_text(encoding="utf-8"), data_path.read_bytes())
    rest = [(path, data[a:b]) for path, a, b in files if not path.startswith(FIRST)]
    gone = {path for path, _ in rest}
    target.write_bytes(file_bundle(rest))
    rewrite_package(js_path, data_path, lambda path: path not in gone)
    return sorted(m for m in (module_name(path) for path in gone) if m)
