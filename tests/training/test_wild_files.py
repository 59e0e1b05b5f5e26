"""What converters write into pretrained ONNX files (issue 32), trained: Softmax/LogSoftmax of opsets
before 13 on non-last axes, ``-1`` and ``?`` dims, weights stored as Constant nodes or behind
Identity/Cast, control flow. Each model: inference equals onnxruntime, 5 SGD steps equal the same
function in torch, the export runs in onnxruntime with pytrain's outputs (tests/helpers/wild_models.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onnx import helper, numpy_helper  # noqa: E402
from wild_models import FLOAT, INT64, batches, check_wild, model, weights  # noqa: E402

N_IN, N_CLS = 6, 5


def _coerced(fn, x, axis):
    """The opset < 13 meaning: ``fn`` over everything from ``axis`` on, as one row."""
    return fn(x.reshape(*x.shape[:axis], -1), -1).reshape(x.shape)


def _softmax_model(opset: int):
    p = weights({"W1": (N_IN, 24), "b1": (24,), "W2": (24, N_CLS)})
    shapes = {"s3": np.array([-1, 4, 6], np.int64), "s4": np.array([-1, 2, 3, 4], np.int64),
              "s2": np.array([-1, 24], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Reshape", ["h1", "s3"], ["h2"]),
             helper.make_node("Softmax", ["h2"], ["h3"], axis=1),
             helper.make_node("Reshape", ["h3", "s4"], ["h4"]),
             helper.make_node("LogSoftmax", ["h4"], ["h5"], axis=2),
             helper.make_node("Reshape", ["h5", "s2"], ["h6"]),
             helper.make_node("MatMul", ["h6", "W2"], ["logits"])]
    m = model(nodes, [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_CLS])], dict(p, **shapes), opset)
    old = opset < 13

    def forward(ps, x):
        h = (x @ ps["W1"] + ps["b1"]).reshape(-1, 4, 6)
        h = _coerced(torch.softmax, h, 1) if old else torch.softmax(h, 1)
        h = h.reshape(-1, 2, 3, 4)
        h = _coerced(torch.log_softmax, h, 2) if old else torch.log_softmax(h, 2)
        return h.reshape(-1, 24) @ ps["W2"]

    return m, forward, p


@pytest.mark.parametrize("opset", [11, 12, 13, 17])
def test_softmax_family_on_non_last_axes_trains_with_its_opsets_meaning(opset):
    m, forward, p = _softmax_model(opset)
    check_wild(m, forward, p, batches(N_IN, N_CLS))


def _converter_model(opset: int = 11):
    """As paddle2onnx / older tf2onnx write a CNN: batch ``-1``, height and width both ``?``, every weight a
    Constant node (a file keeps its weights one way: pytrain/generator/normalize/weights.py), the classifier's
    weight behind Identity and its bias a float64 Constant behind Cast."""
    p = weights({"conv.w": (4, 1, 3, 3), "fc.w": (4, N_CLS)})
    p["fc.b"] = np.random.default_rng(3).standard_normal(N_CLS)  # float64, cast to float in the graph
    const = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(p[name], name))
             for name in ("conv.w", "fc.w", "fc.b")]
    nodes = const + [helper.make_node("Conv", ["x", "conv.w"], ["c"], pads=[1, 1, 1, 1]),
                     helper.make_node("Relu", ["c"], ["r"]),
                     helper.make_node("GlobalAveragePool", ["r"], ["g"]),
                     helper.make_node("Flatten", ["g"], ["f"]),
                     helper.make_node("Identity", ["fc.w"], ["fc.w_copy"]),
                     helper.make_node("Cast", ["fc.b"], ["fc.b_f"], to=FLOAT),
                     helper.make_node("Gemm", ["f", "fc.w_copy", "fc.b_f"], ["logits"])]
    m = model(nodes, [("x", FLOAT, [-1, 1, "?", "?"])], [("logits", FLOAT, [-1, N_CLS])], {}, opset)

    def forward(ps, x):
        h = torch.relu(torch.nn.functional.conv2d(x, ps["conv.w"], padding=1)).mean(dim=(2, 3))
        return h @ ps["fc.w"] + ps["fc.b"].float()

    return m, forward, p


def test_converter_dims_and_weights_stored_as_nodes_train():
    m, forward, p = _converter_model()
    exported = check_wild(m, forward, p, batches((1, 6, 9), N_CLS))  # height 6 and width 9, both named '?'
    assert {"conv.w", "fc.w", "fc.b"} <= {t.name for t in exported.graph.initializer}   # Constants export as initializers
    assert "Constant" not in [n.op_type for n in exported.graph.node]


def test_nothing_trains_says_why():
    from pytrain.generator import artifacts
    from pytrain.errors import ArtifactError

    m = model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Reshape", ["y", "s"], ["logits"])],
              [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_IN])],
              {"s": np.array([-1, N_IN], np.int64)}, 13)
    with pytest.raises(ArtifactError, match=r"no parameter would train.*'s': not a float tensor"):
        artifacts.generate_artifacts(m.SerializeToString())


def _control_model(opset: int):
    """If (its condition from a declared dim: inlined), Loop with a trip count of 3 (unrolled), Scan over
    a declared length of 2 (unrolled); every body reads weights of the outer graph."""
    p = weights({"W1": (N_IN, 8), "b1": (8,), "W2": (8, 8), "b2": (8,), "Ws": (4,), "W3": (12, N_CLS)})
    V, B, I = helper.make_tensor_value_info, helper.make_graph, helper.make_node
    then = B([I("MatMul", ["x", "W1"], ["t0"]), I("Add", ["t0", "b1"], ["t1"])], "then", [], [V("t1", FLOAT, None)])
    other = B([I("MatMul", ["x", "W1"], ["e0"]), I("Sub", ["e0", "b1"], ["e1"])], "else", [], [V("e1", FLOAT, None)])
    loop = B([I("MatMul", ["h", "W2"], ["l0"]), I("Add", ["l0", "b2"], ["l1"]), I("Tanh", ["l1"], ["h2"]),
              I("Identity", ["c"], ["c2"]), I("Identity", ["h2"], ["seen"])], "loop",
             [V("i", INT64, []), V("c", 9, []), V("h", FLOAT, None)],
             [V("c2", 9, []), V("h2", FLOAT, None), V("seen", FLOAT, None)])
    scan = B([I("Mul", ["xt", "Ws"], ["s0"]), I("Add", ["s", "s0"], ["s2"]), I("Sigmoid", ["s2"], ["o"])], "scan",
             [V("s", FLOAT, None), V("xt", FLOAT, None)], [V("s2", FLOAT, None), V("o", FLOAT, None)])
    axes = {"axes": [0]} if opset < 18 else {}
    nodes = [I("Shape", ["x"], ["shape"]), I("Gather", ["shape", "one"], ["width"]),
             I("Equal", ["width", "six"], ["cond"]),
             I("If", ["cond"], ["h0"], then_branch=then, else_branch=other),
             I("Loop", ["three", "true", "h0"], ["hl", "seen_all"], body=loop),
             I("ReduceMean", ["seen_all"], ["seen_mean"], keepdims=0, **axes),
             I("Add", ["hl", "seen_mean"], ["h"]), I("Reshape", ["h", "s3"], ["h3"]),
             I("ReduceMean", ["h3"], ["s_init"], keepdims=0, axes=[1]),
             I("Scan", ["s_init", "h3"], ["s_fin", "outs"], body=scan, num_scan_inputs=1,
               scan_input_axes=[1], scan_output_axes=[1]),
             I("Reshape", ["outs", "shape8"], ["outs2"]), I("Concat", ["s_fin", "outs2"], ["feat"], axis=1),
             I("MatMul", ["feat", "W3"], ["logits"])]
    consts = {"one": np.array(1, np.int64), "six": np.array(N_IN, np.int64), "three": np.array(3, np.int64),
              "true": np.array(True), "s3": np.array([-1, 2, 4], np.int64), "shape8": np.array([-1, 8], np.int64)}
    m = model(nodes, [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_CLS])], dict(p, **consts), opset)
    m.graph.value_info.append(V("h3", FLOAT, ["N", 2, 4]))

    def forward(ps, x):
        h = x @ ps["W1"] + ps["b1"]
        seen = []
        for _ in range(3):
            h = torch.tanh(h @ ps["W2"] + ps["b2"])
            seen.append(h)
        h3 = (h + torch.stack(seen).mean(0)).reshape(-1, 2, 4)
        s, outs = h3.mean(1), []
        for t in range(2):
            s = s + h3[:, t] * ps["Ws"]
            outs.append(torch.sigmoid(s))
        return torch.cat([s, torch.stack(outs, 1).reshape(-1, 8)], 1) @ ps["W3"]

    return m, forward, p


@pytest.mark.parametrize("opset", [11, 17])
def test_control_flow_decided_at_generation_trains(opset):
    m, forward, p = _control_model(opset)
    exported = check_wild(m, forward, p, batches(N_IN, N_CLS))
    assert not {"If", "Loop", "Scan"} & {n.op_type for n in exported.graph.node}  # inlined and unrolled


def test_data_dependent_trip_count_is_refused_by_name():
    from pytrain.generator import artifacts
    from pytrain.errors import UnsupportedOpError

    m, _, _ = _control_model(17)
    for n in m.graph.node:
        if n.op_type == "Loop":
            n.input[0] = "trips"
    m.graph.node.insert(0, helper.make_node("Size", ["x"], ["trips"]))  # the batch decides it
    with pytest.raises(UnsupportedOpError, match=r"'hl' \(Loop\) reads .*trip count is decided by the data"):
        artifacts.generate_artifacts(m.SerializeToString())


def test_unsupported_op_inside_a_body_is_named_at_generation():
    from pytrain.generator import artifacts
    from pytrain.errors import UnsupportedOpError

    m, _, _ = _control_model(17)
    loop = next(n for n in m.graph.node if n.op_type == "Loop")
    loop.attribute[0].g.node[2].op_type = "Det"  # the Tanh of its body
    with pytest.raises(UnsupportedOpError, match=r"\(Det\)"):
        artifacts.generate_artifacts(m.SerializeToString())


def _clip6_model(ratio: float):
    """Opset 10, as older converters write a ReLU6 head: Clip's bounds and Dropout's ratio are attributes."""
    p = weights({"W1": (N_IN, 8), "W2": (8, N_CLS)})
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]),
             helper.make_node("Clip", ["h"], ["r6"], min=0.0, max=0.6),
             helper.make_node("Dropout", ["r6"], ["d"], ratio=ratio),
             helper.make_node("MatMul", ["d", "W2"], ["logits"])]
    m = model(nodes, [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_CLS])], p, 10)

    def forward(ps, x):
        return torch.clamp(x @ ps["W1"], 0.0, 0.6) @ ps["W2"]

    return m, forward, p


def test_clip_6_and_dropout_10_attributes_train():
    m, forward, p = _clip6_model(0.0)
    check_wild(m, forward, p, batches(N_IN, N_CLS))


def test_dropout_10_ratio_attribute_is_the_training_ratio():
    import onnx

    from pytrain.generator import artifacts

    m, _, _ = _clip6_model(0.3)
    arts = artifacts.generate_artifacts(m.SerializeToString(), optimizer=artifacts.SGD())
    g = onnx.load_from_string(arts.training_model).graph
    drop = next(n for n in g.node if n.op_type == "Dropout")
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in g.initializer}
    assert float(inits[drop.input[1]]) == pytest.approx(0.3)


class _Scripted(torch.nn.Module):
    """Python control flow torch.jit.script keeps: a loop over a count from the input's shape, an if on it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.out = torch.nn.Linear(N_IN, N_IN), torch.nn.Linear(N_IN, N_CLS)

    def forward(self, x):
        h = x
        for _ in range(x.shape[1] // 2):
            h = torch.tanh(self.fc(h))
        if x.shape[1] == 6:  # N_IN (script reads no globals)
            h = h + 1
        return self.out(h)


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_torch_script_loop_and_if_train(opset):
    from wild_models import script_export

    torch.manual_seed(0)
    data = batches(N_IN, N_CLS)
    m = script_export(_Scripted(), data[0][0], opset)
    ops = {n.op_type for n in m.graph.node}
    assert {"Loop", "If"} <= ops, ops
    p = {t.name: __import__("onnx").numpy_helper.to_array(t).copy() for t in m.graph.initializer
         if t.name.startswith(("fc.", "out."))}

    def forward(ps, x):
        h = x
        for _ in range(N_IN // 2):
            h = torch.tanh(h @ ps["fc.weight"].T + ps["fc.bias"])
        return (h + 1) @ ps["out.weight"].T + ps["out.bias"]

    check_wild(m, forward, p, data)


def test_weights_read_only_in_a_body_left_as_control_flow_are_refused():
    """A Loop the generator cannot unroll whose body reads weights: not silently frozen, refused by name."""
    from pytrain.generator import artifacts
    from pytrain.errors import UnsupportedOpError
    from wild_models import script_export

    class Dynamic(_Scripted):
        def forward(self, x):
            h = x
            for _ in range(x.shape[0]):  # the batch decides the trip count
                h = torch.tanh(self.fc(h))
            return self.out(h)

    m = script_export(Dynamic(), batches(N_IN, N_CLS)[0][0], 13)
    with pytest.raises(UnsupportedOpError, match=r"\(Loop\) reads 'fc\..*trip count is decided by the data"):
        artifacts.generate_artifacts(m.SerializeToString())
    frozen = [t.name for t in m.graph.initializer if t.name.startswith("fc.")]
    arts = artifacts.generate_artifacts(m.SerializeToString(), frozen_params=frozen)  # frozen: it runs
    assert arts.summary["trainable"] == ["out.weight", "out.bias"]


class _SoftmaxNet(torch.nn.Module):
    """Softmax and LogSoftmax on non-last axes, as torch exports them at each opset."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(N_IN, 24), torch.nn.Linear(24, N_CLS)

    def forward(self, x):
        h = torch.softmax(self.fc1(x).reshape(-1, 4, 6), dim=1)
        h = torch.log_softmax(h.reshape(-1, 2, 3, 4), dim=1)
        return self.fc2(h.reshape(-1, 24))


@pytest.mark.parametrize("opset", [11, 12, 13, 17])
def test_torch_exported_softmax_on_non_last_axes_trains(opset):
    import onnx
    from torch_models import export

    torch.manual_seed(0)
    net = _SoftmaxNet()
    data = batches(N_IN, N_CLS)
    m = onnx.load_from_string(export(net, torch.from_numpy(data[0][0]), opset))
    m.graph.input[0].name = "x"
    for n in m.graph.node:
        n.input[:] = ["x" if i == "input" else i for i in n.input]
        n.output[:] = ["logits" if o == "output" else o for o in n.output]
    m.graph.output[0].name = "logits"
    p = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}

    def forward(ps, x):
        return torch.func.functional_call(net, ps, (x,))

    check_wild(m, forward, p, data)
