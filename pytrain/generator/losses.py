"""Loss blocks with PyTorch's semantics and ORT's label names ("labels" for cross entropy,
"target" for the others). Each is a :class:`pytrain.generator.blocks.Block`."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.base import dtypes
from pytrain.generator.blocks import Block, Constant, reduce
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
    """torch.nn.CrossEntropyLoss on raw scores and int64 class labels (ONNX SoftmaxCrossEntropyLoss).

    Scores (N, C) with labels (N,), or (N, C, d1, ...) with labels (N, d1, ...) as torch takes them.
    ``class_axis=-1`` takes the class axis last instead, as a Hugging Face model's logits come:
    (N, L, C) with labels (N, L), what a torch user writes as
    ``cross_entropy(logits.view(-1, C), labels.view(-1))`` (the mean is then over the N * L
    tokens that are not ignored, as torch's). ``ignore_index`` defaults to torch's -100: labels of
    -100 (a masked-LM's unmasked tokens, padding) add nothing to the loss or the mean's count.
    ``weight`` are per-class weights; ``reduction`` 'mean' (weighted mean as torch), 'sum' or 'none'
    (the per-position losses, shaped like the labels).
    """

    def __init__(self, weight: Optional[Sequence[float]] = None, reduction: str = "mean",
                 ignore_index: Optional[int] = -100, class_axis: int = 1) -> None:
        self.weight = None if weight is None else np.asarray(weight, dtype=np.float32)
        self.reduction = _check_reduction(reduction)
        self.ignore_index = None if ignore_index is None else int(ignore_index)
        if int(class_axis) not in (1, -1):
            raise ArtifactError("CrossEntropyLoss: class_axis must be 1 (torch's (N, C, d1, ...)) or -1 "
                                "(classes last, (N, d1, ..., C)), got %r" % (class_axis,))
        self.class_axis = int(class_axis)

    def build(self, scores: str, labels_name: str = "labels") -> str:
        c = self.ctx()
        shape = c.shape_of(scores)
        if self.class_axis == -1 and (shape is None or len(shape) < 2):
            raise ArtifactError("CrossEntropyLoss(class_axis=-1) needs the rank of %r, and the model declares "
                                "%s; declare the output's shape (e.g. [batch, length, classes])"
                                % (scores, "no shape" if shape is None else "shape %s" % (shape,)))
        if self.class_axis == -1 and len(shape) > 2:
            label_shape = list(shape[:-1])
            rank = len(shape)
            # (N, d1, ..., C) -> (N, C, d1, ...): the layout SoftmaxCrossEntropyLoss (and torch) take
            scores = c.op("Transpose", scores, perm=[0, rank - 1] + list(range(1, rank - 1)))
        else:
            label_shape = None if shape is None else [shape[0]] + list(shape[2:])
        labels = c.add_input(labels_name, dtypes.INT64, label_shape)
        inputs = [scores, labels]
        if self.weight is not None:
            inputs.append(c.op("CastLike", c.const(self.weight, np.float32, "class_weight"), scores))
        return c.op("SoftmaxCrossEntropyLoss", *inputs, reduction=self.reduction,
                    ignore_index=self.ignore_index)


class CausalLMLoss(Block):
    """Next-token cross-entropy of a causal language model, from its logits (N, T, V) and its own
    ``input_ids`` input (N, T): the mean over ``logits[:, :-1]`` against ``input_ids[:, 1:]``, what
    transformers' ``GPT2LMHeadModel(input_ids, labels=input_ids).loss`` computes. No label input is
    added: the training model takes the ids the model takes. ``ignore_index`` (e.g. a pad id) is a
    token id whose next-token targets add nothing to the loss or the mean's count."""

    def __init__(self, reduction: str = "mean", ids_name: str = "input_ids",
                 ignore_index: Optional[int] = None) -> None:
        self.reduction = _check_reduction(reduction)
        self.ids_name = str(ids_name)
        self.ignore_index = None if ignore_index is None else int(ignore_index)

    def build(self, logits: str) -> str:
        c = self.ctx()
        shape = c.shape_of(logits)
        if self.ids_name not in c.types:
            raise ArtifactError("CausalLMLoss reads the model's token ids from its input %r, which the model "
                                "does not have; name its ids input with ids_name=" % (self.ids_name,))
        if shape is not None and len(shape) != 3:
            raise ArtifactError("CausalLMLoss needs logits (batch, length, vocabulary); %r has shape %s"
                                % (logits, shape))
        ids = self.ids_name
        if c.elem_type_of(ids) != dtypes.INT64:
            ids = c.op("Cast", ids, to=dtypes.INT64)
        one, big, minus_one, zero = (c.const([v], np.int64, "clm_index") for v in (1, 2 ** 62, -1, 0))
        axis = c.const([1], np.int64, "clm_axis")
        # position t predicts token t + 1: drop the last position's logits and the first token
        scores = c.op("Slice", logits, zero, minus_one, axis)
        labels = c.op("Slice", ids, one, big, axis)
        scores = c.op("Transpose", scores, perm=[0, 2, 1])   # (N, V, T-1): SoftmaxCrossEntropyLoss's layout
        return c.op("SoftmaxCrossEntropyLoss", scores, labels, reduction=self.reduction,
                    ignore_index=self.ignore_index)
