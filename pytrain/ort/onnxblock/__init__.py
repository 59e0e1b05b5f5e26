"""``pytrain.ort.onnxblock``: ONNX Runtime's ``onnxruntime.training.onnxblock`` on pytrain.

``Block``, ``ForwardBlock``, ``TrainingBlock``, the ``base`` / ``empty_base`` context managers,
``blocks``, ``loss``, ``optim``, ``save_checkpoint`` and ``load_checkpoint_to_model``.
"""
from __future__ import annotations

import os
from typing import Any, Sequence, Tuple, Union

from pytrain.generator.blocks import Block
from pytrain.ort.onnxblock import blocks, loss, optim
from pytrain.ort.onnxblock._building import (ForwardBlock, ModelAccessor, TrainingBlock, base, empty_base,
                                             tensors_to_parameters, to_pytrain, write_back)

__all__ = ["Block", "ForwardBlock", "TrainingBlock", "ModelAccessor", "base", "empty_base", "blocks", "loss",
           "optim", "save_checkpoint", "load_checkpoint_to_model"]


def save_checkpoint(parameters: Tuple[Sequence[Any], Sequence[Any]],
                    path_to_checkpoint: Union[str, "os.PathLike[str]"], nominal_checkpoint: bool = False) -> None:
    """Write a checkpoint of (trainable, frozen) parameters, e.g. ``training_block.parameters()``."""
    from pytrain.checkpoint import encode
    from pytrain.base.files import write_atomic

    write_atomic(path_to_checkpoint, encode(tensors_to_parameters(parameters, nominal_checkpoint), {}, None))


def load_checkpoint_to_model(path_to_checkpoint: Union[str, "os.PathLike[str]"], model: Any) -> None:
    """Overwrite ``model``'s initializers (in place) with the parameters of a checkpoint (pytrain's,
    or one ONNX Runtime wrote)."""
    from pytrain.ort.api import CheckpointState
    from pytrain.proto import from_array

    state = CheckpointState.load_checkpoint(path_to_checkpoint).core
    pt = to_pytrain(model)
    for i, t in enumerate(pt.graph.initializer):
        p = state.parameters.get(t.name)
        if p is not None and p.data is not None:
            pt.graph.initializer[i] = from_array(p.data, t.name)
    write_back(model, pt)
