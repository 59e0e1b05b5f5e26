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
# JSON {"output", "mean", "std"}: the model learns regression targets as (y - mean) / std (the
# page's target scaling); train and eval scale the targets, metrics and export un-scale the output
P_TARGET_SCALING = "pytrain.target_scaling"
# why ``--resume`` cannot continue this checkpoint's run exactly (set by the web app's run file)
P_NO_RESUME = "pytrain.no_resume"
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
        self._blobs: Optional[Dict[str, bytes]] = None
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

    @classmethod
    def from_bytes(cls, files: Dict[str, bytes], label: str = "the run file") -> "ArtifactDir":
        """The same view of artifacts held in memory ({file name: bytes}, e.g. a run file's
        members): lets a writer check what ``pytrain train`` will make of them before saving."""
        missing = [f for f in FILES if f not in files]
        if missing:
            raise CheckpointError("{} is not a complete set of artifacts: missing {}".format(
                label, ", ".join(missing)))
        out = cls.__new__(cls)
        out.path = label
        out._blobs = {k: bytes(v) for k, v in files.items()}
        out._training = None
        out._eval = None
        return out

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def _source(self, name: str) -> Any:
        """Path of artifact ``name``, or its bytes for artifacts held in memory."""
        return self._blobs[name] if self._blobs is not None else self.file(name)

    @property
    def checkpoint_path(self) -> str:
        return self.file(CHECKPOINT)

    def training_proto(self):
        if self._training is None:
            self._training = load_model_file(self._source(TRAINING), "training model")
        return self._training

    def eval_proto(self):
        if self._eval is None:
            self._eval = load_model_file(self._source(EVAL), "eval model")
        return self._eval

    def load_state(self):
        return load_state(self._source(CHECKPOINT))

    def open(self, state, with_optimizer: bool = True, seed: Optional[int] = None) -> Tuple[Any, Any]:
        """(Module, Optimizer or None) over ``state``; ``seed`` seeds random ops such as Dropout."""
        from pytrain.api import Module, Optimizer

        module = Module(self.training_proto(), state, self.eval_proto(), seed=seed)
        optimizer = Optimizer(self._source(OPTIMIZER), module) if with_optimizer else None
        return module, optimizer

    def default_lr(self) -> float:
        """The optimizer model's default learning rate (1e-3 when it records none)."""
        from pytrain.proto import model_metadata

        meta = model_metadata(load_model_file(self._source(OPTIMIZER), "optimizer model"))
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


class TargetScaling:
    """Regression targets learnt in standard units: ``(y - mean) / std`` while training, and
    ``output * std + mean`` for metrics and in the exported model (the page's target scaling, in
    float32 exactly as :mod:`pytrain.webapp.scaling` computes it, so a resumed run is the same)."""

    def __init__(self, mean: Any, std: Any, output: Optional[str]) -> None:
        import numpy as np

        self.mean = np.asarray(mean, dtype=np.float32).reshape(-1)
        self.std = np.asarray(std, dtype=np.float32).reshape(-1)
        self.output = output
        if self.mean.shape != self.std.shape or not len(self.mean) or not np.all(self.std > 0):
            raise CheckpointError("checkpoint property {!r} holds mean {} and std {}: expected one positive std "
                                  "per mean".format(P_TARGET_SCALING, self.mean.tolist(), self.std.tolist()))

    def to_json(self) -> str:
        return json.dumps({"output": self.output, "mean": self.mean.tolist(), "std": self.std.tolist()})

    def _fit(self, a: Any, what: str) -> Any:
        import numpy as np

        flat = np.asarray(a, dtype=np.float32).reshape(len(a), -1)
        if flat.shape[1] != len(self.mean):
            raise ModelFormatError("{} have {} value(s) per sample, but the run's target scaling ({}) has {}".format(
                what, flat.shape[1], P_TARGET_SCALING, len(self.mean)))
        return flat

    def scale(self, y: Any) -> Any:
        """Targets in the units the model learns."""
        import numpy as np

        z = (self._fit(y, "targets") - self.mean) / self.std
        return np.ascontiguousarray(z.reshape(np.shape(y)), dtype=np.float32)

    def unscale(self, out: Any) -> Any:
        """Model outputs in the target's own units."""
        import numpy as np

        z = self._fit(out, "model outputs") * self.std + self.mean
        return np.ascontiguousarray(z.reshape(np.shape(out)), dtype=np.float32)

    def bake(self, model_bytes: bytes) -> bytes:
        """The exported model with ``output * std + mean`` on the scaled output (same name)."""
        from pytrain.webapp.scaling import bake

        return bake(model_bytes, {"y_mean": self.mean.tolist(), "y_std": self.std.tolist()}, str(self.output))


def target_scaling(state) -> Optional[TargetScaling]:
    """The run's target scaling (checkpoint property), or None."""
    d = json_property(state, P_TARGET_SCALING)
    if not d:
        return None
    try:
        return TargetScaling(d["mean"], d["std"], d.get("output"))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError("checkpoint property {!r} is malformed ({})".format(P_TARGET_SCALING, e)) from None


class TargetScaledModule:
    """A Module seen in the target's units: called with raw targets it computes the loss on the
    scaled ones (the loss the run trains) and returns the model output un-scaled (for metrics)."""

    def __init__(self, module: Any, scaling: TargetScaling) -> None:
        self.module = module
        self.scaling = scaling

    def train(self) -> None:
        self.module.train()

    def eval(self) -> None:
        self.module.eval()

    def __call__(self, x: Any, y: Any) -> Any:
        res = self.module(x, self.scaling.scale(y))
        if isinstance(res, (list, tuple)) and len(res) > 1:
            return [res[0], self.scaling.unscale(res[1])] + list(res[2:])
        return res
