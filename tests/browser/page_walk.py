"""A seeded random walk over the whole page: from a corpus of good and bad inputs (the project's
datasets, a table with text and missing values, malformed CSVs, a binary file, non-ONNX files, models
with ops pytrain cannot run, a model whose weights live in an external data file, pictures), random
actions across every panel (upload, build, generate, start / pause / resume / stop, settings, tabs,
reload, download a run and take it back, try a row or a drawing). After every action:

* no page error and no console error,
* no literal "null", "undefined" or "NaN" in the visible text,
* every Start pressed while enabled led to training or to a visible error,
* the error region is in the page.

The actions are dealt from shuffled decks holding each kind as many times as its weight (49 cards), so every
kind comes in every deck: a seed's 350 actions (the default, ``PYTRAIN_WALK_ACTIONS``) hold each kind at least
7 times (the rarest: reload, download, take back, backbone, restore) and Start 42 times, whatever the seed; drawing
each action independently instead gave one seed 23 reloads (a reload boots Python again: 5 s) and could give
another none. ``PYTRAIN_WALK_SEEDS`` sets the seeds ("1,2"). Each seed replays the same walk; a failure names the
seed, the action number and the walk so far.

The walk's two test files (test_page_random_walk_1.py: the 1st, 3rd, ... seeds; test_page_random_walk_2.py: the
2nd, 4th, ...) share this module: a file is what pytest-xdist's ``--dist loadfile`` hands one stream, so with one file
per seed the two ~2-minute walks run on both streams at once instead of back to back on one."""
from __future__ import annotations

import os
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from browser_helpers import LOAD_TIMEOUT_MS, open_app, wait_ms, wait_ready
from test_page_csv import messy_csv
from test_page_unsupported_ops import _nms_model, _unique_model
from test_page_what_trains import _three_layers
from test_tables_and_models import _png

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from test_feature_head_flat import _extractor  # noqa: E402

onnx = pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = int(os.environ.get("PYTRAIN_WALK_ACTIONS") or 350)
SEEDS = [int(s) for s in (os.environ.get("PYTRAIN_WALK_SEEDS") or "1,2").split(",") if s.strip()]
NOT_TEXT = re.compile(r"\b(null|undefined|NaN)\b")
OCTET = "application/octet-stream"

# the page settled: Python ready, no UI action under way, no command awaiting its reply (three polls running)
SETTLED = """() => { const a = window.pytrainApp;
    const idle = !!(a && document.body.dataset.ready && a.busy === 0 && a.client.pendingCalls === 0);
    window.__idle = idle ? (window.__idle || 0) + 1 : 0;
    return window.__idle >= 3; }"""
# training seen since the flag was reset (a short run can end before a poll sees app.training)
HOOKS = """() => { if (window.__walkHooks) return; window.__walkHooks = true; window.__started = false;
    const c = window.pytrainApp.client;
    for (const ev of ['progress', 'epoch', 'done']) c.on(ev, () => { window.__started = true; });
    c.on('state', (s) => { if (s.training) window.__started = true; }); }"""


def _file(name, data, mime=OCTET):
    return {"name": name, "mimeType": mime, "buffer": data}


def _corpus(tmp_path):
    """name -> list of files for each kind of input the page takes."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = {"W1": rng.standard_normal((4, 8)).astype(np.float32), "B1": np.zeros(8, np.float32),
             "W2": rng.standard_normal((8, 3)).astype(np.float32)}
    graph = helper.make_graph([helper.make_node("Gemm", ["input", "W1", "B1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                               helper.make_node("MatMul", ["r", "W2"], ["output"])], "ext",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    ext = tmp_path / "ext.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(ext),
                    save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    iris = (ROOT / "static" / "datasets" / "iris.csv").read_bytes()
    csvs = [[_file("iris.csv", iris, "text/csv")],
            [_file("messy.csv", messy_csv(tmp_path / "messy.csv").read_bytes(), "text/csv")],
            [_file("short-row.csv", b"a,b,y\n1,2,0\n3\n4,5,1\n", "text/csv")],
            [_file("words.csv", b"a,b,y\n1,x,0\n2,3,1\n", "text/csv")],
            [_file("header-only.csv", b"a,b,y\n", "text/csv")],
            [_file("empty.csv", b"", "text/csv")],
            [_file("binary.csv", bytes(range(256)) * 4, "text/csv")],
            [_file("quotes.csv", b'a,b,y\n"1,2,0\n', "text/csv")]]
    onnxs = [[_file("three.onnx", _three_layers())],
             [_file("ext.onnx", ext.read_bytes()), _file("ext.onnx.data", (tmp_path / "ext.onnx.data").read_bytes())],
             [_file("ext.onnx", ext.read_bytes())],                    # without its data file
             [_file("nms.onnx", _nms_model())], [_file("unique.onnx", _unique_model())],
             [_file("notes.onnx", b"just some text, not a model\n")], [_file("iris.onnx", iris)]]
    pictures = [[_file("p%d.png" % i, _png(np.full((20, 20), 30 * i + 10 * k, np.uint8)), "image/png") for i in range(3)]
                for k in range(3)] + [[_file("notes.png", b"not a picture", "image/png")]]
    backbones = [[_file("flat.onnx", _extractor(1e-8))], [_file("grey.onnx", _extractor(1.0))],
                 [_file("notes.onnx", b"not a model")], [_file("three.onnx", _three_layers())]]
    rows = ["5.1, 3.5, 1.4, 0.2", "4.6, , red", "1, 2", "a, b, c, d", "", "1e400, 0, 0, 0", "8.5; 1.25; blue"]
    return {"csv": csvs, "onnx": onnxs, "pictures": pictures, "backbones": backbones, "rows": rows}


class Walk:
    def __init__(self, page, rec, rng, corpus, tmp_path):
        self.page, self.rec, self.rng, self.corpus, self.tmp = page, rec, rng, corpus, tmp_path
        self.runs = []      # run files downloaded so far (taken back later)
        self.log = []
        self.starts = {"trained": 0, "refused": 0}

    # ---------------------------------------------------------------- what the page is in
    def usable(self, sel):
        return self.page.evaluate("""(s) => { const e = document.querySelector(s);
            return !!(e && !e.disabled && e.offsetParent !== null); }""", sel)

    def error_shown(self):
        return self.page.evaluate("() => { const b = document.getElementById('error'); return !!(b && !b.hidden); }")

    def settle(self):
        self.page.wait_for_function(SETTLED, polling=50, timeout=LOAD_TIMEOUT_MS)

    def check(self):
        assert not self.rec.console_errors, self.rec.console_errors
        # one round trip for both (a thousand checks per seed)
        text, region = self.page.evaluate("() => [document.body.innerText, !!document.getElementById('error')]")
        m = NOT_TEXT.search(text)
        assert not m, "%r in the page: ...%s..." % (m.group(0), text[max(0, m.start() - 80):m.end() + 80])
        assert region, "the error region is gone"

    def click(self, sel):
        """Click ``sel`` if it is enabled and shown. A button can turn disabled between the check and the click
        (Stop, Pause as a short training ends): a click that times out on an element no longer usable is that
        race, not a failure; one that times out on an element still usable is."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        if not self.usable(sel):
            return
        try:
            self.page.click(sel, timeout=wait_ms(15_000))
        except PlaywrightTimeout:
            if self.usable(sel):
                raise

    def tab(self, name):
        self.page.click("#tabbtn-%s" % name)

    # ---------------------------------------------------------------- actions
    def a_tab(self):
        self.tab(self.rng.choice(["digits", "table", "model", "examples"]))

    def a_digits_build(self):
        self.tab("digits")
        self.page.select_option("#digits-model", self.rng.choice(["mlp", "mlp", "cnn"]))
        self.page.select_option("#digits-count", "1000")
        self.click("#digits-build")

    def upload(self, tab, sel, kind):
        """Choose one of the corpus's ``kind`` files in the file input ``sel`` of ``tab``."""
        self.tab(tab)
        if self.usable(sel):
            self.page.set_input_files(sel, files=self.rng.choice(self.corpus[kind]))

    def a_table_upload(self):
        self.upload("table", "#csv-file", "csv")

    def a_table_build(self):
        self.tab("table")
        if self.usable("#csv-missing"):
            self.page.select_option("#csv-missing", self.rng.choice(["error", "drop", "fill"]))
        self.click("#csv-build")

    def a_model_upload(self):
        self.upload("model", "#onnx-file", "onnx")

    def a_model_what_trains(self):
        self.tab("model")
        if self.usable("#onnx-last-n"):
            self.page.fill("#onnx-last-n", self.rng.choice(["1", "2", "3", "0", "9"]))
        self.click(self.rng.choice(["#onnx-all", "#onnx-none", "#onnx-head", "#onnx-last"]))

    def a_model_generate(self):
        self.tab("model")
        self.click("#onnx-generate")

    def a_model_data(self):
        self.upload("model", "#data-csv-file", "csv")
        self.settle()
        self.click("#data-csv-load")

    def a_examples_files(self):
        self.tab("examples")
        k = self.rng.choice([1, 2])
        sel = "#ex-classes fieldset:nth-of-type(%d) input[type=file]" % k
        if self.page.locator(sel).count():
            self.page.set_input_files(sel, files=self.rng.choice(self.corpus["pictures"]))

    def a_examples_backbone(self):
        self.tab("examples")
        if self.rng.random() < 0.3:
            self.click("#ex-backbone-clear")
        else:
            self.upload("examples", "#ex-backbone", "backbones")

    def a_examples_build(self):
        self.tab("examples")
        self.click("#ex-build")

    def a_settings(self):
        sel, values = self.rng.choice([("#epochs", ["1", "2", "3", "0", ""]),
                                       ("#batch-size", ["8", "16", "64", "5000", "0", "-3"]),
                                       ("#lr", ["0.01", "0.003", "1e9", "-1", ""])])
        self.page.fill(sel, self.rng.choice(values))
        self.page.dispatch_event(sel, "change")
        if self.usable("#optimizer") and self.rng.random() < 0.2:
            self.page.select_option("#optimizer", self.rng.choice(["AdamW", "Adam", "SGD"]))

    def a_start(self):
        if not self.usable("#start"):
            return
        before = len(self.page.evaluate("window.pytrainApp.errors"))
        self.page.evaluate("() => { window.__started = false; }")
        self.page.click("#start")
        self.page.wait_for_function("""(n) => window.__started || window.pytrainApp.errors.length > n &&
            !document.getElementById('error').hidden""", arg=before, timeout=wait_ms(60_000))
        self.starts["trained" if self.page.evaluate("window.__started") else "refused"] += 1

    def a_control(self):
        self.click(self.rng.choice(["#pause", "#resume-train", "#stop", "#stop"]))

    def a_reload(self):
        self.page.reload()
        wait_ready(self.page)
        self.page.evaluate(HOOKS)
        if self.usable("#resume-btn"):
            self.page.wait_for_function("() => window.pytrainApp.savedRun", timeout=wait_ms(30_000))
            self.click(self.rng.choice(["#resume-btn", "#discard-btn"]))

    def a_download_run(self):
        if not self.usable("#download-run"):
            return
        with self.page.expect_download(timeout=wait_ms(60_000)) as info:
            self.page.click("#download-run")
        path = self.tmp / ("run%d.zip" % len(self.runs))
        info.value.save_as(str(path))
        self.runs.append(path)

    def a_take_back(self):
        self.tab("model")
        if self.runs:
            self.page.set_input_files("#artifact-files", str(self.rng.choice(self.runs)))
            self.click("#artifacts-use")

    def a_try_row(self):
        if self.usable("#row-input"):
            self.page.fill("#row-input", self.rng.choice(self.corpus["rows"]))
            self.click("#row-predict")

    def a_draw(self):
        for pad in ("#pad", "#image-pad"):
            if self.usable(pad):
                box = self.page.locator(pad).bounding_box()
                x, y, w = box["x"], box["y"], box["width"]
                self.page.mouse.move(x + w * self.rng.random(), y + w * self.rng.random())
                self.page.mouse.down()
                self.page.mouse.move(x + w * self.rng.random(), y + w * self.rng.random(), steps=8)
                self.page.mouse.up()
                return

    def a_close_error(self):
        self.click("#error-close")

    def a_restore_good(self):
        self.click("#restore-good")

    WEIGHTS = {"a_tab": 3, "a_digits_build": 3, "a_table_upload": 3, "a_table_build": 3, "a_model_upload": 3,
               "a_model_what_trains": 2, "a_model_generate": 2, "a_model_data": 2, "a_examples_files": 2,
               "a_examples_backbone": 1, "a_examples_build": 2, "a_settings": 3, "a_start": 6, "a_control": 4,
               "a_reload": 1, "a_download_run": 1, "a_take_back": 1, "a_try_row": 2, "a_draw": 2,
               "a_close_error": 2, "a_restore_good": 1}

    def deal(self, n):
        """``n`` actions from shuffled decks of every kind, each as many times as its weight."""
        deck = [name for name in sorted(self.WEIGHTS) for _ in range(self.WEIGHTS[name])]
        actions = []
        while len(actions) < n:
            self.rng.shuffle(deck)
            actions.extend(deck)
        return actions[:n]

    def run(self, n):
        self.page.evaluate(HOOKS)
        for i, name in enumerate(self.deal(n)):
            self.log.append(name)
            try:
                getattr(self, name)()
                self.settle()
                self.check()
            except Exception as e:
                raise AssertionError("action %d (%s) failed: %s\nthe walk: %s" % (i, name, e, " ".join(self.log))) from e


def walk_the_page(context, site_url, tmp_path, seed):
    """One seed's walk of ``ACTIONS`` actions over a started app, checked after every action."""
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    walk = Walk(page, rec, random.Random(seed), _corpus(tmp_path), tmp_path)
    try:
        walk.run(ACTIONS)
    except AssertionError as e:
        raise AssertionError("seed %d: %s" % (seed, e)) from None
    errors = page.evaluate("window.pytrainApp.errors")
    print("seed %d: %d actions, Start pressed %d times (%d trained, %d refused with an error), %d errors shown since "
          "the last reload, %d run files taken" % (seed, ACTIONS, sum(walk.starts.values()), walk.starts["trained"],
                                                   walk.starts["refused"], len(errors), len(walk.runs)))
    page.evaluate("() => { const b = document.getElementById('stop'); if (!b.disabled) b.click(); }")
    assert rec.foreign(site_url) == []
