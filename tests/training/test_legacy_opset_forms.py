"""Old opsets' forms of ops whose inputs were once attributes, trained: Slice-1 (starts/ends/axes
attributes) and Pad-2 (pads/value attributes, constant and reflect modes). 5 SGD steps equal the same
function in torch, the export (at the model's opset) runs in onnxruntime with pytrain's outputs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from onnx import helper  # noqa: E402
from wild_models import FLOAT, batches, check_wild, model, weights  # noqa: E402

N_IN, N_CLS = 6, 5


@pytest.mark.parametrize("opset", [9])
def test_slice_1_and_pad_2_attributes_train(opset):
    p = weights({"W1": (N_IN, 8), "W2": (11, N_CLS)})
    I = helper.make_node
    nodes = [I("MatMul", ["x", "W1"], ["h"]),
             I("Slice", ["h"], ["s"], starts=[1], ends=[-1], axes=[1]),                # (N, 6)
             I("Pad", ["s"], ["pc"], pads=[0, 1, 0, 2], mode="constant", value=0.5),  # (N, 9)
             I("Pad", ["pc"], ["pr"], pads=[0, 1, 0, 1], mode="reflect"),             # (N, 11)
             I("MatMul", ["pr", "W2"], ["logits"])]
    m = model(nodes, [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_CLS])], p, opset)
    m.ir_version = 3

    def forward(ps, x):
        s = (x @ ps["W1"])[:, 1:-1]
        pc = torch.nn.functional.pad(s, (1, 2), value=0.5)
        pr = torch.nn.functional.pad(pc[None], (1, 1), mode="reflect")[0]
        return pr @ ps["W2"]

    check_wild(m, forward, p, batches(N_IN, N_CLS))
