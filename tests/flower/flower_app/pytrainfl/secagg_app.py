"""A SecAgg+ ServerApp: flwr's DefaultWorkflow with ``SecAggPlusWorkflow`` for training and legacy
FedAvg (no evaluate round), starting from ``init`` (an .npz of parameters by name, in the model's
order). It writes the global model of every round to ``out/round_<n>.npz``, every masked vector the
nodes sent to ``out/masked_<round>_<node>.npz`` and ``out/result.json``. Selected with
``flwr run ... --run-config 'secagg=true ...'`` through pytrainfl.server_app."""
import os

import numpy as np
from flwr.common import ndarrays_to_parameters
from flwr.server import LegacyContext, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow


class RecordingGrid:
    """The Grid, noting every masked vector a node sends (what the server sees of an update)."""

    def __init__(self, grid, out: str) -> None:
        self._grid, self._out, self.stage = grid, out, 0

    def __getattr__(self, name):
        return getattr(self._grid, name)

    def send_and_receive(self, messages, *args, **kwargs):
        replies = list(self._grid.send_and_receive(messages, *args, **kwargs))
        for m in replies:
            if m.has_error():
                continue
            cfg = m.content.config_records.get("secaggplus_configs")
            if cfg is not None and "masked_params" in cfg:
                arrays = [np.load(__import__("io").BytesIO(b), allow_pickle=False) for b in cfg["masked_params"]]
                np.savez(os.path.join(self._out, "masked_%s_%d.npz" % (m.metadata.group_id, m.metadata.src_node_id)),
                         *arrays)
        return replies


def federate_secagg(grid, context, cfg, out: str) -> None:
    with np.load(str(cfg["init"])) as z:
        names = list(z.files)
        initial = [z[n] for n in names]
    n = int(cfg["num-nodes"])

    def save_global(server_round, ndarrays, config):
        np.savez(os.path.join(out, "round_%d.npz" % server_round), **dict(zip(names, ndarrays)))
        return None

    strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n, min_evaluate_clients=0,
                      min_available_clients=n, initial_parameters=ndarrays_to_parameters(initial),
                      evaluate_fn=save_global,
                      on_fit_config_fn=lambda r: {"lr": float(cfg["lr"]), "local-epochs": int(cfg["local-epochs"]),
                                                  "batch-size": int(cfg["batch-size"]), "server-round": r})
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=int(cfg["num-server-rounds"])),
                           strategy=strategy)
    workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(
        num_shares=n, reconstruction_threshold=max(2, n - 1), clipping_range=float(cfg["secagg-clip"]),
        timeout=float(cfg["round-timeout"])))
    workflow(RecordingGrid(grid, out), legacy)
    from pytrainfl.server_app import write_result
    write_result(out, {"rounds": int(cfg["num-server-rounds"]), "fit": dict(legacy.history.metrics_distributed_fit)})
