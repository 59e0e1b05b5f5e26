"""Serves the site: MIME types, precompressed .br/.gz twins (by Accept-Encoding), ETags, cache headers,
cross-origin isolation (COOP/COEP, so the worker can split big products across threads), and a Flower
SuperLink's Fleet API under /flower/ (the SuperLink has no CORS; the page's CSP stays 'self')."""
from __future__ import annotations

import email.utils
import http.server
import json
import shutil
import threading
from pathlib import Path
from typing import Optional, Tuple

from buildsite import compress
from buildsite.paths import SITE

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
    """Serves one folder: MIME types, precompressed .br/.gz twins, ETag revalidation, cache headers."""

    root: Path = SITE
    quiet = True
    #: send COOP/COEP on every response: the page is cross-origin isolated (self.crossOriginIsolated),
    #: which gives its worker SharedArrayBuffer and so the kernels' helper threads (docs/web.md)
    isolated = True
    server_version = "pytrain-site"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        if not self.quiet:
            super().log_message(format, *args)

    def end_headers(self) -> None:
        if self.isolated:
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()

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
        # a precompressed twin (.br, .gz) when the client accepts its encoding; the file itself otherwise
        send_path, encoding = compress.pick(path, self.headers.get("Accept-Encoding"))
        st = send_path.stat()
        etag = '"%x-%x%s"' % (int(st.st_mtime_ns), st.st_size, "-" + encoding if encoding else "")
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
        from urllib.parse import urlsplit
        if urlsplit(self.path).path == self.FLOWER_ROOT:  # the page asks whether a SuperLink is served here
            self._reply(200, json.dumps({"superlink": bool(self.flower)}).encode(), "application/json")
            return
        try:
            self._send(head_only=False)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
        self._send(head_only=True)

    # The SuperLink has no CORS: the page reaches its Fleet API through this origin (CSP stays 'self').
    flower: Optional[str] = None
    #: GET answers {"superlink": true|false}: whether this server forwards a SuperLink (the page's Join needs one)
    FLOWER_ROOT = "/flower/"
    FLOWER_PREFIX = FLOWER_ROOT + "v1/fleet/"
    FLOWER_HEADERS = ("Content-Type", "Accept", "flwr-public-key", "flwr-timestamp", "flwr-signature")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        """POST /flower/v1/fleet/<route> -> <flower>/v1/fleet/<route>, bodies and status as they are."""
        import urllib.error
        import urllib.request
        from urllib.parse import urlsplit

        from pytrain.flower.transport import MAX_RESPONSE
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
                # no more than the node reads: past MAX_RESPONSE it refuses the answer anyway
                status, ctype = resp.status, resp.headers.get("Content-Type", "")
                data = resp.read(MAX_RESPONSE + 1)
        except urllib.error.HTTPError as e:
            status, data, ctype = e.code, e.read(MAX_RESPONSE + 1), e.headers.get("Content-Type", "")
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


def make_server(root: Path = SITE, port: int = 0, host: str = "127.0.0.1", quiet: bool = True,
                flower: Optional[str] = None, isolated: bool = True) -> http.server.ThreadingHTTPServer:
    """A threaded HTTP server for ``root`` (port 0 picks a free port); call serve_forever().
    ``flower``: a SuperLink's Fleet API URL to serve under /flower/; ``isolated``: send COOP/COEP."""
    handler = type("BoundSiteHandler", (SiteHandler,), {"root": Path(root), "quiet": quiet, "flower": flower,
                                                         "isolated": isolated})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve_in_thread(root: Path = SITE, port: int = 0, flower: Optional[str] = None,
                    isolated: bool = True) -> Tuple[http.server.ThreadingHTTPServer, str]:
    """Start a server in a daemon thread; returns (server, base URL ending in /)."""
    server = make_server(root, port, flower=flower, isolated=isolated)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, "http://127.0.0.1:%d/" % server.server_address[1]
