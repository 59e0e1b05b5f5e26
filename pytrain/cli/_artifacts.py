"""An artifact directory as the CLI sees it: the four files ``pytrain generate`` writes, what the
training model expects as data and label, and the settings recorded in checkpoint properties."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from pytrain import dtypes
from pytrain.errors import CheckpointError, ModelFormatError, PytrainError

TRAINING = "training_model.onnx"
EVAL = "eval_model.onnx"
OPTIMIZER = "optimizer_model.onnx"
CHECKPOINT = "checkpoint"
FILES = (TRAINING, EVAL, OPTIMIZER, CHECKPOINT)
LAYOUT_KEY = "pytrain.layout"  # pytrain.artifacts.LAYOUT_KEY, repeated to keep imports lazy

# Checkpoint properties the CLI reads and writes. "epoch", "step" and "seed" are plain names so
# other tools (and the browser UI) can read them; the rest are namespaced.
P_EPOCH = "epoch"            # completed epochs
P_STEP = "step"              # optimizer steps taken in all
P_SEED = "seed"
P_EPOCH_STEP = "epoch_step"  # batches done in the current, unfinished epoch (0 at a boundary)
P_LOSS = "pytrain.loss"      # ce / mse / bce / l1
P_REDUCTION = "pytrain.reduction"
P_OUTPUTS = "pytrain.outputs"  # JSON list: the inference model's outputs
P_TRAIN = "pytrain.train"    # JSON: settings of the run, checked on --resume
P_CLASSES = "pytrain.classes"  # JSON list: text class labels, id = position
P_STANDARDIZER = "pytrain.standardizer"  # JSON, see pytrain.data.Standardizer.to_json
P_EPOCH_LOSS = "pytrain.epoch_loss_sum"  # sum over the unfinished epoch's batches, for its mean
P_EPOCH_SEEN = "pytrain.epoch_samples"


class TensorSpec:
    """Name, element type and shape (ints, symbolic names or None) of a graph input/output."""

    def __init__(self, name: str, elem_type: int, shape: Optional[List[Any]]) -> None:
        self.name = name
        self.elem_type = elem_type
        self.shape = shape

    @property
    def dtype_name(self) -> str:
        return dtypes.NAMES.get(self.elem_type, str(self.elem_type))

    def sample_shape(self) -> Optional[List[Any]]:
        """Shape without the batch axis; None when the rank is unknown."""
        return None if self.shape is None else list(self.shape[1:])


def tensor_specs(values) -> List[TensorSpec]:
    from pytrain.proto import value_info_type

    out = []
    for vi in values:
        elem, shape = value_info_type(vi)
        out.append(TensorSpec(vi.name, elem, shape))
    return out


def load_model_file(path: str, what: str):
    """Parse an ONNX file; any failure becomes a ModelFormatError naming the file."""
    from pytrain.proto import load_model

    try:
        return load_model(path, what)
    except PytrainError:
        raise
    except Exception as e:  # a corrupted file can trip the decoder in many ways
        raise ModelFormatError("{} {} is not a readable ONNX model ({}: {})".format(
            what, path, type(e).__name__, e)) from None


def load_state(path_or_bytes):
    """Load a checkpoint; any failure becomes a CheckpointError naming the file."""
    from pytrain.api import CheckpointState

    try:
        return CheckpointState.load_checkpoint(path_or_bytes)
    except PytrainError:
        raise
    except Exception as e:
        label = path_or_bytes if isinstance(path_or_bytes, str) else "(bytes)"
        raise CheckpointError("checkpoint {} is corrupted or not a pytrain checkpoint ({}: {})"
                              .format(label, type(e).__name__, e)) from None


def json_property(state, key: str, default: Any = None) -> Any:
    """A JSON-encoded checkpoint property, or ``default`` when absent."""
    raw = state.properties.get(key)
    if raw is None:
        return default
    try:
        return json.loads(str(raw))
    except ValueError:
        raise CheckpointError("checkpoint property {!r} is not valid JSON: {!r}".format(key, raw)) from None


class ArtifactDir:
    """The files of one artifact directory, with the facts the commands need about them."""

    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.isdir(path):
            if os.path.exists(path):
                raise CheckpointError("{} is a file, expected an artifact directory (made by "
                                      "'pytrain generate MODEL.onnx -o DIR')".format(path))
            raise CheckpointError("artifact directory {} does not exist (create it with 'pytrain "
                                  "generate MODEL.onnx -o {}')".format(path, path))
        missing = [f for f in FILES if not os.path.isfile(os.path.join(path, f))]
        if missing:
            raise CheckpointError("{} is not a complete artifact directory: missing {} (create it "
                                  "with 'pytrain generate MODEL.onnx -o {}')".format(
                                      path, ", ".join(missing), path))
        self._training = None
        self._eval = None

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def checkpoint_path(self) -> str:
        return self.file(CHECKPOINT)

    def training_proto(self):
        if self._training is None:
            self._training = load_model_file(self.file(TRAINING), "training model")
        return self._training

    def eval_proto(self):
        if self._eval is None:
            self._eval = load_model_file(self.file(EVAL), "eval model")
        return self._eval

    def load_state(self):
        return load_state(self.checkpoint_path)

    def open(self, state, with_optimizer: bool = True, seed: Optional[int] = None) -> Tuple[Any, Any]:
        """(Module, Optimizer or None) over ``state``; ``seed`` seeds random ops such as Dropout."""
        from pytrain.api import Module, Optimizer

        module = Module(self.training_proto(), state, self.eval_proto(), seed=seed)
        optimizer = Optimizer(self.file(OPTIMIZER), module) if with_optimizer else None
        return module, optimizer

    def default_lr(self) -> float:
        """The optimizer model's default learning rate (1e-3 when it records none)."""
        from pytrain.proto import model_metadata

        meta = model_metadata(load_model_file(self.file(OPTIMIZER), "optimizer model"))
        try:
            return float(meta.get("pytrain.default_lr", "0.001"))
        except ValueError:
            return 1e-3

    def layout(self) -> Dict[str, Any]:
        """The training layout generate_artifacts records in the training model's metadata."""
        from pytrain.proto import model_metadata

        raw = model_metadata(self.training_proto()).get(LAYOUT_KEY)
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {}

    def inputs(self, state) -> Tuple[List[TensorSpec], TensorSpec]:
        """(data inputs, label input) of the training model."""
        graph = self.training_proto().graph
        layout = self.layout()
        specs_by_name = {s.name: s for s in tensor_specs(graph.input)}
        if layout.get("user_inputs") and len(layout.get("labels") or []) == 1:
            data_specs = [specs_by_name[n] for n in layout["user_inputs"] if n in specs_by_name]
            label = specs_by_name.get(layout["labels"][0])
            if label is not None and len(data_specs) == len(layout["user_inputs"]):
                return data_specs, label
        # no layout (an older or foreign training model): the label is the last non-parameter input
        skip = {t.name for t in graph.initializer} | set(state.parameters)
        specs = [s for s in tensor_specs(graph.input) if s.name not in skip]
        if len(specs) < 2:
            raise ModelFormatError("training model {} has inputs {} but needs data inputs and a "
                                   "label input".format(self.file(TRAINING), [s.name for s in specs]))
        return specs[:-1], specs[-1]

    def eval_outputs(self) -> List[TensorSpec]:
        """The eval model's outputs after the loss (the model outputs it also reports)."""
        return tensor_specs(self.eval_proto().graph.output)[1:]

    def loss_kind(self, state) -> str:
        """ce / mse / bce / l1 as recorded at generation, else guessed from the label input."""
        kind = state.properties.get(P_LOSS)
        if kind:
            return str(kind)
        _, label = self.inputs(state)
        return "ce" if label.elem_type in (dtypes.INT64, dtypes.INT32) else "mse"

    def task(self, state) -> str:
        return "classification" if self.loss_kind(state) == "ce" else "regression"

    def outputs(self, state) -> List[str]:
        """Names of the inference model's outputs."""
        names = json_property(state, P_OUTPUTS) or self.layout().get("model_outputs")
        if names:
            return [str(n) for n in names]
        return [s.name for s in self.eval_outputs()]


def read_settings(state) -> Dict[str, Any]:
    """The training settings recorded by the last ``pytrain train`` on this checkpoint."""
    return json_property(state, P_TRAIN, {}) or {}
