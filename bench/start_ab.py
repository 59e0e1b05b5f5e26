"""The web app's and the widget's start on loopback, two built sites alternating (A/B): per pass and site a fresh
browser context, the app's two visits (first, second from the Service Worker cache) and the widget host page's two.

    python build.py && cp -a build/site /tmp/site_a          # (a site built from another checkout: /tmp/site_b)
    python bench/start_ab.py --sites /tmp/site_b build/site --passes 4 [--json out.json]

Prints per site and visit the median of every stage (ms since navigation: bench/browser.py app_stages) and the
widget's first progress, with the load average before and after the run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from browser import WIDGET_HOST, BrowserSession  # noqa: E402

HOST = "bench-widget-start.html"


def one_pass(session, url: str, site: Path) -> dict:
    """The app's two visits and the widget host's two, each in a fresh context."""
    (site / HOST).write_text(WIDGET_HOST, encoding="utf-8")
    app = session.app_start(url)
    widget = session.widget_start(url, HOST)
    return {"app": [v["stages"] for v in app], "widget": [v["firstProgress"] for v in widget]}


def medians(runs: list, visit: int) -> dict:
    """Each stage's median over the runs (stages in the first run's order)."""
    names = list(runs[0]["app"][visit])
    return {n: statistics.median(r["app"][visit][n] for r in runs if n in r["app"][visit]) for n in names}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sites", nargs="+", required=True, help="built site folders, run alternating")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--json", help="write every pass's stages here")
    args = ap.parse_args()
    from buildsite.server import serve_in_thread

    sites = [Path(s).resolve() for s in args.sites]
    servers = [serve_in_thread(s) for s in sites]
    runs = {str(s): [] for s in sites}
    load = [os.getloadavg()[0]]
    try:
        with BrowserSession() as session:
            for p in range(args.passes):
                order = list(zip(sites, servers))
                if p % 2:
                    order.reverse()
                for site, (_, url) in order:
                    r = one_pass(session, url, site)
                    runs[str(site)].append(r)
                    print(f"pass {p + 1} {site}: app second {r['app'][1]['first step']:.0f} first "
                          f"{r['app'][0]['first step']:.0f}; widget {r['widget'][0]:.0f} / {r['widget'][1]:.0f} ms",
                          flush=True)
                load.append(os.getloadavg()[0])
    finally:
        for server, _ in servers:
            server.shutdown()
            server.server_close()
    for site, rs in runs.items():
        print(f"\n== {site} ({len(rs)} passes, load {min(load):.1f}-{max(load):.1f})")
        for visit, label in ((1, "second"), (0, "first")):
            print(f"  app {label} visit: " + ", ".join(f"{k} {v:.0f}" for k, v in medians(rs, visit).items()))
        for visit, label in ((1, "second"), (0, "first")):
            vals = sorted(r["widget"][visit] for r in rs)
            print(f"  widget {label} visit: first progress median {statistics.median(vals):.0f} [{vals[0]:.0f} - {vals[-1]:.0f}]")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "load": load}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
