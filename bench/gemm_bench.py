"""Benchmark web/kernels/kernels.wasm: in Node (raw kernel) and inside Pyodide (through
the Python handshake of pytrain/ops/wasm/linalg.py, against numpy-in-Pyodide).

    python bench/gemm_bench.py [--reps N] [--skip-browser]

run.py calls node_gemm() and pyodide_gemm() for its "WebAssembly SIMD GEMM" section.
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import List, Optional

from report_format import log

HERE = Path(__file__).resolve().parent
WASM = HERE.parent / "web" / "kernels" / "kernels.wasm"


def node_gemm(reps: int = 200, wasm: Path = WASM) -> List[dict]:
    """Median/min ms and GFLOP/s per case from bench/gemm_node.js."""
    out = subprocess.run(["node", str(HERE / "gemm_node.js"), str(wasm), str(reps)],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def chromium_raw_gemm(session) -> List[dict]:
    """The raw kernel in the browser (bench/pages/gemm_raw.html), same cases as Node."""
    return session.run_page("/bench/pages/gemm_raw.html")["cases"]


def pyodide_gemm(session) -> dict:
    """Run bench/pages/gemm.html in an open browser.BrowserSession."""
    return session.run_page("/bench/pages/gemm.html")


def run_gemm(results: dict, session=None) -> None:
    g = results.setdefault("gemm", {})
    try:
        g["node"] = node_gemm(reps=30)
        log("  gemm in Node: " + ", ".join(f"{r['case']} {r['ms']:.3f} ms" for r in g["node"][:4]))
    except Exception as e:
        g["node_error"] = str(e)
    if session is None:
        from browser import BrowserSession

        with BrowserSession() as s:
            results["env"]["chromium"] = s.version
            run_gemm_pages(g, s)
    else:
        run_gemm_pages(g, session)


def run_gemm_pages(g: dict, s) -> None:
    try:
        g["chromium_raw"] = chromium_raw_gemm(s)
        g["pyodide"] = pyodide_gemm(s)
        c = g["pyodide"]["cases"][0]
        log(f"  gemm in Pyodide: {c['case']} wasm {c['wasm_ms']:.3f} ms vs numpy "
            f"{c['numpy_ms']:.3f} ms")
    except Exception as e:
        g["pyodide_error"] = str(e)
        log(f"  gemm pages: ERROR {str(e)[:300]}")


def main(argv: Optional[list] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--skip-browser", action="store_true")
    args = ap.parse_args(argv)
    print("Node.js (raw kernel, operands already in wasm memory):")
    for r in node_gemm(args.reps):
        print(f"  {r['case']:<26} median {r['ms']:.3f} ms  min {r['min_ms']:.3f} ms  "
              f"{r['gflops']:.1f} GFLOP/s")
    if args.skip_browser:
        return
    from browser import BrowserSession

    with BrowserSession() as s:
        raw = chromium_raw_gemm(s)
        res = pyodide_gemm(s)
    print(f"Chromium {s.version} (raw kernel, own WebAssembly.Memory):")
    for r in raw:
        print(f"  {r['case']:<26} median {r['ms']:.3f} ms  min {r['min_ms']:.3f} ms  "
              f"{r['gflops']:.1f} GFLOP/s")
    print(f"Pyodide 0.17.1 in Chromium (Python call -> JS -> wasm, in place):")
    for c in res["cases"]:
        print(f"  {c['case']:<24} {c['trans']}  wasm {c['wasm_ms']:.3f} ms  numpy "
              f"{c['numpy_ms']:.3f} ms  x{c['speedup']:.1f}  max rel err {c['max_rel_err']:.1e}")
    print("  call overhead (us):", json.dumps({k: round(v, 1) for k, v in res["overhead"].items()}))


if __name__ == "__main__":
    main()
