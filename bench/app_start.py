"""The web app's start-up in the bench: build.py's site served, its first visit's bytes, one start-up
run (a fresh browser context: first visit, then second from the Service Worker cache)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from browser import WIDGET_HOST
from report_format import log

ROOT = Path(__file__).resolve().parent.parent


def build_site() -> Path:
    """build.py's site folder (what AppSite serves)."""
    import build

    return build.SITE


class AppSite:
    """build.py's site, built once and served on a free port for the web app's start-up runs."""

    def __enter__(self) -> "AppSite":
        sys.path.insert(0, str(ROOT))
        import build

        self.error = None
        self.server = None
        try:
            build.build()
            self.server, self.url = build.serve_in_thread(build.SITE)
        except Exception as e:  # the start-up rows show the error
            self.error = str(e)
        return self

    def __exit__(self, *exc) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


#: what Chromium 156 sends, also to http://127.0.0.1
CHROMIUM_ACCEPT_ENCODING = "gzip, deflate, br, zstd"


def app_transfer(site: Path) -> dict:
    """Bytes a first visit downloads on the way to the first digits-MLP step (build.py's server
    sends the .br or .gz twin Chromium accepts when there is one): raw and as sent, in total and for the items the
    start-up work added (pytrain's bytecode zip, the stdlib + numpy bytecode bundle)."""
    config = json.loads((site / "config.json").read_text())
    index = config["pyodide"]["indexURL"]
    digits = config["mnist"].get("first") or config["mnist"]   # the whole file arrives after the first step
    # (kernels.js is inlined in worker.js; Chromium has relaxed SIMD: the worker fetches the FMA build)
    rels = ["index.html", "config.json", "sw.js", "worker.js", "kernels/kernels-fma.wasm",
            digits["file"]] + [str(p.relative_to(site)) for p in (site / "js").glob("*.js")]
    rels += [str(p.relative_to(site)) for p in (site / "worker").glob("*.js")]   # worker.js's rooms
    rels += [index + n for n in ("pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "pyodide.asm.data",
                                 "packages.json")]
    rels += [index + f"{pkg}.{ext}" for pkg in config["pyodide"].get("packages", ["numpy"]) for ext in ("js", "data")]
    rels += list((config.get("artifacts") or {}).get("digits-mlp", {}).values())
    parts = {"pytrain": (config.get("python") or {}).get("zip", config["wheel"]),
             "bytecode": (config.get("bytecode") or {}).get("file")}
    rels += [r for r in parts.values() if r]

    from buildsite.compress import pick

    def sizes(rel: str) -> tuple:
        path = site / rel
        raw = path.stat().st_size if path.is_file() else 0
        return raw, pick(path, CHROMIUM_ACCEPT_ENCODING)[0].stat().st_size if raw else 0

    total = [sum(x) for x in zip(*(sizes(r) for r in rels))]
    return {"raw": total[0], "sent": total[1],
            **{k: dict(zip(("raw", "sent"), sizes(r))) for k, r in parts.items() if r}}


def run_app_start(results: dict, session, site: AppSite) -> None:
    """One start-up run of the web app (a fresh browser context, first visit then second visit
    from the Service Worker cache), appended to results["app_runs"]."""
    try:
        if site.error:
            raise RuntimeError(site.error)
        visits = session.app_start(site.url)
        host = "bench-widget-start.html"   # at the site's root, as the README's host pages are
        (build_site() / host).write_text(WIDGET_HOST, encoding="utf-8")
        widget = session.widget_start(site.url, host)
        results.setdefault("widget_runs", []).append(widget)
        log("  widget: first progress " + ", ".join(f"visit {i + 1} {v['firstProgress']:.0f} ms" for i, v in enumerate(widget)))
        if "app_transfer" not in results:
            import build

            results["app_transfer"] = app_transfer(build.SITE)
        results.setdefault("app_runs", []).append(visits)
        for i, t in enumerate(visits):
            stages = ", ".join(f"{k} {v:.0f}" for k, v in t["stages"].items())
            log(f"  app visit {i + 1}: first step {t['firstStep']:.0f} ms after navigation ({stages})")
    except Exception as e:  # the row shows the error
        results.setdefault("app_errors", []).append(str(e))
        log(f"  app start-up: ERROR {str(e)[:400]}")


def run_app_only(results: dict, repeat: int, verbose: bool) -> None:
    """Only the web app's start-up, ``repeat`` times (``--only app``)."""
    from browser import BrowserSession

    with BrowserSession(verbose=verbose) as s, AppSite() as site:
        results["env"]["chromium"] = s.version
        for _ in range(repeat):
            run_app_start(results, s, site)
