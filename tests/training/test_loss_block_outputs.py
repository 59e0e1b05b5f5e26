"""Which model outputs a loss Block reads: as many of the first outputs as its ``build`` has parameters without a
default (all of them for ``*outputs``). A with-past LM's ``present.*`` outputs and a second head's output must not
become labels; ``loss_input_names`` still names others."""
from __future__ import annotations

import numpy as np
import pytest

from pytrain.generator import artifacts, blocks, losses
from pytrain.device.api import CheckpointState, Module
from onnx import helper, numpy_helper

from tests.helpers.hub_fixtures import hub


def _two_heads():
    """x (N, 3) -> a (N, 2) and b (N, 2), two outputs of two weights."""
    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array(rng.standard_normal((3, 2)).astype(np.float32), n) for n in ("w1", "w2"))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("MatMul", ["x", "w2"], ["b"])],
                              "two", [helper.make_tensor_value_info("x", 1, ["N", 3])],
                              [helper.make_tensor_value_info("a", 1, ["N", 2]), helper.make_tensor_value_info("b", 1, ["N", 2])],
                              [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _first_loss(arts, *feeds):
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    return float(Module(arts.training_model, state, arts.eval_model)(*feeds))


def test_a_block_with_a_label_default_reads_the_first_output_only():
    model = _two_heads()
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    target = np.ones((4, 2), np.float32)
    by_default = artifacts.generate_artifacts(model, loss=losses.MSELoss(), optimizer=artifacts.SGD())
    named = artifacts.generate_artifacts(model, loss=losses.MSELoss(), optimizer=artifacts.SGD(), loss_input_names=["a"])
    assert _first_loss(by_default, x, target) == pytest.approx(_first_loss(named, x, target))
    second = artifacts.generate_artifacts(model, loss=losses.MSELoss(), optimizer=artifacts.SGD(), loss_input_names=["b"])
    assert _first_loss(second, x, target) != pytest.approx(_first_loss(named, x, target))


def test_a_block_taking_every_output_gets_every_output():
    class Both(blocks.Block):
        def __init__(self):
            self.add, self.mse_a, self.mse_b = blocks.Add(), losses.MSELoss(), losses.MSELoss()

        def build(self, *outputs):
            assert len(outputs) == 2
            return self.add(self.mse_a(outputs[0], "ta"), self.mse_b(outputs[1], "tb"))

    arts = artifacts.generate_artifacts(_two_heads(), loss=Both(), optimizer=artifacts.SGD())
    x, t = np.ones((2, 3), np.float32), np.zeros((2, 2), np.float32)
    assert _first_loss(arts, x, t, t) > 0


def test_a_causal_lm_block_on_a_with_past_hub_export_reads_the_logits():
    fixture = hub("gpt2")
    block = artifacts.generate_artifacts(fixture.model, loss=losses.CausalLMLoss(), optimizer=artifacts.SGD())
    named = artifacts.generate_artifacts(fixture.model, loss=losses.CausalLMLoss(), optimizer=artifacts.SGD(),
                                         loss_input_names=["logits"])
    assert block.training_model == named.training_model and block.eval_model == named.eval_model
