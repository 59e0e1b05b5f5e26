"""Precompressed twins of the site's files: written at build time (``name.br``, ``name.gz``), picked
per request by the server from the client's Accept-Encoding, counted by the bench as bytes sent.

Brotli (quality 11, what static hosts precompress with) needs the ``brotli`` package from PyPI
(``python build.py test`` installs it); without it the build writes the gzip twins only and says so.
Compressing Pyodide's big files at quality 11 takes minutes, so every compressed file is kept in
build/cache/compressed/ under the hash of its content and reused by later builds, and a fresh build
compresses on every core at once (brotli and zlib release the GIL; the bytes are the same as one at a time).
"""
from __future__ import annotations

import gzip
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from buildsite.paths import BUILD, log

#: files at least this big get compressed twins, each kept when it saves at least 10%
MIN_BYTES = 16 * 1024
SUFFIXES = {".js", ".mjs", ".wasm", ".data", ".bin", ".onnx", ".json", ".css", ".html", ".csv", ".svg", ".zip", ""}
#: Content-Encoding -> file suffix, in the server's order of preference
ENCODINGS = (("br", ".br"), ("gzip", ".gz"))
TWIN_SUFFIXES = tuple(s for _, s in ENCODINGS)
CACHE = BUILD / "cache" / "compressed"


def _brotli() -> Optional[Callable[[bytes], bytes]]:
    try:
        import brotli  # type: ignore  # PyPI "Brotli", a build/test-time dependency only
    except ImportError:
        return None
    return lambda data: brotli.compress(data, quality=11)


def compressors() -> Dict[str, Callable[[bytes], bytes]]:
    """Content-Encoding -> compress function, for the encodings this build can write."""
    out = {"gzip": lambda data: gzip.compress(data, compresslevel=9, mtime=0)}
    br = _brotli()
    if br is not None:
        out["br"] = br
    return out


def _compressed(data: bytes, encoding: str, fn: Callable[[bytes], bytes]) -> bytes:
    key = CACHE / ("%s.%s" % (hashlib.sha256(data).hexdigest(), encoding))
    if key.is_file():
        return key.read_bytes()
    packed = fn(data)
    key.parent.mkdir(parents=True, exist_ok=True)
    # written whole then renamed: two files with the same content may be compressed at once
    tmp = key.with_name("%s.%d.%d" % (key.name, os.getpid(), id(packed)))
    tmp.write_bytes(packed)
    os.replace(str(tmp), str(key))
    return packed


def _to_compress(site: Path) -> List[Path]:
    """The big compressible files of ``site``, biggest first (so the longest jobs start first)."""
    paths = [p for p in site.rglob("*") if not p.is_dir() and p.suffix not in TWIN_SUFFIXES and p.suffix in SUFFIXES
             and p.stat().st_size >= MIN_BYTES]
    return sorted(paths, key=lambda p: (-p.stat().st_size, str(p)))


def precompress(site: Path) -> Dict[str, int]:
    """Write .br and .gz twins beside every big compressible file of ``site`` (deterministic bytes);
    returns how many twins of each encoding were written."""
    fns = compressors()
    if "br" not in fns:
        log("brotli: the `brotli` package is missing (pip install brotli): gzip twins only")
    counts = {enc: 0 for enc in fns}

    def twin(job: Tuple[Path, str, str]) -> Tuple[str, bool]:
        path, encoding, suffix = job
        data = path.read_bytes()
        packed = _compressed(data, encoding, fns[encoding])
        if len(packed) <= 0.9 * len(data):
            Path(str(path) + suffix).write_bytes(packed)
            return encoding, True
        return encoding, False

    jobs = [(path, encoding, suffix) for path in _to_compress(site) for encoding, suffix in ENCODINGS
            if encoding in fns]
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        for encoding, written in pool.map(twin, jobs):
            counts[encoding] += written
    return counts


def accepted(accept_encoding: Optional[str]) -> List[str]:
    """The content codings an Accept-Encoding header allows (q > 0), lower-case; ``*`` allows any."""
    out = []
    for part in (accept_encoding or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        name = fields[0].lower()
        q = 1.0
        for f in fields[1:]:
            if f.lower().startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if name and q > 0:
            out.append(name)
    return out


def pick(path: Path, accept_encoding: Optional[str]) -> Tuple[Path, Optional[str]]:
    """The file to send for ``path`` and its Content-Encoding (None: ``path`` itself, as it is): the
    first twin in ENCODINGS order that exists and the client accepts."""
    ok = accepted(accept_encoding)
    for encoding, suffix in ENCODINGS:
        if encoding in ok or "*" in ok:
            twin = Path(str(path) + suffix)
            if twin.is_file():
                return twin, encoding
    return path, None
