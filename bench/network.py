"""The first training step over a network: a first and a second visit under Chromium's network
emulation (CDP ``Network.emulateNetworkConditions``), and the bytes sent before that step.

    python bench/run.py --only network [--repeat 3] [--out /tmp/net]

Runtimes: pytrain's web app (build.py's site: precompressed .br/.gz twins, its Service Worker cache
on the second visit; the digits MLP built and trained as in the start-up rows), onnxruntime-web and
TensorFlow.js (their bench pages, the MLP workload, 1 thread). The peers are served the same way as
the app: the files their page fetched on loopback are mirrored into a folder, precompressed by the
site build's own code (buildsite/compress.py) and served by the site's server (buildsite/server.py:
brotli when the browser accepts it, ETag revalidation, so their second visit comes from the HTTP
cache), so every runtime gets the same deployment. Each pass: for every profile and runtime, a
fresh browser context, two visits. Bytes are counted on the server's sockets (headers included)
from navigation to the end of the first step. Emulation on the page throttles its Web Worker's
requests too, not its Service Worker's: :class:`ServiceWorkerEmulation` gives every service
worker the profile as well, holding it at its start until it has it (before that fix it attached
from a CDP event, and the app's Service Worker often fetched before); the report still leaves out
a pass whose first visit came faster than its bytes can at the profile's throughput (and says how many).
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: Chromium's emulation parameters (latency: added round trip in ms; throughputs in bytes/s); None: no emulation
PROFILES: Dict[str, Optional[dict]] = {
    "loopback": None,
    # a phone on a good mobile network (DevTools' "Fast 4G" throughputs) with a 150 ms round trip
    "phone": dict(offline=False, latency=150, downloadThroughput=9e6 / 8, uploadThroughput=1.5e6 / 8),
}
PEERS = (("onnxruntime-web 1.19.2 (1 thread)", "/bench/pages/ort.html?workload=mlp&warmup=0&steps=1&threads=1"),
         ("TensorFlow.js 4.22 wasm (1 thread)", "/bench/pages/tfjs.html?workload=mlp&warmup=0&steps=1&threads=1"))
DONE = "window.__bench && window.__bench.status !== 'running'"   # a bench page has finished (pages/common.js)
APP = "pytrain web app (Pyodide 0.17.1 + wasm kernels)"
MB = 2 ** 20


class ByteCounter:
    """Counts what a server's handlers write to their sockets (status line, headers, bodies)."""

    def __init__(self, server) -> None:
        self.bytes = 0
        self._lock = threading.Lock()
        counter, base = self, server.RequestHandlerClass

        class _Writer:
            def __init__(self, raw) -> None:
                self._raw = raw

            def write(self, data) -> int:
                n = self._raw.write(data)
                with counter._lock:
                    counter.bytes += len(data)
                return n

            def __getattr__(self, name):
                return getattr(self._raw, name)

        class Counting(base):
            def setup(self) -> None:
                super().setup()
                self.wfile = _Writer(self.wfile)

        server.RequestHandlerClass = Counting

    def take(self) -> int:
        with self._lock:
            n, self.bytes = self.bytes, 0
        return n


def emulate(page, profile: Optional[dict]) -> None:
    """Network emulation for ``page`` (and the Web Workers it starts), before it navigates."""
    if profile is None:
        return
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", profile)


#: runs in a helper page given the browser's DevTools protocol (Target.exposeDevToolsProtocol): every
#: service worker is auto-attached as it starts, held there (waitForDebuggerOnStart) until it has the
#: profile (window.swProfile), then let run. Its flat-protocol messages address the worker's session.
_SW_HOLD = """() => {
  let id = 1000;
  const send = (method, params, sessionId) => window.cdp.send(JSON.stringify(
    Object.assign({ id: id++, method, params: params || {} }, sessionId ? { sessionId } : {})));
  window.swAttached = 0;
  window.cdp.onmessage = (raw) => {
    const msg = JSON.parse(raw);
    if (msg.method !== "Target.attachedToTarget" || msg.params.targetInfo.type !== "service_worker") return;
    const sid = msg.params.sessionId;
    send("Network.enable", {}, sid);
    if (window.swProfile) send("Network.emulateNetworkConditions", window.swProfile, sid);
    send("Runtime.runIfWaitingForDebugger", {}, sid);
    window.swAttached++;
  };
  send("Target.setAutoAttach", { autoAttach: true, waitForDebuggerOnStart: true, flatten: true,
                                 filter: [{ type: "service_worker", exclude: false }] });
}"""


class ServiceWorkerEmulation:
    """A page's emulation does not reach its Service Worker's own fetches (measured: 2 MB through a
    Service Worker in 0.15 s under a 9 Mbit/s page), and the app's worker loads everything through its
    Service Worker. So, as DevTools does, every service worker is attached as it starts and held until
    it has ``profile`` too: no fetch of its escapes the emulation. Playwright's sessions cannot address
    a flat child session, so a helper page holds the browser's protocol (``_SW_HOLD``)."""

    def __init__(self, browser) -> None:
        self._profile: Optional[dict] = None
        self._ctx = browser.new_context()
        self._page = self._ctx.new_page()
        cdp = browser.new_browser_cdp_session()
        targets = cdp.send("Target.getTargets")["targetInfos"]
        page_target = next(t["targetId"] for t in targets if t["type"] == "page" and t["url"] == "about:blank"
                           and t.get("browserContextId") == self._context_id(cdp))
        cdp.send("Target.exposeDevToolsProtocol", {"targetId": page_target, "bindingName": "cdp"})
        self._page.evaluate(_SW_HOLD)

    def _context_id(self, cdp) -> Optional[str]:
        info = self._page.context.new_cdp_session(self._page).send("Target.getTargetInfo")["targetInfo"]
        return info.get("browserContextId")

    @property
    def profile(self) -> Optional[dict]:
        return self._profile

    @profile.setter
    def profile(self, value: Optional[dict]) -> None:
        self._profile = value
        self._page.evaluate("(p) => { window.swProfile = p; }", value)

    @property
    def attached(self) -> int:
        return int(self._page.evaluate("window.swAttached"))


def peer_site(session, dest: Path) -> None:
    """Mirror into ``dest`` every file the peers' pages fetch (one loopback load each), then
    precompress it as build.py does the app's site."""
    from buildsite.compress import precompress

    for _, url in PEERS:
        session.plain.take_log()
        ctx = session.browser.new_context()
        try:
            page = ctx.new_page()
            page.goto(session.plain.origin + url, wait_until="commit")
            page.wait_for_function(DONE, timeout=300_000, polling=250)
        finally:
            ctx.close()
        for url_path, fs_path in session.plain.take_log():
            target = dest / url_path.split("?")[0].lstrip("/")
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(fs_path, target)
    precompress(dest)


def _peer_visits(session, origin: str, url: str, profile: Optional[dict], counter: ByteCounter) -> List[dict]:
    ctx = session.browser.new_context()  # (the peers' pages register no Service Worker)
    out = []
    try:
        for _ in range(2):
            page = ctx.new_page()
            emulate(page, profile)
            counter.take()
            t0 = time.perf_counter()
            page.goto(origin + url, wait_until="commit")
            page.wait_for_function(DONE, timeout=600_000, polling=100)
            state = page.evaluate("window.__bench")
            sent = counter.take()
            if state["status"] != "done":
                raise RuntimeError(f"{url}: {state.get('error')}")
            out.append({"first_step_ms": state["result"]["cold_ms"], "bytes": sent, "wall_s": time.perf_counter() - t0})
            page.close()
    finally:
        ctx.close()
    return out


def _app_visits(session, site, profile: Optional[dict], counter: ByteCounter) -> List[dict]:
    sent: List[int] = []

    def prepare(page) -> None:
        emulate(page, profile)
        counter.take()

    visits = session.app_start(site.url, prepare=prepare, reached=lambda page, t: sent.append(counter.take()),
                               timeout_s=600)
    return [{"first_step_ms": t["firstStep"], "bytes": b, "stages": t["stages"]} for t, b in zip(visits, sent)]


def run(results: dict, repeat: int, verbose: bool = False) -> None:
    """``repeat`` passes over every profile and runtime; appends to results["network"]["runs"]."""
    sys.path.insert(0, str(ROOT))
    from browser import BrowserSession
    from buildsite.server import make_server
    from app_start import AppSite
    from report_format import log

    net = results.setdefault("network", {"profiles": PROFILES, "runs": []})
    with BrowserSession(verbose=verbose) as s, AppSite() as site, tempfile.TemporaryDirectory() as tmp:
        results["env"]["chromium"] = s.version
        if site.error:
            raise RuntimeError(site.error)
        app_counter = ByteCounter(site.server)
        workers = ServiceWorkerEmulation(s.browser)
        peer_site(s, Path(tmp))
        peers = make_server(Path(tmp))
        threading.Thread(target=peers.serve_forever, daemon=True).start()
        peer_counter = ByteCounter(peers)
        origin = "http://127.0.0.1:%d" % peers.server_address[1]
        try:
            for i in range(repeat):
                for name, profile in PROFILES.items():
                    workers.profile = profile
                    jobs = [(APP, lambda: _app_visits(s, site, profile, app_counter))]
                    jobs += [(label, lambda url=url: _peer_visits(s, origin, url, profile, peer_counter))
                             for label, url in PEERS]
                    for label, job in jobs:
                        rec = {"pass": i, "profile": name, "runtime": label}
                        try:
                            rec["visits"] = job()
                            log("  %-8s %-48s " % (name, label) + "  ".join(
                                "visit %d: first step %.2f s, %.2f MB"
                                % (k + 1, v["first_step_ms"] / 1e3, v["bytes"] / MB)
                                for k, v in enumerate(rec["visits"])))
                        except Exception as e:  # the report shows the error
                            rec["error"] = str(e)
                            log("  %-8s %-48s ERROR %s" % (name, label, str(e)[:300]))
                        net["runs"].append(rec)
        finally:
            peers.shutdown()
            peers.server_close()


def section(res: dict, fmt_range) -> List[str]:
    """RESULTS.md's table: per profile and runtime, each visit's first step and bytes before it
    (``fmt_range(values, fmt)``: the report's median [min – max])."""
    runs = (res.get("network") or {}).get("runs") or []
    if not runs:
        return []
    out = ["## First training step over a network (`python bench/run.py --only network`)", "",
           "Seconds from navigation to the end of the first training step (the digits MLP for the web app, the MLP "
           "workload for the peers' pages), median [min – max] over the passes, and the MB the server sent before it "
           "(headers included). Chromium's network emulation: **phone** = 9 Mbit/s down, 1.5 Mbit/s up, 150 ms round "
           "trip; **loopback** = none. Every runtime is served by the site's server with the build's precompressed "
           "brotli/gzip twins; the second visit is in the same browser context (the app: its Service Worker cache; "
           "the peers: the HTTP cache, revalidated by ETag).", "",
           "| profile | runtime | first visit s | MB sent | second visit s | MB sent |", "|---|---|---|---|---|---|"]
    keys = list(dict.fromkeys((r["profile"], r["runtime"]) for r in runs))
    profiles = (res.get("network") or {}).get("profiles") or PROFILES

    def throttled(prof: str, visits: List[dict]) -> bool:
        """False when a visit came faster than its bytes can at the profile's throughput: the emulation
        did not reach every request (a Service Worker attached too late), so the pass is left out."""
        rate = (profiles.get(prof) or {}).get("downloadThroughput")
        return not rate or all(v["first_step_ms"] / 1e3 >= v["bytes"] / rate for v in visits)

    for prof, rt in keys:
        mine = [r for r in runs if r["profile"] == prof and r["runtime"] == rt]
        ok = [r["visits"] for r in mine if "visits" in r and throttled(prof, r["visits"])]
        cells = []
        for v in (0, 1):
            secs = [vs[v]["first_step_ms"] / 1e3 for vs in ok if len(vs) > v]
            sent = [vs[v]["bytes"] / MB for vs in ok if len(vs) > v]
            cells += [fmt_range(secs, "%.2f") if secs else "–", fmt_range(sent, "%.2f") if sent else "–"]
        errs = len(mine) - len(ok)
        note = f" ({errs} of {len(mine)} passes failed or were not throttled: left out)" if errs else ""
        out.append(f"| {prof} | {rt}{note} | " + " | ".join(cells) + " |")
    return out + [""] + _targets(runs, fmt_range)


#: issue 24: (profile, visit, limit) on the app's first step over onnxruntime-web's, same pass and visit
TARGETS = (("phone", 0, 1.5), ("phone", 1, 1.0), ("loopback", 0, 2.0), ("loopback", 1, 1.5))
#: the app's stages (bench/browser.py app_stages) the causes line reads, in order
_STAGES = ("worker started", "Starting Python", "Pyodide started", "numpy loaded", "page ready", "model built",
           "first step")


def _targets(runs: List[dict], fmt_range) -> List[str]:
    """Issue 24's targets per pass (the app's first step over onnxruntime-web's in the same pass and
    visit), and for every profile the app's stages on each visit: where its time goes."""
    def visits(prof: str, runtime: str) -> Dict[int, List[dict]]:
        return {r["pass"]: r["visits"] for r in runs if r["profile"] == prof and r["runtime"] == runtime
                and "visits" in r}

    out = ["Issue 24's targets (the app's first step ÷ onnxruntime-web's, same pass and visit):", "",
           "| profile | visit | target | this run: median [min – max] | met? |", "|---|---|---|---|---|"]
    for prof, visit, limit in TARGETS:
        app, ort = visits(prof, APP), visits(prof, PEERS[0][0])
        ratios = [app[i][visit]["first_step_ms"] / ort[i][visit]["first_step_ms"] for i in app
                  if i in ort and len(app[i]) > visit and len(ort[i]) > visit]
        met = sum(r <= limit for r in ratios)
        verdict = "–" if not ratios else "met" if met == len(ratios) else "**not met**" if not met \
            else f"**met in {met} of {len(ratios)} passes**"
        cell = fmt_range(ratios, "×%.2f") if ratios else "not measured"
        out.append(f"| {prof} | {('first', 'second')[visit]} | ≤ ×{limit} | {cell} | {verdict} |")
    out += ["", "The app's stages, ms since navigation (median over the passes): where its time goes.", "",
            "| profile | visit | " + " | ".join(_STAGES) + " |", "|---|---|" + "---|" * len(_STAGES)]
    for prof in PROFILES:
        for visit in (0, 1):
            rows = [v[visit].get("stages") or {} for v in visits(prof, APP).values() if len(v) > visit]
            cells = []
            for name in _STAGES:
                vals = sorted(r[name] for r in rows if name in r)
                cells.append("%.0f" % vals[len(vals) // 2] if vals else "–")
            out.append(f"| {prof} | {('first', 'second')[visit]} | " + " | ".join(cells) + " |")
    return out + [""] + _loopback_cause(visits)


def _loopback_cause(visits) -> List[str]:
    """Over loopback the bytes cost nothing: what the app's first step spends beyond onnxruntime-web's,
    stage by stage (medians over the passes), Pyodide's own start apart."""
    def med(vals: List[float]) -> float:
        vals = sorted(vals)
        return vals[len(vals) // 2] if vals else float("nan")

    parts = []
    for visit, name in ((0, "first"), (1, "second")):
        runs = [v[visit] for v in visits("loopback", APP).values() if len(v) > visit and v[visit].get("stages")]
        ort = med([v[visit]["first_step_ms"] for v in visits("loopback", PEERS[0][0]).values() if len(v) > visit])
        if not runs or ort != ort:
            return []
        st = lambda a, b: med([r["stages"][b] - (r["stages"][a] if a else 0) for r in runs  # noqa: E731
                               if b in r["stages"] and (not a or a in r["stages"])])
        total, py = med([r["first_step_ms"] for r in runs]), st("worker started", "Pyodide started")
        parts.append("%s visit %.0f ms against onnxruntime-web's %.0f: the page and the worker's start %.0f, "
                     "Pyodide's own start (its 11 MB wasm compiled, CPython and its `pyodide` package started) %.0f, "
                     "numpy's load %.0f, the imports (numpy, the kernels, pytrain) %.0f, the model %.0f and the "
                     "first step %.0f ms; without Pyodide's start the app would be x%.2f of onnxruntime-web"
                     % (name, total, ort, st(None, "worker started"), py, st("Pyodide started", "numpy loaded"),
                        st("numpy loaded", "page ready"), st("page ready", "model built"),
                        st("model built", "first step"), (total - py) / ort))
    return ["Over loopback (where the bytes cost nothing): " + "; ".join(parts) + ". Pyodide 0.17's start is "
            "the floor the page cannot cut (the site already sends precompiled bytecode and starts every "
            "download at once).", ""]
