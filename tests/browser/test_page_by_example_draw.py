"""By example from the drawing pad: horizontal strokes vs vertical strokes drawn with the
mouse (and some with the keyboard) go into the chosen class's gallery; a small CNN trains on them;
"Try the model" predicts from its own pad after each stroke, and the exported model answers in
onnxruntime like the page did on the very pixels the page used."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, open_app, train_epochs, wait_ready
from test_page_a11y import axe_violations, shoot

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

SHAPE = (3, 32, 32)


def _stroke(page, selector, a, b):
    """A mouse stroke from a to b, given as fractions (x, y) of the pad's box."""
    box = page.locator(selector).bounding_box()
    at = lambda p: (box["x"] + p[0] * box["width"], box["y"] + p[1] * box["height"])  # noqa: E731
    page.mouse.move(*at(a))
    page.mouse.down()
    page.mouse.move(*at(b), steps=8)
    page.mouse.up()


def _add(page, cls):
    page.select_option("#ex-pad-class", str(cls))
    page.click("#ex-pad-add")


EMPTY = "Draw something on the pad first."


def _empty_add(page):
    """Add with nothing drawn: refused next to the pad, nothing added."""
    page.click("#ex-pad-add")
    assert page.locator("#error").is_visible() and page.inner_text("#error-text") == EMPTY
    assert page.evaluate("() => !!document.getElementById('error').closest('#ex-pad-box')")
    page.click("#error-close")


def _items(page, cls):
    return page.evaluate("(i) => window.pytrainApp.examples[i].items.length", cls)


def _example(page, cls, k):
    return np.array(page.evaluate("([i, k]) => Array.from(window.pytrainApp.examples[i].items[k])", [cls, k]),
                    np.float32).reshape(SHAPE)


def _name(page, cls, name):
    sel = "#ex-classes fieldset:nth-of-type(%d) legend input" % (cls + 1)
    page.fill(sel, name)
    page.dispatch_event(sel, "change")


def _try_draw(page, a, b):
    """Clear Try's pad, draw one stroke, wait for the prediction; returns (input, outputs, label)."""
    page.click("#image-pad-clear")
    assert page.inner_text("#image-pad-prediction") == ""
    _stroke(page, "#image-pad", a, b)
    page.wait_for_function("() => document.getElementById('image-pad-prediction').textContent.includes('Prediction')",
                           timeout=wait_ms(30_000))
    assert page.inner_text("#picture-prediction") == ""     # the camera's and picture's line is another
    last = app_state(page, "a.lastPrediction")
    # what predict received is the pad read the way By example reads a drawing (the same pixels())
    again = page.evaluate("""async (shape) => {
        const { pixels } = await import(new URL('js/images.js', document.baseURI).href);
        return Array.from(pixels(document.getElementById('image-pad'), shape)); }""", list(SHAPE))
    np.testing.assert_array_equal(np.array(last["input"], np.float32), np.array(again, np.float32))
    return np.array(last["input"], np.float32).reshape((1,) + SHAPE), np.array(last["outputs"], np.float32), last["label"]


def test_draw_examples_train_and_predict_from_the_pad(context, site_url, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    page.click("#tabbtn-examples")
    assert page.locator("#ex-pad").is_visible()
    _name(page, 0, "Horizontal")
    _name(page, 1, "Vertical")
    # the "Add to" choice follows the class names
    assert page.eval_on_selector_all("#ex-pad-class option", "os => os.map((o) => o.text)") == ["Horizontal", "Vertical"]

    # an empty pad adds nothing, and says so
    _empty_add(page)
    assert _items(page, 0) == 0 and _items(page, 1) == 0

    # with the mouse: 6 horizontal strokes, 5 vertical ones, at different places
    for k in range(6):
        y = 0.25 + 0.1 * k
        _stroke(page, "#ex-pad", (0.15 + 0.02 * k, y), (0.85 - 0.02 * k, y))
        _add(page, 0)
    for k in range(5):
        x = 0.25 + 0.12 * k
        _stroke(page, "#ex-pad", (x, 0.15), (x, 0.85))
        _add(page, 1)
    # with the keyboard: 2 vertical strokes (Space pen down/up, arrows move), then Add with the keyboard too
    for dx in (-3, 2):
        page.focus("#ex-pad")
        for _ in range(abs(dx)):
            page.keyboard.press("ArrowLeft" if dx < 0 else "ArrowRight")
        for _ in range(8):
            page.keyboard.press("ArrowUp")
        page.keyboard.press("Space")
        for _ in range(16):
            page.keyboard.press("ArrowDown")
        page.keyboard.press("Space")
        page.select_option("#ex-pad-class", "1")
        page.focus("#ex-pad-add")
        page.keyboard.press("Enter")
    # Escape clears the pad: nothing to add
    page.focus("#ex-pad")
    page.keyboard.press("Space")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Escape")
    _empty_add(page)

    assert _items(page, 0) == 6 and _items(page, 1) == 7
    assert page.locator("#ex-classes fieldset:nth-of-type(1) .ex-item").count() == 6
    assert page.locator("#ex-classes fieldset:nth-of-type(2) .ex-item").count() == 7
    assert "6 examples" in page.inner_text("#ex-classes fieldset:nth-of-type(1) .ex-count")
    assert "7 examples" in page.inner_text("#ex-classes fieldset:nth-of-type(2) .ex-count")
    # each drawing went in as a picture: white ink on black, along rows for class 1, along columns for class 2
    for cls, k, axis in ((0, 0, 1), (1, 0, 0), (1, 6, 0)):   # (1, 6): a keyboard drawing
        x = _example(page, cls, k)
        assert np.allclose(x[0], x[1]) and np.allclose(x[0], x[2])   # grey
        ink = x[0].sum(axis=axis)          # per row (axis=1) or per column (axis=0)
        assert ink.max() > 12, ink.max()    # a line ~20 px long in 32 px
        assert x[0].sum(axis=1 - axis).max() < ink.max() / 3
    assert axe_violations(page) == []
    shoot(page, "by-example-draw")

    page.click("#ex-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'cnn'",
                           timeout=LOAD_TIMEOUT_MS)
    data = app_state(page, "a.data")
    assert data["classes"] == ["Horizontal", "Vertical"] and data["sample_shape"] == list(SHAPE)
    assert data["train"] + data["val"] == 13
    epochs = train_epochs(page, 6, 240_000, batch_size=4, lr=0.003)
    assert all(np.isfinite(e["loss"]) for e in epochs)

    # Try the model: its own pad, a prediction after each stroke
    assert page.locator("#try-image").is_visible() and page.locator("#image-pad").is_visible()
    with page.expect_download() as info:
        page.click("#download-model")
    path = tmp_path / "drawn.onnx"
    info.value.save_as(str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for a, b, want in (((0.2, 0.5), (0.8, 0.5), "Horizontal"), ((0.45, 0.2), (0.45, 0.8), "Vertical")):
        x, outputs, label = _try_draw(page, a, b)
        assert x.max() == pytest.approx(1.0, abs=0.02) and x.min() == 0.0   # ink on black, as the examples
        out = sess.run(None, {sess.get_inputs()[0].name: x})[0]
        np.testing.assert_allclose(out[0], outputs, rtol=1e-4, atol=1e-4)
        assert label == ["Horizontal", "Vertical"][int(np.argmax(out[0]))]
        assert label == want, (label, out[0])   # a new stroke, told apart (logits about +-2.5 after 6 epochs)
    shoot(page, "by-example-draw-try")
    page.click("#image-pad-clear")
    assert page.inner_text("#image-pad-prediction") == ""
    page.click("#tabbtn-examples")
    assert axe_violations(page) == []
    assert app_state(page, "a.errors") == [EMPTY, EMPTY]   # the two empty adds, nothing else
    assert rec.foreign(site_url) == []
