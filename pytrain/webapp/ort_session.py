"""onnxruntime-web's ``TrainingSession`` and ``InferenceSession`` on pytrain: the Python half of
``web/pytrain-ort.js``.

The page's ``TrainingSession.create({checkpointState, trainModel, evalModel, optimizerModel})``
becomes one :class:`OrtTrainingSession` here (``pytrain.ort.api``'s ``Module`` plus ``Optimizer`` over
the artifacts given as bytes: pytrain's, or those ONNX Runtime's ``generate_artifacts`` made), its
``InferenceSession.create(model)`` one :class:`OrtInferenceSession` (``pytrain.runtime``), each kept by
id in the worker's :class:`~pytrain.webapp.Session`. Tensors
cross the worker as ``{"type": ORT type name, "dims": [...], "data": bytes}``: little-endian
raw data, as onnxruntime-web's typed arrays hold it (int64 as BigInt64Array, float32 as
Float32Array, bool as one byte per value).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from pytrain.errors import InputError
from pytrain.webapp.common import WebappError

# onnxruntime-common's Tensor.Type names and the numpy dtypes of their typed arrays (float16: Uint16Array's bits).
ORT_TYPES = {
    "float32": np.dtype("<f4"), "float64": np.dtype("<f8"), "int8": np.dtype("i1"), "uint8": np.dtype("u1"),
    "int16": np.dtype("<i2"), "uint16": np.dtype("<u2"), "int32": np.dtype("<i4"), "uint32": np.dtype("<u4"),
    "int64": np.dtype("<i8"), "uint64": np.dtype("<u8"), "bool": np.dtype("?"), "float16": np.dtype("<f2"),
}
_NUMPY_TO_ORT = {np.dtype(v).str: k for k, v in ORT_TYPES.items()}


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
    arr = np.asarray(value)   # 0-d stays 0-d (a scalar loss has dims [], as in onnxruntime-web)
    kind = _NUMPY_TO_ORT.get(arr.dtype.str) or _NUMPY_TO_ORT.get(arr.dtype.newbyteorder("<").str)
    if kind is None:
        raise WebappError("an output of dtype %s has no onnxruntime-web tensor type" % arr.dtype)
    return {"type": kind, "dims": [int(d) for d in arr.shape], "data": arr.astype(ORT_TYPES[kind]).tobytes()}


class OrtTrainingSession:
    """One onnxruntime-web TrainingSession: ``pytrain.ort.api``'s Module (training + optional eval model)
    and Optimizer, so artifacts ONNX Runtime made train as they do in ``pytrain.ort`` (and pytrain's own
    as well), with ORT's defaults (a fresh optimizer's learning rate 1e-3)."""

    def __init__(self, checkpoint: bytes, train_model: bytes, eval_model: Optional[bytes] = None,
                 optimizer_model: Optional[bytes] = None) -> None:
        from pytrain.ort.api import CheckpointState, Module, Optimizer
        # pytrain's checkpoints and those ONNX Runtime 1.19 wrote (its flatbuffer format)
        self.state = CheckpointState.load_checkpoint(bytes(checkpoint))
        self.module = Module(bytes(train_model), self.state, bytes(eval_model) if eval_model else None)
        self.optimizer = Optimizer(bytes(optimizer_model), self.module) if optimizer_model else None
        self.eval_input_names: List[str] = []
        self.eval_output_names: List[str] = []
        if eval_model:
            self.module.eval()
            self.eval_input_names = self.module.input_names()
            self.eval_output_names = self.module.output_names()
            self.module.train()

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
        if not isinstance(outs, (list, tuple)):
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
        other = [(n, p.data.dtype) for n, p in self.state.parameters
                 if (p.requires_grad or not trainable_only) and p.data is not None and p.data.dtype != np.float32]
        if other:
            raise InputError("only float32 parameters go through a contiguous buffer (as in onnxruntime-web); "
                             "%r is %s" % other[0])

    def contiguous_parameters(self, trainable_only: bool = True) -> Dict[str, Any]:
        self._check_float32(trainable_only)
        value = self.module.get_contiguous_parameters(bool(trainable_only))
        # an OrtValue where onnxruntime is installed: copied while it (and the memory it views) lives
        flat = np.array(value.numpy() if hasattr(value, "numpy") else value, dtype=np.float32)
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


class OrtInferenceSession:
    """One onnxruntime-web InferenceSession: pytrain's inference runtime over the model's bytes."""

    def __init__(self, model: bytes) -> None:
        from pytrain.engine.runtime import InferenceSession
        self.session = InferenceSession(bytes(model))

    def names(self) -> Dict[str, List[str]]:
        return {"inputNames": self.session.input_names(), "outputNames": self.session.output_names()}

    def run(self, feeds: Dict[str, Any], fetches: Optional[List[str]] = None) -> Dict[str, Any]:
        input_names, output_names = self.session.input_names(), self.session.output_names()
        unknown = sorted(set(feeds) - set(input_names))
        if unknown:
            raise InputError("invalid input %r: the model takes %s" % (unknown[0], input_names))
        names = list(fetches) if fetches else output_names
        bad = [n for n in names if n not in output_names]
        if bad:
            raise InputError("invalid output name %r: the model gives %s" % (bad[0], output_names))
        arrays = {n: to_array(t, "input %r" % n) for n, t in feeds.items()}
        for info in self.session.get_inputs():   # as onnxruntime: the declared type and fixed dims
            if info.name in arrays:
                _check_declared(info, arrays[info.name])
        return {n: from_array(o) for n, o in zip(names, self.session.run(names, arrays))}


def _check_declared(info: Any, arr: np.ndarray) -> None:
    """InputError unless ``arr`` has the element type and the fixed dims the model declares for input ``info``."""
    from pytrain.base import dtypes
    from pytrain.proto import value_info_type
    elem, dims = value_info_type(info)
    if elem and np.dtype(dtypes.to_numpy(elem)) != arr.dtype:
        raise InputError("input %r: the model takes %s, the tensor is %s"
                         % (info.name, _NUMPY_TO_ORT.get(np.dtype(dtypes.to_numpy(elem)).str, "?"),
                            _NUMPY_TO_ORT.get(arr.dtype.str, arr.dtype)))
    fixed_differ = dims is not None and any(isinstance(d, int) and d != n for d, n in zip(dims, arr.shape))
    if dims is not None and (len(dims) != arr.ndim or fixed_differ):
        shown = ["?" if not isinstance(d, int) else d for d in dims]
        raise InputError("input %r: the model takes dims %s, the tensor has %s"
                         % (info.name, shown, list(arr.shape)))


class OrtSessions:
    """The worker's TrainingSessions and InferenceSessions, by the ids it was given for them."""

    def __init__(self) -> None:
        self.table: Dict[int, Any] = {}
        self._next_id = 1

    def add(self, sess: Any) -> int:
        """Keep ``sess`` under a new id (ids are never reused)."""
        sid = self._next_id
        self._next_id += 1
        self.table[sid] = sess
        return sid


def dispatch(owner: OrtSessions, op: str, args: Dict[str, Any]) -> Any:
    """Run one TrainingSession or InferenceSession operation for the worker (``owner`` keeps the sessions
    by id)."""
    table = owner.table
    if op in ("create", "inference_create"):
        sess = OrtInferenceSession(args["model"]) if op == "inference_create" else \
            OrtTrainingSession(args["checkpoint"], args["train_model"], args.get("eval_model"),
                               args.get("optimizer_model"))
        out = sess.names()
        out["session"] = owner.add(sess)
        return out
    sid = int(args.get("session", 0))
    if sid not in table:
        raise InputError("this session was released (or never created)")
    sess = table[sid]
    if op == "release":
        del table[sid]
        return None
    if isinstance(sess, OrtInferenceSession) != (op == "inference_run"):
        raise InputError("session %d is %s session: %r is not one of its operations"
                         % (sid, "an inference" if isinstance(sess, OrtInferenceSession) else "a training", op))
    if op == "inference_run":
        return sess.run(args.get("feeds") or {}, args.get("fetches"))
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
    raise WebappError("unknown TrainingSession operation %r" % op)
