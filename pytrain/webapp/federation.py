"""The page's "Join a federation": this tab's model and data as a Flower node, driven by the worker.

The worker (web/worker.js) signs and ``fetch``-es each request of :class:`pytrain.flower.steps.StepDriver`;
only parameters and metrics (loss, accuracy, number of examples) ever leave the tab.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional

import numpy as np

from pytrain.flower.node import HEARTBEAT_MAX, HEARTBEAT_MIN, FlowerNode
from pytrain.flower.privacy import LocalDp
from pytrain.flower.secagg_crypto import provider as crypto_provider
from pytrain.flower.steps import PemSigner, StepDriver
from pytrain.flower.mods import privacy_mods
from pytrain.flower.trainer import LocalTraining, PytrainTrainer, parameter_names
from pytrain.run.properties import LOSS_KINDS
from pytrain.webapp.common import WebappError


def _loss_kind(loss: Any) -> str:
    """The kind a Flower trainer judges accuracy by: ce or bce, else mse (no accuracy)."""
    kind = LOSS_KINDS.get(loss, "mse")
    return kind if kind in ("ce", "bce") else "mse"


class TrainerData(NamedTuple):
    """A Flower trainer's samples as the training graph takes them: training, then evaluation."""
    x: np.ndarray
    y: np.ndarray
    eval_x: np.ndarray
    eval_y: np.ndarray


class JoinOptions(NamedTuple):
    """The page's "Join a federation": the SuperLink's ``url``, the tab's ``public_key`` (PEM), the node id of an
    earlier session, heartbeat and poll intervals (s), local epochs per round (the server may set them), the
    privacy setting (``local_dp``: {clipping_norm, epsilon, delta} or None; ``require_clipping``), and whether
    the worker performs SecAgg+'s public-key crypto (``webcrypto``, else Python does)."""
    url: str
    public_key: str
    node_id: Optional[str] = None
    heartbeat: float = 30.0
    poll: float = 1.0
    epochs: int = 1
    local_dp: Optional[Dict[str, Any]] = None
    require_clipping: bool = False
    webcrypto: bool = False


class FederationFlow:
    """The tab's Flower node while it is in a federation: the run it trains (``run``) and the exported model
    it makes stale (``exports``) are given; the samples come from the session when the node starts."""

    def __init__(self, run: Any, exports: Any) -> None:
        self.run, self.exports = run, exports
        self.driver: Optional[StepDriver] = None

    def dispatch(self, op: str, args: Dict[str, Any]) -> Any:
        """The worker's ``next`` (the answer to the last request) and ``stop``."""
        driver = self.driver
        if driver is None:
            raise WebappError("this tab has not joined a federation")
        if op == "next":
            step = driver.next(status=args.get("status"), body=args.get("body"), error=args.get("error"),
                               result=args.get("result"), crypto_error=args.get("crypto_error"))
            if any(e.get("kind") == "answered" and e.get("message_type") == "train" for e in step["events"]):
                self.exports.forget()  # the weights changed: predictions must not use a stale export
            if step["kind"] in ("done", "failed"):
                self.driver = None
            return step
        if op == "stop":
            driver.stop()
            return True
        raise WebappError("unknown federation operation %r" % op)

    def start(self, data: Callable[[], TrainerData], loss: Any, options: JoinOptions) -> Dict[str, Any]:
        """A node for this tab's model and ``data()`` (the server's ConfigRecord sets the rounds' recipe);
        ``loss``: the model's loss; ``options``: the page's choices (:class:`JoinOptions`)."""
        url, public_key, node_id, heartbeat, poll, epochs, local_dp, require_clipping, webcrypto = options
        if self.driver is not None:
            raise WebappError("this tab is already in a federation: leave it first")
        samples = data()
        if not HEARTBEAT_MIN <= float(heartbeat) <= HEARTBEAT_MAX:
            raise WebappError("the heartbeat interval must be within %g-%g s" % (HEARTBEAT_MIN, HEARTBEAT_MAX))
        dp = local_dp_of(local_dp)
        run = self.run
        trainer = PytrainTrainer(run.module, run.optimizer, samples.x, samples.y, samples.eval_x, samples.eval_y,
                                 LocalTraining(int(epochs), run.batch_size, run.lr, run.seed, _loss_kind(loss)))
        # a stepping driver cannot heartbeat in the middle of fit(): a round's local training must
        # fit in the SuperLink's patience (2 heartbeat intervals)
        node = FlowerNode(url, trainer, signer=PemSigner(public_key.encode("ascii")),
                          heartbeat_interval=float(heartbeat), poll_interval=float(poll), beat_during_training=False,
                          mods=privacy_mods(dp, bool(require_clipping)))
        self.driver = StepDriver(node, int(node_id) if node_id else None, crypto_outside=bool(webcrypto))
        params = run.module.state.parameters
        privacy = {"require_clipping": bool(require_clipping), "local_dp": None if dp is None else {
            "clipping_norm": dp.clipping_norm, "sensitivity": dp.sensitivity, "epsilon": dp.epsilon,
            "delta": dp.delta, "noise_std": float(dp.noise_std)}}
        # which crypto SecAgg+ uses here: the worker's WebCrypto, else cryptography or pure Python
        return {"samples": int(len(samples.x)), "eval_samples": int(len(samples.eval_x)), "privacy": privacy,
                "secagg_crypto": "webcrypto" if webcrypto else crypto_provider(),
                "parameters": [{"name": n, "shape": list(params[n].shape)} for n in parameter_names(run.module)]}


def local_dp_of(local_dp: Optional[Dict[str, Any]]) -> Optional[LocalDp]:
    """The page's privacy setting ({clipping_norm, epsilon, delta}, or None: off) as a LocalDp. The
    sensitivity of an update clipped to a norm is that norm, so it is the clipping norm unless given."""
    if not local_dp:
        return None
    clip = local_dp.get("clipping_norm")
    return LocalDp(clip, local_dp.get("sensitivity", clip), local_dp.get("epsilon"), local_dp.get("delta"))
