"""onnxruntime-web's ``TrainingSession`` on pytrain: the Python half of ``web/pytrain-ort.js``.

The page's ``TrainingSession.create({checkpointState, trainModel, evalModel, optimizerModel})``
becomes one :class:`OrtTrainingSession` here (a ``Module`` plus an ``Optimizer`` over the
artifacts given as bytes), kept by id in the worker's :class:`~pytrain.webapp.Session`. Tensors
cross the worker as ``{"type": ORT type name, "dims": [...], "data": bytes}``: little-endian
raw data, as onnxruntime-web's typed arrays hold it (int64 as BigInt64Array, float32 as
Float32Array, bool as one byte per value).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from pytrain.errors import InputError
from pytrain.webapp.common import WebappError

# onnxruntime-common's Tensor.Type names and the numpy dtypes of their typed arrays.
ORT_TYPES = {
    "float32": np.dtype("<f4"), "float64": np.dtype("<f8"), "int8": np.dtype("i1"), "uint8": np.dtype("u1"),
    "int16": np.dtype("<i2"), "uint16": np.dtype("<u2"), "int32": np.dtype("<i4"), "uint32": np.dtype("<u4"),
    "int64": np.dtype("<i8"), "uint64": np.dtype("<u8"), "bool": np.dtype("?"),
}
_NUMPY_TO_ORT = {np.dtype(v).str: k for k, v in ORT_TYPES.items()}


def load_state(checkpoint: bytes) -> Any:
    """A CheckpointState from pytrain's checkpoint or ONNX Runtime 1.19's (its flatbuffer format):
    ``CheckpointState.load_checkpoint`` reads both."""
    from pytrain.checkpoint import CheckpointState
    return CheckpointState.load_checkpoint(bytes(checkpoint))


def to_array(tensor: Dict[str, Any], what: str) -> np.ndarray:
    """An onnxruntime-web tensor {type, dims, data (numpy array or bytes)} as a numpy array."""
    kind = tensor.get("type")
    if kind not in ORT_TYPES:
        raise InputError("%s: tensors of type %r are not supported; pytrain takes %s"
                         % (what, kind, ", ".join(sorted(ORT_TYPES))))
    data = tensor.get("data")
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data or b"")
    dtype = ORT_TYPES[kind]
    dims = [int(d) for d in tensor.get("dims") or []]
    count = int(np.prod(dims)) if dims else 1
    if len(raw) != count * dtype.itemsize:
        raise InputError("%s: dims %s need %d values of %s, the data holds %d bytes"
                         % (what, dims, count, kind, len(raw)))
    return np.frombuffer(raw, dtype=dtype).reshape(dims)


def from_array(value: Any) -> Dict[str, Any]:
    """A numpy result as {type, dims, data bytes} for the page."""
    arr = np.ascontiguousarray(np.asarray(value))
    kind = _NUMPY_TO_ORT.get(arr.dtype.str) or _NUMPY_TO_ORT.get(arr.dtype.newbyteorder("<").str)
    if kind is None:
        raise WebappError("an output of dtype %s has no onnxruntime-web tensor type" % arr.dtype)
    return {"type": kind, "dims": [int(d) for d in arr.shape], "data": arr.astype(ORT_TYPES[kind]).tobytes()}


class OrtTrainingSession:
    """One onnxruntime-web TrainingSession: a Module (training + optional eval model) and an optional
    Optimizer over pytrain artifacts."""

    def __init__(self, checkpoint: bytes, train_model: bytes, eval_model: Optional[bytes] = None,
                 optimizer_model: Optional[bytes] = None) -> None:
        from pytrain.api import Module, Optimizer
        from pytrain.module import model_layout
        from pytrain.validate import load_model
        self.state = load_state(checkpoint)
        self.module = Module(bytes(train_model), self.state, bytes(eval_model) if eval_model else None)
        self.optimizer = Optimizer(bytes(optimizer_model), self.module) if optimizer_model else None
        self.eval_input_names: List[str] = []
        self.eval_output_names: List[str] = []
        if eval_model:
            layout = model_layout(load_model(bytes(eval_model), "eval model"), "eval model", "eval")
            self.eval_input_names = list(layout["user_inputs"]) + list(layout["labels"])
            self.eval_output_names = list(layout["outputs"])

    def names(self) -> Dict[str, List[str]]:
        return {"trainingInputNames": self.module.input_names(), "trainingOutputNames": self.module.output_names(),
                "evalInputNames": self.eval_input_names, "evalOutputNames": self.eval_output_names}

    def _run(self, training: bool, feeds: Dict[str, Any]) -> Dict[str, Any]:
        input_names = self.module.input_names() if training else self.eval_input_names
        output_names = self.module.output_names() if training else self.eval_output_names
        unknown = sorted(set(feeds) - set(input_names))
        if unknown:
            raise InputError("invalid input %r: the %s model takes %s"
                             % (unknown[0], "training" if training else "eval", input_names))
        missing = [n for n in input_names if n not in feeds]
        if missing:
            raise InputError("input %r is missing in 'feeds'" % missing[0])
        inputs = [to_array(feeds[n], "input %r" % n) for n in input_names]
        self.module.train(training)
        try:
            outs = self.module(*inputs)
        finally:
            self.module.train(True)
        if len(output_names) == 1:
            outs = [outs]
        return {n: from_array(o) for n, o in zip(output_names, outs)}

    def train_step(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        return self._run(True, feeds)

    def eval_step(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        if not self.eval_output_names:
            raise InputError("This TrainingSession has no EvalModel loaded.")
        return self._run(False, feeds)

    def optimizer_step(self) -> None:
        if self.optimizer is None:
            raise InputError("This TrainingSession has no OptimizerModel loaded.")
        self.optimizer.step()

    def lazy_reset_grad(self) -> None:
        self.module.lazy_reset_grad()

    def parameters_size(self, trainable_only: bool = True) -> int:
        return self.module.get_parameters_size(bool(trainable_only))

    def _check_float32(self, trainable_only: bool) -> None:
        # onnxruntime-web copies parameters through one float32 buffer; so does this.
        names = self.module.trainable_names if trainable_only else self.module.parameter_names
        other = [n for n in names if np.dtype(self.state.parameters[n].dtype) != np.float32]
        if other:
            raise InputError("only float32 parameters go through a contiguous buffer (as in onnxruntime-web); "
                             "%r is %s" % (other[0], np.dtype(self.state.parameters[other[0]].dtype)))

    def contiguous_parameters(self, trainable_only: bool = True) -> Dict[str, Any]:
        self._check_float32(trainable_only)
        flat = np.asarray(self.module.get_contiguous_parameters(bool(trainable_only)), dtype=np.float32)
        return from_array(flat.ravel())

    def load_parameters(self, buffer: Any, trainable_only: bool = True) -> None:
        self._check_float32(trainable_only)
        raw = buffer.tobytes() if isinstance(buffer, np.ndarray) else bytes(buffer)
        size = self.parameters_size(trainable_only)
        if len(raw) != 4 * size:
            raise InputError("Size of the buffer passed into loadParametersBuffer must match the number of "
                             "parameters in the model (%d float32 values, %d bytes); got %d bytes"
                             % (size, 4 * size, len(raw)))
        self.module.copy_buffer_to_parameters(np.frombuffer(raw, dtype="<f4"), bool(trainable_only))


def _sessions(owner: Any) -> Dict[int, OrtTrainingSession]:
    table = getattr(owner, "_ort_sessions", None)
    if table is None:
        table = {}
        owner._ort_sessions = table
        owner._ort_next_id = 1
    return table


def dispatch(owner: Any, op: str, args: Dict[str, Any]) -> Any:
    """Run one TrainingSession operation for the worker (``owner`` keeps the sessions by id)."""
    table = _sessions(owner)
    if op == "create":
        sess = OrtTrainingSession(args["checkpoint"], args["train_model"], args.get("eval_model"),
                                  args.get("optimizer_model"))
        sid = owner._ort_next_id
        owner._ort_next_id += 1
        table[sid] = sess
        out = sess.names()
        out["session"] = sid
        return out
    sid = int(args.get("session", 0))
    if sid not in table:
        raise InputError("this TrainingSession was released (or never created)")
    sess = table[sid]
    trainable_only = bool(args.get("trainable_only", True))
    if op == "train_step":
        return sess.train_step(args.get("feeds") or {})
    if op == "eval_step":
        return sess.eval_step(args.get("feeds") or {})
    if op == "optimizer_step":
        return sess.optimizer_step()
    if op == "lazy_reset_grad":
        return sess.lazy_reset_grad()
    if op == "parameters_size":
        return sess.parameters_size(trainable_only)
    if op == "contiguous_parameters":
        return sess.contiguous_parameters(trainable_only)
    if op == "load_parameters":
        return sess.load_parameters(args["buffer"], trainable_only)
    if op == "release":
        del table[sid]
        return None
    raise WebappError("unknown TrainingSession operation %r" % op)
