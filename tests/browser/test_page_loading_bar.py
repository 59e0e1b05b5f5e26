"""The loading bar shows the start's steps after the downloads: it does not rest near its end while
CPython, numpy and pytrain start (which take longer than the downloads on a second visit)."""
from __future__ import annotations

import re

from browser_helpers import open_app, wait_ready

# Installed before any page script runs: every text the loading line shows, in order.
RECORD_LOAD_TEXT = """
window.__loadTexts = [];
document.addEventListener("DOMContentLoaded", () => {
  const el = document.getElementById("load-text");
  new MutationObserver(() => window.__loadTexts.push(el.textContent))
    .observe(el, {childList: true, characterData: true, subtree: true});
});
"""


def _steps(texts):
    """[(stage, percent)] from lines such as 'Loading numpy… 71%'."""
    out = []
    for text in texts:
        m = re.match(r"^(.*)… (\d+)%$", text)
        if m:
            out.append((m.group(1), int(m.group(2))))
    return out


def test_loading_bar_moves_through_the_steps_after_the_downloads(context, site_url):
    ctx, rec = context
    ctx.add_init_script(RECORD_LOAD_TEXT)
    for visit in ("first", "second"):
        page = open_app(ctx, site_url, rec)
        wait_ready(page)
        steps = _steps(page.evaluate("() => window.__loadTexts"))
        stages = [s for s, _ in steps]
        percents = [p for _, p in steps]
        assert percents == sorted(percents), (visit, steps)      # never goes back
        order = ["Loading the Python runtime", "Starting Python", "Loading numpy", "Installing pytrain",
                 "Starting pytrain"]
        firsts = [stages.index(s) for s in order]                  # each step is shown, in this order
        assert firsts == sorted(firsts), (visit, steps)
        # Once the downloads are done the steps still have a quarter of the bar to move through.
        assert max(p for s, p in steps if s == "Starting Python") <= 75, (visit, steps)
        assert page.evaluate("() => document.getElementById('load-text').textContent") == "Python is ready."
        page.close()
    assert rec.console_errors == []
