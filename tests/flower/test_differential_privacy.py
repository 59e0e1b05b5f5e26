"""The client side of Flower's differential privacy on a pytrain node, against flwr 1.42.0 itself.

- fixed clipping (``fixedclipping_mod`` for ``DifferentialPrivacyClientSideFixedClipping``): the update
  a node sends has L2 norm <= the server's ``clipping_norm`` and is byte for byte what flwr's own mod
  makes of the same training result;
- local DP (``LocalDpMod``): with the same seed, the clipped and noised update equals what flwr's mod
  sends (same clipping, same noise std, same draws), and its noise has that std;
- a hostile ``clipping_norm`` (negative, zero, NaN, infinite, a string, a bool) gets an error reply
  naming the key and the model stays as it was;
- a real federation: a FedAvg ServerApp wrapped in ``DifferentialPrivacyClientSideFixedClipping``
  with two pytrain nodes and one ``pytrain federate --local-dp`` node aggregates every round, and every
  update it received has norm <= the clipping norm (measured by flwr's ``get_norm`` in the ServerApp).

flwr's mods run in its venv (build/venv-flwr, made by test_flower.py's helpers) on the node's inputs.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pytrain.errors import InputError
from pytrain.flower import FlowerNode, LocalDp, privacy
from pytrain.flower.mods import Answer, Task, compose, privacy_mods
from pytrain.flower import objects as ob
from pytrain.flower import messages as pb
from pytrain.flower.transport import EcdsaSigner
from test_flower import (ROOT, FakeLink, SuperLink, arts, digits_splits, make_trainer,  # noqa: F401 (fixture)
                         run_client_app_script, venv, wait_until)
from waits import wait_s

RECIPE = [("lr", 0.2), ("local-epochs", 2), ("batch-size", 32), ("server-round", 1)]

# flwr's own mods on pytrain's inputs: the arrays the node received, what its training produced, the config
ORACLE = r"""
import json, sys
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod
from flwr.supercore.differential_privacy import get_norm
from flwr.supercore.task_identity import TaskIdentity
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
case = json.load(open(sys.argv[1]))
with np.load(case["received"]) as z:
    received = {k: z[k] for k in z.files}
with np.load(case["trained"]) as z:
    trained = {k: z[k] for k in z.files}
record = lambda arrays: ArrayRecord({k: Array(v) for k, v in arrays.items()})
msg = Message(content=RecordDict({"arrays": record(received), "config": ConfigRecord(case["config"])}),
              dst_node_id=1, message_type="train")
ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
answer = lambda m, c: Message(content=RecordDict({"arrays": record(trained),
                                                  "metrics": MetricRecord({"num-examples": 1})}), reply_to=m)
if case["local_dp"]:
    mod = LocalDpMod(*case["local_dp"])
    np.random.seed(case["seed"])  # flwr draws from numpy's global generator
else:
    mod = fixedclipping_mod
out = mod(msg, ctx, answer)
assert not out.has_error(), out.error
sent = {k: a.numpy() for k, a in next(iter(out.content.array_records.values())).items()}
np.savez(case["out"], **sent)
# flwr's mods also act on evaluate messages, whose reply has no ArrayRecord (and FedAvg's evaluate
# config no clipping_norm): say what they answer there
ev = Message(content=RecordDict({"arrays": record(received), "config": ConfigRecord({"server-round": 1})}),
             dst_node_id=1, message_type="evaluate")
evr = mod(ev, ctx, lambda m, c: Message(content=RecordDict({"metrics": MetricRecord({"num-examples": 1})}),
                                       reply_to=m))
print(json.dumps({"keys": list(sent), "update_norm": get_norm([sent[k] - received[k] for k in sent]),
                  "evaluate_error": evr.error.reason if evr.has_error() else None}))
"""


def train_message(arrays, config):
    md = ob.metadata(run_id=1, src_node_id=1, dst_node_id=77, group_id="1", ttl=600.0, message_type="train",
                     created_at=time.time(), src_task_id=3)
    d = ob.deflate_message(md, {"arrays": ob.ArrayRecord(arrays), "config": ob.ConfigRecord(config)})
    md.message_id = d.id
    return pb.FlwrMessage(metadata=md, content=pb.RecordDict()), d.tree(), d.all_objects()


def answer_one(trainer, config, monkeypatch=None, mods=()):
    """One train message with ``config`` through a node with ``mods``: (what it received, what training
    produced, the reply pushed, its arrays or None, what privacy did to the update or None)."""
    received = {k: v + 0.01 for k, v in trainer.get_parameters().items()}
    trained = {}
    if monkeypatch is not None:  # keep what training produced, before privacy (its first clipping)
        real = privacy.clip_update

        def spy(before, params, *a):
            if not trained:
                trained.update((k, np.array(v)) for k, v in params.items())
            return real(before, params, *a)
        monkeypatch.setattr(privacy, "clip_update", spy)
    link = FakeLink(*train_message(received, config))
    node = FlowerNode("http://fleet.invalid", trainer, signer=EcdsaSigner(), transport=link, mods=mods)
    node.events = []
    assert node.run(max_messages=1, timeout=wait_s(60)) == 1
    reply = link.pushed[0]
    arrays = None
    if reply.error is None:
        _, content = ob.inflate_message(reply.metadata.message_id, link.pushed_objects.__getitem__)
        arrays = dict(content["arrays"])
    done = [e for e in node.events if e["kind"] == "answered"]
    return received, trained, reply, arrays, done[0]["privacy"] if done else None


def flwr_mod(venv, tmp_path, received, trained, config, local_dp=None, seed=0):
    np.savez(str(tmp_path / "received.npz"), **received)
    np.savez(str(tmp_path / "trained.npz"), **trained)
    case = {"received": str(tmp_path / "received.npz"), "trained": str(tmp_path / "trained.npz"),
            "out": str(tmp_path / "flwr.npz"), "config": dict(config), "local_dp": local_dp, "seed": seed}
    (tmp_path / "case.json").write_text(json.dumps(case))
    res = subprocess.run([str(venv / "bin" / "python"), "-c", ORACLE, str(tmp_path / "case.json")],
                         capture_output=True, text=True, timeout=wait_s(60))
    assert res.returncode == 0, res.stdout + res.stderr
    with np.load(str(tmp_path / "flwr.npz")) as z:
        return {k: z[k] for k in z.files}, json.loads(res.stdout.strip().splitlines()[-1])


def norm_of_update(sent, received):
    return float(np.sqrt(sum(float(np.sum((sent[k].astype(np.float64) - received[k]) ** 2)) for k in sent)))


def test_fixed_clipping_matches_flwr_fixedclipping_mod(tmp_path, venv, arts, monkeypatch):
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, *parts[0])
    config = RECIPE + [("clipping_norm", 0.5)]
    received, trained, reply, sent, report = answer_one(trainer, config, monkeypatch)
    assert reply.error is None, reply.error
    assert norm_of_update(trained, received) > 2.0  # training moved further than the norm: it clipped
    assert norm_of_update(sent, received) <= 0.5 * (1 + 1e-6)
    assert report["clipping_norm"] == 0.5 and report["scale"] < 1
    theirs, info = flwr_mod(venv, tmp_path, received, trained, config)
    assert info["keys"] == list(sent) and info["update_norm"] <= 0.5 * (1 + 1e-6)
    for k in sent:  # byte for byte what flwr's mod sends
        assert sent[k].dtype == theirs[k].dtype
        np.testing.assert_array_equal(sent[k], theirs[k])
    for k, v in trainer.get_parameters().items():  # the local model is what was sent
        np.testing.assert_array_equal(v, sent[k])
    # flwr 1.42's mod refuses FedAvg's evaluate messages (no clipping_norm there); pytrain clips train replies only
    assert "clipping_norm" in info["evaluate_error"]


def test_update_within_norm_is_sent_unchanged(arts):
    (parts, _) = digits_splits(1)
    received, _, reply, sent, _ = answer_one(make_trainer(arts, *parts[0]), RECIPE + [("clipping_norm", 1e6)])
    trainer = make_trainer(arts, *parts[0])  # the same training without DP
    _, _, _, plain, report = answer_one(trainer, RECIPE)
    assert report is None
    for k in sent:  # scale 1; like flwr, received + (trained - received), which float32 rounds by an ulp
        np.testing.assert_array_equal(sent[k], received[k] + (plain[k] - received[k]))
        np.testing.assert_allclose(sent[k], plain[k], rtol=0, atol=1e-7)


def test_local_dp_matches_flwr_localdpmod(tmp_path, venv, arts, monkeypatch):
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, *parts[0])
    args = [1.0, 0.05, 2.0, 1e-5]  # clipping norm, sensitivity, epsilon, delta
    local_dp = LocalDp(*args, seed=1234)
    std = 0.05 * np.sqrt(2 * np.log(1.25 / 1e-5)) / 2.0  # flwr's formula
    assert local_dp.noise_std == pytest.approx(std, rel=1e-15)
    received, trained, reply, sent, report = answer_one(trainer, RECIPE, monkeypatch, privacy_mods(local_dp))
    assert reply.error is None, reply.error
    assert report["noise_std"] == pytest.approx(std, rel=1e-15)
    theirs, info = flwr_mod(venv, tmp_path, received, trained, RECIPE, local_dp=args, seed=1234)
    for k in sent:  # same clipping, same noise: the same numbers
        np.testing.assert_array_equal(sent[k], theirs[k])
    # the noise itself: what was sent minus the clipped update has the formula's std
    clipped, _, scale = privacy.clip_update(received, trained, 1.0)
    assert scale < 1
    noise = np.concatenate([(sent[k].astype(np.float64) - clipped[k]).ravel() for k in sent])
    assert abs(noise.mean()) < 4 * std / np.sqrt(noise.size)
    assert noise.std() == pytest.approx(std, rel=0.06)  # 2,410 draws: 6% is about 4 standard errors
    assert "ArrayRecord" in info["evaluate_error"]  # flwr's LocalDpMod refuses evaluate replies


@pytest.mark.parametrize("value", [-1.0, 0.0, float("nan"), float("inf"), "0.5", True, None])
def test_hostile_clipping_norm_gets_an_error_reply(arts, value):
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, *parts[0], seed=3)
    before = trainer.get_parameters()
    config = RECIPE + ([("clipping_norm", value)] if value is not None else [])
    _, _, reply, _, _ = answer_one(trainer, config, mods=privacy_mods(require_clipping=value is None))
    assert reply.error is not None and "'clipping_norm'" in reply.error.reason, reply.error
    assert "refused the train message" in reply.error.reason
    for k, v in trainer.get_parameters().items():  # refused before training: the model is untouched
        np.testing.assert_array_equal(v, before[k])


@pytest.mark.parametrize("args,word", [((0.0, 1, 1, 1e-5), "clipping norm"), ((1, -1, 1, 1e-5), "sensitivity"),
                                       ((1, 1, 0, 1e-5), "epsilon"), ((1, 1, 1, 0), "delta"),
                                       ((1, 1, 1, 1.5), "delta"), ((1, "x", 1, 1e-5), "sensitivity"),
                                       ((float("nan"), 1, 1, 1e-5), "clipping norm")])
def test_local_dp_refuses_meaningless_settings(args, word):
    with pytest.raises(InputError, match=word):
        LocalDp(*args)


def test_federation_with_client_side_fixed_clipping(tmp_path, venv, arts):
    """DifferentialPrivacyClientSideFixedClipping around FedAvg, 2 rounds: two pytrain nodes in threads
    (one requiring the clipping norm) and one ``pytrain federate --local-dp`` process."""
    rounds, clip = 2, 0.5
    splits, _ = digits_splits(3)
    link = SuperLink(venv, tmp_path / "home").start()
    stop, errors, nodes, threads = threading.Event(), [], [], []
    out = tmp_path / "out"
    cli = None
    try:
        init = tmp_path / "init.npz"
        np.savez(str(init), **make_trainer(arts, *splits[0]).get_parameters())
        for k in range(2):
            trainer = make_trainer(arts, *splits[k], seed=k)
            node = FlowerNode(link.url, trainer, heartbeat_interval=10, poll_interval=0.1, keep_replies=True,
                              mods=privacy_mods(require_clipping=k == 1))
            node.join()
            nodes.append(node)

            def work(n=node):
                try:
                    n.run(stop=stop.is_set, timeout=wait_s(120))
                except Exception as e:  # reported below
                    errors.append(e)
            threads.append(threading.Thread(target=work, daemon=True))
        d = tmp_path / "cli"
        arts.write(str(d))
        np.savez(str(d / "data.npz"), x=splits[2][0], y=splits[2][1])
        with open(str(tmp_path / "cli.log"), "wb") as f:
            cli = subprocess.Popen(
                [sys.executable, "-m", "pytrain", "federate", str(d), "--superlink", link.url, "--data",
                 str(d / "data.npz"), "--rounds", str(rounds), "--poll", "0.1", "--heartbeat", "10", "--timeout",
                 str(wait_s(120)), "--local-dp", "1.0,0.01,1.0,1e-5", "--require-clipping"],
                stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                start_new_session=True)
        for t in threads:
            t.start()
        link.run_app(out, init, **{"num-nodes": 3, "num-server-rounds": rounds, "dp-mode": "client",
                                   "dp-clip": clip, "dp-noise": 0.01, "local-epochs": 2})
        wait_until(lambda: (out / "result.json").exists(), wait_s(90), "the ServerApp's result", link.proc, link.log)
        cli.wait(timeout=wait_s(60))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=wait_s(30))
        if cli is not None and cli.poll() is None:
            os.killpg(cli.pid, signal.SIGTERM)
            cli.wait(timeout=15)
        link.stop()
    assert not errors, errors
    result = json.loads((out / "result.json").read_text())
    assert "error" not in result, result["error"]
    cli_log = (tmp_path / "cli.log").read_text()
    assert cli.returncode == 0, cli_log
    assert "local DP: clipped to 1" in cli_log and "clipped to the server's norm 0.5" in cli_log, cli_log
    for r in range(1, rounds + 1):
        replies = result["replies"]["train"][str(r)]
        assert len(replies) == 3 and all(rep["error"] is None for rep in replies), replies
        assert all(rep["update_norm"] <= clip * (1 + 1e-6) for rep in replies), replies  # flwr's get_norm
        assert all(rep["error"] is None for rep in result["replies"]["evaluate"][str(r)])
        assert (out / ("round_%d.npz" % r)).exists()  # the DP strategy aggregated the round
    assert set(result["train"]) == {str(r) for r in range(1, rounds + 1)}
    for node in nodes:
        sent = [rep for rep in node.replies if rep.message_type == "train"]
        assert len(sent) == rounds and all(rep.error is None for rep in sent)


PY38 = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from pytrain.flower import mods, privacy
with np.load(sys.argv[2]) as z:
    received = {k[2:]: z[k] for k in z.files if k.startswith("r_")}
    trained = {k[2:]: z[k] for k in z.files if k.startswith("t_")}
handler = mods.compose(lambda task: mods.Answer(trained, 1, {}),
                       mods.privacy_mods(privacy.LocalDp(1.0, 0.05, 2.0, 1e-5, seed=99)))
np.savez(sys.argv[3], **handler(mods.Task("train", received, {"clipping_norm": 0.5})).arrays)
print(np.__version__, sys.version_info[:2])
"""


def test_privacy_on_python38_numpy117_gives_the_same_bytes(tmp_path):
    py = ROOT / "build" / "py38-numpy117" / "bin" / "python"
    if not py.exists():
        pytest.skip("no Python 3.8 + numpy 1.17.5 venv (tests/api/test_python38_numpy117.py builds it)")
    rng = np.random.RandomState(0)
    received = {"w": rng.randn(32, 64).astype(np.float32), "b": rng.randn(32).astype(np.float32)}
    trained = {k: v + rng.randn(*v.shape).astype(np.float32) for k, v in received.items()}
    np.savez(str(tmp_path / "in.npz"), **{"r_" + k: v for k, v in received.items()},
             **{"t_" + k: v for k, v in trained.items()})
    res = subprocess.run([str(py), "-c", PY38, str(ROOT), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                         capture_output=True, text=True, timeout=wait_s(60))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("1.17"), res.stdout
    handler = compose(lambda task: Answer(trained, 1, {}), privacy_mods(LocalDp(1.0, 0.05, 2.0, 1e-5, seed=99)))
    ours = handler(Task("train", received, {"clipping_norm": 0.5})).arrays
    with np.load(str(tmp_path / "out.npz")) as z:
        for k in ours:
            np.testing.assert_array_equal(z[k], ours[k])
    assert norm_of_update(ours, received) <= 0.5 * (1 + 1e-6)


CLIENT_APP = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.differential_privacy import get_norm
from flwr.supercore.task_identity import TaskIdentity
from pytrain.device.api import CheckpointState
from pytrain.flower import LocalDp, client_app
from pytrain.flower.mods import privacy_mods

TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1  # to build messages by hand
arts, data = sys.argv[2], sys.argv[3]
app = client_app(arts, data, privacy=privacy_mods(LocalDp(1.0, 0.01, 1.0, 1e-5, seed=5), require_clipping=True))
params = {k: p.data + 0.01 for k, p in CheckpointState.load_checkpoint(arts + "/checkpoint").parameters.items()}
ctx = Context(run_id=1, node_id=2, node_config={}, state=RecordDict(), run_config={})
out = {}
for case, extra in (("clipped", {"clipping_norm": 0.25}), ("missing", {})):
    config = dict({"lr": 0.2, "local-epochs": 2, "batch-size": 16}, **extra)
    msg = Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in params.items()}),
                              "config": ConfigRecord(config)}), dst_node_id=2, message_type="train")
    msg.metadata.__dict__["_message_id"] = msg.object_id
    try:
        reply = app(msg, ctx)
    except ValueError as e:  # flower-supernode turns what a ClientApp raises into an error reply
        out[case] = str(e)
    else:
        got = {k: v.numpy() for k, v in reply.content["arrays"].items()}
        out[case] = get_norm([got[k] - params[k] for k in got])
print(json.dumps(out))
"""


def test_client_app_clips_and_refuses_as_configured(tmp_path, venv, arts):
    (parts, _) = digits_splits(1)
    out = run_client_app_script(CLIENT_APP, tmp_path, venv, arts, *parts[0])
    assert 0.24 < out["clipped"] <= 0.25 * (1 + 1e-6)  # flwr's get_norm of the update the ClientApp sent
    assert "'clipping_norm'" in out["missing"]  # require_clipping: refused, as flwr's fixedclipping_mod does
