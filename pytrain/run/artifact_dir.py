"""A set of training artifacts as a run sees it: the four files ``generate_artifacts`` writes (a
directory, or bytes in memory), what the training model expects as data and label, and the facts
recorded in its checkpoint properties."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from pytrain.base import dtypes
from pytrain.errors import CheckpointError, ModelFormatError, PytrainError
from pytrain.base.layout import ARTIFACT_FILES, LayoutError, default_lr, parse_layout
from pytrain.run.properties import P_LOSS, P_OUTPUTS, json_property

TRAINING = ARTIFACT_FILES["training"]
EVAL = ARTIFACT_FILES["eval"]
OPTIMIZER = ARTIFACT_FILES["optimizer"]
CHECKPOINT = ARTIFACT_FILES["checkpoint"]
FILES = (TRAINING, EVAL, OPTIMIZER, CHECKPOINT)


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
    from pytrain.engine.validate import load_model

    try:
        return load_model(path, what)
    except PytrainError:
        raise
    except Exception as e:  # a corrupted file can trip the decoder in many ways
        raise ModelFormatError("{} {} is not a readable ONNX model ({}: {})".format(
            what, path, type(e).__name__, e)) from None


def load_state(path_or_bytes):
    """Load a checkpoint; any failure becomes a CheckpointError naming the file."""
    from pytrain.device.api import CheckpointState

    try:
        return CheckpointState.load_checkpoint(path_or_bytes)
    except PytrainError:
        raise
    except Exception as e:
        label = path_or_bytes if isinstance(path_or_bytes, str) else "(bytes)"
        raise CheckpointError("checkpoint {} is corrupted or not a pytrain checkpoint ({}: {})"
                              .format(label, type(e).__name__, e)) from None


class ArtifactDir:
    """The files of one artifact directory, with the facts the commands need about them."""

    def __init__(self, path: str, blobs: Optional[Dict[str, bytes]] = None) -> None:
        """``path``: the directory; or, with ``blobs`` ({file name: bytes}, see :meth:`from_bytes`), a
        label for artifacts held in memory."""
        self.path = path
        self._blobs = blobs
        self._training = None
        self._eval = None
        if blobs is not None:
            return
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

    @classmethod
    def from_bytes(cls, files: Dict[str, bytes], label: str = "the run file") -> "ArtifactDir":
        """The same view of artifacts held in memory ({file name: bytes}, e.g. a run file's
        members): lets a writer check what ``pytrain train`` will make of them before saving."""
        missing = [f for f in FILES if f not in files]
        if missing:
            raise CheckpointError("{} is not a complete set of artifacts: missing {}".format(
                label, ", ".join(missing)))
        return cls(label, {k: bytes(v) for k, v in files.items()})

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
        from pytrain.device.api import Module, Optimizer

        module = Module(self.training_proto(), state, self.eval_proto(), seed=seed)
        optimizer = Optimizer(self._source(OPTIMIZER), module) if with_optimizer else None
        return module, optimizer

    def default_lr(self) -> float:
        """The optimizer model's default learning rate (1e-3 when it records none)."""
        from pytrain.proto import model_metadata

        meta = model_metadata(load_model_file(self._source(OPTIMIZER), "optimizer model"))
        try:
            return default_lr(meta)
        except ValueError:
            return 1e-3

    def layout(self) -> Dict[str, Any]:
        """The training layout generate_artifacts records in the training model's metadata."""
        from pytrain.proto import model_metadata

        try:
            return parse_layout(model_metadata(self.training_proto()), "training model")
        except LayoutError:   # a damaged layout: read the graph as for a foreign model
            return {}

    def text_inputs(self) -> Optional[List[TensorSpec]]:
        """The data inputs of a training model without a label input (a causal LM: its loss reads the next
        tokens from its own ids), else None."""
        layout = self.layout()
        if layout.get("user_inputs") and layout.get("labels") == []:
            specs = {s.name: s for s in tensor_specs(self.training_proto().graph.input)}
            return [specs[n] for n in layout["user_inputs"] if n in specs]
        return None

    def inputs(self, state) -> Tuple[List[TensorSpec], TensorSpec]:
        """(data inputs, label input) of the training model."""
        graph = self.training_proto().graph
        layout = self.layout()
        if self.text_inputs() is not None:
            raise ModelFormatError("training model {} takes no label input: its loss ({}) reads its targets from the "
                                   "model's token ids; train it on text (--text FILE --tokenizer tokenizer.json)"
                                   .format(self.file(TRAINING), state.properties.get(P_LOSS) or "?"))
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
