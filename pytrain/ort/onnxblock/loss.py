"""ORT's ``onnxblock.loss``: loss blocks with ORT's arguments and defaults (PyTorch's semantics)."""
from __future__ import annotations

from typing import Any, Optional

from pytrain.generator import losses
from pytrain.errors import ArtifactError

__all__ = ["MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss"]


class MSELoss(losses.MSELoss):
    """mean((output - target)^2); ``build(loss_input_name, target_name="target")``."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__(reduction)


class L1Loss(losses.L1Loss):
    """mean(|output - target|); ``build(loss_input_name, target_name="target")``."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__(reduction)


class CrossEntropyLoss(losses.CrossEntropyLoss):
    """Softmax cross entropy on class scores; ``build(scores_input_name, labels_name="labels")``.
    ORT's default ``ignore_index`` is None (no label ignored)."""

    def __init__(self, weight: Optional[Any] = None, reduction: str = "mean",
                 ignore_index: Optional[int] = None) -> None:
        super().__init__(weight=weight, reduction=reduction, ignore_index=ignore_index)


class BCEWithLogitsLoss(losses.BCEWithLogitsLoss):
    """Binary cross entropy on logits; ``build(loss_input_name, target_name="target")``."""

    def __init__(self, weight: Optional[Any] = None, reduction: str = "mean",
                 pos_weight: Optional[Any] = None) -> None:
        if weight is not None:
            raise ArtifactError("onnxblock.loss.BCEWithLogitsLoss(weight=...) is not supported by pytrain.ort; "
                                "use pos_weight, or compose a weighted loss from onnxblock.blocks")
        super().__init__(reduction, pos_weight)
