"""Nodes that leave after their last round (``pytrain federate --rounds N``) first answer every message
of that round and stay until the SuperLink has handed their replies to the ServerApp: flwr 1.42's
SuperLink gives the ServerApp a reply only while its sender is online, "Node Unavailable" otherwise.

A real SuperLink runs five FedAvg runs in a row, each with fresh ``pytrain federate`` processes and one
round (the round a node leaves after is its last: its evaluate reply is the one at stake); the
ServerApp notes every reply it receives (tests/flower/flower_app).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np

from test_flower import ROOT, SuperLink, arts, digits_splits, make_trainer, venv, wait_until  # noqa: F401 (fixtures)

RUNS, ROUNDS, NODES = 5, 1, 2


def test_nodes_leaving_after_their_last_round_deliver_every_reply(tmp_path, venv, arts):  # noqa: F811
    splits, _ = digits_splits(NODES)
    splits = [(x[:96], y[:96]) for x, y in splits]  # tiny: the test is about the protocol, not the model
    link = SuperLink(venv, tmp_path / "home").start()
    try:
        init = tmp_path / "init.npz"
        np.savez(str(init), **make_trainer(arts, *splits[0]).get_parameters())
        for k in range(NODES):
            d = tmp_path / ("node%d" % k)
            arts.write(str(d))
            np.savez(str(d / "data.npz"), x=splits[k][0], y=splits[k][1])
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        for run in range(RUNS):
            clis = []
            for k in range(NODES):
                d = tmp_path / ("node%d" % k)
                with open(str(tmp_path / ("run%d_node%d.log" % (run, k))), "wb") as f:
                    clis.append(subprocess.Popen(
                        [sys.executable, "-m", "pytrain", "federate", str(d), "--superlink", link.url, "--data",
                         str(d / "data.npz"), "--rounds", str(ROUNDS), "--poll", "0.1", "--heartbeat", "10",
                         "--timeout", "300", "--no-save", "--seed", str(k)],
                        stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True))
            try:
                out = tmp_path / ("out%d" % run)
                link.run_app(out, init, **{"num-nodes": NODES, "num-server-rounds": ROUNDS, "local-epochs": 1})
                wait_until(lambda: (out / "result.json").exists(), 150, "run %d's result" % run, link.proc, link.log)
                for p in clis:
                    wait_until(lambda p=p: p.poll() is not None, 90, "run %d's nodes to leave" % run)
            finally:
                for p in clis:
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGTERM)
                        p.wait(timeout=15)
            result = json.loads((out / "result.json").read_text())
            assert "error" not in result, result["error"]
            for kind in ("train", "evaluate"):  # what the ServerApp received: every node's reply, no error
                for r in range(1, ROUNDS + 1):
                    got = result["replies"][kind][str(r)]
                    assert len(got) == NODES and len({g["node"] for g in got}) == NODES, (run, kind, r, got)
                    assert all(g["error"] is None for g in got), (run, kind, r, got)
            for k, p in enumerate(clis):
                log = (tmp_path / ("run%d_node%d.log" % (run, k))).read_text()
                assert p.returncode == 0 and "left after %d training round(s)" % ROUNDS in log, log
                assert "not taken" not in log, log
    finally:
        link.stop()
