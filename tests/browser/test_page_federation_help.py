"""On a site served without a SuperLink, Join stays disabled and the panel says, in words for people,
that the site serves none and how to start one; "Heartbeat (s)" and the privacy setting are explained
next to them."""
from __future__ import annotations

import pytest

from browser_helpers import wait_ms, build_digits, open_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def test_join_on_a_site_without_a_superlink_says_how_to_start_one(context, site_url):
    page, rec = open_ready(context, site_url)
    help_id = page.get_attribute("#fl-heartbeat", "aria-describedby")
    assert help_id and "still there" in page.inner_text("#" + help_id)
    build_digits(page)
    page.wait_for_function("() => document.getElementById('fl-why').textContent.length > 0", timeout=wait_ms(10_000))
    why = page.inner_text("#fl-why")
    assert why.startswith("This site serves no federation") and "python build.py serve --flower URL" in why, why
    assert page.is_disabled("#fl-join")  # Join waits for a site that serves a SuperLink
    # the privacy setting says in plain words what each part protects
    assert page.is_visible("#fl-privacy")
    def help_of(sel: str) -> str:
        return page.inner_text("#" + page.get_attribute(sel, "aria-describedby"))
    assert "even from the federation's server" in help_of("#fl-dp")
    assert "not from the server itself" in help_of("#fl-require-clipping")
    assert rec.foreign(site_url) == []
