"""Secure aggregation (SecAgg+) on pytrain nodes, against flwr 1.42.0 itself.

- the primitives (key agreement, Fernet, Shamir shares, the mask generator) are flwr's: flwr's own
  functions, in its venv, agree on the shared key, decrypt what pytrain encrypted and recombine
  pytrain's Shamir shares;
- hostile stage messages (a stage out of order, a bool where an int belongs, a key that is not a
  P-384 PEM, shares from or for unknown nodes) get an error reply and the node keeps serving;
- a real federation: a ServerApp with flwr's ``DefaultWorkflow(fit_workflow=SecAggPlusWorkflow)``
  and three pytrain nodes completes a round; the aggregate equals plain FedAvg of the nodes' updates
  within the quantization error, and no masked vector the server received equals a node's update;
- a mixed one: flwr's own ``flower-supernode`` (a numpy ClientApp with flwr's ``secaggplus_mod``) and
  two pytrain nodes, one of which leaves after it shared its keys (dropout recovery): the aggregate
  equals FedAvg of the two survivors.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pytrain.flower import FlowerNode
from pytrain.flower import messages as pb
from pytrain.flower import objects as ob
from pytrain.flower import secagg
from pytrain.flower import secagg_crypto as sc
from pytrain.flower.transport import EcdsaSigner
from test_flower import (APP, ROOT, FakeLink, SuperLink, app_with_clientapp, arts, digits_splits,  # noqa: F401
                         free_port, make_trainer, supernode_cmd, venv, wait_until)
from waits import wait_s

ORACLE = r"""
import json, sys, base64
import numpy as np
from flwr.common.secure_aggregation.crypto.shamir import combine_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import decrypt, generate_shared_key
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key
d = json.load(open(sys.argv[1]))
b = lambda k: base64.b64decode(d[k])
key = generate_shared_key(bytes_to_private_key(b("sk_a")), bytes_to_public_key(b("pk_b")))
shares = [base64.b64decode(s) for s in d["shares"]]
out = {"key": key.decode(), "plain": base64.b64encode(decrypt(key, b("token"))).decode(),
       "secret2": base64.b64encode(combine_shares(shares[:2])).decode(),
       "secret_all": base64.b64encode(combine_shares(shares)).decode(),
       "mask": [a.tolist() for a in pseudo_rand_gen(key, 1 << 32, [(3,), (2, 2), ()])]}
print(json.dumps(out))
"""


def test_primitives_match_flwr(tmp_path, venv):
    import base64
    sk_a, _ = sc.generate_key_pair()
    sk_b, pk_b = sc.generate_key_pair()
    key = sc.shared_key(sk_a, pk_b)
    secret = sk_a  # a PEM private key: what a node shares besides its 32-byte seed
    shares = sc.create_shares(secret, 2, 3)
    token = sc.encrypt(key, sc.plaintext_concat(5, 2 ** 63 + 7, b"seed", b"key"))
    enc = lambda v: base64.b64encode(v).decode()  # noqa: E731
    (tmp_path / "in.json").write_text(json.dumps({"sk_a": enc(sk_a), "pk_b": enc(pk_b), "token": enc(token),
                                                  "shares": [enc(s) for s in shares]}))
    (tmp_path / "oracle.py").write_text(ORACLE)
    res = subprocess.run([str(venv / "bin" / "python"), str(tmp_path / "oracle.py"), str(tmp_path / "in.json")],
                         capture_output=True, text=True, timeout=wait_s(60))
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["key"].encode() == key
    assert sc.plaintext_separate(base64.b64decode(got["plain"])) == (5, 2 ** 63 + 7, b"seed", b"key")
    assert base64.b64decode(got["secret2"]) == secret and base64.b64decode(got["secret_all"]) == secret
    mine = sc.pseudo_rand_gen(key, 1 << 32, [(3,), (2, 2), ()])
    assert [a.tolist() for a in mine] == got["mask"]


# -- hostile stage messages --------------------------------------------------------------------------------
SETUP = [("stage", "setup"), ("sample_num", 3), ("share_num", 3), ("threshold", 2), ("clipping_range", 4.0),
         ("target_range", 1 << 22), ("mod_range", 1 << 32), ("max_weight", 1000.0)]


def stage_message(cfg, extra=None):
    md = ob.metadata(run_id=1, src_node_id=1, dst_node_id=77, group_id="1", ttl=600.0, message_type="train",
                     created_at=time.time(), src_task_id=3)
    content = OrderedDict([(secagg.CONFIGS, ob.ConfigRecord(cfg))])
    content.update(extra or {})
    d = ob.deflate_message(md, content)
    md.message_id = d.id
    return pb.FlwrMessage(metadata=md, content=pb.RecordDict()), d.tree(), d.all_objects()


def run_stages(arts, stages):
    """Feed a node SecAgg+ stage messages (a FakeLink); returns its pushed replies."""
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, *parts[0])
    link = FakeLink(*stage_message(stages[0]))
    for cfg in stages[1:]:
        link.add(*stage_message(cfg))
    node = FlowerNode("http://fleet.invalid", trainer, signer=EcdsaSigner(), transport=link)
    assert node.run(max_messages=len(stages), timeout=wait_s(30)) == len(stages)
    return link.pushed, node


def _peer_keys():
    return [sc.generate_key_pair()[1] for _ in range(2)]


@pytest.mark.parametrize("case,expect", [
    ("out of order", "expected stage 'setup'"),
    ("bool threshold", "'threshold' must be an int"),
    ("not a key", "not a PEM public key"),
    ("short key list", "fewer than the threshold"),
    ("unknown source", "not a neighbour"),
])
def test_hostile_stages_get_error_replies(arts, case, expect):
    setup = list(SETUP)
    if case == "out of order":
        stages = [[("stage", "share_keys")]]
    elif case == "bool threshold":
        stages = [[(k, True if k == "threshold" else v) for k, v in setup]]
    else:
        stages = [setup]
    replies, node = run_stages(arts, stages)
    if case in ("not a key", "short key list", "unknown source"):
        # the second stage needs this node's own keys (from its setup reply)
        objs = node.fleet.transport.pushed_objects
        own = next(v for v in ob.inflate_message(replies[0].metadata.message_id, objs.__getitem__)[1].values())
        peers = OrderedDict([("77", [own["pk1"], own["pk2"]])])
        if case == "not a key":
            peers["5"] = [b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", _peer_keys()[0]]
        elif case == "unknown source":
            peers["5"] = _peer_keys()
        link = node.fleet.transport
        cfg = [("stage", "share_keys")] + list(peers.items())
        link.add(*stage_message(cfg))
        if case == "unknown source":
            link.add(*stage_message([("stage", "collect_masked_vectors"), ("ctxts", [b"x"]), ("srcs", [6])]))
        n = 2 if case == "unknown source" else 1
        assert node.run(max_messages=n, timeout=wait_s(30)) == n
        replies = link.pushed
    last = replies[-1]
    assert last.error is not None and expect in last.error.reason, last.error
    assert all(r.error is None for r in replies[:-1])


# -- a real federation -----------------------------------------------------------------------------------
def secagg_federation(tmp: Path, venv: Path, arts, drop: bool, native: int = 3, linked=None, app: Path = APP,
                      num_nodes: int = 3):
    """``num_nodes`` nodes and flwr's SecAggPlusWorkflow for one round (``drop``: the last native node
    leaves after sharing its keys): ``native`` pytrain nodes in threads, on the first parts of the
    digits; ``linked(link)``, called once the SuperLink is up, brings the others (e.g. a browser tab,
    flwr's supernode); ``app``: the Flower App ``flwr run`` submits."""
    splits, _ = digits_splits(3)
    link = SuperLink(venv, tmp / "home").start()
    nodes, threads, errors = [], [], []
    stop = threading.Event()
    out = tmp / "out"
    try:
        if linked is not None:
            linked(link)
        init = tmp / "init.npz"
        np.savez(str(init), **make_trainer(arts, *splits[0]).get_parameters())
        for k in range(native):
            node = FlowerNode(link.url, make_trainer(arts, *splits[k], seed=k), heartbeat_interval=10,
                              poll_interval=0.1)
            node.join()
            nodes.append(node)
            leaves = drop and k == native - 1  # leaves once it has shared its keys: before its masked vector

            def done(n=node, leaves=leaves):
                return stop.is_set() or (leaves and any(c.stage == secagg.SHARE_KEYS for c in n.secagg.values()))

            def work(n=node, done=done):
                try:
                    n.run(stop=done, timeout=wait_s(240))
                except Exception as e:  # reported by the test
                    errors.append(e)
            threads.append(threading.Thread(target=work, daemon=True))
        for t in threads:
            t.start()
        link.run_app(out, init, app=app, **{"num-nodes": num_nodes, "num-server-rounds": 1, "local-epochs": 1,
                                            "secagg": True, "secagg-clip": 4.0, "round-timeout": wait_s(30)})
        wait_until(lambda: (out / "result.json").exists(), wait_s(150), "the ServerApp's result", link.proc,
                   link.log)
        return nodes, out, errors
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        link.stop()


def check_aggregate(nodes, out: Path, survivors):
    result = json.loads((out / "result.json").read_text())
    assert "error" not in result, result.get("error")
    with np.load(str(out / "round_1.npz")) as z:
        got = {k: z[k] for k in z.files}
    # each node's model holds the update it trained (no evaluate round overwrites it)
    updates = [nodes[k].trainer.get_parameters() for k in survivors]
    weights = np.array([len(nodes[k].trainer.x) for k in survivors], dtype=np.float64)
    step = 2 * 4.0 / (1 << 22)  # the quantization step at clipping range 4
    worst = 0.0
    for name in got:
        want = sum(w * u[name].astype(np.float64) for w, u in zip(weights, updates)) / weights.sum()
        worst = max(worst, float(np.abs(got[name] - want).max()))
    assert worst < 10 * step, worst
    masked = sorted(out.glob("masked_*.npz"))
    assert len(masked) == len(survivors)
    for f in masked:
        with np.load(str(f)) as z:
            vec = [z["arr_%d" % i] for i in range(len(z.files))]
        assert vec[0].shape == (1,) and all(v.dtype == np.int64 for v in vec)
        flat = np.concatenate([v.ravel() for v in vec[1:]]).astype(np.float64)
        for u in updates:  # not the update, nor its quantization (the masks make it uniform noise)
            plain = np.concatenate([u[n].ravel() for n in got]).astype(np.float64)
            assert flat.shape == plain.shape
            assert not np.allclose(flat, plain, atol=1e-3)
            assert not np.allclose(flat, (np.clip(plain, -4, 4) + 4) / step, atol=1e3)
    return worst


def test_secagg_round_equals_fedavg(tmp_path, venv, arts):
    nodes, out, errors = secagg_federation(tmp_path, venv, arts, drop=False)
    assert not errors, errors
    worst = check_aggregate(nodes, out, [0, 1, 2])
    print("secagg aggregate vs FedAvg: max abs error %.3g" % worst)


def flower_supernode(tmp: Path, venv: Path, link, x, y) -> Path:
    """Start flwr's own ``flower-supernode`` on ``link`` with (``x``, ``y``) as its data (the App's
    ClientApp must be pytrainfl.secagg_client); returns the .npz it writes what it sends to."""
    data, sent = tmp / "supernode.npz", tmp / "supernode_sent.npz"
    np.savez(str(data), x=x, y=y)
    link.spawn(supernode_cmd(venv) + ["--insecure", "--superlink", "127.0.0.1:%d" % link.port,
                "--port", str(free_port()), "--node-config", 'data="%s" out="%s"' % (data, sent)],
               tmp / "supernode.log")
    return sent


def update_node(params, rows: int) -> SimpleNamespace:
    """A node for ``check_aggregate`` whose update is ``params``, weighted by its ``rows``."""
    return SimpleNamespace(trainer=SimpleNamespace(get_parameters=lambda: params, x=range(rows)))


def supernode_node(sent: Path, names) -> SimpleNamespace:
    """What flwr's node trained (``flower_supernode``'s .npz, before its mod masked it), as a node
    for ``check_aggregate``; ``names``: the parameters' names in the model's order."""
    with np.load(str(sent)) as z:
        theirs = dict(zip(names, [z["arr_%d" % i] for i in range(len(names))]))
        return update_node(theirs, int(z["num_examples"]))


def left_after_sharing_keys(node) -> bool:
    """``node`` took part in SecAgg+ and sent no masked vector: it dropped out after sharing its keys."""
    return bool(node.secagg) and all(c.last_masked is None for c in node.secagg.values())


def test_secagg_mixed_with_flower_supernode_survives_a_dropout(tmp_path, venv, arts):
    """flwr's own ``flower-supernode`` running a numpy ClientApp with flwr's ``secaggplus_mod``
    (pytrainfl.secagg_client) and two pytrain nodes, the second of which leaves after sharing its keys:
    the round completes with the FedAvg of the survivors, flwr's node and the first pytrain node."""
    splits, _ = digits_splits(3)
    held = {}

    def linked(link) -> None:
        held["sent"] = flower_supernode(tmp_path, venv, link, *splits[2])
    app = app_with_clientapp(tmp_path, "pytrainfl.secagg_client:app")
    nodes, out, errors = secagg_federation(tmp_path, venv, arts, drop=True, native=2, linked=linked, app=app)
    assert not errors, errors
    assert left_after_sharing_keys(nodes[1])
    flwr_node = supernode_node(held["sent"], list(nodes[0].trainer.get_parameters()))
    assert len(flwr_node.trainer.x) == len(splits[2][0])
    worst = check_aggregate(nodes + [flwr_node], out, [0, 2])
    print("secagg, flwr's supernode + pytrain nodes, one dropout, vs FedAvg of the survivors: max abs error %.3g"
          % worst)
