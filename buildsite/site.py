"""The static site assembled: web/ and static/ copied, the wheel, Pyodide, bytecode, data and
artifacts added, config.json written, sw.js stamped with the site's hash, big files precompressed
(brotli and gzip twins, buildsite/compress.py)."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path
from typing import Dict, List, Optional

from buildsite.assets import build_demo_artifacts, cached_mnist
from buildsite.bytecode import build_python_zip, build_startup_bytecode
from buildsite.compress import TWIN_SUFFIXES, compressors, precompress
from buildsite.favicon import favicon_ico
from buildsite.paths import PYODIDE_NPM, ROOT, SITE, STARTUP_MODULES, log
from buildsite.pyodide import PYODIDE_START_PACKAGES, copy_pyodide, ensure_node_modules
from buildsite.strip import drop_sources, split_rest
from buildsite.wheel import build_wheel, pytrain_version


def _copy_tree(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.name.startswith("."):
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


SW_VERSION_PLACEHOLDER = "__PYTRAIN_SITE_HASH__"


def site_hash(site: Path, config: Dict[str, object]) -> str:
    """A hash of every file the site serves plus config.json (without its build time).

    Written to config.json as "site", into sw.js as its cache version and into index.html as the
    stamp sw.js compares with it: any change to the
    runtime, wheel, data or code gives the service worker a new cache, identical builds keep it.
    """
    h = hashlib.sha256()
    for path in sorted(site.rglob("*")):
        if path.is_file() and path.suffix not in TWIN_SUFFIXES and path.name not in ("config.json", ".stamp"):
            h.update(path.relative_to(site).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    h.update(json.dumps({k: v for k, v in config.items() if k != "built"}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def source_stamp() -> float:
    """Newest modification time among the build's inputs (to rebuild only when needed)."""
    newest = 0.0
    for folder in ("web", "static", "pytrain", "buildsite"):
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
    _bundle_worker(site)
    _preload_modules(site)
    if (ROOT / "static").is_dir():
        _copy_tree(ROOT / "static", site / "static")
    # browsers ask for /favicon.ico by themselves on a page without an icon link (a 404 is a console error)
    (site / "favicon.ico").write_bytes(favicon_ico())
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

    if pyodide_files:
        _warm_first_visit(site, index_url)
    _npm_package(site)
    config = {
        "version": pytrain_version(),
        "built": int(started),
        # the worker loads only numpy at start (micropip stays in the site for users who want it)
        "pyodide": {"indexURL": index_url, "files": pyodide_files, "packages": list(PYODIDE_START_PACKAGES)},
        "wheel": "wheels/" + wheel.name,
        "wheelSize": wheel.stat().st_size,
        "python": build_python_zip(site),
        "bytecode": _startup_bytecode(site, index_url, pyodide_files),
        "mnist": cached_mnist(site),
        "artifacts": build_demo_artifacts(site) if artifacts else {},
    }
    config["site"] = site_hash(site, config)
    (site / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    # the service worker's cache version, and the pages' stamp it compares with it (web/sw.js)
    for stamped in [site / "sw.js"] + sorted(site.rglob("*.html")):
        if stamped.is_file():
            stamped.write_text(stamped.read_text(encoding="utf-8").replace(SW_VERSION_PLACEHOLDER, config["site"]),
                               encoding="utf-8")
    twins = precompress(site)
    (site / ".stamp").write_text(json.dumps(_stamp(pyodide, artifacts)), encoding="utf-8")
    log("site ready in %s (%s, %.1fs)" % (site, ", ".join("%d %s files" % (n, enc) for enc, n in sorted(twins.items())),
                                           time.time() - started))
    return site


_ROOMS = re.compile(r'self\.importScripts\(((?:\s*"[\w/.]+\.js",?)+)\s*\);')


def _bundle_worker(site: Path) -> None:
    """worker.js with its rooms (the classic scripts its first ``self.importScripts(...)`` loads, in
    that order) inlined: importScripts fetches one script after the other, a round trip each on a
    first visit; one script shares one global scope as the rooms did."""
    worker = site / "worker.js"
    text = worker.read_text(encoding="utf-8")
    found = _ROOMS.search(text)
    if found is None:
        raise SystemExit("build: worker.js has no self.importScripts(\"...\") of its rooms to inline")
    rooms = re.findall(r'"([\w/.]+\.js)"', found.group(1))
    body = "".join("\n// ---- %s (inlined by build.py) ----\n%s\n" % (r, (site / r).read_text(encoding="utf-8"))
                   for r in rooms)
    if not text[:found.start()].rstrip().endswith('"use strict";'):
        raise SystemExit("build: worker.js must say \"use strict\" before loading its rooms")
    worker.write_text(text[:found.start()] + body + text[found.end():], encoding="utf-8")


def _preload_modules(site: Path) -> None:
    """index.html asks for every page module at once (<link rel="modulepreload">) instead of one level
    of imports per round trip."""
    page = site / "index.html"
    text = page.read_text(encoding="utf-8")
    entry = '<script type="module" src="js/app.js"></script>'
    if text.count(entry) != 1:
        raise SystemExit("build: index.html does not load js/app.js as expected")
    links = "".join('<link rel="modulepreload" href="js/%s">\n  ' % p.name
                    for p in sorted((site / "js").glob("*.js")) if p.name != "app.js")
    page.write_text(text.replace(entry, links + entry), encoding="utf-8")


#: Pyodide's files the worker fetches first (immutable: the server lets browsers keep them a year)
WARM_FILES = ("pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "pyodide.asm.data")
#: the widget's module, and the list in it the build fills with those files (site-relative)
WIDGET, WARM_MARK = "pytrain-widget.js", "[/* WARM_FILES */]"


def _warm_first_visit(site: Path, index_url: str) -> None:
    """index.html preloads the Pyodide files a first visit downloads first, from the moment its head is
    parsed: on a phone's network the pipe is otherwise idle while the page's modules, the service
    worker and the worker start (~0.5 s of round trips). The worker's own requests for them (through
    the service worker, which keeps them for the next visit) then find them in the browser's HTTP cache
    (immutable, a year). On later visits the service worker hands out this build's page without them
    (sw.js withoutPreloads): the Web Worker reads the files from the service worker's cache, and preloaded
    they would only be copied into the page before its modules run."""
    page = site / "index.html"
    text = page.read_text(encoding="utf-8")
    stamp = '<meta name="pytrain-site"'
    if text.count(stamp) != 1:
        raise SystemExit("build: index.html has no <meta name=\"pytrain-site\"> to put the preloads after")
    links = "".join('<link rel="preload" href="%s" as="fetch" crossorigin>\n  ' % (index_url + n)
                    for n in WARM_FILES if (site / index_url / n).is_file())
    page.write_text(text.replace(stamp, links + stamp), encoding="utf-8")
    # a host page embedding the widget gets the same preloads when it imports the widget (no markup of its own)
    widget = site / WIDGET
    code = widget.read_text(encoding="utf-8")
    if code.count(WARM_MARK) != 1:
        raise SystemExit("build: %s has no %s for the files a first visit downloads first" % (WIDGET, WARM_MARK))
    names = [index_url + n for n in WARM_FILES if (site / index_url / n).is_file()]
    widget.write_text(code.replace(WARM_MARK, json.dumps(names)), encoding="utf-8")


def _startup_bytecode(site: Path, index_url: str, pyodide_files: List[Dict[str, object]]) -> Optional[Dict[str, object]]:
    """The start-up modules' bytecode bundle, sourceless: their .py files leave the site's Pyodide
    packages (the page reads the .pyc alone); the rest of the stdlib but FIRST's (buildsite.strip)
    moves to a second bundle, ``rest``; ``pyodide_files``' sizes are brought up to date."""
    if not pyodide_files:
        return None
    folder = site / index_url
    entry = build_startup_bytecode(site, folder, PYODIDE_START_PACKAGES, sourceless=True)
    if entry is None:
        return None
    n = drop_sources(folder, PYODIDE_START_PACKAGES, entry.pop("sources"))
    log("pyodide: %d start-up sources left out (the bundle's bytecode replaces them)" % n)
    # what is left of the stdlib but the codecs and Pyodide's own packages loads after the first step
    rest = site / "wheels" / "pyodide-stdlib-rest.bin"
    modules = split_rest(folder, rest)
    entry["rest"] = {"file": "wheels/" + rest.name, "size": rest.stat().st_size, "modules": modules}
    log("pyodide: %d stdlib modules moved to %s (%.0f KB), fetched after the first step"
        % (len(entry["rest"]["modules"]), rest.name, rest.stat().st_size / 1024))
    for f in pyodide_files:
        f["size"] = (folder / str(f["name"])).stat().st_size
    return entry


#: the npm package bundlers install (its index.js is web/npm/pytrain-ort/index.js)
NPM_PACKAGE = Path("npm") / "pytrain-ort"


def _npm_package(site: Path) -> None:
    """``npm/pytrain-ort/``: web/npm/pytrain-ort's index.js with its package.json and types (pytrain-ort.d.ts)."""
    folder = site / NPM_PACKAGE
    shutil.copyfile(str(site / "pytrain-ort.d.ts"), str(folder / "index.d.ts"))
    manifest = {"name": "pytrain-ort", "version": pytrain_version(), "private": True, "type": "module",
                "description": "onnxruntime-web 1.19's training API on pytrain, for bundlers: loads pytrain-ort.js "
                               "from the pytrain site at run time",
                "main": "index.js", "types": "index.d.ts",
                "exports": {".": {"types": "./index.d.ts", "default": "./index.js"}}}
    (folder / "package.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _stamp(pyodide: Optional[str], artifacts: bool) -> Dict[str, object]:
    # (the encodings too: a site built without the brotli package is rebuilt once it is installed)
    return {"sources": source_stamp(), "pyodide": pyodide, "artifacts": artifacts, "encodings": sorted(compressors())}


def needs_build(site: Path = SITE, pyodide: Optional[str] = None, artifacts: bool = True) -> bool:
    """True when the site is missing, older than its sources, or built with other options."""
    stamp = site / ".stamp"
    if not stamp.is_file() or not (site / "config.json").is_file():
        return True
    try:
        return json.loads(stamp.read_text(encoding="utf-8")) != _stamp(pyodide, artifacts)
    except ValueError:
        return True
