"""Semicolon/tab separators are sniffed, missing values dropped or filled,
columns excluded, small text columns one-hot encoded (large ones left out, saying why), and a
binary file gets a clear message."""
from __future__ import annotations

import pytest

import numpy as np

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, train_epochs

#: the app starts once for the module (``started_app``), as a second visit: each test uploads its own file on the
#: "Your table" tab, and neither asserts a fresh page's defaults (the second only that a binary file is refused, on a
#: page where a table was built and trained before)
pytestmark = pytest.mark.second_visit


def messy_csv(path):
    rs = np.random.RandomState(0)
    lines = ["id;size;weight;color;name;y"]
    for i in range(120):
        size, weight = rs.rand() * 10, rs.rand() * 5
        color = ["red", "green", "blue"][i % 3]
        y = int(size + (color == "red") * 4 > 7)
        cells = [str(i), "%.3f" % size, "%.3f" % weight, color, "person%d" % i, str(y)]
        if i % 17 == 3:
            cells[2] = "NA"
        if i % 23 == 5:
            cells[1] = ""
        lines.append(";".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_messy_semicolon_table_builds_and_trains(started_app, tmp_path):
    page, _ = started_app
    page.click("button[data-tab=table]")
    page.set_input_files("#csv-file", str(messy_csv(tmp_path / "messy.csv")))
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 6", timeout=wait_ms(30_000))
    info = page.inner_text("#csv-info")
    assert "separated by semicolon" in info and "missing values" in info, info
    assert page.input_value("#csv-label") == "y"
    # the name column cannot be used (120 distinct texts): unticked, disabled, with the reason
    name_box = page.locator("#csv-columns input[value=name]")
    assert name_box.is_disabled() and not name_box.is_checked()
    assert "too many to encode" in page.inner_text("#csv-columns")
    assert page.locator("#csv-columns input[value=color]").is_checked()
    page.uncheck("#csv-columns input[value=id]")
    page.select_option("#csv-missing", "fill")
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    data = app_state(page, "a.data")
    assert data["features"] == ["size", "weight", "color=blue", "color=green", "color=red"]
    assert data["train"] + data["val"] == 120        # filled, not dropped
    status = page.inner_text("#setup-status")
    assert "one-hot encoded text column 'color'" in status and "filled" in status, status
    epochs = train_epochs(page, 2, 120_000, batch_size=16, lr=0.01)
    assert all(np.isfinite(e["loss"]) for e in epochs)

    # dropping instead: fewer rows, and the page says how many
    page.select_option("#csv-missing", "drop")
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.data.train + window.pytrainApp.data.val < 120", timeout=wait_ms(60_000))
    assert "dropped" in page.inner_text("#setup-status")

    # a tab-separated table is read as columns too
    res = page.evaluate("() => window.pytrainApp.client.call('inspectCSV', {text: 'a\\tb\\tlabel\\n1\\t2\\t0\\n3\\t4\\t1\\n'})")
    assert res["columns"] == ["a", "b", "label"] and res["delimiter"] == "\t"
    assert app_state(page, "a.errors") == []


def test_binary_file_gets_a_clear_message(started_app):
    page, _ = started_app
    page.click("button[data-tab=table]")
    page.set_input_files("#csv-file", files=[{"name": "photo.csv", "mimeType": "text/csv",
                                              "buffer": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00"}])
    page.wait_for_selector("#error", state="visible", timeout=wait_ms(30_000))
    msg = page.inner_text("#error-text")
    assert "binary file" in msg and "NUL" not in msg.split("(")[0], msg
    assert page.locator("#csv-build").is_disabled()
