"""Training through an If decided at run time (a condition computed from the batch, as a voice-activity
detector's sample-rate branch): the backward takes the branch the forward took, the weights of the
branch not taken get zeros. 5 SGD steps equal PyTorch running the same branches (both taken across the
steps), the export runs in onnxruntime with pytrain's outputs (tests/helpers/wild_models.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import onnx  # noqa: E402
from onnx import helper  # noqa: E402
from wild_models import FLOAT, batches, check_wild, model, script_export, weights  # noqa: E402

N_IN, N_CLS = 6, 5
DATA = batches(N_IN, N_CLS)


def test_the_batches_take_both_branches():
    assert {bool(x.sum() > 0) for x, _ in DATA} == {True, False}
    assert {bool(x[0, 0] > 0) for x, _ in DATA if x.sum() > 0} == {True, False}


class _Branchy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.a, self.b = torch.nn.Linear(N_IN, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, N_CLS)

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        if x.sum() > 0:  # decided by the batch: an If in the export
            h = torch.relu(self.a(h))
        else:
            h = torch.sigmoid(self.b(h)) * 2
        return self.out(h)


@pytest.mark.parametrize("opset", [11, 17])
def test_torch_script_if_on_the_data_trains(opset):
    torch.manual_seed(0)
    net = _Branchy()
    m = script_export(net, DATA[0][0], opset)
    assert "If" in {n.op_type for n in m.graph.node}
    p = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}

    def forward(ps, x):
        return torch.func.functional_call(net, ps, (x,))

    exported = check_wild(m, forward, p, DATA)
    assert "If" in {n.op_type for n in exported.graph.node}  # still decided at run time


def _nested_model():
    """An outer If on the batch's sum; its then-branch holds an If on x[0, 0]; a weight (Ws) read in
    both branches; a branch passing a value of the outer graph through (an Identity, as ORT wants)."""
    p = weights({"W1": (N_IN, 8), "Ws": (8,), "Wt": (8, 8), "W2": (8, N_CLS)})
    V, B, I = helper.make_tensor_value_info, helper.make_graph, helper.make_node
    inner_then = B([I("MatMul", ["h", "Wt"], ["it0"]), I("Tanh", ["it0"], ["it1"])], "inner_then", [],
                   [V("it1", FLOAT, None)])
    inner_else = B([I("Identity", ["h"], ["ie"])], "inner_else", [], [V("ie", FLOAT, None)])  # the outer value
    then = B([I("Mul", ["h", "Ws"], ["t0"]), I("Gather", ["x", "zero"], ["row"]), I("Gather", ["row", "zero"], ["x00"]),
              I("Greater", ["x00", "fzero"], ["c2"]),
              I("If", ["c2"], ["t1"], then_branch=inner_then, else_branch=inner_else), I("Add", ["t0", "t1"], ["t2"])],
             "then", [], [V("t2", FLOAT, None)])
    other = B([I("Sub", ["h", "Ws"], ["e0"]), I("Relu", ["e0"], ["e1"])], "else", [], [V("e1", FLOAT, None)])
    nodes = [I("MatMul", ["x", "W1"], ["h"]), I("ReduceSum", ["x"], ["sx"], keepdims=0),
             I("Greater", ["sx", "fzero"], ["cond"]),
             I("If", ["cond"], ["g"], then_branch=then, else_branch=other), I("MatMul", ["g", "W2"], ["logits"])]
    consts = {"zero": np.array(0, np.int64), "fzero": np.array(0, np.float32)}
    m = model(nodes, [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_CLS])], dict(p, **consts), 13)

    def forward(ps, x):
        h = x @ ps["W1"]
        if x.sum() > 0:
            inner = torch.tanh(h @ ps["Wt"]) if x[0, 0] > 0 else h
            g = h * ps["Ws"] + inner
        else:
            g = torch.relu(h - ps["Ws"])
        return g @ ps["W2"]

    return m, forward, p


def test_nested_ifs_on_the_data_train():
    m, forward, p = _nested_model()
    check_wild(m, forward, p, DATA)


def test_untaken_branch_weights_get_zero_gradients():
    from pytrain.device.api import CheckpointState, Module
    from pytrain.generator import artifacts

    m, _, _ = _nested_model()
    arts = artifacts.generate_artifacts(m.SerializeToString(), optimizer=artifacts.SGD())
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    x, y = next((x, y) for x, y in DATA if x.sum() <= 0)  # the else branch: Wt is not read
    module(x, y)
    assert np.all(state.parameters["Wt"].grad == 0)
    assert np.any(state.parameters["Ws"].grad != 0)


def test_dropout_in_a_branch_decided_at_run_time_is_refused_by_name():
    from pytrain.errors import UnsupportedOpError
    from pytrain.generator import artifacts

    m, _, _ = _nested_model()
    node = next(n for n in m.graph.node if n.op_type == "If")
    other = next(a.g for a in node.attribute if a.name == "else_branch")
    other.node[1].CopyFrom(helper.make_node("Dropout", ["e0"], ["e1"], name="drop"))
    with pytest.raises(UnsupportedOpError, match=r"'g' \(If\) reads 'h'.*branch 'else' runs 'drop' \(Dropout\)"):
        artifacts.generate_artifacts(m.SerializeToString())
    frozen = artifacts.generate_artifacts(m.SerializeToString(), frozen_params=["W1", "Ws", "Wt"])
    assert frozen.summary["trainable"] == ["W2"]
