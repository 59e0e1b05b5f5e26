""":func:`pytrain.generator.artifacts.generate_artifacts`' options in one object, spelled (and defaulted) once:
the CLI, the page and ORT's signature (:mod:`pytrain.ort.artifacts`) pass their choices through it."""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Sequence, Union

from pytrain.engine.lora import LoRA


class GenerateOptions(NamedTuple):
    """:func:`generate_artifacts`' options after ORT's first seven arguments (pass one, or its fields by name).

    additional_output_names: model outputs to return next to the loss (e.g. logits).
    nominal_checkpoint: store parameter shapes only (fill them at run time).
    loss_input_names: model outputs fed to the loss (default: the first output; all outputs for a custom Block).
    trainable_ops: only the parameters of the last N ops that hold parameters train (as ONERT's
        num_of_trainable_ops); the others are frozen.
    loss_reduction: 'mean', 'sum' or 'none' for the built-in losses.
    batchnorm: how each BatchNormalization runs in the training model. 'auto' (default): one
        exported in training mode (``training_mode=1``: the module was in train()) or whose scale or
        bias trains uses the batch's statistics and updates its running statistics (a PyTorch module
        in train(), and ONNX Runtime); one exported in inference mode whose scale and bias both do
        not train (frozen by requires_grad / frozen_params / trainable_ops, or not initializers)
        runs on its running statistics, which stay unchanged, as a frozen backbone in eval() does;
        the gradient still flows through it to its input. 'train' / 'eval' force one mode for every
        node; a dict {node name or scale initializer name: 'auto'|'train'|'eval'} sets it per node.
        The eval model always uses the running statistics.
    external_data: {location: bytes} of the external-data files when ``model`` is bytes or a ModelProto.
    allow_no_trainable: accept a model where no parameter trains (the training model then computes
        the loss and any input gradients only) instead of refusing it.
    input_grads: graph inputs whose gradient the training model also outputs (as ``<input>_grad``).
    lora: ``LoRA(rank, alpha, targets, dropout)`` (:mod:`pytrain.lora`): low-rank adapters beside the
        MatMul/Gemm weights ``targets`` names, as peft adds them; only the adapters (and initializers
        ``requires_grad`` names) train. The inference export folds them back into the weights.
    """
    additional_output_names: Optional[Sequence[str]] = None
    nominal_checkpoint: bool = False
    loss_input_names: Optional[Sequence[str]] = None
    trainable_ops: Optional[int] = None
    loss_reduction: str = "mean"
    batchnorm: Union[str, Dict[str, str]] = "auto"
    external_data: Optional[Dict[str, bytes]] = None
    allow_no_trainable: bool = False
    input_grads: Sequence[str] = ()
    lora: Optional[LoRA] = None
