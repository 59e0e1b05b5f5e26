"""Oracles for the forward-kernel tests: run one ONNX node with onnx's ReferenceEvaluator or
onnxruntime, and the same node through pytrain's kernel, then compare."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pytrain.ops import OpContext, get_kernel

_NP_TO_ONNX = {
    np.dtype(np.float32): onnx.TensorProto.FLOAT, np.dtype(np.float64): onnx.TensorProto.DOUBLE,
    np.dtype(np.float16): onnx.TensorProto.FLOAT16,
    np.dtype(np.int64): onnx.TensorProto.INT64, np.dtype(np.int32): onnx.TensorProto.INT32,
    np.dtype(np.int8): onnx.TensorProto.INT8, np.dtype(np.uint8): onnx.TensorProto.UINT8,
    np.dtype(np.int16): onnx.TensorProto.INT16, np.dtype(np.uint16): onnx.TensorProto.UINT16,
    np.dtype(np.bool_): onnx.TensorProto.BOOL, np.dtype(object): onnx.TensorProto.STRING,
}


def _onnx_attrs(attrs: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    for k, v in attrs.items():
        if v is None:
            continue
        out[k] = numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
    return out


def make_model(op: str, inputs: Sequence[Optional[np.ndarray]], attrs: Dict[str, Any],
               n_outputs: int = 1, opset: int = 17) -> onnx.ModelProto:
    """A one-node model: inputs ``in0..`` (None -> empty name, i.e. an omitted optional input)."""
    names: List[str] = []
    vis = []
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        names.append("in%d" % i)
        vis.append(helper.make_tensor_value_info("in%d" % i, _NP_TO_ONNX[x.dtype], x.shape))
    while names and names[-1] == "":
        names.pop()
    outs = ["out%d" % i for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **_onnx_attrs(attrs))
    graph = helper.make_graph([node], "g", vis, [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 19 else 9
    # give the outputs their inferred types so onnxruntime accepts the model
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for o in model.graph.output:
        if o.name in types and types[o.name].HasField("tensor_type"):
            o.type.CopyFrom(types[o.name])
    return model


def _feeds(inputs: Sequence[Optional[np.ndarray]]) -> Dict[str, np.ndarray]:
    return {"in%d" % i: x for i, x in enumerate(inputs) if x is not None}


def run_reference(op: str, inputs, attrs, n_outputs: int = 1, opset: int = 17) -> List[np.ndarray]:
    """The node's outputs per ``onnx.reference.ReferenceEvaluator``."""
    from onnx.reference import ReferenceEvaluator

    model = make_model(op, inputs, attrs, n_outputs, opset)
    return list(ReferenceEvaluator(model).run(None, _feeds(inputs)))


def run_ort(op: str, inputs, attrs, n_outputs: int = 1, opset: int = 17) -> List[np.ndarray]:
    """The node's outputs per onnxruntime (CPU)."""
    import onnxruntime as ort

    model = make_model(op, inputs, attrs, n_outputs, opset)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return list(sess.run(None, _feeds(inputs)))


def run_pytrain(op: str, inputs, attrs, n_outputs: int = 1, opset: int = 17,
                rng: Optional[np.random.Generator] = None, wants: Optional[Sequence[bool]] = None,
                domain: str = "") -> tuple:
    """Call pytrain's kernel directly, checking that it never mutates its inputs."""
    info = get_kernel(op, domain)
    assert info is not None, "no kernel for %s" % op
    mask = tuple(wants) if wants is not None else (True,) * n_outputs
    ctx = OpContext(opset=opset, rng=rng, output_mask=mask)
    before = [None if x is None else np.array(x, copy=True) for x in inputs]
    kw = {k: v for k, v in attrs.items() if v is not None}
    out = info.fn(ctx, *inputs, **kw)
    assert isinstance(out, tuple), "%s returned %r, not a tuple" % (op, type(out))
    for b, x in zip(before, inputs):
        if b is not None:
            assert b.dtype == x.dtype and b.shape == x.shape and np.array_equal(b, x, equal_nan=b.dtype.kind == "f"), \
                "%s mutated an input" % op
    return out


def assert_same(got: Any, ref: Any, rtol: float = 1e-5, atol: float = 1e-6, what: str = "") -> None:
    """``got`` is an ndarray with ``ref``'s dtype and shape and close values (exact for non-floats)."""
    ref = np.asarray(ref)
    assert isinstance(got, np.ndarray), "%s: got %r, not an ndarray" % (what, type(got))
    assert got.dtype == ref.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, ref.dtype)
    assert got.shape == ref.shape, "%s: shape %s, expected %s" % (what, got.shape, ref.shape)
    if ref.dtype.kind in "fc":
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, ref, err_msg=what)


def check(op: str, inputs, attrs=None, n_outputs: int = 1, opset: int = 17, oracle: str = "ref",
          rtol: float = 1e-5, atol: float = 1e-6) -> tuple:
    """Run ``op`` through pytrain and the oracle (``"ref"`` or ``"ort"``) and compare every output."""
    attrs = dict(attrs or {})
    run = run_reference if oracle == "ref" else run_ort
    ref = run(op, inputs, attrs, n_outputs, opset)
    got = run_pytrain(op, inputs, attrs, n_outputs, opset)
    assert len(got) >= n_outputs, "%s returned %d outputs, expected %d" % (op, len(got), n_outputs)
    for i in range(n_outputs):
        assert_same(got[i], ref[i], rtol, atol, "%s output %d" % (op, i))
    return got
