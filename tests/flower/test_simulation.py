"""pytrain's ClientApp (``pytrain.flower.client_app``) under Flower's Simulation Engine: ``flwr run``
against a ``flower-superlink --simulation`` whose Ray backend runs 20 virtual SuperNodes, each training
on its own part of the digits; FedAvg for 3 rounds (tests/flower/flower_app with
``pytrainfl.pytrain_client``). What the ServerApp aggregates (the global model of every round, the
aggregated train loss and evaluate accuracy) must equal plain FedAvg over the same 20 clients
computed here, in this process, with the same pytrain code. Scale (100 and 500 virtual nodes):
bench/flower_scale.py sim.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from test_flower import RECIPE, SuperLink, app_with_clientapp, digits_splits, make_trainer, wait_until
from test_flower import arts, venv  # noqa: F401 (fixtures)

CLIENTS, ROUNDS = 20, 3
#: the Simulation Engine's options: one CPU per virtual SuperNode, so Ray runs two at a time here
FEDERATION = {"num-supernodes": CLIENTS, "client-resources-num-cpus": 1}


def simulation_app(work: Path) -> Path:
    """The test Flower App with pytrain's ClientApp as its ``clientapp`` component."""
    return app_with_clientapp(work, "pytrainfl.pytrain_client:app")


def write_parts(work: Path, arts, parts) -> None:  # noqa: F811
    """What pytrainfl.pytrain_client reads: ``arts/`` and ``part<k>.npz``, one per virtual SuperNode."""
    arts.write(str(work / "arts"))
    for k, (x, y) in enumerate(parts):
        np.savez(str(work / ("part%d.npz" % k)), x=x, y=y)


def plain_fedavg(arts, parts, initial, config, rounds):  # noqa: F811
    """FedAvg by hand: every client trains from the global model, the examples weigh the mean.
    Returns per round (global model, mean train loss, mean evaluate accuracy of the new model)."""
    trainers = [make_trainer(arts, x, y) for x, y in parts]
    weights = np.array([len(x) for x, _ in parts], np.float64)
    w = weights / weights.sum()
    model, out = initial, []
    for r in range(1, rounds + 1):
        sent = [t.fit(model, dict(config, **{"server-round": r})) for t in trainers]
        model = {k: sum(wi * s[0][k].astype(np.float64) for wi, s in zip(w, sent)).astype(np.float32)
                 for k in model}
        loss = float(sum(wi * s[2]["train_loss"] for wi, s in zip(w, sent)))
        acc = float(sum(wi * t.evaluate(model, {})[1]["eval_acc"] for wi, t in zip(w, trainers)))
        out.append((model, loss, acc))
    return out


def test_simulation_of_20_virtual_pytrain_clients(tmp_path, venv, arts):  # noqa: F811
    parts, _ = digits_splits(CLIENTS)
    write_parts(tmp_path, arts, parts)
    initial = make_trainer(arts, *parts[0]).get_parameters()
    np.savez(str(tmp_path / "init.npz"), **initial)
    link = SuperLink(venv, tmp_path / "home", simulation=True).start()
    out = tmp_path / "out"
    try:
        link.run_app(out, tmp_path / "init.npz", app=simulation_app(tmp_path), federation=FEDERATION,
                     **{"num-nodes": CLIENTS, "num-server-rounds": ROUNDS, "sim-dir": str(tmp_path)})
        # the oracle while Ray starts and the rounds run (the test waited for them, then computed it)
        expect = plain_fedavg(arts, parts, initial, RECIPE, ROUNDS)
        wait_until(lambda: (out / "result.json").exists(), 300, "the simulation's result", link.proc, link.log)
    finally:
        link.stop()
    result = json.loads((out / "result.json").read_text())
    assert "error" not in result, result["error"]
    accs = []
    for r, (model, loss, acc) in enumerate(expect, start=1):
        replies = result["replies"]["train"][str(r)]
        assert len(replies) == CLIENTS and not any(n["error"] for n in replies), replies
        assert len({n["node"] for n in replies}) == CLIENTS  # 20 distinct virtual SuperNodes
        with np.load(str(out / ("round_%d.npz" % r))) as z:
            for k in model:
                np.testing.assert_allclose(z[k], model[k], rtol=0, atol=1e-5, err_msg="round %d %s" % (r, k))
        assert abs(result["train"][str(r)]["train_loss"] - loss) < 1e-5, (r, result["train"], loss)
        got = result["evaluate"][str(r)]["eval_acc"]
        assert abs(got - acc) < 1e-6, (r, got, acc)
        accs.append(got)
    print("simulation: FedAvg eval accuracy by round", accs)
    assert all(b > a for a, b in zip(accs, accs[1:])) and accs[-1] > 0.5, accs
