"""The site's precompressed twins (buildsite/compress.py) and the server's Accept-Encoding
negotiation (buildsite/server.py), on a small folder of their own: no site build, no browser."""
from __future__ import annotations

import gzip
import http.client
import http.server
import os
import threading

import pytest

from buildsite import compress
from buildsite.server import SiteHandler, make_server

TEXT = b"".join(b"const value_%d = %d;\n" % (i, i * i) for i in range(4000))   # ~90 KB, compressible


@pytest.fixture()
def site(tmp_path, monkeypatch):
    """A folder with a big compressible file (twins), a small one and an incompressible one (none)."""
    monkeypatch.setattr(compress, "CACHE", tmp_path / "cache")
    root = tmp_path / "site"
    root.mkdir()
    (root / "big.js").write_bytes(TEXT)
    (root / "small.js").write_bytes(b"let x = 1;\n")
    (root / "noise.data").write_bytes(os.urandom(64 * 1024))
    return root


def _serve(root, handler=None):
    if handler is None:
        server = make_server(root)
    else:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _get(server, path, accept=None, method="GET", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    h = dict(headers or {})
    if accept is not None:
        h["Accept-Encoding"] = accept
    conn.request(method, path, headers=h)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp, body


def test_precompress_writes_twins_that_decode_to_the_original(site):
    counts = compress.precompress(site)
    assert (site / "big.js.gz").is_file() and gzip.decompress((site / "big.js.gz").read_bytes()) == TEXT
    for name in ("small.js", "noise.data"):   # too small / compression saves < 10%: no twins
        assert not any((site / (name + s)).exists() for s in compress.TWIN_SUFFIXES)
    assert counts["gzip"] == 1
    brotli = pytest.importorskip("brotli")
    assert counts["br"] == 1
    packed = (site / "big.js.br").read_bytes()
    assert brotli.decompress(packed) == TEXT and len(packed) < len((site / "big.js.gz").read_bytes())
    # deterministic, and the second build takes the compressed bytes from the cache
    (site / "big.js.br").unlink()
    compress.precompress(site)
    assert (site / "big.js.br").read_bytes() == packed


def test_accept_encoding_parsing():
    assert compress.accepted("gzip, deflate, br, zstd") == ["gzip", "deflate", "br", "zstd"]
    assert compress.accepted("br;q=0, GZIP;q=0.5") == ["gzip"]
    assert compress.accepted("identity") == ["identity"]
    assert compress.accepted("") == [] and compress.accepted(None) == []
    assert compress.accepted("br;q=oops") == []


def test_server_sends_the_twin_the_client_accepts(site):
    brotli = pytest.importorskip("brotli")
    compress.precompress(site)
    server = _serve(site)
    try:
        resp, body = _get(server, "/big.js", "gzip, deflate, br, zstd")   # what Chromium sends
        assert resp.status == 200 and resp.getheader("Content-Encoding") == "br"
        assert resp.getheader("Vary") == "Accept-Encoding"
        assert resp.getheader("Content-Type").startswith("text/javascript")
        assert int(resp.getheader("Content-Length")) == len(body) and brotli.decompress(body) == TEXT
        br_etag = resp.getheader("ETag")

        for accept in ("gzip", "br;q=0, gzip", "deflate, gzip;q=0.8"):
            resp, body = _get(server, "/big.js", accept)
            assert resp.getheader("Content-Encoding") == "gzip" and gzip.decompress(body) == TEXT, accept
            assert resp.getheader("ETag") != br_etag   # one validator per representation

        for accept in (None, "", "identity", "br;q=0, gzip;q=0", "zstd"):   # nothing usable: the file
            resp, body = _get(server, "/big.js", accept)
            assert resp.getheader("Content-Encoding") is None and body == TEXT, accept
            assert resp.getheader("Vary") == "Accept-Encoding"

        resp, body = _get(server, "/big.js", "*")
        assert resp.getheader("Content-Encoding") == "br"

        # files without a twin keep working, whatever the client accepts
        resp, body = _get(server, "/small.js", "gzip, br")
        assert resp.status == 200 and resp.getheader("Content-Encoding") is None and body == b"let x = 1;\n"
        resp, body = _get(server, "/noise.data", "br")
        assert resp.getheader("Content-Encoding") is None and len(body) == 64 * 1024

        # revalidation per representation, HEAD without a body
        resp, body = _get(server, "/big.js", "br, gzip", headers={"If-None-Match": br_etag})
        assert resp.status == 304 and body == b""
        resp, body = _get(server, "/big.js", "br", method="HEAD")
        assert resp.getheader("Content-Encoding") == "br" and body == b""
        assert int(resp.getheader("Content-Length")) == (site / "big.js.br").stat().st_size
    finally:
        server.shutdown()
        server.server_close()


def test_encoding_composes_with_extra_response_headers(site):
    """The server's own extra headers (cross-origin isolation) and the negotiation go together."""
    compress.precompress(site)

    class Isolated(SiteHandler):
        root = site
        isolated = True

    server = _serve(site, Isolated)
    try:
        resp, body = _get(server, "/big.js", "gzip")
        assert resp.getheader("Content-Encoding") == "gzip" and gzip.decompress(body) == TEXT
        assert resp.getheader("Cross-Origin-Embedder-Policy") == "require-corp"
        assert resp.getheader("Cross-Origin-Opener-Policy") == "same-origin"
        assert resp.getheader("Vary") == "Accept-Encoding"
    finally:
        server.shutdown()
        server.server_close()
