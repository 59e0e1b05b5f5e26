"""The page <-> worker protocol is declared once (web/js/protocol.js) and the page's panels talk
through one store (web/js/store.js), without a browser: the worker's command table has exactly the
protocol's commands, every command the page, the widget and pytrain-ort.js send and every event the
worker emits is declared there, and no panel imports another."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

WEB = Path(__file__).resolve().parents[2] / "web"
NODE = shutil.which("node")
#: the worker's rooms, in the order worker.js loads them
WORKER_ROOMS = re.findall(r'"(js/protocol\.js|worker/[a-z_]+\.js)"', (WEB / "worker.js").read_text(encoding="utf-8"))
PANELS = {"setup.js", "examples.js", "train.js", "try.js", "learned.js", "federation.js"}


@pytest.fixture(scope="module")
def declared() -> dict:
    """The protocol's names and the worker's command table, read by running the worker's scripts in Node."""
    if NODE is None:
        pytest.skip("Node.js is not installed")
    script = r"""
const fs = require("fs"), vm = require("vm");
const ctx = { URL, console, TextDecoder, TextEncoder, performance, setTimeout, clearTimeout };
ctx.self = ctx; ctx.globalThis = ctx; ctx.location = { href: "http://127.0.0.1/worker.js" };
ctx.postMessage = () => {};
vm.createContext(ctx);
for (const f of JSON.parse(process.argv[2])) vm.runInContext(fs.readFileSync(process.argv[1] + "/" + f, "utf8"), ctx, { filename: f });
const p = ctx.pytrainProtocol;
console.log(JSON.stringify({ commands: p.COMMANDS, events: p.EVENTS, runEvents: p.RUN_EVENTS, ortOps: p.ORT_OPS,
                             table: Object.keys(vm.runInContext("COMMAND_TABLE", ctx)) }));
"""
    res = subprocess.run([NODE, "-e", script, str(WEB), json.dumps(WORKER_ROOMS)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_worker_loads_the_protocol_first_and_every_room():
    assert WORKER_ROOMS[0] == "js/protocol.js"
    assert sorted(WORKER_ROOMS[1:]) == sorted("worker/" + p.name for p in (WEB / "worker").glob("*.js"))
    for path in [WEB / "worker.js"] + sorted((WEB / "worker").glob("*.js")):
        assert len(path.read_text(encoding="utf-8").splitlines()) < 500, path.name


def test_command_table_has_exactly_the_protocols_commands(declared):
    assert len(set(declared["commands"])) == len(declared["commands"])
    assert sorted(declared["table"]) == sorted(declared["commands"])
    assert set(declared["ortOps"]) <= set(declared["commands"])
    assert set(declared["runEvents"]) <= set(declared["events"])


def test_page_side_sends_only_declared_commands(declared):
    sent = set()
    for path in [WEB / "pytrain-widget.js", WEB / "pytrain-ort.js"] + sorted((WEB / "js").glob("*.js")):
        sent |= set(re.findall(r'\b(?:call|_call|_step)\("([A-Za-z]+)"', path.read_text(encoding="utf-8")))
    assert {"train", "predict", "ortCreate", "ortTrainStep", "federate", "resumeSaved"} <= sent
    assert sent <= set(declared["commands"])


def test_worker_emits_only_declared_events(declared):
    emitted = set()
    for path in [WEB / "worker.js"] + sorted((WEB / "worker").glob("*.js")):
        emitted |= set(re.findall(r'\bemit\("([a-z]+)"', path.read_text(encoding="utf-8")))
    assert {"loading", "ready", "startup", "fatal", "progress", "epoch", "done", "federation"} <= emitted
    assert emitted <= set(declared["events"])


def test_no_panel_imports_another():
    for path in sorted((WEB / "js").glob("*.js")):
        imported = set(re.findall(r'^import (?:[^"]* from )?"\./([a-z_]+\.js)";', path.read_text(encoding="utf-8"), re.M))
        if path.name == "app.js":   # the entry point loads the panels
            assert PANELS <= imported
            continue
        assert not (imported & PANELS), "%s imports the panel(s) %s" % (path.name, sorted(imported & PANELS))
