"""Artifacts ONNX Runtime 1.19.2's own ``generate_artifacts`` made train in ``pytrain.ort`` as they
are, with ORT's numbers: its training model (com.microsoft gradient ops, gradient accumulation
buffers, ``lazy_reset_grad``), its optimizer model (one AdamWOptimizer or SGDOptimizerV2 node over
sequences) and its eval model.

Fixtures: tests/compat/fixtures/ort_made_models/<case>/ (ORT's four files and ``steps.npz``: ORT's
loss and parameters after each of 10 steps), from make_fixtures.py there, run in the
onnxruntime-training-cpu 1.19.2 venv (the torch models it trains, an embedding + LayerNorm and a
TransformerEncoderLayer classifier, exported first by export_models.py there); tests/compat/fixtures/ort_training/ for ORT's AdamW
attributes and ORT's checkpoint after 3 steps.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from ort_made_fixtures import batch_inputs

from pytrain.errors import ModelFormatError, UnsupportedOpError
from pytrain.ort import artifacts
from pytrain.ort.api import CheckpointState, Module, Optimizer
from pytrain.proto import ModelProto, make_attribute, make_node

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
MODELS = os.path.join(FIXTURES, "ort_made_models")
MLP = os.path.join(FIXTURES, "ort_training")
LR = 0.01
MLP_TRAINABLE = ("fc1.weight", "fc1.bias", "fc2.weight")
#: ops of each case's ORT training model (com.microsoft unless noted), as make_fixtures.py printed them
CASE_OPS = {
    "mlp_adamw": ["InPlaceAccumulatorV2", "ReluGrad", "SoftmaxCrossEntropyLossGrad"],
    "mlp_sgd": ["InPlaceAccumulatorV2", "ReluGrad", "SoftmaxCrossEntropyLossGrad"],
    "cnn_adamw": ["BatchNormInternal", "BatchNormalizationGrad", "ConvGrad", "InPlaceAccumulatorV2",
                  "ReluGrad", "SoftmaxCrossEntropyLossGrad", "ai.onnx:MaxPoolGrad"],
    # torch-exported at opset 14; ORT fuses the exporter's LayerNorm into its LayerNormalization
    "embed_ln_adamw": ["GatherGrad", "InPlaceAccumulatorV2", "LayerNormalizationGrad", "Scale",
                       "SoftmaxCrossEntropyLossGrad"],
    "transformer_adamw": ["ConcatTraining", "FusedMatMul", "GatherGrad", "InPlaceAccumulatorV2",
                          "LayerNormalizationGrad", "ReluGrad", "Scale", "SoftmaxCrossEntropyLossGrad",
                          "SoftmaxGrad_13"],
    # torch models (export_models.py's ZOO: TorchScript, opset 17, 14 where ORT fails at 17), AdamW
    "mobilenet_v2_transfer_bn": ["BatchNormInternal", "InPlaceAccumulatorV2", "SoftmaxCrossEntropyLossGrad"],
    "mobilenet_v2_transfer_folded": ["InPlaceAccumulatorV2", "SoftmaxCrossEntropyLossGrad"],
    "mobilenet_v2": ["BatchNormInternal", "BatchNormalizationGrad", "ConvGrad", "InPlaceAccumulatorV2", "Scale",
                     "SoftmaxCrossEntropyLossGrad"],
    "resnet": ["BatchNormInternal", "BatchNormalizationGrad", "ConvGrad", "InPlaceAccumulatorV2", "ReluGrad", "Scale",
               "SoftmaxCrossEntropyLossGrad", "ai.onnx:MaxPoolGrad"],
    "multihead_attention": ["FusedMatMul", "InPlaceAccumulatorV2", "Scale", "SoftmaxCrossEntropyLossGrad",
                            "SoftmaxGrad_13"],
    "gru": ["ConcatTraining", "GRUGrad", "GRUTraining", "InPlaceAccumulatorV2", "Scale",
            "SoftmaxCrossEntropyLossGrad", "SplitTraining"],
    "lstm": ["ConcatTraining", "InPlaceAccumulatorV2", "LSTMGrad", "LSTMTraining", "Scale",
             "SoftmaxCrossEntropyLossGrad", "SplitTraining"],
    "bert": ["FusedMatMul", "GatherGrad", "Gelu", "GeluGrad", "InPlaceAccumulatorV2", "LayerNormalizationGrad",
             "SoftmaxCrossEntropyLossGrad", "SoftmaxGrad_13", "TanhGrad"],
}
#: cases whose training model holds ORT's fused LayerNormalization at opset 14
FUSED_LAYERNORM = ("embed_ln_adamw", "transformer_adamw", "bert")
#: (case, parameter): the part whose gradient is 0 in exact arithmetic, so it moves by float32 rounding
#: noise only, which AdamW divides by its own size (ORT's and numpy's differ): attention's key bias
#: (in_proj_bias[d:2d], d = 8), as softmax over the keys ignores a shift q.b_k common to all of them
ROUNDING_NOISE = {("transformer_adamw", "enc.self_attn.in_proj_bias"): slice(8, 16),
                  ("multihead_attention", "body.in_proj_bias"): slice(16, 32),
                  ("bert", "hf.bert.encoder.layer.0.attention.self.key.bias"): slice(0, 16)}


def _load(path):
    with open(path, "rb") as f:
        return ModelProto.FromString(f.read())


def _ops(path):
    return sorted({n.op_type if n.domain == "com.microsoft" else "%s:%s" % (n.domain or "ai.onnx", n.op_type)
                   for n in _load(path).graph.node if n.domain == "com.microsoft" or n.op_type.endswith("Grad")})


def _session(d, state, eval_model=True):
    module = Module(os.path.join(d, "training_model.onnx"), state,
                    os.path.join(d, "eval_model.onnx") if eval_model else None)
    optimizer = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR)
    return module.train(), optimizer


def record_steps(module, optimizer, state, xs, ys, names):
    """Train on each (x, y) (``xs``: one array of batches, or a list of them, one per input): the
    losses and every step's values of the ``names`` parameters."""
    inputs = xs if isinstance(xs, list) else [xs]
    losses, params = [], {p: [] for p in names}
    for step, y in enumerate(ys):
        losses.append(float(np.asarray(module(*[x[step] for x in inputs], y)).reshape(())))
        optimizer.step()
        module.lazy_reset_grad()
        for p in names:
            params[p].append(np.array(state.parameters[p].data))
    return np.array(losses), {p: np.stack(v) for p, v in params.items()}


@pytest.mark.parametrize("case", sorted(CASE_OPS))
def test_orts_artifacts_train_as_they_are_with_orts_losses_and_parameters(case):
    d = os.path.join(MODELS, case)
    assert _ops(os.path.join(d, "training_model.onnx")) == CASE_OPS[case]  # the ops this case runs
    if case in FUSED_LAYERNORM:  # ORT's own LayerNormalization, below the opset ONNX defines it from
        raw = _load(os.path.join(d, "training_model.onnx"))
        assert [o.version for o in raw.opset_import if o.domain in ("", "ai.onnx")] == [14]
        assert any(n.op_type == "LayerNormalization" and len(n.output) == 3 for n in raw.graph.node)
    ort = np.load(os.path.join(d, "steps.npz"))
    state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    # ORT 1.19 refuses its own eval model of a BatchNorm in training mode, so ORT has no eval loss there
    module, optimizer = _session(d, state, eval_model="eval_loss" in ort.files)
    if "lr" in ort.files:
        optimizer.set_learning_rate(float(ort["lr"]))
    # every step's parameters ("param/"), or the last step's only for a large one ("last/")
    names = [k.split("/", 1)[1] for k in ort.files if k.startswith(("param/", "last/"))]
    assert module.training and sorted(module._module.trainable_names) == sorted(names)
    xs = batch_inputs(ort)
    losses, params = record_steps(module, optimizer, state, xs, ort["y"], names)
    np.testing.assert_allclose(losses, ort["loss"], rtol=1e-4)
    for p in names:
        mine, theirs = params[p], ort["param/" + p] if "param/" + p in ort.files else ort["last/" + p][None]
        mine = mine[-len(theirs):]
        noise = ROUNDING_NOISE.get((case, p))
        if noise is not None:  # both stay in the noise band; the rest of the tensor is compared as usual
            assert np.abs(mine[:, noise]).max() < 1e-3 * LR and np.abs(theirs[:, noise]).max() < 1e-3 * LR, p
            keep = np.ones(mine.shape[1:], bool)
            keep[noise] = False
            mine, theirs = mine[:, keep], theirs[:, keep]
            if not keep.any():  # the whole tensor (BERT's key bias)
                continue
        # elements near 0 of a tensor compared at 1e-4 of its scale: a float32 sum of a thousand terms
        # rounds differently in ORT's kernels and numpy's, which AdamW's m / sqrt(v) carries to small weights
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=max(1e-6, 1e-4 * np.abs(theirs).max()), err_msg=p)
    for k in ort.files:  # frozen ones as ORT leaves them: BatchNormInternal updates its running statistics
        if k.startswith("frozen/"):  # in place (biased batch variance), though the graph outputs neither
            np.testing.assert_allclose(state.parameters[k[len("frozen/"):]].data, ort[k], rtol=1e-4, atol=1e-6,
                                       err_msg=k)
    if "eval_loss" in ort.files:
        module.eval()
        np.testing.assert_allclose(float(np.asarray(module(*[x[-1] for x in xs], ort["y"][-1])).reshape(())),
                                   float(ort["eval_loss"]), rtol=1e-4)


def _set_attributes(src, dst, attrs):
    model = _load(src)
    (node,) = model.graph.node
    node.attribute[:] = [a for a in node.attribute if a.name not in attrs] + \
        [make_attribute(k, v) for k, v in attrs.items()]
    with open(dst, "wb") as f:
        f.write(model.SerializeToString())


@pytest.mark.parametrize("case, attrs", [
    ("hf_decay", {"adam_mode": 1, "correct_bias": 1, "weight_decay": 0.05}),
    ("torch_decay", {"adam_mode": 0, "correct_bias": 1, "weight_decay": 0.05}),
    ("hf_no_correction", {"adam_mode": 1, "correct_bias": 0, "weight_decay": 0.0}),
])
def test_orts_adamw_node_attributes_are_read(case, attrs, tmp_path):
    """ORT's optimizer model with its AdamWOptimizer node's attributes changed (as the fixture did in
    ORT) gives ORT's steps for each: adam_mode, correct_bias and weight_decay are all read."""
    ort = np.load(os.path.join(MLP, "steps.npz"))
    made = os.path.join(MLP, "ort_made")
    _set_attributes(os.path.join(made, "optimizer_model.onnx"), str(tmp_path / "optimizer_model.onnx"), attrs)
    for name in ("training_model.onnx", "eval_model.onnx"):
        with open(os.path.join(made, name), "rb") as f, open(str(tmp_path / name), "wb") as g:
            g.write(f.read())
    # ORT's fresh checkpoint holds the inference model's weights, as pytrain.ort's does
    artifacts.generate_artifacts(os.path.join(MLP, "model.onnx"), requires_grad=list(MLP_TRAINABLE),
                                 frozen_params=["fc2.bias"], loss=artifacts.LossType.CrossEntropyLoss,
                                 artifact_directory=str(tmp_path / "pytrain"))
    state = CheckpointState.load_checkpoint(str(tmp_path / "pytrain" / "checkpoint"))
    module, optimizer = _session(str(tmp_path), state)
    steps = len(ort[case + "/loss"])
    names = list(MLP_TRAINABLE)
    losses, params = record_steps(module, optimizer, state, ort["x"][:steps], ort["y"][:steps], names)
    np.testing.assert_allclose(losses, ort[case + "/loss"], rtol=1e-4)
    for p in names:
        np.testing.assert_allclose(params[p], ort[case + "/" + p], rtol=1e-4, atol=1e-6, err_msg=p)


def test_orts_checkpoint_continues_with_orts_own_artifacts():
    """ORT trained 3 steps and saved; its own training and optimizer models take ORT's next 3 steps."""
    ort = np.load(os.path.join(MLP, "steps.npz"))
    state = CheckpointState.load_checkpoint(os.path.join(MLP, "continued.ckpt"))
    module, optimizer = _session(os.path.join(MLP, "ort_made"), state)
    names = list(MLP_TRAINABLE)
    losses, params = record_steps(module, optimizer, state, ort["x"][3:6], ort["y"][3:6], names)
    np.testing.assert_allclose(losses, ort["continued/loss"], rtol=1e-4)
    for p in names:
        np.testing.assert_allclose(params[p], ort["continued/" + p], rtol=1e-4, atol=1e-6, err_msg=p)
    assert state.core.optimizer_state.step == 6


def _changed(tmp_path, src, change):
    model = _load(src)
    change(model)
    path = str(tmp_path / os.path.basename(src))
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def test_an_ort_op_pytrain_does_not_run_is_refused_by_name(tmp_path):
    made = os.path.join(MLP, "ort_made")

    def to_fused(model):
        (n,) = [n for n in model.graph.node if n.op_type == "ReluGrad"]
        n.op_type = "BiasGeluGrad_dX"

    path = _changed(tmp_path, os.path.join(made, "training_model.onnx"), to_fused)
    with pytest.raises(ModelFormatError) as e:
        Module(path, CheckpointState.load_checkpoint(os.path.join(MLP, "continued.ckpt")))
    msg = str(e.value)
    assert "training model was made by ONNX Runtime's generate_artifacts" in msg
    assert "com.microsoft:BiasGeluGrad_dX (node 'Relu_Grad/ReluGrad_0')" in msg
    assert "pytrain.ort.artifacts.generate_artifacts" in msg


def test_an_optimizer_attribute_pytrain_does_not_know_is_refused(tmp_path):
    made = os.path.join(MLP, "ort_made")
    path = _changed(tmp_path, os.path.join(made, "optimizer_model.onnx"),
                    lambda m: m.graph.node[0].attribute.append(make_attribute("max_norm", 1.0)))
    state = CheckpointState.load_checkpoint(os.path.join(MLP, "continued.ckpt"))
    module = Module(os.path.join(made, "training_model.onnx"), state)
    with pytest.raises(ModelFormatError, match="AdamWOptimizer node has attribute max_norm"):
        Optimizer(path, module)


def test_an_accumulator_off_orts_convention_is_refused(tmp_path):
    made = os.path.join(MLP, "ort_made")

    def reads_no_reset(model):
        n = next(n for n in model.graph.node if n.op_type == "InPlaceAccumulatorV2")
        del n.input[2:]

    path = _changed(tmp_path, os.path.join(made, "training_model.onnx"), reads_no_reset)
    with pytest.raises(ModelFormatError, match="InPlaceAccumulatorV2 node .* is not"):
        Module(path, CheckpointState.load_checkpoint(os.path.join(MLP, "continued.ckpt")))


@pytest.mark.parametrize("node, attrs, message", [
    ("FusedMatMul", {"transBatchA": 1}, "FusedMatMul with transBatchA=transBatchB=0 only"),
    ("LayerNormalizationGrad", {"stash_type": 2}, "float statistics \\(stash_type=1\\) only"),
])
def test_an_ort_op_attribute_pytrain_does_not_implement_is_refused_by_name(node, attrs, message, tmp_path):
    d = os.path.join(MODELS, "transformer_adamw")

    def change(model):
        n = next(n for n in model.graph.node if n.op_type == node)
        n.attribute[:] = [a for a in n.attribute if a.name not in attrs] + \
            [make_attribute(k, v) for k, v in attrs.items()]

    path = _changed(tmp_path, os.path.join(d, "training_model.onnx"), change)
    ort = np.load(os.path.join(d, "steps.npz"))
    module = Module(path, CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))).train()
    with pytest.raises(UnsupportedOpError, match=message) as e:
        module(ort["x"][0], ort["y"][0])
    assert "node '" in str(e.value)


def test_recurrent_gates_read_by_another_node_are_refused_by_name(tmp_path):
    """pytrain reads GRUTraining as ONNX's GRU and GRUGrad as its own BPTT kernel, which recomputes the
    gates ORT saved (ZRH): a model where another node reads those gates is refused, naming both nodes."""
    d = os.path.join(MODELS, "gru")

    def reads_gates(model):
        gru = next(n for n in model.graph.node if n.op_type == "GRUTraining")
        model.graph.node.append(make_node("Identity", [gru.output[2]], ["gates_copy"], name="spy"))

    path = _changed(tmp_path, os.path.join(d, "training_model.onnx"), reads_gates)
    with pytest.raises(ModelFormatError, match="node 'spy' \\(Identity\\) reads the gates GRUTraining node "
                                               "'/body/GRU_training' saved") as e:
        Module(path, CheckpointState.load_checkpoint(os.path.join(d, "checkpoint")))
    assert "pytrain.ort.artifacts.generate_artifacts" in str(e.value)
