"""Loss blocks with PyTorch's semantics and ORT's label names ("labels" for cross entropy,
"target" for the others). Each is a :class:`pytrain.blocks.Block`."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain import dtypes
from pytrain.blocks import Block, Constant, reduce
from pytrain.errors import ArtifactError


def _check_reduction(reduction: str) -> str:
    if reduction not in ("mean", "sum", "none"):
        raise ArtifactError("loss reduction must be 'mean', 'sum' or 'none', got %r" % (reduction,))
    return reduction


class _TargetLoss(Block):
    """A loss comparing an output with a float target shaped like it."""

    def __init__(self, reduction: str = "mean") -> None:
        self.reduction = _check_reduction(reduction)

    def target(self, output: str, target_name: str) -> str:
        c = self.ctx()
        return c.add_input(target_name, c.elem_type_of(output), c.shape_of(output))


class MSELoss(_TargetLoss):
    """mean((output - target)^2), as torch.nn.MSELoss."""

    def build(self, output: str, target_name: str = "target") -> str:
        c = self.ctx()
        diff = c.op("Sub", output, self.target(output, target_name))
        return reduce(c.op("Mul", diff, diff), self.reduction)


class L1Loss(_TargetLoss):
    """mean(|output - target|), as torch.nn.L1Loss."""

    def build(self, output: str, target_name: str = "target") -> str:
        c = self.ctx()
        return reduce(c.op("Abs", c.op("Sub", output, self.target(output, target_name))), self.reduction)


class BCEWithLogitsLoss(_TargetLoss):
    """torch.nn.BCEWithLogitsLoss on raw logits x and targets y in [0, 1]:

        loss = (1 - y) * x + (1 + (pos_weight - 1) * y) * softplus(-x)

    which never forms sigmoid(x) or log(0): finite for logits of +-1000, and its gradient is
    exactly sigmoid(x) - y (scaled by the positive weight where given)."""

    def __init__(self, reduction: str = "mean", pos_weight: Optional[Sequence[float]] = None) -> None:
        super().__init__(reduction)
        self.pos_weight = None if pos_weight is None else np.asarray(pos_weight, dtype=np.float32)

    def build(self, output: str, target_name: str = "target") -> str:
        c = self.ctx()
        y = self.target(output, target_name)
        one = Constant(1.0)(output)
        sp = c.op("Softplus", c.op("Neg", output))
        if self.pos_weight is None:
            weight = one
        else:
            pw = c.op("CastLike", c.const(self.pos_weight, np.float32, "pos_weight"), output)
            weight = c.op("Add", one, c.op("Mul", c.op("Sub", pw, one), y))
        loss = c.op("Add", c.op("Mul", c.op("Sub", one, y), output), c.op("Mul", weight, sp))
        return reduce(loss, self.reduction)


class CrossEntropyLoss(Block):
    """torch.nn.CrossEntropyLoss on raw scores (N, C) or (N, C, d1...) and int64 class labels,
    with optional class weights and ignore_index (ONNX SoftmaxCrossEntropyLoss)."""

    def __init__(self, weight: Optional[Sequence[float]] = None, reduction: str = "mean",
                 ignore_index: Optional[int] = None) -> None:
        self.weight = None if weight is None else np.asarray(weight, dtype=np.float32)
        self.reduction = _check_reduction(reduction)
        self.ignore_index = ignore_index

    def build(self, scores: str, labels_name: str = "labels") -> str:
        c = self.ctx()
        shape = c.shape_of(scores)
        label_shape = None if shape is None else [shape[0]] + list(shape[2:])
        labels = c.add_input(labels_name, dtypes.INT64, label_shape)
        inputs = [scores, labels]
        if self.weight is not None:
            inputs.append(c.op("CastLike", c.const(self.weight, np.float32, "class_weight"), scores))
        return c.op("SoftmaxCrossEntropyLoss", *inputs, reduction=self.reduction,
                    ignore_index=self.ignore_index)
