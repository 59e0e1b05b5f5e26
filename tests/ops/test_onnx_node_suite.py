"""The ONNX backend node test suite, run through pytrain's inference path.

The cases are generated from the installed ``onnx`` (``onnx.backend.test.case.node.collect_testcases``,
what onnx's own runner falls back to when its data files are not shipped): each is a small model with
input and expected output arrays. Every case whose model uses only ops pytrain claims
(``pytrain.ops.supported_ops()``) runs through ``pytrain.engine.runtime.InferenceSession`` and must either

* give the expected outputs (dtype, shape, and values within the case's rtol/atol, 1e-3/1e-7 by
  default as in onnx's runner, NaN equal to NaN), or
* refuse with a :class:`pytrain.errors.PytrainError` whose message names what is unsupported: an
  element type the model uses (float8, int4, bfloat16...), an attribute of one of its nodes, or a
  sequence/optional value.

Never a wrong result, never a raw Python exception, and never a KernelError (numpy failing inside a
kernel: pytrain did not know it could not do the case).

The only cases not compared value for value are Dropout in training mode: their expected outputs come
from numpy's global random generator, which no runtime reproduces (the spec leaves the generator to
the runtime); for them the test checks the dropout law instead (see ``_check_random_dropout``).

``python tests/ops/test_onnx_node_suite.py`` prints the counts (covered, passing, refused by reason).
"""
from __future__ import annotations

import collections
import re
import warnings
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from pytrain.base import dtypes
from pytrain.errors import KernelError, PytrainError
from pytrain.ops import supported_ops
from pytrain.engine.runtime import InferenceSession
from test_python38_numpy117 import py38  # noqa: F401  (the fixture: a Python 3.8 venv with numpy 1.17.5)


def _collect() -> List[object]:
    from onnx.backend.test.case.node import collect_testcases

    state = np.random.get_state()  # the generators seed numpy's global RNG: leave it as it was
    try:
        with warnings.catch_warnings():  # the generators overflow on purpose (cast edge values)
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                return list(collect_testcases())
    finally:
        np.random.set_state(state)


def _graphs(g: onnx.GraphProto):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g)
            for sub in a.graphs:
                yield from _graphs(sub)


def _ops(model: onnx.ModelProto) -> Set[Tuple[str, str]]:
    return {(n.domain or "", n.op_type) for g in _graphs(model.graph) for n in g.node}


def _covered(cases) -> Dict[str, object]:
    ours = set(supported_ops())
    return {c.name: c for c in cases
            if all(d in ("", "ai.onnx") and op in ours for d, op in _ops(c.model))}


ALL_CASES = _collect()
CASES = _covered(ALL_CASES)


# ---- what a clear refusal must name ------------------------------------------------------------------
def _type_names(t: onnx.TypeProto) -> Set[str]:
    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        return {_elem_name(t.tensor_type.elem_type)}
    if kind == "sequence_type":
        return {"sequence"} | _type_names(t.sequence_type.elem_type)
    if kind == "optional_type":
        return {"optional"} | _type_names(t.optional_type.elem_type)
    return {str(kind)}


def _elem_name(elem_type: int) -> str:
    return dtypes.NAMES.get(elem_type, onnx.TensorProto.DataType.Name(elem_type).lower())


def _nameable(model: onnx.ModelProto) -> Dict[str, str]:
    """Words a refusal may name, each with its reason category: element types pytrain has no
    numpy dtype for, non-tensor types, and node attributes."""
    supported = {dtypes.NAMES[k] for k in dtypes._TO_NUMPY}
    words: Dict[str, str] = {}
    names: Set[str] = set()
    for g in _graphs(model.graph):
        for v in list(g.input) + list(g.output) + list(g.value_info):
            names |= _type_names(v.type)
        names |= {_elem_name(t.data_type) for t in g.initializer}
        for n in g.node:
            for a in n.attribute:
                words[a.name] = "attribute %s.%s" % (n.op_type, a.name)
                if a.name == "to" and n.op_type == "Cast":
                    names.add(_elem_name(a.i))
                if a.HasField("t"):
                    names.add(_elem_name(a.t.data_type))
    for name in sorted(names):
        if name in ("sequence", "optional"):
            words[name] = name + " type"
        elif name not in supported:
            words[name] = "element type " + name
    return words


def refusal_reason(model: onnx.ModelProto, err: PytrainError) -> Optional[str]:
    """The reason a refusal names (None: it names nothing the model uses)."""
    msg = str(err).lower()
    for word, reason in sorted(_nameable(model).items(), key=lambda kv: kv[1].startswith("attribute")):
        w = re.escape(word.lower())
        # a type as a word; an attribute quoted ('round_mode') or with its value (antialias=1)
        pattern = r"'%s'|(?<![a-z0-9_])%s\s*=" % (w, w) if reason.startswith("attribute") else \
            r"(?<![a-z0-9_])%s(?![a-z0-9_])" % w
        if re.search(pattern, msg):
            return reason
    return None


# ---- running one case -----------------------------------------------------------------------------
def _value(v):
    if isinstance(v, TensorProto):
        if v.data_type in (TensorProto.INT4, TensorProto.UINT4):  # onnx's ml_dtypes int4 as pytrain holds it
            return dtypes.as_four_bit(numpy_helper.to_array(v).astype(np.int8), dtypes.to_numpy(v.data_type))
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def _same(got, want, rtol: float, atol: float, what: str) -> None:
    if want is None or isinstance(want, list):
        raise AssertionError("%s: expected a %s, pytrain returned a tensor %r" % (
            what, "sequence" if isinstance(want, list) else "missing optional value", got))
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), "%s: got %r" % (what, type(got))
    assert got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    elif want.dtype == object:
        assert got.tolist() == want.tolist(), what
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def _random_dropout(case) -> bool:
    """Dropout nodes that drop at random (training_mode fed True and a ratio in (0, 1))."""
    return any(n.op_type == "Dropout" and len(n.input) > 2 and n.input[2] for n in case.model.graph.node)


def _check_random_dropout(case, feeds: Dict[str, np.ndarray], got: Sequence[np.ndarray], want) -> None:
    """Dropout's law, as the spec states it: output = data * mask / (1 - ratio) with a bool mask of
    data's shape, the kept fraction near 1 - ratio (binomial, 5 sigma), and with training_mode false or
    ratio 0 the identity."""
    (node,) = case.model.graph.node
    x = feeds[node.input[0]]
    ratio = float(feeds[node.input[1]]) if len(node.input) > 1 and node.input[1] else 0.5
    training = bool(feeds[node.input[2]])
    y = got[0]
    assert y.dtype == x.dtype and y.shape == x.shape
    if len(got) > 1:
        mask = got[1]
        assert mask.dtype == np.bool_ and mask.shape == x.shape
    else:
        mask = y != 0
    assert np.asarray(want[0]).shape == y.shape
    if not training or ratio == 0.0:
        np.testing.assert_array_equal(y, x)
        assert mask.all()
        return
    np.testing.assert_allclose(y, np.where(mask, x / (1.0 - ratio), 0).astype(x.dtype), rtol=1e-6, atol=0)
    n, p = x.size, 1.0 - ratio
    assert abs(mask.sum() - n * p) <= 5 * np.sqrt(n * p * (1 - p)) + 1, (mask.sum(), n, p)


#: Cases whose stored expected outputs (computed by onnx.reference) disagree with onnxruntime and with
#: PyTorch, where the spec reads both ways: for align_corners with a fractional in * scale, onnx.reference
#: takes (length_resized - 1) as in * scale - 1, while onnxruntime and torch.nn.functional.interpolate use
#: the integer output length. pytrain follows onnxruntime and torch; these cases are checked against
#: onnxruntime instead of the stored outputs.
ORT_IS_THE_ORACLE = frozenset(["test_resize_downsample_scales_linear_align_corners",
                               "test_resize_downsample_scales_cubic_align_corners"])


def _onnxruntime_outputs(case, inputs) -> list:
    import onnxruntime as ort

    sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: _value(v) for i, v in zip(sess.get_inputs(), inputs)})


def run_case(case) -> Tuple[str, str]:
    """("pass", "") or ("refused", reason); raises AssertionError on a wrong result or an unclear
    refusal, and lets any raw exception through."""
    try:
        sess = InferenceSession(case.model.SerializeToString())
        for inputs, outputs in case.data_sets:
            feeds = dict(zip(sess.input_names(), [_value(v) for v in inputs]))
            got = sess.run(None, feeds)
            want = _onnxruntime_outputs(case, inputs) if case.name in ORT_IS_THE_ORACLE else \
                [_value(v) for v in outputs]
            assert len(got) == len(want), "%d outputs, expected %d" % (len(got), len(want))
            if _random_dropout(case):
                _check_random_dropout(case, feeds, got, want)
                continue
            for i, (g, w) in enumerate(zip(got, want)):
                _same(g, w, case.rtol, case.atol, "%s output %d" % (case.name, i))
    except KernelError as e:
        raise AssertionError("%s: a kernel failed instead of refusing clearly: %s" % (case.name, e)) from e
    except PytrainError as e:
        reason = refusal_reason(case.model, e)
        assert reason is not None, "%s: refusal names nothing the model uses: %s: %s" % (
            case.name, type(e).__name__, e)
        return "refused", reason
    return "pass", ""


#: name -> run_case's verdict ("pass"/"refused"), or None when it raised AssertionError, as test_node_case found
#: it: the Python 3.8 test reuses them instead of running every case here a second time (run_case is deterministic)
OUTCOMES: Dict[str, Optional[str]] = {}


def outcome(name: str) -> Optional[str]:
    """run_case(CASES[name])'s verdict, None for an AssertionError (remembered in OUTCOMES); a raw exception
    goes through."""
    if name not in OUTCOMES:
        try:
            OUTCOMES[name] = run_case(CASES[name])[0]
        except AssertionError:
            OUTCOMES[name] = None
            raise
    return OUTCOMES[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name):
    OUTCOMES.pop(name, None)
    outcome(name)


def test_suite_is_covered():
    """The filter finds the cases it should: the suite is there and pytrain claims a good part of it."""
    assert len(ALL_CASES) > 1000
    assert len(CASES) > 900
    assert {"test_abs", "test_gemm_default_no_bias", "test_cast_FLOAT_to_FLOAT8E4M3FN"} <= set(CASES)
    # the quantization ops (pytrain/ops/quant): per-axis, blocked, dynamic, integer products
    assert {"test_quantizelinear_blocked_asymmetric", "test_dequantizelinear_blocked", "test_dequantizelinear_axis",
            "test_dynamicquantizelinear_min_adjusted", "test_matmulinteger", "test_convinteger_with_padding"} <= set(CASES)


def test_refusals_name_float8_int4_and_attributes():
    """The element type and the unknown attribute are named, in a PytrainError."""
    assert run_case(CASES["test_cast_FLOAT_to_FLOAT8E4M3FN"]) == ("refused", "element type float8e4m3fn")
    assert run_case(CASES["test_cast_INT4_to_FLOAT"]) == ("pass", "")  # int4 is read (one value a byte)
    assert run_case(CASES["test_cast_FLOAT_to_UINT2"]) == ("refused", "element type uint2")
    assert run_case(CASES["test_cast_FLOAT4E2M1_to_FLOAT"]) == ("refused", "element type float4e2m1")
    status, reason = run_case(CASES["test_cast_e8m0_FLOAT_to_FLOAT8E8M0"])
    assert status == "refused" and reason in ("attribute Cast.round_mode", "element type float8e8m0")


def test_unknown_attribute_is_refused_in_one_place():
    """Any kernel: an attribute it does not take is an UnsupportedOpError naming node, op and
    attribute when the plan is built (not a TypeError from the call, not silently ignored)."""
    from onnx import helper

    from pytrain.errors import UnsupportedOpError

    node = helper.make_node("Relu", ["X"], ["Y"], name="act1", negative_slope=0.1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match=r"node 'act1' \(Relu\) has attribute 'negative_slope'"):
        InferenceSession(model.SerializeToString()).run(None, {"X": np.ones(2, np.float32)})


@pytest.mark.parametrize("elem_type", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2FNUZ, TensorProto.INT2,
                                       TensorProto.UINT2,
                                       TensorProto.FLOAT4E2M1, TensorProto.FLOAT8E8M0, TensorProto.BFLOAT16])
def test_unsupported_element_types_are_named(elem_type):
    from pytrain.errors import GraphError

    name = TensorProto.DataType.Name(elem_type).lower()
    with pytest.raises(GraphError, match=r"element type %s \(%d\) is not supported" % (name, elem_type)):
        dtypes.to_numpy(elem_type)


# ---- the same cases on the browser's Python: 3.8 with numpy 1.17 ---------------------------------------
PY38_SCRIPT = r"""
import pickle, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from pytrain.errors import PytrainError
from pytrain.engine.runtime import InferenceSession

def dec(e):
    if e[0] == "O":
        return np.array(e[2], dtype=object).reshape(e[1])
    return np.frombuffer(e[2], dtype=np.dtype(e[0] if isinstance(e[0], str) else [tuple(f) for f in e[0]])
                         ).reshape(e[1]).copy()

def enc(a):
    a = np.asarray(a)
    # a structured dtype (pytrain's int4 / uint4) as its field list, which np.dtype() takes back
    return ("O", a.shape, a.tolist()) if a.dtype == object else (
        a.dtype.descr if a.dtype.names else a.dtype.str, a.shape, a.tobytes())

out = {}
for name, model, data_sets in pickle.load(open(sys.argv[2], "rb")):
    try:
        sess = InferenceSession(model)
        out[name] = ("ok", [[enc(y) for y in sess.run(None, dict(zip(sess.input_names(), [dec(x) for x in ins])))]
                            for ins in data_sets])
    except PytrainError as e:
        out[name] = ("refused", type(e).__name__, str(e))
    except Exception as e:
        out[name] = ("raw", type(e).__name__, str(e))
pickle.dump(out, open(sys.argv[3], "wb"), protocol=4)
"""


def _encode(a: np.ndarray):
    # builtins only, so the pickle loads under another numpy version
    # a structured dtype (pytrain's int4 / uint4) as its field list, which np.dtype() takes back
    return ("O", a.shape, a.tolist()) if a.dtype == object else (
        a.dtype.descr if a.dtype.names else a.dtype.str, a.shape, a.tobytes())


def _decode(e) -> np.ndarray:
    if e[0] == "O":
        return np.array(e[2], dtype=object).reshape(e[1])
    return np.frombuffer(e[2], dtype=np.dtype(e[0] if isinstance(e[0], str) else [tuple(f) for f in e[0]])
                         ).reshape(e[1])


def _numpy_only(case) -> bool:
    """Cases whose data numpy 1.17 can hold (no float8/int4/bfloat16, sequences or optionals)."""
    for ins, outs in case.data_sets:
        for v in list(ins) + list(outs):
            v = _value(v)
            if not isinstance(v, np.ndarray) or v.dtype not in dtypes._TO_NUMPY.values():
                return False
    return True


def test_node_suite_on_python38_numpy117(py38, tmp_path):
    """Every covered case the browser's numpy can hold comes out on Python 3.8 + numpy 1.17.5 as it
    does here: the expected outputs, or a refusal (cases failing here are test_node_case's to report)."""
    import pickle
    import subprocess

    from test_python38_numpy117 import ROOT

    chosen = {}
    for name, case in CASES.items():
        if _numpy_only(case) and not _random_dropout(case):
            try:
                here = outcome(name)
            except AssertionError:
                continue
            if here is not None:
                chosen[name] = here
    payload = [(name, CASES[name].model.SerializeToString(),
                [[_encode(_value(v)) for v in ins] for ins, _ in CASES[name].data_sets]) for name in sorted(chosen)]
    with open(tmp_path / "in.pkl", "wb") as f:
        pickle.dump(payload, f, protocol=4)
    (tmp_path / "run.py").write_text(PY38_SCRIPT)
    subprocess.run([str(py38), "-W", "ignore", str(tmp_path / "run.py"), str(ROOT), str(tmp_path / "in.pkl"),
                    str(tmp_path / "out.pkl")], check=True, timeout=600)
    with open(tmp_path / "out.pkl", "rb") as f:
        got = pickle.load(f)
    assert len(got) == len(chosen) > 900
    wrong = []
    for name, here in sorted(chosen.items()):
        case, result = CASES[name], got[name]
        try:
            assert result[0] == {"pass": "ok", "refused": "refused"}[here], "%s on 3.11, %s on 3.8" % (here, result)
            if result[0] == "ok":
                for ys, (ins, outs) in zip(result[1], case.data_sets):
                    want = _onnxruntime_outputs(case, ins) if name in ORT_IS_THE_ORACLE else [_value(w) for w in outs]
                    for i, (y, w) in enumerate(zip(ys, want)):
                        _same(_decode(y), w, case.rtol, case.atol, "%s output %d" % (name, i))
        except AssertionError as e:
            wrong.append("%s: %s" % (name, str(e).strip().splitlines()[0][:300]))
    assert not wrong, "\n".join(wrong)


def summary() -> Dict[str, object]:
    counts: Dict[str, int] = collections.Counter()
    reasons: Dict[str, int] = collections.Counter()
    failing: List[str] = []
    for name, case in sorted(CASES.items()):
        try:
            status, reason = run_case(case)
        except Exception as e:  # noqa: BLE001  (a summary lists every failure)
            failing.append("%s: %s: %s" % (name, type(e).__name__, str(e).splitlines()[0][:200]))
            continue
        counts[status] += 1
        if reason:
            reasons[reason] += 1
    return {"suite cases": len(ALL_CASES), "covered": len(CASES), "passing": counts["pass"],
            "refused": counts["refused"], "refusal reasons": dict(sorted(reasons.items())),
            "failing": failing}


if __name__ == "__main__":
    import json
    import time

    t = time.time()
    out = summary()
    out["seconds (collect excluded)"] = round(time.time() - t, 2)
    print(json.dumps(out, indent=1))
