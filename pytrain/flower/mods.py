"""What the node does with a task, as flwr's ClientApp mods do it: a *handler* answers a :class:`Task`
(``train`` or ``evaluate`` with its parameters and config) with an :class:`Answer`, and each *mod* wraps
the handler after it (``mod(task, call_next)``), in list order, as flwr's ``make_ffn`` composes a
ClientApp's mods. The trainer (:class:`~pytrain.flower.trainer.Trainer`) is the innermost handler.

pytrain's mods are flwr's client-side differential privacy (:mod:`pytrain.flower.privacy` has the
arithmetic): `FixedClippingMod` (flwr's ``fixedclipping_mod``, for a ServerApp wrapped in
``DifferentialPrivacyClientSideFixedClipping``) and :class:`LocalDpMod` (flwr's ``LocalDpMod``). Both act
on train answers only; as in flwr, the fixed clipping must be the last to touch the parameters, so it
comes first in the list: :func:`privacy_mods` orders them. SecAgg+ (:func:`pytrain.flower.secagg.mod_steps`)
wraps the whole handler the same way, as a mod of steps, since its stages wait on public-key crypto.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from pytrain.flower import privacy


class Task(NamedTuple):
    """One message for the handler: its type, its parameters by name (checked against the model and in
    its dtypes), its config and its server round (None when the config has none)."""
    message_type: str
    arrays: Mapping[str, np.ndarray]
    config: Dict[str, Any]
    server_round: Optional[int] = None


class Answer(NamedTuple):
    """What the handler answers: the parameters to send (train only, else None), the examples, the
    metrics, and what differential privacy did to the update (None: nothing; it never leaves the node)."""
    arrays: Optional["OrderedDict[str, np.ndarray]"]
    num_examples: int
    metrics: Dict[str, Any]
    privacy: Optional[Dict[str, Any]] = None


Handler = Callable[[Task], Answer]
#: mod(task, call_next) -> answer: flwr's ``Mod`` without the Context (a mod keeps its own state)
Mod = Callable[[Task, Handler], Answer]


def make_handler(trainer: Any, mods: Sequence[Mod] = ()) -> Handler:
    """The trainer's ``fit``/``evaluate`` wrapped in ``mods`` (the first is the outermost, as flwr's
    ``make_ffn``). A train task's parameters are checked and converted to the model's dtypes first; when a
    mod changes the parameters sent, the local model is set to them before the mods outside it see the answer."""
    def answer(task: Task) -> Answer:
        if task.message_type == "train":
            params, num, metrics = trainer.fit(task.arrays, task.config)
            return Answer(params, num, metrics)
        num, metrics = trainer.evaluate(task.arrays, task.config)
        return Answer(None, num, metrics)

    handler = compose(answer, mods, trainer.set_parameters)

    def handle(task: Task) -> Answer:
        if task.message_type == "train":
            task = Task(task.message_type, trainer.check_parameters(task.arrays), task.config, task.server_round)
        return handler(task)
    return handle


def compose(handler: Handler, mods: Sequence[Mod], on_sent: Optional[Callable[[Any], None]] = None) -> Handler:
    """``handler`` wrapped in ``mods``, the first outermost (flwr's ``make_ffn``). ``on_sent(arrays)``: called
    when a mod changes the parameters sent, before the mods outside it see its answer."""
    for mod in reversed(list(mods)):
        handler = _wrap(mod, handler, on_sent)
    return handler


def _wrap(mod: Mod, call_next: Handler, on_sent: Optional[Callable[[Any], None]]) -> Handler:
    def handle(task: Task) -> Answer:
        inner: List[Answer] = []

        def next_(t: Task) -> Answer:
            inner.append(call_next(t))
            return inner[-1]
        got = mod(task, next_)
        if on_sent is not None and inner and got.arrays is not None and got.arrays is not inner[-1].arrays:
            on_sent(got.arrays)  # the local model (and DIR/checkpoint) is what the mod sends on
        return got
    return handle


def _with_report(answer: Answer, arrays: "OrderedDict[str, np.ndarray]", report: Dict[str, Any]) -> Answer:
    merged: Dict[str, Any] = OrderedDict(answer.privacy or ())
    for k, v in report.items():
        if k == "update_norm":
            merged.setdefault(k, v)   # the norm of the update as trained: the first mod's
        else:
            merged[k] = v
    return Answer(arrays, answer.num_examples, answer.metrics, merged)


class FixedClippingMod:
    """flwr's ``fixedclipping_mod``: a train answer's update is clipped to the ``clipping_norm`` the server's
    config carries (checked before any work); ``required``: a train message without it is refused."""

    def __init__(self, required: bool = False) -> None:
        self.required = bool(required)

    def __call__(self, task: Task, call_next: Handler) -> Answer:
        if task.message_type != "train":
            return call_next(task)
        norm = privacy.server_clipping_norm(task.config, self.required)
        answer = call_next(task)
        if norm is None or answer.arrays is None:
            return answer
        sent, update_norm, scale = privacy.clip_update(task.arrays, answer.arrays, norm)
        return _with_report(answer, sent, OrderedDict([("update_norm", update_norm), ("clipping_norm", norm),
                                                       ("scale", scale)]))


class LocalDpMod:
    """flwr's ``LocalDpMod``: each train answer's update clipped to ``local_dp``'s norm, then noised
    (:class:`pytrain.flower.privacy.LocalDp`)."""

    def __init__(self, local_dp: privacy.LocalDp) -> None:
        self.local_dp = local_dp

    def __call__(self, task: Task, call_next: Handler) -> Answer:
        answer = call_next(task)
        if task.message_type != "train" or answer.arrays is None:
            return answer
        dp = self.local_dp
        sent, norm, scale = dp.apply(task.arrays, OrderedDict((n, np.asarray(v)) for n, v in answer.arrays.items()))
        return _with_report(answer, sent, OrderedDict([
            ("update_norm", norm), ("local_dp_clipping_norm", dp.clipping_norm), ("local_dp_scale", scale),
            ("noise_std", float(dp.noise_std))]))


def with_fixed_clipping(mods: Sequence[Mod]) -> List[Mod]:
    """``mods`` with the server's fixed clipping first when they lack one: a clipping norm the server sends is
    never ignored."""
    out = list(mods)
    if not any(isinstance(m, FixedClippingMod) for m in out):
        out.insert(0, FixedClippingMod())
    return out


def privacy_mods(local_dp: Optional[privacy.LocalDp] = None, require_clipping: bool = False) -> List[Mod]:
    """A node's privacy mods: the server's fixed clipping (always: it acts when the server sends a
    ``clipping_norm``; ``require_clipping`` refuses train messages without one), after local DP when given."""
    mods: List[Mod] = [FixedClippingMod(require_clipping)]
    if local_dp is not None:
        mods.append(LocalDpMod(local_dp))
    return mods
