"""bench/RESULTS.md's sections about the web app: its start-up stage by stage and the WebAssembly SIMD GEMM."""
from __future__ import annotations

from typing import List, Optional

from report_format import fmt, fmt_range

MB = 2 ** 20


def widget_section(widget_runs: List[list], app_runs: List[list]) -> List[str]:
    """A host page embedding the widget (bench/browser.py WIDGET_HOST): ms from navigation to its first training
    progress per visit, beside the app's first step in the same runs."""
    if not widget_runs:
        return []
    out = ["### The widget in a host page (the README's embedding: digits, an MLP)", "",
           f"ms from navigation, median [min – max] over {len(widget_runs)} run(s); the app's first step from the same runs.",
           "", "| visit | widget: first progress | app: first step |", "|---|---|---|"]
    for visit, name in ((0, "first"), (1, "second")):
        w = [run[visit]["firstProgress"] for run in widget_runs if len(run) > visit]
        a = [run[visit]["firstStep"] for run in app_runs if len(run) > visit and run[visit].get("firstStep")]
        out.append(f"| {name} | {fmt_range(w, '%.0f') if w else '–'} | {fmt_range(a, '%.0f') if a else '–'} |")
    return out + [""]


def app_section(app_runs: List[list], transfer: Optional[dict] = None) -> List[str]:
    """The web app's start-up stage by stage (ms since navigation), per visit, over the runs."""
    if not app_runs:
        return []
    out = ["## Web app start-up (build.py's site; each run: a fresh browser context, two visits)", "",
           "ms since navigation at the end of each stage (the worker's marks moved to the page's clock), "
           f"median [min – max] over {len(app_runs)} run(s), and the stage's own duration (median). "
           "The harness builds the digits MLP and starts training as soon as Python is ready.", ""]
    if transfer:
        extra = "; ".join(f"{name} {v['sent'] / MB:.2f} MB ({v['raw'] / MB:.2f} MB raw)"
                          for name, v in transfer.items() if isinstance(v, dict))
        out += [f"A first visit downloads {transfer['sent'] / MB:.1f} MB as sent (gzip where build.py "
                f"wrote a .gz; {transfer['raw'] / MB:.1f} MB raw) up to the first digits step; of it {extra}.", ""]
    for visit, title in ((0, "First visit (empty cache)"), (1, "Second visit (Service Worker cache)")):
        visits = [run[visit] for run in app_runs if len(run) > visit and run[visit].get("stages")]
        if not visits:
            continue
        names = list(dict.fromkeys(k for v in visits for k in v["stages"]))
        out += [f"### {title}", "", "| stage ends | ms since navigation | stage ms (median) |", "|---|---|---|"]
        prev = None
        for name in names:
            vals = [v["stages"][name] for v in visits if name in v["stages"]]
            durs = [v["stages"][name] - v["stages"][prev] for v in visits
                    if prev is not None and name in v["stages"] and prev in v["stages"]]
            out.append(f"| {name} | {fmt_range(vals, '%.0f')} | {fmt_range(durs, '%.0f').split(' [')[0] if durs else '–'} |")
            prev = name
        out.append("")
    return out


def gemm_section(g: dict) -> List[str]:
    if not g:
        return []
    out = ["## WebAssembly SIMD GEMM (web/kernels/kernels.wasm)", ""]
    node, raw = g.get("node") or [], g.get("chromium_raw") or []
    if node or raw:
        by_raw = {r["case"]: r for r in raw}
        out += ["Raw kernel (operands already in wasm memory), median ms and GFLOP/s:", "",
                "| case | Node ms | Node GFLOP/s | Chromium ms | Chromium GFLOP/s |",
                "|---|---|---|---|---|"]
        for r in node or raw:
            c = by_raw.get(r["case"], {})
            n = r if node else {}
            out.append(f"| {r['case']} | {fmt(n.get('ms'), 3)} | {fmt(n.get('gflops'), 1)} | "
                       f"{fmt(c.get('ms'), 3)} | {fmt(c.get('gflops'), 1)} |")
        out.append("")
    py = g.get("pyodide")
    if py:
        out += ["Inside Pyodide 0.17.1 (numpy arrays -> Python call -> JS -> wasm, in place; "
                "pytrain/ops/wasm/linalg.py), median ms per product:", "",
                "| product | views | wasm sgemm ms | numpy-in-Pyodide ms | speed-up | max rel. error |",
                "|---|---|---|---|---|---|"]
        for c in py["cases"]:
            out.append(f"| {c['case']} | {c['trans']} | {fmt(c['wasm_ms'], 3)} | "
                       f"{fmt(c['numpy_ms'], 3)} | ×{c['speedup']:.1f} | {c['max_rel_err']:.1e} |")
        ov = py.get("overhead", {})
        if ov:
            out += ["", "Per-call costs in Pyodide (µs): " + ", ".join(
                f"{k.replace('_us', '')} {v:.1f}" for k, v in ov.items())]
        out.append("")
    for k in ("node_error", "pyodide_error"):
        if g.get(k):
            out += [f"{k}: `{g[k][:300]}`", ""]
    return out
