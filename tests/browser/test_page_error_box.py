"""The page's one error box survives every panel's re-render: after a bad file in a "By example"
class, "Add a class" (which redraws the classes) and a run, later errors (a bad learning rate, an
invalid .onnx) still show, and no "null" / "undefined" / "NaN" ever appears in the visible text."""
from __future__ import annotations

import pytest

import re

from browser_helpers import wait_ms, build_digits, open_ready, train_epochs

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

NOT_TEXT = re.compile(r"\b(null|undefined|NaN)\b")
NOT_ONNX = {"name": "notes.onnx", "mimeType": "application/octet-stream", "buffer": b"just some text, not a model\n"}


def _shows(page, needle):
    """The error box is in the page, visible, and says ``needle``; no stray "null" text anywhere."""
    page.wait_for_function("""(needle) => { const b = document.getElementById('error');
        return b && b.isConnected && !b.hidden && b.textContent.includes(needle); }""", arg=needle,
                           timeout=wait_ms(30_000))
    page.click("#error-close")
    _no_stray_text(page)


def _no_stray_text(page):
    text = page.evaluate("document.body.innerText")
    assert not NOT_TEXT.search(text), NOT_TEXT.search(text).group(0)


def test_every_error_shows_after_any_panel_redraws(context, site_url):
    page, rec = open_ready(context, site_url)
    page.click("#tabbtn-examples")
    page.set_input_files("#ex-classes fieldset:nth-of-type(1) input[type=file]", files=[NOT_ONNX])
    _shows(page, "notes.onnx")
    page.click("#ex-add-class")
    assert page.locator("#ex-classes fieldset").count() == 3
    page.set_input_files("#ex-classes fieldset:nth-of-type(3) input[type=file]", files=[NOT_ONNX])
    _shows(page, "notes.onnx")
    page.click("#ex-add-class")          # redraws the classes while the box sits inside one of them

    build_digits(page)
    train_epochs(page, 1, 120_000, batch_size=64)
    _no_stray_text(page)

    page.fill("#epochs", "2")             # "Train until epoch" past the run's 1, so Start reads the settings
    page.fill("#lr", "-1")
    page.click("#start")
    _shows(page, "learning rate")
    page.fill("#lr", "0.01")

    page.click("#tabbtn-model")
    page.set_input_files("#onnx-file", files=[NOT_ONNX])
    _shows(page, "notes.onnx")
    assert page.evaluate("document.getElementById('error').closest('fieldset, .tab, .card') !== null")
    assert not [e for e in rec.console_errors if "Cannot read" in e], rec.console_errors
