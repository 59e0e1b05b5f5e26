"""The contract between the offline generator and the device: the artifact file names, the metadata
keys the generated models carry, and the optimizer model's input names. Dependency-free, so every
layer (and the JavaScript side, through ``web/js/layout.js``, checked equal by the tests) reads one
spelling of each."""
from __future__ import annotations

import json
from typing import Any, Dict, Mapping

#: the four artifacts by role, in the order ``generate_artifacts`` writes them
ARTIFACT_FILES: Dict[str, str] = {
    "training": "training_model.onnx",
    "eval": "eval_model.onnx",
    "optimizer": "optimizer_model.onnx",
    "checkpoint": "checkpoint",
}
#: metadata key holding the training layout (JSON) in the training and eval models
LAYOUT_KEY = "pytrain.layout"
#: metadata key naming which artifact a model is ("training", "eval" or "optimizer")
ARTIFACT_KEY = "pytrain.artifact"
#: the optimizer model's metadata: its description, default learning rate and state slot names
OPTIMIZER_KEY = "pytrain.optimizer"
DEFAULT_LR_KEY = "pytrain.default_lr"
STATE_NAMES_KEY = "pytrain.state_names"
#: the loss output of the training and eval models
LOSS_OUTPUT = "loss"
#: the optimizer model's scalar inputs
LR_INPUT, STEP_INPUT = "learning_rate", "step"
#: onnxruntime-training's training-model conventions, which pytrain reads (pytrain.ort_made) and writes
#: (pytrain.ort): a parameter's gradient accumulation buffer (input) and its new value (output), and the
#: boolean input that says whether to start the accumulation again
ACC_BUFFER = "%s_grad.accumulation.buffer"
ACC_OUT = "%s_grad.accumulation.out"
LAZY_RESET = "lazy_reset_grad"


class LayoutError(ValueError):
    """A model's metadata does not hold the layout asked for (raised as pytrain's ModelFormatError
    by ``read_layout``'s callers, which know which file it was)."""


def state_name(param: str, slot: str) -> str:
    """Name of an optimizer state tensor in the optimizer model (ORT-like)."""
    return "%s.%s" % (param, slot)


def grad_name(param: str) -> str:
    """Name of a parameter's gradient in the training and optimizer models."""
    return param + "_grad"


def default_lr(meta: Mapping[str, str]) -> float:
    """The learning rate an optimizer model was generated with (metadata of the optimizer model)."""
    return float(meta.get(DEFAULT_LR_KEY, "0.001"))


def read_layout(meta: Mapping[str, str], what: str, kind: str) -> Dict[str, Any]:
    """The layout JSON of a pytrain ``kind`` artifact ("training" or "eval") from its metadata;
    ``what`` names the file in the messages."""
    if LAYOUT_KEY not in meta:
        raise LayoutError("the %s is not a pytrain artifact (no %s metadata); generate it with "
                          "pytrain.artifacts.generate_artifacts" % (what, LAYOUT_KEY))
    if meta.get(ARTIFACT_KEY) != kind:
        raise LayoutError("the %s is pytrain's %s artifact, not the %s model: pass %s here"
                          % (what, meta.get(ARTIFACT_KEY, "unknown"), kind, ARTIFACT_FILES.get(kind, kind)))
    return parse_layout(meta, what)


def parse_layout(meta: Mapping[str, str], what: str) -> Dict[str, Any]:
    """The layout JSON in ``meta`` (empty when there is none)."""
    raw = meta.get(LAYOUT_KEY)
    if raw is None:
        return {}
    try:
        layout = json.loads(raw)
    except ValueError:
        raise LayoutError("the %s has a damaged %s (not JSON)" % (what, LAYOUT_KEY)) from None
    if not isinstance(layout, dict):
        raise LayoutError("the %s has a damaged %s (not a JSON object)" % (what, LAYOUT_KEY))
    return layout
