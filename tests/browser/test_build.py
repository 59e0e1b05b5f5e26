"""build.py without a browser: the wheel, the site's contents, the MNIST binary and the server."""
from __future__ import annotations

import gzip
import http.client
import json
import zipfile
from urllib.parse import urlsplit

import numpy as np

import build
from buildsite.compress import TWIN_SUFFIXES


def _get(url: str, path: str, headers=None):
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp, body


def test_wheel_is_pure_and_complete(site_url):
    wheels = sorted((build.SITE / "wheels").glob("*.whl"))
    assert [w.name for w in wheels] == ["pytrain-%s-py3-none-any.whl" % build.pytrain_version()]
    with zipfile.ZipFile(wheels[0]) as zf:
        names = zf.namelist()
        assert "pytrain/__init__.py" in names and "pytrain/webapp/session.py" in names and "pytrain/device/api.py" in names
        assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
        dist = "pytrain-%s.dist-info/" % build.pytrain_version()
        assert "Tag: py3-none-any" in zf.read(dist + "WHEEL").decode()
        record = zf.read(dist + "RECORD").decode().splitlines()
        assert len(record) == len(names)          # every file is listed with its hash
        assert "Requires-Dist: numpy" in zf.read(dist + "METADATA").decode()


def test_site_has_what_the_page_needs_and_no_more(site_url):
    config = json.loads((build.SITE / "config.json").read_text())
    index = build.SITE / config["pyodide"]["indexURL"]
    shipped = sorted(p.name for p in index.iterdir() if p.suffix not in TWIN_SUFFIXES)  # (not the .br/.gz twins)
    assert shipped == sorted(f["name"] for f in config["pyodide"]["files"])
    for name in ("pyodide.js", "pyodide.asm.wasm", "numpy.js", "numpy.data", "micropip.data"):
        assert name in shipped
    assert not any(n.startswith(("scipy", "matplotlib", "pandas")) for n in shipped)
    for kind in ("digits-mlp", "digits-cnn"):
        for rel in config["artifacts"][kind].values():
            assert (build.SITE / rel).is_file()
    for rel in ("index.html", "worker.js", "pytrain-widget.js", "examples/widget.html", "static/favicon.svg",
                "favicon.ico"):
        assert (build.SITE / rel).is_file(), rel


def test_site_worker_holds_its_rooms_and_the_page_preloads_its_modules(site_url):
    import re
    source = (build.ROOT / "web" / "worker.js").read_text(encoding="utf-8")
    rooms = re.findall(r'"((?:js|worker)/[\w]+\.js)"', source.split("self.importScripts(", 1)[1].split(");", 1)[0])
    assert "worker/boot.js" in rooms and "worker/commands.js" in rooms
    site = (build.SITE / "worker.js").read_text(encoding="utf-8")
    assert '"worker/boot.js"' not in site and site.lstrip().startswith("/*") and '"use strict";' in site
    at = [site.index((build.ROOT / "web" / r).read_text(encoding="utf-8")) for r in rooms]   # each whole, in order
    assert at == sorted(at) and site.index('"use strict";') < at[0]
    page = (build.SITE / "index.html").read_text(encoding="utf-8")
    preloaded = re.findall(r'<link rel="modulepreload" href="js/(\w+\.js)">', page)
    assert sorted(preloaded + ["app.js"]) == sorted(p.name for p in (build.ROOT / "web" / "js").glob("*.js"))
    config = json.loads((build.SITE / "config.json").read_text())
    for rel in ("index.html", "examples/widget.html", "examples/element.html"):   # sw.js compares it with its own
        assert '<meta name="pytrain-site" content="%s">' % config["site"] in (build.SITE / rel).read_text(), rel


def test_mnist_binary_is_compact_and_balanced(site_url):
    from pytrain.webapp import read_mnist
    blob = (build.SITE / "data" / "mnist-10k.bin").read_bytes()
    assert len(blob) == 16 + 10000 * (1 + 784)
    images, labels = read_mnist(blob)
    assert images.shape == (10000, 28, 28) and images.dtype == np.uint8
    assert images.max() == 255 and images.min() == 0
    counts = np.bincount(labels, minlength=10)
    assert counts.min() > 800                            # every digit, roughly balanced
    assert len(set(labels[-1000:].tolist())) == 10       # the held-out tail has every class


def test_server_types_gzip_caching_and_safety(site_url):
    resp, body = _get(site_url, "/")
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/html") and b"pytrain" in body
    resp, _ = _get(site_url, "/worker.js")
    assert resp.getheader("Content-Type").startswith("text/javascript")

    config = json.loads((build.SITE / "config.json").read_text())
    wasm = "/" + config["pyodide"]["indexURL"] + "pyodide.asm.wasm"
    resp, body = _get(site_url, wasm, {"Accept-Encoding": "gzip, deflate"})
    assert resp.status == 200 and resp.getheader("Content-Type") == "application/wasm"
    assert resp.getheader("Content-Encoding") == "gzip"
    assert "immutable" in resp.getheader("Cache-Control")
    raw = gzip.decompress(body)
    assert raw[:4] == b"\0asm" and len(raw) > len(body)
    resp, body = _get(site_url, wasm)                    # no gzip asked for: plain bytes
    assert resp.getheader("Content-Encoding") is None and body[:4] == b"\0asm"
    resp, body = _get(site_url, wasm, {"Accept-Encoding": "gzip, deflate, br, zstd"})   # Chromium's
    if (build.SITE / wasm.lstrip("/")).with_name("pyodide.asm.wasm.br").is_file():   # (built with brotli)
        assert resp.getheader("Content-Encoding") == "br" and len(body) < len(raw) / 3

    resp, _ = _get(site_url, "/" + config["wheel"])
    assert resp.status == 200 and resp.getheader("Content-Type") == "application/zip"
    resp, _ = _get(site_url, "/config.json")
    etag = resp.getheader("ETag")
    assert resp.getheader("Cache-Control") == "no-cache" and etag
    resp, body = _get(site_url, "/config.json", {"If-None-Match": etag})
    assert resp.status == 304 and body == b""

    # the icon a browser asks for by itself on a page without <link rel="icon">: a 32x32 PNG in an ICO
    resp, body = _get(site_url, "/favicon.ico")
    assert resp.status == 200 and resp.getheader("Content-Type") == "image/x-icon"
    assert body[:6] == b"\0\0\1\0\1\0" and body[6:8] == b"\x20\x20" and body[22:30] == b"\x89PNG\r\n\x1a\n"

    resp, _ = _get(site_url, "/no/such/file.js")
    assert resp.status == 404
    resp, body = _get(site_url, "/../../build.py")
    assert resp.status == 404 and b"def build" not in body
    resp, body = _get(site_url, "/%2e%2e/%2e%2e/build.py")
    assert resp.status == 404 and b"def build" not in body
