"""``pytrain.ort.artifacts``: ONNX Runtime's ``onnxruntime.training.artifacts.generate_artifacts``
with ORT's arguments, optimizer defaults and file conventions, on pytrain's generator."""
from __future__ import annotations

import enum
import os
from typing import Any, List, Optional, Sequence, Union

from pytrain.generator import artifacts as core_api
from pytrain.checkpoint import CheckpointState as _CoreState
from pytrain.errors import ArtifactError
from pytrain.base.files import write_atomic
from pytrain.base.layout import ARTIFACT_FILES
from pytrain.ort._eval import ort_eval_model
from pytrain.proto import ModelProto

__all__ = ["LossType", "OptimType", "generate_artifacts"]


class LossType(enum.Enum):
    """ORT's built-in losses."""

    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4


class OptimType(enum.Enum):
    """ORT's built-in optimizers, with ORT's defaults: AdamW (betas 0.9/0.999, eps 1e-6, no weight
    decay) and SGD (no momentum)."""

    AdamW = 1
    SGD = 2


def _loss(loss: Any) -> Any:
    from pytrain.ort.onnxblock import loss as ort_loss

    if isinstance(loss, LossType):
        return getattr(ort_loss, loss.name)()
    if isinstance(loss, core_api.LossType):
        return getattr(ort_loss, loss.name)()
    return loss


def _optimizer(optimizer: Any) -> Any:
    from pytrain.ort.onnxblock import optim

    if optimizer is None:
        return None
    if isinstance(optimizer, OptimType):
        optimizer = getattr(optim, optimizer.name)()
    if isinstance(optimizer, optim.OptimizerBlock):
        return optimizer.to_pytrain()
    return optimizer


# Deliberately more than 8 parameters: the signature is onnxruntime.training.artifacts.generate_artifacts', kept
# whole so code written for ORT runs unchanged; pytrain's own options travel on as one GenerateOptions's fields.
def generate_artifacts(
    model: Any,
    requires_grad: Optional[Sequence[str]] = None,
    frozen_params: Optional[Sequence[str]] = None,
    loss: Any = None,
    optimizer: Any = None,
    artifact_directory: Union[str, "os.PathLike[str]", None] = None,
    prefix: str = "",
    ort_format: bool = False,
    custom_op_library: Union[str, "os.PathLike[str]", None] = None,
    additional_output_names: Optional[List[str]] = None,
    nominal_checkpoint: bool = False,
    loss_input_names: Optional[List[str]] = None,
    **pytrain_options: Any,
) -> None:
    """Write training_model.onnx, eval_model.onnx, optimizer_model.onnx (when an optimizer is given)
    and checkpoint to ``artifact_directory`` (default: the current directory), as ORT does.

    With ``nominal_checkpoint=True`` a ``nominal_checkpoint`` (shapes only) is written next to the
    full ``checkpoint``. ``ort_format`` (ORT's flatbuffer model format) and ``custom_op_library``
    (ORT's compiled custom ops) have no meaning in a numpy runtime and are refused. Other keyword
    arguments go to :func:`pytrain.generator.artifacts.generate_artifacts` (e.g. ``batchnorm``).
    """
    if ort_format:
        raise ArtifactError("ort_format=True: the ORT flatbuffer model format is ONNX Runtime's own; pytrain "
                            "writes and runs .onnx models only (drop ort_format)")
    if custom_op_library is not None:
        raise ArtifactError("custom_op_library: ONNX Runtime's compiled custom-op libraries cannot run in pytrain "
                            "(numpy kernels only); register the ops as pytrain kernels instead")
    if loss is None:
        raise ArtifactError("generate_artifacts needs a loss: an artifacts.LossType or an onnxblock.Block")
    arts = core_api.generate_artifacts(
        model, requires_grad=requires_grad, frozen_params=frozen_params, loss=_loss(loss),
        optimizer=_optimizer(optimizer) or _optimizer(OptimType.AdamW),
        additional_output_names=additional_output_names, loss_input_names=loss_input_names,
        allow_no_trainable=True, **pytrain_options)
    directory = os.fspath(artifact_directory) if artifact_directory is not None else os.getcwd()
    os.makedirs(directory, exist_ok=True)
    eval_model = ort_eval_model(ModelProto.FromString(arts.eval_model)).SerializeToString()

    def path(name: str) -> str:
        return os.path.join(directory, prefix + name)

    write_atomic(path(ARTIFACT_FILES["training"]), arts.training_model)
    write_atomic(path(ARTIFACT_FILES["eval"]), eval_model)
    if optimizer is not None:
        write_atomic(path(ARTIFACT_FILES["optimizer"]), arts.optimizer_model)
    write_atomic(path(ARTIFACT_FILES["checkpoint"]), arts.checkpoint)
    if nominal_checkpoint:
        state = _CoreState.load_checkpoint(arts.checkpoint)
        for p in state.parameters.values():
            p.data = None
        write_atomic(path("nominal_checkpoint"), state.to_bytes(False))
