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
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from pytrain.flower.mods import Handler, Mod, Task, make_handler, with_fixed_clipping
from pytrain.flower.trainer import LocalTraining
from pytrain.base.layout import ARTIFACT_FILES


def _load_data(data: Any, context: Any) -> Tuple[np.ndarray, np.ndarray]:
    if callable(data) and not isinstance(data, (str, os.PathLike)):
        data = data(context)
    if isinstance(data, (str, os.PathLike)):
        with np.load(str(data), allow_pickle=False) as z:
            return z["x"], z["y"]
    x, y = data
    return np.asarray(x), np.asarray(y)


def _open(artifacts: Any, context: Any):
    from pytrain.device.api import CheckpointState, Module, Optimizer

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


def client_app(artifacts: Any, data: Any, settings: Optional[LocalTraining] = None, eval_data: Any = None,
               mods: Optional[list] = None, privacy: Sequence[Mod] = ()):
    """A ``flwr.clientapp.ClientApp`` training ``artifacts`` on ``data`` (see the module docstring) with the
    rounds' defaults ``settings`` (:class:`~pytrain.flower.trainer.LocalTraining`); ``mods`` are Flower
    ClientApp mods (e.g. ``secaggplus_mod``). Differential privacy is pytrain's, as on a
    :class:`~pytrain.flower.node.FlowerNode`: ``privacy`` (e.g. :func:`pytrain.flower.mods.privacy_mods`) wraps
    the trainer; the update is always clipped to the ``clipping_norm`` a
    ``DifferentialPrivacyClientSideFixedClipping`` server sends."""
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    from pytrain.flower.trainer import PytrainTrainer

    app = ClientApp(mods=mods)
    handlers: dict = {}  # node id -> its trainer's handler: its own model, optimizer state and data

    def handler(context) -> Handler:
        node = getattr(context, "node_id", None)
        if node not in handlers:
            module, optimizer, _ = _open(artifacts, context)
            x, y = _load_data(data, context)
            ex, ey = _load_data(eval_data, context) if eval_data is not None else (None, None)
            trainer = PytrainTrainer(module, optimizer, x, y, ex, ey, settings)
            handlers[node] = make_handler(trainer, with_fixed_clipping(privacy))
        return handlers[node]

    def task(msg: Message, kind: str) -> Task:
        arrays = [r for r in msg.content.array_records.values()]
        if len(arrays) != 1:
            raise ValueError("a %s message must carry exactly one ArrayRecord, got %d"
                             % (msg.metadata.message_type, len(arrays)))
        config = {}
        for rec in msg.content.config_records.values():
            config.update(dict(rec))
        return Task(kind, {k: v.numpy() for k, v in arrays[0].items()}, config)

    @app.train()
    def train(msg: Message, context) -> Message:
        answer = handler(context)(task(msg, "train"))
        content = RecordDict({"arrays": ArrayRecord({k: Array(np.asarray(v)) for k, v in answer.arrays.items()}),
                              "metrics": MetricRecord(dict(answer.metrics))})
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context) -> Message:
        answer = handler(context)(task(msg, "evaluate"))
        return Message(content=RecordDict({"metrics": MetricRecord(dict(answer.metrics))}), reply_to=msg)

    return app
