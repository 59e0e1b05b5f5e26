"""The stdlib's second part (buildsite/strip.py split_rest, worker/data.js loadStdlibRest): the start and
the default run's first step import nothing from it; it is fetched after that step, and a command that is
not the run's training waits until it is written, then runs. The server holds it back until told."""
from __future__ import annotations

import http.server
import json
import threading
from urllib.parse import urlsplit

import build
from browser_helpers import (LOAD_TIMEOUT_MS, Recorder, app_worker, build_digits, new_context, open_app,
                             stop_training, wait_ms, wait_ready)

MODULES = "() => runtime.pyodide.runPython('import json, sys\\njson.dumps(sorted(sys.modules))')"
EARLY = "() => runtime.pyodide.runPython('import json\\njson.dumps(_pt_rest_guard.early)')"


def test_a_command_after_the_first_step_waits_for_the_stdlib_rest(browser, site_url):
    rest = json.loads((build.SITE / "config.json").read_text())["bytecode"]["rest"]
    asked, release = threading.Event(), threading.Event()

    class Held(build.SiteHandler):
        root = build.SITE

        def do_GET(self):  # noqa: N802 - stdlib naming
            if urlsplit(self.path).path == "/" + rest["file"]:
                asked.set()
                release.wait(wait_ms(60_000) / 1000)
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Held)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/" % server.server_address[1]
    rec = Recorder()
    ctx = new_context(browser, rec)
    try:
        page = open_app(ctx, url, rec)
        wait_ready(page)
        build_digits(page, "mlp", "8000")        # the page's default run
        assert not asked.is_set()                # nothing before the first step asked for it
        page.fill("#epochs", "1")
        page.click("#start")
        page.wait_for_function("() => window.pytrainApp.timing.firstStep !== null", timeout=LOAD_TIMEOUT_MS)
        assert asked.wait(wait_ms(30_000) / 1000)   # fetched once the first step is done
        stop_training(page)                       # (stop is answered at once: nothing waits for the rest)
        worker = app_worker(page)
        assert worker.evaluate("() => restWritten") is False
        # the start and the first step import what that step needs: its own nodes' kernels (pytrain/ops/kernel_index.py),
        # not every kernel module, the generator, autodiff or the text stack (prebuilt artifacts)
        loaded = json.loads(worker.evaluate(MODULES))
        assert "pytrain.ops.nn.op_gemm" in loaded and len([m for m in loaded if ".op_" in m]) < 30
        assert not [m for m in loaded if m.startswith(("pytrain.text", "pytrain.autodiff", "pytrain.generator.artifacts"))]
        # a later command waits: its reply comes after the one of an early command sent after it
        page.evaluate("() => { const c = window.pytrainApp.client; window.__evaluated = null;"
                      " c.call('evaluate').then(() => { window.__evaluated = 'ok'; }, (e) => { window.__evaluated = String(e); }); }")
        page.evaluate("() => window.pytrainApp.client.call('config')")
        assert page.evaluate("() => window.__evaluated") is None
        assert worker.evaluate("() => runtime.pyodide.runPython('import sys\\n\"email\" in sys.modules')") is False
        release.set()
        page.wait_for_function("() => window.__evaluated !== null", timeout=LOAD_TIMEOUT_MS)
        assert page.evaluate("() => window.__evaluated") == "ok"
        assert worker.evaluate("() => restWritten") is True
        # modules of the second part import now, none of them before it was written (the guard's list)
        later = ["email.parser", "copy", "calendar", "html.entities", "gzip", "http.client"]
        assert set(later) <= set(rest["modules"])
        code = "import importlib\n[importlib.import_module(n).__name__ for n in %r]" % later
        assert worker.evaluate("(code) => runtime.pyodide.runPython(code).toJs()", code) == later
        assert json.loads(worker.evaluate(EARLY)) == []
        assert rec.console_errors == []
    finally:
        release.set()
        ctx.close()
        server.shutdown()
        server.server_close()
