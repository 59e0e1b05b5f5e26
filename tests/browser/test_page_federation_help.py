"""Joining a federation on a site served without a SuperLink says, in words for people, that the site
serves none and how to start one; "Heartbeat (s)" is explained next to it."""
from __future__ import annotations

from browser_helpers import wait_ms, build_digits, open_ready


def test_join_on_a_site_without_a_superlink_says_how_to_start_one(context, site_url):
    page, rec = open_ready(context, site_url)
    help_id = page.get_attribute("#fl-heartbeat", "aria-describedby")
    assert help_id and "still there" in page.inner_text("#" + help_id)
    build_digits(page)
    page.click("#fl-join")
    page.wait_for_function("() => window.pytrainApp.federation.events.some((e) => e.kind === 'failed')",
                           timeout=wait_ms(60_000))
    page.wait_for_selector("#error", state="visible", timeout=wait_ms(10_000))
    err = page.inner_text("#error-text")
    assert err.startswith("This site serves no federation") and "python build.py serve --flower URL" in err, err
    assert rec.foreign(site_url) == []
