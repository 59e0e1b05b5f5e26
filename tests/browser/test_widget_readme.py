"""The README's widget snippets work as written, from a page at the site's root (the data path
they name exists), and a widget whose data cannot be loaded shows only the error (no "Loading
data…" status or full progress bar above it)."""
from __future__ import annotations

import json
import re

import build
from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, open_app
from buildsite.site import WARM_FILES
from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = (ROOT / "docs" / "web.md").read_text(encoding="utf-8")
JS = re.search(r"```js\n(import \{ createTrainer \}.*?)```", README, re.S).group(1)
ELEMENT = re.search(r"`(<pytrain-trainer .*?</pytrain-trainer>)`", README).group(1)
DOCS_ELEMENT = re.search(r"```html\n(.*?<pytrain-trainer .*?</pytrain-trainer>)\n```", DOCS, re.S).group(1)
WIDGET = '<script type="module" src="pytrain-widget.js"></script>\n'


def _host(ctx, site_url, rec, body):
    """A host page at the site's root (same origin as the widget), holding ``body``."""
    html = "<!doctype html><html lang=en><head><meta charset=utf-8><title>host</title></head><body>%s</body></html>" % body
    ctx.route(site_url + "host.html", lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    return open_app(ctx, site_url, rec, "host.html")


def _prepared_or_error(page):
    page.evaluate("""() => { window.seen = {}; const el = document.querySelector('pytrain-trainer');
        for (const t of ['prepared', 'error']) el.addEventListener(t, (e) => { window.seen[t] = e.detail; }); }""")
    page.wait_for_function("() => window.seen.prepared || window.seen.error", timeout=LOAD_TIMEOUT_MS)
    return page.evaluate("window.seen")


def test_readme_code_snippet_trains_as_written(context, site_url):
    ctx, rec = context
    page = _host(ctx, site_url, rec, '<div id="trainer"></div>\n<script type="module">\n%s\nwindow.snippet = onnxBytes.length;\n</script>' % JS)
    page.wait_for_function("() => window.snippet > 0 || document.querySelector('.pytrain-widget') && "
                           "document.querySelector('.pytrain-widget').shadowRoot.querySelector('.error:not([hidden])')",
                           timeout=wait_ms(180_000))
    assert (page.evaluate("window.snippet") or 0) > 200, page.locator(".pytrain-widget .error").inner_text()
    assert rec.foreign(site_url) == [] and rec.console_errors == []
    # the app's start reaches the embedding page: Pyodide's first files preloaded by the widget on a first
    # visit (as index.html's head does) and the digits' first part and MLP downloaded while Python starts
    config = json.loads((build.SITE / "config.json").read_text())
    warm = [site_url + config["pyodide"]["indexURL"] + n for n in WARM_FILES]
    assert page.evaluate("[...document.querySelectorAll('link[rel=preload]')].map((l) => l.href)") == warm
    assert site_url + "worker.js" in rec.urls    # a table: nothing of the site's digits downloads


def test_a_digits_widget_downloads_the_digits_and_its_model_while_python_starts(context, site_url):
    """As the app's worker does (worker/data.js prefetchSiteData): its first progress needs no download after "ready"."""
    ctx, rec = context
    page = _host(ctx, site_url, rec, '<script type="module">\nimport { createTrainer } from "./pytrain-widget.js";\n'
                 'const t = createTrainer({ data: "digits", epochs: 1 });\n'
                 't.on("progress", () => { window.progressed = true; t.stop(); });\nt.train();\n</script>')
    page.wait_for_function("() => window.progressed === true", timeout=wait_ms(180_000))
    config = json.loads((build.SITE / "config.json").read_text())
    assert site_url + "worker.js?prefetch=digits" in rec.urls
    wanted = [config["mnist"]["first"]["file"]] + sorted(config["artifacts"]["digits-mlp"].values())
    assert all(site_url + u in rec.urls for u in wanted), (wanted, rec.urls)
    assert rec.foreign(site_url) == [] and rec.console_errors == []


def test_readme_and_docs_elements_load_their_data_as_written(context, site_url):
    ctx, rec = context
    for snippet in (WIDGET + ELEMENT, DOCS_ELEMENT):
        page = _host(ctx, site_url, rec, snippet)
        seen = _prepared_or_error(page)
        assert "error" not in seen, seen["error"]
        page.close()


def test_widget_that_cannot_load_its_data_shows_only_the_error(context, site_url):
    ctx, rec = context
    page = _host(ctx, site_url, rec, WIDGET + '<pytrain-trainer data="nowhere/iris.csv" label="species"></pytrain-trainer>')
    seen = _prepared_or_error(page)
    assert "error" in seen
    box = page.locator("pytrain-trainer .box")
    page.wait_for_function("() => { const r = document.querySelector('pytrain-trainer .pytrain-widget').shadowRoot;"
                           " return !r.querySelector('.error').hidden; }", timeout=wait_ms(30_000))
    text = box.inner_text()
    assert "nowhere/iris.csv" in text and "Loading" not in text, text
    assert not page.locator("pytrain-trainer .bar").is_visible()
