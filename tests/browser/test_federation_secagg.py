"""A browser tab in a secure-aggregation round: flwr 1.42.0's SecAggPlusWorkflow on a real SuperLink,
two native pytrain nodes, flwr's own ``flower-supernode`` (a numpy ClientApp with flwr's
``secaggplus_mod``, tests/flower/flower_app/pytrainfl/secagg_client.py) and the page (``build.py serve
--flower``); the second native node leaves after sharing its keys (dropout recovery). The tab's node is
the same Python as the native ones, but its P-384 keys, ECDH, HKDF and Fernet are WebCrypto's (the
worker answers the node's crypto steps, web/worker/secagg_crypto.js), and the native nodes and flwr's
decrypt its key shares with ``cryptography``. The aggregate equals FedAvg of the three survivors'
updates (the tab, flwr's node, the first pytrain node) within the quantization error.
"""
from __future__ import annotations

import base64
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "flower"), str(ROOT / "tests" / "helpers")]
import build  # noqa: E402
from test_federation import Tab  # noqa: E402
from test_flower import (app_with_clientapp, arts, cryptography_installed, digits_splits,  # noqa: E402,F401
                         ensure_flwr_venv)
from test_secagg import (check_aggregate, flower_supernode, left_after_sharing_keys, secagg_federation,  # noqa: E402
                         supernode_node, update_node)

from pytrain.device.api import CheckpointState  # noqa: E402


def test_tab_and_flwr_supernode_in_a_secagg_plus_round_with_a_dropout(tmp_path, browser, site_url, arts):  # noqa: F811
    venv = ensure_flwr_venv()
    splits, _ = digits_splits(3)
    x, y = splits[2]
    half = len(x) // 2  # the third part: its first half the tab's, the rest flwr's node's
    held: dict = {}

    def linked(link) -> None:  # the tab joins first: the native nodes heartbeat only once they serve
        held["sent"] = flower_supernode(tmp_path, venv, link, x[half:], y[half:])
        held["server"], url = build.serve_in_thread(build.SITE, flower=link.url)
        tab = held["tab"] = Tab(browser, url)
        tab.load({k: base64.b64encode(getattr(arts, a)).decode() for k, a in (
            ("training", "training_model"), ("eval", "eval_model"), ("optimizer", "optimizer_model"),
            ("checkpoint", "checkpoint"))}, x[:half], y[:half])
        tab.join()
    try:
        app = app_with_clientapp(tmp_path, "pytrainfl.secagg_client:app")
        nodes, out, errors = secagg_federation(tmp_path, venv, arts, drop=True, native=2, linked=linked, app=app,
                                               num_nodes=4)
        tab = held["tab"]
        tab.wait_event("e.kind === 'answered'", 30_000)
        events = tab.events()
        ckpt = tab.page.evaluate("async () => Array.from(await window.pytrainApp.client.call('checkpoint'))")
    finally:
        if "tab" in held:
            held["tab"].close()
        if "server" in held:
            held["server"].shutdown()
            held["server"].server_close()
    assert not errors, errors
    assert left_after_sharing_keys(nodes[1])
    assert not [e for e in events if e["kind"] == "refused"], events
    stages = [e["config"].get("stage") for e in events if e["kind"] == "received"]
    assert stages == ["setup", "share_keys", "collect_masked_vectors", "unmask"], stages
    # every public-key operation was the worker's WebCrypto (Python yields them all: it does none itself)
    assert next(e for e in events if e["kind"] == "started")["secagg_crypto"] == "webcrypto"
    crypto = [e for e in events if e["kind"] == "crypto"]
    assert all(e["by"] == "webcrypto" and e["error"] is None for e in crypto), crypto
    # two key pairs; per neighbour (three: the dropout shared its keys): a key agreement and a share
    # encrypted, a share decrypted, a mask key agreed
    ops = [e["op"] for e in crypto]
    assert sorted(ops) == sorted(["key_pair"] * 2 + ["shared_key"] * 6 + ["encrypt"] * 3 + ["decrypt"] * 3), ops
    took = [e["seconds"] for e in events if e["kind"] == "answered"]
    print("the tab's SecAgg+ stages took %s s" % ", ".join("%s %.2f" % st for st in zip(stages, took)))
    # the tab's model holds the update it trained; its weight is its training rows (80% of what it loaded)
    trained = {k: p.data for k, p in CheckpointState.load_checkpoint(bytes(ckpt)).parameters.items()}
    tab_node = update_node(trained, next(e for e in events if e["kind"] == "started")["samples"])
    flwr_node = supernode_node(held["sent"], list(nodes[0].trainer.get_parameters()))
    assert len(flwr_node.trainer.x) == len(x) - half
    worst = check_aggregate(nodes + [tab_node, flwr_node], out, [0, 2, 3])
    print("secagg with a tab, flwr's supernode and a dropout vs FedAvg of the survivors: max abs error %.3g" % worst)
