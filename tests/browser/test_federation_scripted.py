"""A headless tab as a Flower node against a scripted Fleet API (tests/flower's FakeLink behind a real
HTTP server on loopback, forwarded by ``build.py serve --flower``): the tab runs the same Python
StepDriver as ``pytrain federate``, so what it is sent decides exactly what it must answer.

- Hostile messages (a ``.npy`` header declaring 1 TiB, a dedup bomb, a chunk list that never ends,
  a chunk whose bytes do not hash to its id, a pull-messages answer over 16 MiB) each get an error
  reply, the tab's wasm memory grows by less than MEMORY_BOUND over them all, and the tab trains the
  next good message.
- The page's privacy setting reaches the tab's PytrainTrainer: "Require the server's clipping"
  refuses a train message without ``clipping_norm``; local DP clips and adds noise of the formula's
  std, and the server's clipping brings the update back to its norm.
"""
from __future__ import annotations

import base64
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "flower"), str(ROOT / "tests" / "helpers")]
import build  # noqa: E402
from test_federation import Tab  # noqa: E402
from test_flower import arts, cryptography_installed, digits_splits, make_trainer, train_message  # noqa: E402,F401
from test_hostile_server import (MEMORY_BOUND, LoopbackFleet, OversizedFirst, hostile,  # noqa: E402
                                 oversized_answer)

from pytrain.flower import objects as ob  # noqa: E402
from pytrain.flower.privacy import LocalDp  # noqa: E402

SAMPLES = 120


def scripted_tab(browser, link, arts):  # noqa: F811
    """(tab, server, fleet): the page on a site whose /flower/ forwards to ``link``, model and data loaded."""
    fleet = LoopbackFleet(link).__enter__()
    server, url = build.serve_in_thread(build.SITE, flower=fleet.url)
    (parts, _) = digits_splits(1)
    tab = Tab(browser, url)
    tab.load({k: base64.b64encode(getattr(arts, a)).decode() for k, a in (
        ("training", "training_model"), ("eval", "eval_model"), ("optimizer", "optimizer_model"),
        ("checkpoint", "checkpoint"))}, parts[0][0][:SAMPLES], parts[0][1][:SAMPLES])
    tab.page.wait_for_function("() => !document.getElementById('fl-join').disabled", timeout=30_000)
    return tab, server, fleet


def train_once(scripted, timeout_ms: int, settings=None) -> list:
    """Join (after ``settings(page)``), wait for a train reply, leave; the tab's events."""
    tab, server, fleet = scripted
    try:
        if settings is not None:
            settings(tab.page)
        tab.join()
        tab.wait_event("e.kind === 'answered' && e.message_type === 'train'", timeout_ms)
        events = tab.events()
        tab.page.click("#fl-leave")
        tab.wait_event("e.kind === 'left'", 30_000)
        return events
    finally:
        tab.close()
        server.shutdown()
        server.server_close()
        fleet.__exit__()


def privacy_settings(page) -> None:
    """Local DP with clip 1, epsilon 2, delta 1e-4, and the server's clipping required."""
    page.check("#fl-dp")
    page.fill("#fl-dp-clip", "1")
    page.fill("#fl-dp-epsilon", "2")
    page.fill("#fl-dp-delta", "0.0001")
    page.check("#fl-require-clipping")


def reply_arrays(link, reply):
    _, content = ob.inflate_message(reply.metadata.message_id, link.pushed_objects.__getitem__)
    return content


def test_tab_refuses_hostile_messages_and_keeps_its_privacy_setting(browser, site_url, arts):  # noqa: F811
    """In order: a pull-messages answer of 17 MiB, a .npy header declaring 1 TiB, a dedup bomb, a list
    of a million chunks for an 8 KiB array, a chunk whose bytes do not match its id, a train message
    without ``clipping_norm`` (refused: the page requires the server's clipping), then a good one with
    ``clipping_norm`` 0.5, which the tab trains and sends with local DP and the server's clip."""
    params = make_trainer(arts, np.zeros((1, 64), np.float32), np.zeros(1, np.int64)).get_parameters()
    bad, bd = train_message({k: v + 1.0 for k, v in params.items()})
    link = OversizedFirst(oversized_answer(bad, bd.tree(), junk_first=False))
    cases = [hostile("header_1TiB", {k: v + 0.5 for k, v in params.items()}),
             hostile("dedup_bomb", {k: v + 0.75 for k, v in params.items()}),
             hostile("endless_chunks", {k: v + 0.25 for k, v in params.items()}),
             hostile("id_mismatch", {k: v + 0.125 for k, v in params.items()})]
    for msg, tree, objs, _, _, _ in cases:
        link.add(msg, tree, objs)
    unclipped, ud = train_message(params)
    link.add(unclipped, ud.tree(), ud.all_objects())
    good, _ = train_message({k: v + 0.01 for k, v in params.items()})
    cfg = ob.ConfigRecord([("lr", 0.1), ("local-epochs", 1), ("batch-size", 32), ("server-round", 2),
                           ("clipping_norm", 0.5)])
    gd = ob.deflate_message(good.metadata, {"arrays": ob.ArrayRecord({k: v + 0.01 for k, v in params.items()}),
                                            "config": cfg})
    good.metadata.message_id = gd.id
    link.add(good, gd.tree(), gd.all_objects())
    events = train_once(scripted_tab(browser, link, arts), 120_000, privacy_settings)

    refused = [e["error"] for e in events if e["kind"] == "refused"]
    assert len(refused) == 6, refused
    assert "more than any Fleet answer takes" in refused[0]
    assert [c[4] in r for c, r in zip(cases, refused[1:5])] == [True] * 4, refused  # each its own error
    assert "clipping_norm" in refused[5], refused
    assert [m.error is not None for m in link.pushed] == [True] * 6 + [False]
    assert link.pushed[0].metadata.reply_to_message_id == bd.id
    bomb_chunks = {c.id for c in cases[1][3].children}  # its one 5 MiB chunk: fetched once at most
    assert sum(1 for c in link.pulled if c in bomb_chunks) <= 1
    assert not {c.id for c in cases[2][3].children} & set(link.pulled)  # the endless list: refused unfetched
    # the tab's wasm memory (it never shrinks: the peak shows) from joining to the last refusal: the
    # native node's bound, a fraction of what the messages declare (1 TiB, 2 GiB) or send (17 MiB, 3 MB
    # of chunk ids) could cost if read as they say
    heap = [e["wasm_heap"] for e in events if e["kind"] in ("started", "refused")]
    grew = heap[-1] - heap[0]
    assert grew < MEMORY_BOUND, "the hostile messages cost the tab %.1f MiB" % (grew / 2 ** 20)
    print("the tab's wasm memory from joining over the hostile messages: %s MiB" % " -> ".join("%.1f" % (h / 2 ** 20)
                                                                                        for h in heap))
    # the privacy setting reached the tab's trainer: the formula's noise, then the server's clip
    std = LocalDp(1.0, 1.0, 2.0, 1e-4).noise_std  # pytrain's (flwr's) formula: sensitivity = the clipping norm
    started = next(e for e in events if e["kind"] == "started")
    assert started["privacy"]["require_clipping"] is True
    assert abs(started["privacy"]["local_dp"]["noise_std"] - std) < 1e-12, started
    answered = next(e for e in events if e["kind"] == "answered")
    assert answered["metrics"]["num-examples"] == started["samples"]  # it trained the good message
    assert abs(answered["privacy"]["noise_std"] - std) < 1e-12 and answered["privacy"]["clipping_norm"] == 0.5
    sent = reply_arrays(link, link.pushed[6])["arrays"]
    assert set(sent) == set(params)
    update = np.sqrt(sum(float(np.sum((sent[k].astype(np.float64) - (params[k] + 0.01)) ** 2)) for k in params))
    assert abs(update - 0.5) < 1e-4, update  # noise of std 2.17 per value, then the server's clip
