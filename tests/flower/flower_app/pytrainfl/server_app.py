"""FedAvg ServerApp: starts from the arrays in ``init`` (an .npz of parameters by name), trains
``num-server-rounds`` rounds on exactly ``num-nodes`` nodes (with central differential
privacy when ``dp-noise`` > 0: clipping on the server, or on the nodes when ``dp-mode`` is
"client", i.e. DifferentialPrivacyClientSideFixedClipping), and writes the global model of every
round to ``out/round_<n>.npz`` (round 0 is the initial model) plus ``out/result.json``."""
import json
import os
import time
import traceback

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import (DifferentialPrivacyClientSideFixedClipping,
                                     DifferentialPrivacyServerSideFixedClipping, FedAvg)
from flwr.supercore.differential_privacy import get_norm

app = ServerApp()


class PromptGrid:
    """The Grid, pulling replies every 0.1 s where flwr's HTTP Grid sleeps 3 s between pulls (its
    ``send_and_receive``; every stage of every round waits for that sleep): the same push, the same
    pulls until every reply or the timeout, only sooner."""

    POLL_S = 0.1

    def __init__(self, grid: Grid) -> None:
        self._grid = grid

    def __getattr__(self, name):
        return getattr(self._grid, name)

    def send_and_receive(self, messages, *, timeout=None):
        msg_ids = set(self._grid.push_messages(messages))
        end = time.time() + (timeout if timeout is not None else 0.0)
        got = []
        while timeout is None or time.time() < end:
            replies = list(self._grid.pull_messages(msg_ids))
            got.extend(replies)
            msg_ids.difference_update(m.metadata.reply_to_message_id for m in replies)
            if not msg_ids:
                break
            time.sleep(self.POLL_S)
        return got


@app.main()
def main(grid: Grid, context: Context) -> None:
    out = str(context.run_config["out"])
    os.makedirs(out, exist_ok=True)
    grid = PromptGrid(grid)
    try:
        if context.run_config.get("secagg"):  # SecAgg+ (pytrainfl.secagg_app)
            from pytrainfl.secagg_app import federate_secagg
            federate_secagg(grid, context, context.run_config, out)
        else:
            federate(grid, context.run_config, out)
    except BaseException:
        write_result(out, {"error": traceback.format_exc()})  # the test stops waiting at once
        raise


def write_result(out: str, result: dict) -> None:
    """``out/result.json``, whole or not at all (a test reads it as soon as it exists)."""
    path = os.path.join(out, "result.json")
    with open(path + ".part", "w") as f:
        json.dump(result, f)
    os.replace(path + ".part", path)


class RecordingFedAvg(FedAvg):
    """FedAvg that also notes, per round, which node each reply came from and whether it was an error
    (so a test sees a reply the SuperLink replaced by "Node Unavailable")."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.replies = {"train": {}, "evaluate": {}}
        self.sent = {}  # round -> the arrays the nodes were sent for training

    def configure_train(self, server_round, arrays, config, grid):
        self.sent[server_round] = {name: a.numpy() for name, a in arrays.items()}
        return super().configure_train(server_round, arrays, config, grid)

    def _note(self, kind: str, server_round: int, replies):
        replies = list(replies)
        notes = []
        for m in replies:
            note = {"node": str(m.metadata.src_node_id), "error": m.error.reason if m.has_error() else None}
            if kind == "train" and not m.has_error():  # the update's L2 norm, by flwr's own function
                got = next(iter(m.content.array_records.values()))
                note["update_norm"] = get_norm([a.numpy() - self.sent[server_round][name]
                                                for name, a in got.items()])
            notes.append(note)
        self.replies[kind][str(server_round)] = notes
        return replies

    def aggregate_train(self, server_round, replies):
        return super().aggregate_train(server_round, self._note("train", server_round, replies))

    def aggregate_evaluate(self, server_round, replies):
        return super().aggregate_evaluate(server_round, self._note("evaluate", server_round, replies))


def federate(grid: Grid, cfg, out: str) -> None:
    with np.load(str(cfg["init"])) as z:
        initial = ArrayRecord({name: Array(z[name]) for name in z.files})
    n = int(cfg["num-nodes"])
    strategy = recorder = RecordingFedAvg(fraction_train=1.0, fraction_evaluate=1.0, min_train_nodes=n,
                                          min_evaluate_nodes=n, min_available_nodes=n)
    if str(cfg["dp-mode"]) == "client":  # central DP, the nodes clip (fixedclipping_mod's job)
        strategy = DifferentialPrivacyClientSideFixedClipping(
            strategy, noise_multiplier=float(cfg["dp-noise"]), clipping_norm=float(cfg["dp-clip"]),
            num_sampled_clients=n)
    elif float(cfg["dp-noise"]) > 0:  # central DP, all on the server: the nodes do nothing different
        strategy = DifferentialPrivacyServerSideFixedClipping(
            strategy, noise_multiplier=float(cfg["dp-noise"]), clipping_norm=float(cfg["dp-clip"]),
            num_sampled_clients=n)

    def save_global(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        np.savez(os.path.join(out, "round_%d.npz" % server_round),
                 **{name: array.numpy() for name, array in arrays.items()})
        return MetricRecord({"saved": 1})

    result = strategy.start(
        grid=grid, initial_arrays=initial, num_rounds=int(cfg["num-server-rounds"]),
        timeout=float(cfg["round-timeout"]),
        train_config=ConfigRecord({"lr": float(cfg["lr"]), "local-epochs": int(cfg["local-epochs"]),
                                   "batch-size": int(cfg["batch-size"])}),
        evaluate_fn=save_global)
    summary = {
        "train": {str(r): dict(m) for r, m in result.train_metrics_clientapp.items()},
        "evaluate": {str(r): dict(m) for r, m in result.evaluate_metrics_clientapp.items()},
        "replies": recorder.replies,
    }
    write_result(out, summary)
