"""ORT's ``onnxblock.optim``: optimizer blocks with ORT's defaults.

Called inside ``onnxblock.empty_base()`` on ``training_block.parameters()``, a block writes ORT's
optimizer-model interface in standard ONNX ops (sequences of parameters, gradients and moments,
a Loop over them), which any ONNX runtime runs. It also records its hyper-parameters in the
model's metadata: ``pytrain.ort.api.Optimizer`` reads them and runs pytrain's own update. Passed
to ``artifacts.generate_artifacts``, a block gives pytrain's optimizer with these hyper-parameters.
"""
from __future__ import annotations

import json
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.generator import optim as _optim
from pytrain.generator.blocks import Block, BuildContext
from pytrain.errors import ArtifactError
from pytrain.engine.graph import NodeBuilder
from pytrain.base.layout import LR_INPUT, STEP_INPUT
from pytrain.ort.onnxblock._building import (ForwardBlock, add_metadata, declare_output, mark_sequence,
                                             sequence_value_info)
from pytrain.proto import make_graph, make_value_info as _vi

__all__ = ["AdamW", "ClipGradNorm", "SGD"]

#: metadata key holding an optimizer block's hyper-parameters (JSON)
OPTIMIZER_KEY = "pytrain.ort.optimizer"
FLOAT = dtypes.FLOAT


def _scalar(name: str, elem: int) -> Any:
    return _vi(name, elem, [])


def _loop(ctx: BuildContext, count: str, carried: Sequence[Tuple[str, Any]], body: Any) -> List[str]:
    """A Loop over ``count`` iterations; ``carried`` are (initial value, value info maker); ``body(b, i)``
    appends the body's nodes to builder ``b`` and returns the carried outputs."""
    b = NodeBuilder(ctx.scope, prefix="loop/")
    i = ctx.scope.fresh("loop/i")
    cond_in = ctx.scope.fresh("loop/cond")
    carried_in = [ctx.scope.fresh("loop/carried") for _ in carried]
    outs = body(b, i, carried_in)
    cond_out = b.op("Identity", cond_in)
    for name, value in b.initializers.items():  # constants of the body as Constant nodes
        b.nodes.insert(0, _const_node(name, value))
    graph = make_graph(b.nodes, "loop_body", [_scalar(i, dtypes.INT64), _scalar(cond_in, dtypes.BOOL)] +
                       [mk(n) for n, (_, mk) in zip(carried_in, carried)],
                       [_scalar(cond_out, dtypes.BOOL)] + [mk(n) for n, (_, mk) in zip(outs, carried)])
    return ctx.op("Loop", count, "", *[v for v, _ in carried], n_out=len(carried), body=graph)


def _const_node(name: str, value: np.ndarray) -> Any:
    from pytrain.proto import from_array, make_node
    return make_node("Constant", [], [name], value=from_array(np.asarray(value), name))


def _seq(name: str) -> Any:
    return sequence_value_info(name, FLOAT)


def _empty_seq(ctx: BuildContext) -> str:
    return ctx.op("SequenceEmpty", dtype=FLOAT)


class ClipGradNorm(Block):
    """Scales a sequence of gradients so their global L2 norm is at most ``max_norm`` (as
    torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6), capped at 1)."""

    def __init__(self, max_norm: float) -> None:
        self.max_norm = float(max_norm)

    def build(self, gradients_name: str) -> str:
        c = self.ctx()
        count = c.op("SequenceLength", gradients_name)
        zero = c.const(np.zeros((), np.float32))

        def squares(b: NodeBuilder, i: str, carried: List[str]) -> List[str]:
            g = b.op("SequenceAt", gradients_name, i)
            return [b.op("Add", carried[0], b.op("ReduceSumSquare", g, keepdims=0))]

        total = _loop(c, count, [(zero, lambda n: _scalar(n, FLOAT))], squares)
        total = total[0] if isinstance(total, list) else total
        norm = c.op("Sqrt", total)
        coef = c.op("Min", c.op("Div", c.const(np.float32(self.max_norm)),
                                c.op("Add", norm, c.const(np.float32(1e-6)))), c.const(np.float32(1.0)))

        def scale(b: NodeBuilder, i: str, carried: List[str]) -> List[str]:
            g = b.op("SequenceAt", gradients_name, i)
            return [b.op("SequenceInsert", carried[0], b.op("Mul", g, coef))]

        out = _loop(c, count, [(_empty_seq(c), _seq)], scale)
        out = out[0] if isinstance(out, list) else out
        mark_sequence(c, out)
        return out


class OptimizerBlock(ForwardBlock):
    """An optimizer block: ``block(training_block.parameters())`` inside ``onnxblock.empty_base()``."""

    kind = ""

    def __init__(self, clip_grad: Optional[ClipGradNorm] = None) -> None:
        super().__init__()
        if clip_grad is not None and not isinstance(clip_grad, ClipGradNorm):
            raise ArtifactError("clip_grad must be an onnxblock.optim.ClipGradNorm, got %r" % (clip_grad,))
        self._clip_grad = clip_grad

    def hyper_parameters(self) -> dict:
        return {}

    def to_pytrain(self) -> Any:
        """pytrain's optimizer with these hyper-parameters (for generate_artifacts)."""
        raise NotImplementedError

    def _max_norm(self) -> Optional[float]:
        return None if self._clip_grad is None else self._clip_grad.max_norm

    def build(self, parameters: Any) -> str:
        trainable = parameters[0] if isinstance(parameters, tuple) else parameters
        names = [t.name for t in trainable]
        c = self.ctx()
        lr = c.add_input(LR_INPUT, FLOAT, [1])
        step = c.add_input(STEP_INPUT, dtypes.INT64, [1]) if self.kind == "AdamW" else None
        c.new_inputs.append(_seq("params"))
        c.new_inputs.append(_seq("gradients"))
        grads = "gradients"
        if self._clip_grad is not None:
            grads = self._clip_grad(grads)
        outs = self._update(c, lr, step, grads)
        for o in outs:
            declare_output(c, _seq(o))
        flag = c.op("Constant", value=_true())
        add_metadata(c, OPTIMIZER_KEY, json.dumps(dict(self.hyper_parameters(), type=self.kind,
                                                       max_norm=self._max_norm(), params=names)))
        return flag

    def _update(self, c: BuildContext, lr: str, step: Optional[str], grads: str) -> List[str]:
        raise NotImplementedError


def _true() -> Any:
    from pytrain.proto import from_array
    return from_array(np.array([True]), "updated_flag")


class OrtAdamW(_optim.AdamW):
    """pytrain's optimizer spec for ORT's AdamW rule: ``adam_mode`` 1 (Hugging Face's, ORT's default)
    or 0 (PyTorch's), ``bias_correction`` as ORT's ``correct_bias`` (``pytrain.ops.train.op_adamw_ort``)."""

    op_type = "OrtAdamWStep"

    def __init__(self, betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0,
                 bias_correction: bool = True, adam_mode: int = 1, max_grad_norm: Optional[float] = None) -> None:
        super().__init__(betas, eps, weight_decay, max_grad_norm)
        if adam_mode not in (0, 1):
            raise ArtifactError("AdamW: adam_mode must be 0 (PyTorch's rule) or 1 (Hugging Face's, ORT's default), "
                                "got %r" % (adam_mode,))
        if adam_mode == 0 and not bias_correction:
            raise ArtifactError("AdamW: adam_mode=0 (PyTorch's rule) needs bias_correction=True, as ORT's "
                                "AdamWOptimizer requires (\"The correct_bias should be 1 for adam_mode = 0.\")")
        self.bias_correction = bool(bias_correction)
        self.adam_mode = int(adam_mode)

    def attributes(self) -> dict:
        return {"alpha": self.betas[0], "beta": self.betas[1], "epsilon": self.eps,
                "weight_decay": self.weight_decay, "adam_mode": self.adam_mode,
                "correct_bias": int(self.bias_correction)}


class AdamW(OptimizerBlock):
    """AdamW with ORT's defaults: betas (0.9, 0.999), eps 1e-6, weight_decay 0.0, bias correction on,
    and ORT's rule: ``adam_mode=1`` (Hugging Face's: denominator sqrt(v) + eps, step size
    lr * sqrt(1 - beta2^t) / (1 - beta1^t), decay after the update), as ORT's AdamWOptimizer node.
    ``adam_mode=0`` (PyTorch's rule) is the node's other mode, which ORT's block does not expose."""

    kind = "AdamW"

    def __init__(self, bias_correction: bool = True, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, clip_grad: Optional[ClipGradNorm] = None, adam_mode: int = 1) -> None:
        super().__init__(clip_grad)
        self.bias_correction = bool(bias_correction)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.adam_mode = int(adam_mode)
        self.to_pytrain()  # refuses bad hyper-parameters here, as ORT's node would at its first step

    def hyper_parameters(self) -> dict:
        return {"betas": list(self.betas), "eps": self.eps, "weight_decay": self.weight_decay,
                "bias_correction": self.bias_correction, "adam_mode": self.adam_mode}

    def to_pytrain(self) -> Any:
        return OrtAdamW(self.betas, self.eps, self.weight_decay, self.bias_correction, self.adam_mode,
                        self._max_norm())

    def _update(self, c: BuildContext, lr: str, step: Optional[str], grads: str) -> List[str]:
        c.new_inputs.append(_seq("first_order_moments"))
        c.new_inputs.append(_seq("second_order_moments"))
        b1, b2 = self.betas
        stepf = c.op("Cast", step, to=FLOAT)
        f = lambda v: c.const(np.float32(v))  # noqa: E731
        if self.bias_correction:
            bc1 = c.op("Sub", f(1.0), c.op("Pow", f(b1), stepf))
            bc2 = c.op("Sub", f(1.0), c.op("Pow", f(b2), stepf))
        else:
            bc1 = bc2 = f(1.0)
        decay = c.op("Mul", lr, f(self.weight_decay))
        lr_corrected = c.op("Div", c.op("Mul", lr, c.op("Sqrt", bc2)), bc1)
        count = c.op("SequenceLength", "params")
        hf = self.adam_mode == 1

        def body(b: NodeBuilder, i: str, carried: List[str]) -> List[str]:
            p = b.op("SequenceAt", "params", i)
            g = b.op("SequenceAt", grads, i)
            m = b.op("SequenceAt", "first_order_moments", i)
            v = b.op("SequenceAt", "second_order_moments", i)
            if not hf:  # PyTorch's: decoupled decay before the update
                p = b.op("Sub", p, b.op("Mul", decay, p))
            m = b.op("Add", b.op("Mul", f(b1), m), b.op("Mul", f(1 - b1), g))
            v = b.op("Add", b.op("Mul", f(b2), v), b.op("Mul", f(1 - b2), b.op("Mul", g, g)))
            if hf:
                denom = b.op("Add", b.op("Sqrt", v), f(self.eps))
                p = b.op("Sub", p, b.op("Mul", lr_corrected, b.op("Div", m, denom)))
                p = b.op("Sub", p, b.op("Mul", decay, p))  # Hugging Face's: decay after the update
            else:
                denom = b.op("Add", b.op("Sqrt", b.op("Div", v, bc2)), f(self.eps))
                p = b.op("Sub", p, b.op("Mul", lr, b.op("Div", b.op("Div", m, bc1), denom)))
            return [b.op("SequenceInsert", carried[0], p), b.op("SequenceInsert", carried[1], m),
                    b.op("SequenceInsert", carried[2], v)]

        outs = _loop(c, count, [(_empty_seq(c), _seq), (_empty_seq(c), _seq), (_empty_seq(c), _seq)], body)
        return [c.op("Identity", o, out_names=[n])[0] for o, n in
                zip(outs, ("params.out", "first_order_moments.out", "second_order_moments.out"))]


class SGD(OptimizerBlock):
    """Plain SGD (ORT's: no momentum, no weight decay)."""

    kind = "SGD"

    def to_pytrain(self) -> Any:
        return _optim.SGD(max_grad_norm=self._max_norm())

    def _update(self, c: BuildContext, lr: str, step: Optional[str], grads: str) -> List[str]:
        count = c.op("SequenceLength", "params")

        def body(b: NodeBuilder, i: str, carried: List[str]) -> List[str]:
            p = b.op("SequenceAt", "params", i)
            g = b.op("SequenceAt", grads, i)
            return [b.op("SequenceInsert", carried[0], b.op("Sub", p, b.op("Mul", lr, g)))]

        outs = _loop(c, count, [(_empty_seq(c), _seq)], body)
        return c.op("Identity", outs[0] if isinstance(outs, list) else outs, out_names=["params.out"])


def from_model_metadata(meta: dict) -> Optional[dict]:
    """The hyper-parameters an optimizer block recorded, or None for another model."""
    value = meta.get(OPTIMIZER_KEY)
    return json.loads(value) if value else None


def spec_from_hyper_parameters(h: dict) -> Any:
    """pytrain's optimizer for recorded hyper-parameters."""
    if h["type"] == "AdamW":
        # blocks recorded before adam_mode was: their graph applies PyTorch's rule (mode 0)
        return AdamW(h.get("bias_correction", True), tuple(h["betas"]), h["eps"], h["weight_decay"],
                     ClipGradNorm(h["max_norm"]) if h.get("max_norm") else None, h.get("adam_mode", 0)).to_pytrain()
    return SGD(ClipGradNorm(h["max_norm"]) if h.get("max_norm") else None).to_pytrain()
