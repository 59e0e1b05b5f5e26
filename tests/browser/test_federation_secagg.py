"""A browser tab in a secure-aggregation round: flwr 1.42.0's SecAggPlusWorkflow on a real SuperLink,
two native pytrain nodes and the page (``build.py serve --flower``). The tab's node is the same Python
as the native ones, but its P-384 keys, ECDH, HKDF and Fernet are WebCrypto's (the worker answers the
node's crypto steps, web/worker/secagg_crypto.js), and the native nodes decrypt its key shares with
``cryptography``. The aggregate equals FedAvg of the three nodes' updates within the quantization error.
"""
from __future__ import annotations

import base64
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "flower"), str(ROOT / "tests" / "helpers")]
import build  # noqa: E402
from test_federation import Tab  # noqa: E402
from test_flower import arts, cryptography_installed, digits_splits, ensure_flwr_venv  # noqa: E402,F401
from test_secagg import check_aggregate, secagg_federation  # noqa: E402

from pytrain.api import CheckpointState  # noqa: E402


def test_tab_in_a_secagg_plus_round(tmp_path, browser, site_url, arts):  # noqa: F811
    venv = ensure_flwr_venv()
    splits, _ = digits_splits(3)
    x, y = splits[2]
    held: dict = {}

    def linked(link) -> None:  # the tab joins first: the native nodes heartbeat only once they serve
        held["server"], url = build.serve_in_thread(build.SITE, flower=link.url)
        tab = held["tab"] = Tab(browser, url)
        tab.load({k: base64.b64encode(getattr(arts, a)).decode() for k, a in (
            ("training", "training_model"), ("eval", "eval_model"), ("optimizer", "optimizer_model"),
            ("checkpoint", "checkpoint"))}, x, y)
        tab.join()
    try:
        nodes, out, errors = secagg_federation(tmp_path, venv, arts, drop=False, native=2, linked=linked)
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
    assert not [e for e in events if e["kind"] == "refused"], events
    stages = [e["config"].get("stage") for e in events if e["kind"] == "received"]
    assert stages == ["setup", "share_keys", "collect_masked_vectors", "unmask"], stages
    # every public-key operation was the worker's WebCrypto (Python yields them all: it does none itself)
    assert next(e for e in events if e["kind"] == "started")["secagg_crypto"] == "webcrypto"
    crypto = [e for e in events if e["kind"] == "crypto"]
    assert all(e["by"] == "webcrypto" and e["error"] is None for e in crypto), crypto
    # two key pairs; per neighbour: a key agreement and a share encrypted, a share decrypted, a mask key agreed
    ops = [e["op"] for e in crypto]
    assert sorted(ops) == sorted(["key_pair"] * 2 + ["shared_key"] * 4 + ["encrypt"] * 2 + ["decrypt"] * 2), ops
    took = [e["seconds"] for e in events if e["kind"] == "answered"]
    print("the tab's SecAgg+ stages took %s s" % ", ".join("%s %.2f" % st for st in zip(stages, took)))
    # the tab's model holds the update it trained; its weight is its training rows (80% of what it loaded)
    trained = {k: p.data for k, p in CheckpointState.load_checkpoint(bytes(ckpt)).parameters.items()}
    n_train = next(e for e in events if e["kind"] == "started")["samples"]
    tab_node = SimpleNamespace(trainer=SimpleNamespace(get_parameters=lambda: trained, x=range(n_train)))
    worst = check_aggregate(nodes + [tab_node], out, [0, 1, 2])
    print("secagg with a tab vs FedAvg: max abs error %.3g" % worst)
