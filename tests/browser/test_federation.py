"""The page's "Join a federation": headless Chromium tabs as nodes of a real Flower federation.

A real flower-superlink (flwr 1.42, build/venv-flwr) and the FedAvg ServerApp of tests/flower/flower_app
(started with tests/flower/test_flower.py's helpers), one native pytrain node and two tabs on the site
served with ``build.py``'s /flower/ proxy. Every request a tab sends is recorded and decoded: only
parameters and metrics leave it. One tab is closed mid-round (the federation goes on once the
SuperLink's heartbeat window has passed) and the other is reloaded (it rejoins as the same node).
Every wait is bounded.
"""
from __future__ import annotations

import base64
import json
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "flower"), str(ROOT / "tests" / "helpers")]
import build  # noqa: E402
from browser_helpers import wait_ms, Recorder, new_context, open_app, wait_ready  # noqa: E402
# test_flower's fixtures (arts, cryptography_installed) are used from here too
from test_flower import (SuperLink, arts, cryptography_installed, digits_splits, ensure_flwr_venv,  # noqa: E402,F401
                         global_accuracy, make_trainer, wait_until)

from pytrain.flower import FlowerNode  # noqa: E402
from pytrain.flower import messages as pb  # noqa: E402
from pytrain.flower import objects as ob  # noqa: E402

HEARTBEAT = 10          # seconds; the SuperLink gives up on a silent node after 2 intervals
ROUNDS = 6
# what a tab may send, by route (pull-object and the membership calls carry no content)
ROUTES = {"register-node": pb.RegisterNodeRequest, "activate-node": pb.ActivateNodeRequest,
          "send-node-heartbeat": pb.SendNodeHeartbeatRequest, "pull-messages": pb.PullMessagesRequest,
          "pull-object": pb.PullObjectRequest, "confirm-message-received": pb.ConfirmMessageReceivedRequest,
          "push-messages": pb.PushMessagesRequest, "push-object": pb.PushObjectRequest,
          "deactivate-node": pb.NodeIdRequest, "unregister-node": pb.NodeIdRequest}
METRICS = {"train_loss", "eval_loss", "eval_acc", "num-examples"}


class Tab:
    """A page in its own browser context (its own IndexedDB: its own node key), requests recorded."""

    def __init__(self, browser, url: str) -> None:
        self.rec = Recorder()
        self.ctx = new_context(browser, self.rec)
        self.bodies: List[tuple] = []
        self.ctx.on("request", self._record)
        self.url = url
        self.page = open_app(self.ctx, url, self.rec)

    def _record(self, req) -> None:
        if req.method == "POST":
            self.bodies.append((req.url, req.post_data_buffer or b""))

    def load(self, arts_b64: Dict[str, str], x: np.ndarray, y: np.ndarray) -> None:
        """The model (artifacts) and this tab's share of the data, as a user would choose them."""
        wait_ready(self.page)
        self.page.evaluate("""async ([a, x, y, n]) => {
            const b = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
            const c = window.pytrainApp.client;
            await c.call('useArtifacts', {training: b(a.training), eval: b(a.eval), optimizer: b(a.optimizer),
                                          checkpoint: b(a.checkpoint)});
            await c.call('useArrays', {x: new Float32Array(x), shape: [n, 64], y: new Int32Array(y),
                                       task: 'classification', classes: [...Array(10).keys()].map(String),
                                       valFraction: 0.2});
        }""", [arts_b64, x.reshape(-1).tolist(), y.tolist(), len(x)])

    def join(self) -> None:
        self.page.fill("#fl-heartbeat", str(HEARTBEAT))
        self.page.click("#fl-join")
        self.wait_event("e.kind === 'joined'", 60_000)

    EVENTS = "window.pytrainApp.federation.events"

    def events(self) -> list:
        return self.page.evaluate("() => %s" % self.EVENTS)

    def wait_event(self, cond: str, timeout_ms: int):
        self.page.wait_for_function("() => (%s || []).some((e) => %s)" % (self.EVENTS, cond), timeout=wait_ms(timeout_ms))

    def close(self) -> None:
        self.ctx.close()


class WidgetTab(Tab):
    """The embeddable widget (pytrain-widget.js) in a bare page of the site's origin, joined from code."""
    EVENTS = "window.fedEvents"

    def __init__(self, browser, url: str) -> None:
        super().__init__(browser, url + "no-app-here.html")  # a 404 page of the site: no app, no CSP
        self.url = url

    def load(self, arts_b64: Dict[str, str], x: np.ndarray, y: np.ndarray) -> None:
        self.page.evaluate("""async ([site, a, x, y, n]) => {
            const { createTrainer } = await import(site + 'pytrain-widget.js');
            const b = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
            window.fedEvents = [];
            const t = createTrainer({
              artifacts: {training: b(a.training), eval: b(a.eval), optimizer: b(a.optimizer), checkpoint: b(a.checkpoint)},
              data: {x: new Float32Array(x), shape: [n, 64], y, classes: [...Array(10).keys()].map(String)},
              valFraction: 0.2});
            t.on('federation', (e) => window.fedEvents.push(e));
            window.widgetTrainer = t;
            await t.ready;
        }""", [self.url, arts_b64, x.reshape(-1).tolist(), y.tolist(), len(x)])

    def join(self) -> None:
        self.page.evaluate("() => window.widgetTrainer.federate({heartbeat: %d})" % HEARTBEAT)
        self.wait_event("e.kind === 'joined'", 60_000)


def _answered(events, kind: str) -> List[int]:
    return [e["round"] for e in events if e["kind"] == "answered" and e["message_type"] == kind]


def _check_private(tab: Tab, params: Dict[str, tuple], x: np.ndarray) -> int:
    """Every POST the tab made went to /flower/ and holds only protocol fields, parameters (by
    name, with the model's shapes) and the allowed metrics; no training sample appears in any."""
    rows = [x[i].astype(np.float32).tobytes() for i in range(0, len(x), max(1, len(x) // 40))]
    pushed = 0
    for url, body in tab.bodies:
        assert "/flower/v1/fleet/" in url, url
        route = url.rsplit("/", 1)[1]
        assert route in ROUTES, route
        ROUTES[route].FromString(body)  # it parses as the route's request
        for r in rows:
            assert r not in body, "a training sample left the tab in %s" % route
        if route != "push-object":
            continue
        req = pb.PushObjectRequest.FromString(body)
        kind, _, payload = ob.parse_object(req.object_id, req.object_content)
        assert kind in ("Message", "RecordDict", "ArrayRecord", "Array", "ArrayChunk", "MetricRecord"), kind
        if kind == "ArrayRecord":
            assert set(json.loads(payload)) == set(params), payload[:200]
        if kind == "Array":
            meta = json.loads(payload)
            assert tuple(meta["shape"]) in {tuple(s) for s in params.values()}, meta
        if kind == "MetricRecord":
            names = {item.key for item in pb.MetricRecord.FromString(payload).items}
            assert names <= METRICS, names
        pushed += 1
    return pushed


def test_tabs_join_a_flower_federation(tmp_path, browser, site_url, arts):  # noqa: F811
    venv = ensure_flwr_venv()
    splits, (xt, yt) = digits_splits(3)
    link = SuperLink(venv, tmp_path / "home").start()
    server, url = build.serve_in_thread(build.SITE, flower=link.url)
    stop = threading.Event()
    errors: list = []
    tabs: List[Tab] = []
    out = tmp_path / "out"
    try:
        init = tmp_path / "init.npz"
        np.savez(str(init), **make_trainer(arts, *splits[0]).get_parameters())
        params = {k: tuple(v.shape) for k, v in make_trainer(arts, *splits[0]).get_parameters().items()}
        native = FlowerNode(link.url, make_trainer(arts, *splits[0]), heartbeat_interval=HEARTBEAT,
                            poll_interval=0.2, keep_replies=True)
        native.join()

        def work() -> None:
            try:
                native.run(stop=stop.is_set, timeout=600)
            except Exception as e:  # reported by the test
                errors.append(e)
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        a64 = {k: base64.b64encode(getattr(arts, a)).decode() for k, a in (
            ("training", "training_model"), ("eval", "eval_model"), ("optimizer", "optimizer_model"),
            ("checkpoint", "checkpoint"))}
        tabs = [Tab(browser, url), WidgetTab(browser, url)]  # the page, and the widget in a bare page
        for tab, (x, y) in zip(tabs, splits[1:]):
            tab.load(a64, x, y)
            tab.join()
        a, b = tabs
        # FedAvg samples every available node each round and needs at least 2
        link.run_app(out, init, **{"num-nodes": 2, "num-server-rounds": ROUNDS, "round-timeout": 120.0})

        # tab B closes once it has answered round 1: round 2 samples its node, which has gone silent;
        # the round completes once the SuperLink's heartbeat window has passed, without B. (Not while
        # B pushes a reply: a reply pushed in part holds its round until the round's timeout.)
        b.wait_event("e.kind === 'answered' && e.message_type === 'evaluate' && e.round === 1", 240_000)
        b_events = b.events()
        b_node = next(e["node_id"] for e in b_events if e["kind"] == "joined")
        b_pushed = _check_private(b, params, splits[2][0])
        assert b.rec.foreign(url) == []
        b.close()
        t_closed = time.monotonic()
        wait_until(lambda: (out / "round_2.npz").exists(), 2 * HEARTBEAT + 60, "round 2 without the closed tab",
                   link.proc, link.log)
        print("round 2 completed %.1f s after tab B closed" % (time.monotonic() - t_closed))
        assert _answered(b_events, "train") == [1] and _answered(b_events, "evaluate") == [1]

        # tab A reloads between rounds: once its model and data are back it rejoins as the same node
        a.wait_event("e.kind === 'answered' && e.message_type === 'evaluate' && e.round >= 3", 240_000)
        before = a.events()
        a_node = next(e["node_id"] for e in before if e["kind"] == "joined")
        a_pushed = _check_private(a, params, splits[1][0])
        a.bodies.clear()
        a.page.reload()
        a.load(a64, *splits[1])
        a.wait_event("e.kind === 'joined'", 90_000)
        after = a.events()
        assert next(e["node_id"] for e in after if e["kind"] == "joined") == a_node
        wait_until(lambda: (out / "result.json").exists(), 600, "the ServerApp's result", link.proc, link.log)
        # the page shows the rounds: local training, what was sent, the global model's metrics
        cells = a.page.evaluate("() => Array.from(document.querySelectorAll('#fl-rounds tbody tr'), "
                                "(tr) => Array.from(tr.cells, (c) => c.textContent))")
        assert any("parameters" in r[2] and "eval_acc" in r[3] for r in cells), cells
        # and the user leaves: the node deactivates and unregisters
        a.page.click("#fl-leave")
        a.wait_event("e.kind === 'left'", 30_000)
        after = a.events()
        a_pushed += _check_private(a, params, splits[1][0])
        assert a.rec.foreign(url) == []
    finally:
        stop.set()
        for tab in tabs:
            try:
                tab.close()
            except Exception:
                pass
        server.shutdown()
        server.server_close()
        link.stop()
        if "worker" in locals():
            worker.join(timeout=30)
    assert not errors, errors
    result = json.loads((out / "result.json").read_text())
    assert "error" not in result, result["error"]
    assert sorted(result["train"], key=int) == [str(r) for r in range(1, ROUNDS + 1)]
    # tab A took part before and after its reload; the rounds it answered after come after those before
    first, second = _answered(before, "train"), _answered(after, "train")
    assert first[:3] == [1, 2, 3], first
    assert second and min(second) > max(first), (first, second)
    assert b_pushed > 0 and a_pushed > 0
    print("tab A trained in rounds %s, then after its reload in %s" % (first, second))
    # the page shows the global model's metrics and what was sent (names and sizes)
    evals = [e for e in after if e["kind"] == "answered" and e["message_type"] == "evaluate"]
    assert evals and {"eval_loss", "eval_acc", "num-examples"} <= set(evals[-1]["metrics"])
    sent = next(e["sent"] for e in reversed(after) if e["kind"] == "answered" and e["message_type"] == "train")
    assert {p["name"]: tuple(p["shape"]) for p in sent} == params
    # the federation learned: the final global model on the held-out digits
    with np.load(str(out / ("round_%d.npz" % ROUNDS))) as z:
        acc = global_accuracy(arts, {k: z[k] for k in z.files}, xt, yt)
    print("final global accuracy %.3f; tab B was node %s" % (acc, b_node))
    assert acc >= 0.85, acc
    # the native node answered every round (the tabs come and go around it)
    assert sorted(r.server_round for r in native.replies if r.message_type == "train" and r.error is None) == \
        list(range(1, ROUNDS + 1))


def test_step_driver_moves_only_bytes(arts):  # noqa: F811
    """What the worker does, without a browser: the node's steps answered one by one (from test_flower's
    in-memory Fleet), then a request that cannot be sent."""
    from test_flower import FakeLink, train_message
    from pytrain.flower.steps import PemSigner, StepDriver
    from pytrain.flower.transport import EcdsaSigner
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, *parts[0])
    sent = trainer.get_parameters()
    msg, d = train_message(sent)
    link = FakeLink(msg, d.tree(), d.all_objects())
    pem = EcdsaSigner().public_key_pem
    node = FlowerNode("http://fleet.invalid", trainer, signer=PemSigner(pem), heartbeat_interval=HEARTBEAT,
                      poll_interval=0.01, beat_during_training=False)
    driver = StepDriver(node)
    routes, events = [], []
    step = driver.next()
    while step["kind"] in ("http", "sleep") and len(routes) < 100:
        events += step["events"]
        if any(e["kind"] == "answered" for e in events):
            driver.stop()
        if step["kind"] == "sleep":
            step = driver.next()
            continue
        routes.append(step["route"])
        headers = {"flwr-public-key": "k", "flwr-timestamp": "t", "flwr-signature": "s"}
        status, body = link("http://fleet.invalid/v1/fleet/" + step["route"], step["body"], headers, step["timeout"])
        step = driver.next(status=status, body=body)
    events += step["events"]
    assert step["kind"] == "done" and step["answered"] == 1, step
    assert routes[:3] == ["register-node", "activate-node", "pull-messages"], routes
    assert routes[-2:] == ["deactivate-node", "unregister-node"], routes
    assert [e["kind"] for e in events] == ["joined", "received", "answered", "left"], events
    answered = events[2]
    assert answered["message_type"] == "train" and answered["round"] == 1
    assert {p["name"]: tuple(p["shape"]) for p in answered["sent"]} == {k: v.shape for k, v in sent.items()}
    assert link.pushed[0].error is None
    _, content = ob.inflate_message(link.pushed[0].metadata.message_id, link.pushed_objects.__getitem__)
    for k, v in content["arrays"].items():  # it trained, and sent what it now holds
        np.testing.assert_array_equal(v, trainer.get_parameters()[k])
        assert not np.array_equal(v, sent[k])
    # fetch failed (e.g. the site was not started with --flower): a clear failure, not a hang
    driver = StepDriver(FlowerNode("http://fleet.invalid", trainer, signer=PemSigner(pem),
                                   heartbeat_interval=HEARTBEAT, beat_during_training=False))
    assert driver.next()["route"] == "register-node"
    step = driver.next(error="Failed to fetch")
    assert step["kind"] == "failed" and "could not be sent: Failed to fetch" in step["error"], step
    assert driver.next()["kind"] == "done"


def test_join_without_a_superlink_says_why(context, site_url, arts):  # noqa: F811
    """The site served without --flower: Join stays disabled and the panel says why (the page asks the
    site with a GET of flower/, so no request reaches a Fleet route); the widget's federate() still
    fails with the proxy's answer shown."""
    ctx, rec = context
    (parts, _) = digits_splits(1)
    tab = Tab.__new__(Tab)
    tab.rec, tab.ctx, tab.bodies, tab.url = rec, ctx, [], site_url
    tab.ctx.on("request", tab._record)
    tab.page = open_app(ctx, site_url, rec)
    tab.load({k: base64.b64encode(getattr(arts, a)).decode() for k, a in (
        ("training", "training_model"), ("eval", "eval_model"), ("optimizer", "optimizer_model"),
        ("checkpoint", "checkpoint"))}, parts[0][0][:200], parts[0][1][:200])
    tab.page.wait_for_function("() => document.getElementById('fl-why').textContent.length > 0",
                               timeout=wait_ms(10_000))
    why = tab.page.inner_text("#fl-why")
    assert why.startswith("This site serves no federation") and "python build.py serve --flower URL" in why, why
    assert tab.page.is_disabled("#fl-join")
    assert tab.page.get_attribute("#fl-join", "aria-describedby") == "fl-why"
    # joining anyway (as the widget or a script can): the worker's failure names the 404
    tab.page.evaluate("() => window.pytrainApp.client.call('federate', {url: 'flower/'}).catch(() => {})")
    tab.wait_event("e.kind === 'failed'", 60_000)
    failed = next(e for e in tab.events() if e["kind"] == "failed")
    assert "register-node: HTTP 404" in failed["error"], failed
    assert all("/flower/v1/fleet/" in u for u, _ in tab.bodies), tab.bodies
    assert rec.foreign(site_url) == []
