"""A training run's options in the tab are spelled once, in Python (pytrain.webapp.run_options.TabRun): the
Session resolves what the page, the widget and the worker leave unset, the JavaScript keeps no default of its
own, and the page's first values (web/index.html's inputs) are run_options.PAGE."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytrain import webapp
from pytrain.webapp.common import WebappError
from pytrain.webapp.run_options import PAGE, TAB_RUN, TabRun

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def test_the_widgets_documented_defaults_are_the_sessions():
    got = webapp.Session().run_options()
    assert got == {"epochs": 5, "batch_size": 32, "learning_rate": 0.005, "optimizer": "AdamW", "hidden": [32],
                   "persist": False, "budget_ms": 150.0, "save_every_ms": 10000.0, "seed": None}
    assert webapp.Session().run_options(epochs=2, batch_size=None, hidden=[8, 4])["hidden"] == [8, 4]


def test_start_run_applies_batch_size_learning_rate_and_seed():
    s = webapp.Session()
    opts = s.start_run(batch_size=16, seed=3)
    assert (opts["batch_size"], opts["learning_rate"], opts["epochs"]) == (16, TAB_RUN.learning_rate, TAB_RUN.epochs)
    assert (s.run.batch_size, s.run.lr, s.run.seed) == (16, TAB_RUN.learning_rate, 3)


@pytest.mark.parametrize("given, match", [({"epoch": 3}, "unknown training option"), ({"epochs": 0}, "epochs"),
                                          ({"batch_size": 0}, "batch size"), ({"learning_rate": -1}, "learning rate"),
                                          ({"optimizer": "Adagrad"}, "optimizer")])
def test_bad_options_are_refused_by_name(given, match):
    with pytest.raises(WebappError, match=match):
        webapp.Session().start_run(**given)


def _strip_comments(js: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", js, flags=re.S))


def test_no_javascript_default_for_a_run_option():
    """`epochs: 5`, `batchSize = 32`, `optimizer = "AdamW"`, `Object.assign({ epochs: ...` style defaults: a run
    option's name given a literal anywhere in the page's, the widget's or the worker's code (comments aside)."""
    names = "|".join(_camel(n) for n in TabRun._fields if n != "seed")   # (a text sample's seed is not it)
    literal = re.compile(r"(?<![.\w])(%s)\s*(?::|=(?!=))\s*(-?\d|\"|'|\[\s*\d|true\b|false\b)" % names)
    page_choice = {"train.js: persist: true"}   # not a default: the page always keeps its runs (PAGE.persist)
    found = []
    for path in [WEB / "pytrain-widget.js"] + sorted((WEB / "worker").glob("*.js")) + sorted((WEB / "js").glob("*.js")):
        for m in literal.finditer(_strip_comments(path.read_text(encoding="utf-8"))):
            found.append("%s: %s" % (path.name, m.group(0)))
    assert PAGE.persist and set(found) == page_choice, found


class _Inputs(HTMLParser):
    """Each input's value and each select's shown option (its first: the page marks none selected)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict = {}
        self._select = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "input" and a.get("id"):
            self.values[a["id"]] = a.get("value")
        elif tag == "select":
            self._select = a.get("id")
        elif tag == "option" and self._select == "optimizer":
            assert "selected" not in a, "an option marked selected: read it here"

    def handle_data(self, data):
        if self._select and self._select not in self.values and data.strip():
            self.values[self._select] = data.strip()

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None


def test_the_pages_inputs_hold_the_page_preset():
    parser = _Inputs()
    parser.feed((WEB / "index.html").read_text(encoding="utf-8"))
    v = parser.values
    assert int(v["epochs"]) == PAGE.epochs
    assert int(v["batch-size"]) == PAGE.batch_size
    assert float(v["lr"]) == PAGE.learning_rate
    assert tuple(int(h) for h in v["csv-hidden"].split(",")) == PAGE.hidden
    assert v["optimizer"] == PAGE.optimizer
    # the site's first part of the digits holds the batches of the page's first run (buildsite/assets.py)
    assets = (ROOT / "buildsite" / "assets.py").read_text(encoding="utf-8")
    assert '"batch_size": %d}' % PAGE.batch_size in assets
