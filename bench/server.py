"""A local threaded static server for the bench pages that counts what it sends.

Serves the repository root on 127.0.0.1, never caches (every row is a cold
load), and optionally adds the COOP/COEP headers that make a page
cross-origin isolated (SharedArrayBuffer, so wasm threads).
"""
from __future__ import annotations

import gzip
import threading
from functools import lru_cache, partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import List, Tuple

EXTRA_TYPES = {".wasm": "application/wasm", ".mjs": "text/javascript", ".js": "text/javascript",
               ".data": "application/octet-stream", ".onnx": "application/octet-stream",
               ".whl": "application/octet-stream", ".zip": "application/zip"}


@lru_cache(maxsize=None)
def gzip_size(path: str, mtime: float) -> int:
    """Size of the file gzip-compressed (level 6, what static hosts typically serve)."""
    return len(gzip.compress(Path(path).read_bytes(), compresslevel=6))


class _Handler(SimpleHTTPRequestHandler):
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, **EXTRA_TYPES}

    def __init__(self, *args, bench_server: "BenchServer", **kwargs):
        self.bench_server = bench_server
        super().__init__(*args, **kwargs)

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        if self.bench_server.isolated:
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        super().end_headers()

    def send_head(self):
        f = super().send_head()
        if f is not None and hasattr(f, "name"):
            self.bench_server.record(self.path, f.name)
        return f

    def log_message(self, fmt, *args) -> None:  # keep the bench output readable
        pass


class BenchServer:
    """ThreadingHTTPServer on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self, root: Path, isolated: bool = False) -> None:
        self.isolated = isolated
        self._lock = threading.Lock()
        self._log: List[Tuple[str, str]] = []
        handler = partial(_Handler, directory=str(root), bench_server=self)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def record(self, url_path: str, fs_path: str) -> None:
        with self._lock:
            self._log.append((url_path, fs_path))

    def take_log(self) -> List[Tuple[str, str]]:
        """Files served since the last call (url path, file path), then clear."""
        with self._lock:
            log, self._log = self._log, []
        return log

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def transfer_bytes(log: List[Tuple[str, str]], exclude_prefixes=("/bench/.cache/models/",)) -> dict:
    """Raw and gzip bytes of everything in `log`, minus the batch data (the same for every row)."""
    raw = gz = 0
    files = 0
    for url, fs in log:
        if url.split("?")[0].startswith(exclude_prefixes) and "batch" in url:
            continue
        p = Path(fs)
        st = p.stat()
        raw += st.st_size
        gz += gzip_size(str(p), st.st_mtime)
        files += 1
    return {"bytes_raw": raw, "bytes_gzip": gz, "files": files}
