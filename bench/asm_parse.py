"""pyodide.asm.js's cost in a worker before Python starts: ``importScripts`` of the file, then Pyodide's module
factory run with no wasm (emscripten's ``instantiateWasm`` hook never answers), in a fresh worker each time, two
files alternating (e.g. main's site against this one's: ``buildsite/asm_exports.py`` compacts the export wrappers).

    python bench/asm_parse.py /tmp/main_site/pyodide/0.17.1/pyodide.asm.js build/site/pyodide/0.17.1/pyodide.asm.js
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

WORKER = """self.onmessage = (e) => {
  const t0 = performance.now();
  importScripts(e.data);
  const t1 = performance.now();
  const M = { instantiateWasm() { return {}; }, locateFile: (p) => "absent/" + p, noInitialRun: true };
  self._createPyodideModule(M);
  postMessage([t1 - t0, performance.now() - t1]);
};
"""
#: a fresh worker per run, the file under a new query each time (no cache of any kind can answer)
RUN = """async ([name, i]) => { const w = new Worker('w.js?' + i); const r = await new Promise((res) => {
  w.onmessage = (e) => res(e.data); w.postMessage(name + '?r=' + i); }); w.terminate(); return r; }"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs=2, help="two pyodide.asm.js files")
    ap.add_argument("--runs", type=int, default=12)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from buildsite.server import serve_in_thread

    folder = Path(tempfile.mkdtemp())
    names = ["a.js", "b.js"]
    for src, name in zip(args.files, names):
        shutil.copyfile(src, folder / name)
    (folder / "w.js").write_text(WORKER)
    (folder / "index.html").write_text("<!doctype html><p>pyodide.asm.js</p>")
    server, url = serve_in_thread(folder)
    res = {n: [] for n in names}
    load = [os.getloadavg()[0]]
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(url)
            for i in range(args.runs):
                for n in (names if i % 2 else names[::-1]):
                    res[n].append(page.evaluate(RUN, [n, f"{i}{n}"]))
            browser.close()
    finally:
        server.shutdown()
        shutil.rmtree(folder)
    load.append(os.getloadavg()[0])
    for src, n in zip(args.files, names):
        imp, fac = sorted(r[0] for r in res[n]), sorted(r[1] for r in res[n])
        tot = sorted(r[0] + r[1] for r in res[n])
        print(f"{src} ({Path(src).stat().st_size} bytes): importScripts {statistics.median(imp):.0f} ms median "
              f"[{imp[0]:.0f} - {imp[-1]:.0f}], factory {statistics.median(fac):.0f} [{fac[0]:.0f} - {fac[-1]:.0f}], "
              f"both {statistics.median(tot):.0f} [{tot[0]:.0f} - {tot[-1]:.0f}] (n={len(tot)}, load "
              f"{min(load):.1f}-{max(load):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
