"""A Flower ``ClientApp`` backed by pytrain, for devices that run flwr (``flower-supernode``).

    # client_app.py of a Flower App
    from pytrain.flower import client_app
    app = client_app("artifacts/", "data.npz")                 # or (x, y), or a function of the Context

``artifacts``: a directory from ``pytrain generate`` / ``generate_artifacts(artifact_directory=)``,
an ``Artifacts`` object, or a function ``context -> either``. ``data``: an ``.npz`` with ``x`` and
``y``, an ``(x, y)`` pair, or a function ``context -> either`` (e.g. a path from
``context.node_config``), read once per node. One app serves many nodes in Flower's Simulation Engine
(each Ray actor runs the same app object for every virtual SuperNode it is handed): each node
(``context.node_id``) gets its own model, optimizer state and data (0.13 MiB and 13 ms for the digits
MLP). It answers the same messages as :class:`FlowerNode` with the same replies (``arrays`` +
``metrics`` with ``num-examples``), so pytrain devices with and without flwr mix in one federation.
flwr is imported only when the app is made.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Tuple

import numpy as np

from pytrain.layout import ARTIFACT_FILES


def _load_data(data: Any, context: Any) -> Tuple[np.ndarray, np.ndarray]:
    if callable(data) and not isinstance(data, (str, os.PathLike)):
        data = data(context)
    if isinstance(data, (str, os.PathLike)):
        with np.load(str(data), allow_pickle=False) as z:
            return z["x"], z["y"]
    x, y = data
    return np.asarray(x), np.asarray(y)


def _open(artifacts: Any, context: Any):
    from pytrain.api import CheckpointState, Module, Optimizer

    if callable(artifacts):
        artifacts = artifacts(context)
    if isinstance(artifacts, (str, os.PathLike)):
        d = str(artifacts)
        files = [os.path.join(d, ARTIFACT_FILES[k]) for k in ("training", "eval", "optimizer", "checkpoint")]
    else:
        files = [artifacts.training_model, artifacts.eval_model, artifacts.optimizer_model, artifacts.checkpoint]
    state = CheckpointState.load_checkpoint(files[3])
    module = Module(files[0], state, files[1])
    return module, Optimizer(files[2], module), state


def client_app(artifacts: Any, data: Any, epochs: int = 1, batch_size: int = 32, lr: Optional[float] = None,
               seed: int = 0, loss_kind: str = "ce", eval_data: Any = None, mods: Optional[list] = None,
               local_dp: Any = None, require_clipping: bool = False):
    """A ``flwr.clientapp.ClientApp`` training ``artifacts`` on ``data`` (see the module docstring);
    ``mods`` are Flower ClientApp mods (e.g. ``secaggplus_mod``). Differential privacy is pytrain's, as
    in :class:`PytrainTrainer`: the update is clipped to the ``clipping_norm`` a
    ``DifferentialPrivacyClientSideFixedClipping`` server sends (``require_clipping``: refuse train
    messages without it), and ``local_dp`` (a :class:`pytrain.flower.privacy.LocalDp`) adds local DP."""
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    from pytrain.flower.trainer import PytrainTrainer

    app = ClientApp(mods=mods)
    trainers: dict = {}  # node id -> its PytrainTrainer: its own model, optimizer state and data

    def trainer(context) -> PytrainTrainer:
        node = getattr(context, "node_id", None)
        if node not in trainers:
            module, optimizer, _ = _open(artifacts, context)
            x, y = _load_data(data, context)
            ex, ey = _load_data(eval_data, context) if eval_data is not None else (None, None)
            trainers[node] = PytrainTrainer(module, optimizer, x, y, ex, ey, epochs=epochs, batch_size=batch_size,
                                            lr=lr, seed=seed, loss_kind=loss_kind, local_dp=local_dp,
                                            require_clipping=require_clipping)
        return trainers[node]

    def inputs(msg: Message):
        arrays = [r for r in msg.content.array_records.values()]
        if len(arrays) != 1:
            raise ValueError("a %s message must carry exactly one ArrayRecord, got %d"
                             % (msg.metadata.message_type, len(arrays)))
        config = {}
        for rec in msg.content.config_records.values():
            config.update(dict(rec))
        return {k: v.numpy() for k, v in arrays[0].items()}, config

    @app.train()
    def train(msg: Message, context) -> Message:
        params, config = inputs(msg)
        out, _, metrics = trainer(context).fit(params, config)
        content = RecordDict({"arrays": ArrayRecord({k: Array(np.asarray(v)) for k, v in out.items()}),
                              "metrics": MetricRecord(dict(metrics))})
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context) -> Message:
        params, config = inputs(msg)
        _, metrics = trainer(context).evaluate(params, config)
        return Message(content=RecordDict({"metrics": MetricRecord(dict(metrics))}), reply_to=msg)

    return app
