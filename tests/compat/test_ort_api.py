"""pytrain.ort: ONNX Runtime's training API with ORT's semantics, checked against onnxruntime
(inference) and PyTorch."""
from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import pytrain.ort.onnxblock as onnxblock  # noqa: E402
from pytrain.generator import artifacts as core_artifacts  # noqa: E402
from pytrain.errors import ArtifactError, CheckpointError, InputError  # noqa: E402
from pytrain.ort import _values, artifacts  # noqa: E402
from pytrain.ort.api import CheckpointState, LinearLRScheduler, Module, Optimizer, Parameter  # noqa: E402

PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


class Net(torch.nn.Module):
    def __init__(self, n_in=6, hidden=5, n_out=3):
        super().__init__()
        self.fc1 = torch.nn.Linear(n_in, hidden)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def export(model, *inputs, batchnorm_dims=None):
    """As ORT's tests export: TorchScript exporter, training mode, every dimension symbolic."""
    f = io.BytesIO()
    names = ["input-%d" % i for i in range(len(inputs))]
    dyn = {n: {d: "%s_dim%d" % (n, d) for d in range(x.dim())} for n, x in zip(names, inputs)}
    out = model(*inputs)
    dyn["output-0"] = {d: "output-0_dim%d" % d for d in range(out.dim())}
    torch.onnx.export(model, inputs, f, input_names=names, output_names=["output-0"], opset_version=14,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING, dynamic_axes=dyn,
                      dynamo=False)
    return onnx.load_model_from_string(f.getvalue())


@pytest.fixture
def net():
    torch.manual_seed(0)
    return Net()


@pytest.fixture
def arts(tmp_path, net):
    artifacts.generate_artifacts(export(net, torch.randn(4, 6)), requires_grad=PARAMS,
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=str(tmp_path), nominal_checkpoint=True)
    return tmp_path


def batch(n=8, seed=1):
    rng = np.random.RandomState(seed)
    return rng.randn(n, 6).astype(np.float32), rng.randint(0, 3, size=n).astype(np.int64)


# ---- ORT's defaults ------------------------------------------------------------------------------
def test_optimizer_defaults_are_orts(arts):
    meta = {p.key: p.value for p in onnx.load(str(arts / "optimizer_model.onnx")).metadata_props}
    assert "epsilon=1e-06" in meta["pytrain.optimizer"] and "weight_decay=0.0)" in meta["pytrain.optimizer"]
    spec = onnxblock.optim.AdamW().to_pytrain()
    assert (spec.betas, spec.eps, spec.weight_decay) == ((0.9, 0.999), 1e-6, 0.0)
    assert onnxblock.optim.SGD().to_pytrain().momentum == 0.0
    # pytrain's own API keeps PyTorch's defaults
    core = core_artifacts.AdamW()
    assert (core.eps, core.weight_decay) == (1e-8, 0.01)


@pytest.mark.parametrize("kind", [artifacts.OptimType.SGD, artifacts.OptimType.AdamW])
def test_learning_rate_starts_at_orts_default(tmp_path, net, kind):
    artifacts.generate_artifacts(export(net, torch.randn(4, 6)), requires_grad=PARAMS,
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=kind,
                                 artifact_directory=str(tmp_path))
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    opt = Optimizer(str(tmp_path / "optimizer_model.onnx"), Module(str(tmp_path / "training_model.onnx"), state))
    assert opt.get_learning_rate() == pytest.approx(1e-3)
    sched = LinearLRScheduler(opt, 2, 4, 0.4)
    assert opt.get_learning_rate() == 0.0
    sched.step()
    assert opt.get_learning_rate() == pytest.approx(0.2)


def test_adamw_step_is_orts_rule(arts, net):
    """ORT's default AdamW (adam_mode 1, Hugging Face's rule) with no weight decay is torch's AdamW
    with eps / sqrt(1 - beta2^t) at step t (sqrt(v / bc2) + eps' = (sqrt(v) + eps) / sqrt(bc2))."""
    state = CheckpointState.load_checkpoint(str(arts / "checkpoint"))
    module = Module(str(arts / "training_model.onnx"), state)
    opt = Optimizer(str(arts / "optimizer_model.onnx"), module)
    topt = torch.optim.AdamW(net.parameters(), lr=1e-3, eps=1e-6, weight_decay=0.0)
    for step, seed in enumerate((1, 2, 3), start=1):
        x, y = batch(seed=seed)
        loss = module(x, y)
        opt.step()
        module.lazy_reset_grad()
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
        tloss.backward()
        topt.param_groups[0]["eps"] = 1e-6 / np.sqrt(1 - 0.999 ** step)
        topt.step()
        assert loss == pytest.approx(tloss.item(), rel=1e-5)
    for name, p in net.named_parameters():
        np.testing.assert_allclose(state.parameters[name].data, p.detach().numpy(), rtol=1e-5, atol=1e-6)


# ---- OrtValue in, OrtValue out ---------------------------------------------------------------------
def test_ort_values_in_and_out(arts, monkeypatch):
    state = CheckpointState.load_checkpoint(str(arts / "checkpoint"))
    module = Module(str(arts / "training_model.onnx"), state, str(arts / "eval_model.onnx"))
    x, y = batch()
    as_numpy = module(x, y)
    assert isinstance(as_numpy, np.ndarray)
    as_ort = module(ort.OrtValue.ortvalue_from_numpy(x), ort.OrtValue.ortvalue_from_numpy(y))
    assert isinstance(as_ort, ort.OrtValue)
    np.testing.assert_allclose(as_ort.numpy(), as_numpy)
    flat = module.get_contiguous_parameters()
    assert isinstance(flat, ort.OrtValue) and flat.numpy().shape == (module.get_parameters_size(False),)
    module.copy_buffer_to_parameters(ort.OrtValue.ortvalue_from_numpy(np.zeros_like(flat.numpy())), False)
    assert not state.parameters["fc1.weight"].data.any()
    # without onnxruntime (Pyodide) the buffer is a numpy array
    monkeypatch.setattr(_values, "ort_value_class", lambda: None)
    assert isinstance(module.get_contiguous_parameters(), np.ndarray)


# ---- state.parameters ---------------------------------------------------------------------------------
def test_parameters_view(tmp_path, net):
    artifacts.generate_artifacts(export(net, torch.randn(4, 6)), requires_grad=["fc2.weight", "fc2.bias"],
                                 frozen_params=["fc1.weight", "fc1.bias"], loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.SGD, artifact_directory=str(tmp_path))
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    module = Module(str(tmp_path / "training_model.onnx"), state)
    pairs = list(state.parameters)
    assert sorted(n for n, _ in pairs) == sorted(PARAMS)
    assert all(isinstance(p, Parameter) and p.name == n for n, p in pairs)
    assert state.parameters["fc1.weight"].grad is None and state.parameters["fc1.weight"].requires_grad is False
    g = state.parameters["fc2.weight"].grad
    assert g.shape == (3, 5) and not g.any()  # zeros before the first step, as ORT
    state.parameters["fc1.weight"] = np.full((5, 6), 0.5, np.float32)
    assert isinstance(state.parameters["fc1.weight"], Parameter)
    assert (state.parameters["fc1.weight"].data == 0.5).all()
    state.parameters["fc1.bias"].data = np.ones(5, np.float32)
    x, y = batch()
    module.train()
    module(x, y)
    assert state.parameters["fc2.weight"].grad.any()
    h = np.maximum(x @ np.full((6, 5), 0.5, np.float32) + 1, 0)  # the assigned values are the ones used
    logits = h @ state.parameters["fc2.weight"].data.T + state.parameters["fc2.bias"].data
    np.testing.assert_allclose(module.train()(x, y), torch.nn.functional.cross_entropy(
        torch.from_numpy(logits), torch.from_numpy(y)).item(), rtol=1e-5)
    with pytest.raises(InputError):
        state.parameters["fc1.weight"] = np.ones((2, 2), np.float32)


# ---- nominal checkpoints ----------------------------------------------------------------------------
def test_nominal_checkpoint_as_ort_writes_it(arts):
    assert os.path.getsize(arts / "nominal_checkpoint") < os.path.getsize(arts / "checkpoint") / 2
    full = CheckpointState.load_checkpoint(str(arts / "checkpoint"))
    nominal = CheckpointState.load_checkpoint(str(arts / "nominal_checkpoint"))
    assert "fc1.weight" in nominal.parameters
    with pytest.raises(CheckpointError, match="Please load the parameter states first"):
        nominal.parameters["fc1.weight"]
    m_full = Module(str(arts / "training_model.onnx"), full)
    m_nom = Module(str(arts / "training_model.onnx"), nominal)
    with pytest.raises(CheckpointError, match="Please load the model parameters first."):
        m_nom(*batch())
    m_nom.copy_buffer_to_parameters(m_full.get_contiguous_parameters(), trainable_only=False)
    np.testing.assert_array_equal(m_nom(*batch()), m_full(*batch()))
    assert nominal.parameters["fc2.bias"].data.shape == (3,)


# ---- what the generator accepts and writes -------------------------------------------------------
def test_model_without_trainable_parameters_and_eval_conventions(tmp_path):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(3)
            self.drop = torch.nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.bn(x))

    model = export(M(), torch.randn(2, 3, 4, 4))
    artifacts.generate_artifacts(model, requires_grad=[], loss=artifacts.LossType.MSELoss,
                                 artifact_directory=str(tmp_path))
    ev = onnx.load(str(tmp_path / "eval_model.onnx"))
    bn = [n for n in ev.graph.node if n.op_type == "BatchNormalization"]
    assert [a.i for a in bn[0].attribute if a.name == "training_mode"] == [0]
    drop = [n for n in ev.graph.node if n.op_type == "Dropout"]
    assert len(drop[0].input) == 3 and drop[0].input[2] == ""
    sess = ort.InferenceSession(str(tmp_path / "eval_model.onnx"), providers=["CPUExecutionProvider"])
    assert sess.get_outputs()[0].name == "loss"
    assert not os.path.exists(tmp_path / "optimizer_model.onnx")  # no optimizer asked for, as ORT


def test_refused_arguments(tmp_path, net):
    model = export(net, torch.randn(4, 6))
    with pytest.raises(ArtifactError, match="ORT flatbuffer model format"):
        artifacts.generate_artifacts(model, requires_grad=PARAMS, loss=artifacts.LossType.L1Loss,
                                     artifact_directory=str(tmp_path), ort_format=True)
    with pytest.raises(ArtifactError, match="custom-op"):
        artifacts.generate_artifacts(model, requires_grad=PARAMS, loss=artifacts.LossType.L1Loss,
                                     artifact_directory=str(tmp_path), custom_op_library="libx.so")
    artifacts.generate_artifacts(model, requires_grad=PARAMS, loss=artifacts.LossType.L1Loss,
                                 artifact_directory=str(tmp_path))
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    with pytest.raises(InputError, match="cuda"):
        Module(str(tmp_path / "training_model.onnx"), state, device="cuda")


def test_export_with_symbolic_feature_dimensions(arts, net):
    state = CheckpointState.load_checkpoint(str(arts / "checkpoint"))
    module = Module(str(arts / "training_model.onnx"), state, str(arts / "eval_model.onnx"))
    out = str(arts / "inference.onnx")
    module.export_model_for_inferencing(out, ["output-0"])
    sess = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
    x = np.random.RandomState(0).randn(3, 6).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"input-0": x})[0], net(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


# ---- onnxblock models run in onnxruntime ------------------------------------------------------------
class _Training(onnxblock.TrainingBlock):
    def __init__(self, loss):
        super().__init__()
        self.loss = loss

    def build(self, output_name):
        return self.loss(output_name)


@pytest.mark.parametrize("kind", ["mse", "ce", "bce", "l1"])
def test_training_block_gradients_in_onnxruntime(net, kind):
    losses = {"mse": (onnxblock.loss.MSELoss, torch.nn.functional.mse_loss),
              "ce": (onnxblock.loss.CrossEntropyLoss, torch.nn.functional.cross_entropy),
              "bce": (onnxblock.loss.BCEWithLogitsLoss, torch.nn.functional.binary_cross_entropy_with_logits),
              "l1": (onnxblock.loss.L1Loss, torch.nn.functional.l1_loss)}
    block_loss, torch_loss = losses[kind]
    base = export(net, torch.randn(4, 6))
    block = _Training(block_loss())
    for p in PARAMS[:3]:
        block.requires_grad(p)
    block.requires_grad("input-0")
    with onnxblock.base(base):
        block(base.graph.output[0].name)
    training, _ = block.to_model_proto()
    trainable, frozen = block.parameters()
    assert [t.name for t in trainable] == PARAMS[:3] and frozen == []
    x = torch.from_numpy(batch()[0]).requires_grad_(True)
    rng = np.random.RandomState(5)
    target = (torch.from_numpy(batch()[1]) if kind == "ce" else
              torch.from_numpy(rng.rand(8, 3).astype(np.float32)))
    net.zero_grad()
    loss = torch_loss(net(x), target)
    loss.backward()
    sess = ort.InferenceSession(training.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"input-0": x.detach().numpy(), training.graph.input[1].name: target.numpy(),
             "lazy_reset_grad": np.array([False])}
    buffers = {}
    for name, p in list(net.named_parameters())[:3] + [("input-0", x)]:
        if name != "input-0":
            feeds[name] = p.detach().numpy()
        buffers[name] = np.full(tuple(p.shape), 0.25, np.float32)
        feeds[name + "_grad.accumulation.buffer"] = buffers[name]
    names = [training.graph.output[0].name] + [n + "_grad.accumulation.out" for n in buffers]
    outs = sess.run(names, feeds)
    assert outs[0] == pytest.approx(loss.item(), rel=1e-5)
    torch_grads = [p.grad.numpy() for _, p in list(net.named_parameters())[:3]] + [x.grad.numpy()]
    for got, want, buf in zip(outs[1:], torch_grads, buffers.values()):
        np.testing.assert_allclose(got, want + buf, rtol=1e-4, atol=1e-6)  # accumulated: lazy_reset_grad off


@pytest.mark.parametrize("adam_mode", [0, 1])
def test_optimizer_blocks_in_onnxruntime(net, adam_mode):
    """The block's graph computes ORT's rule in standard ops: adam_mode 0 is torch's AdamW; 1 (ORT's
    default) is Hugging Face's (step lr * sqrt(bc2) / bc1, denominator sqrt(v) + eps, decay after)."""
    base = export(net, torch.randn(4, 6))
    block = _Training(onnxblock.loss.MSELoss())
    for p in PARAMS:
        block.requires_grad(p)
    with onnxblock.base(base):
        block(base.graph.output[0].name)
    adamw = onnxblock.optim.AdamW(weight_decay=0.1, clip_grad=onnxblock.optim.ClipGradNorm(0.05),
                                  adam_mode=adam_mode)
    with onnxblock.empty_base() as acc:
        flag = adamw(block.parameters())
        model = acc.model
    meta = json.loads({p.key: p.value for p in model.metadata_props}["pytrain.ort.optimizer"])
    assert meta["params"] == PARAMS and meta["eps"] == 1e-6 and meta["max_norm"] == 0.05
    x = torch.randn(8, 6)
    target = torch.randn(8, 3)
    torch.nn.functional.mse_loss(net(x), target).backward()
    params = [p.detach().numpy().copy() for p in net.parameters()]
    grads = [p.grad.numpy().copy() for p in net.parameters()]
    topt = torch.optim.AdamW(net.parameters(), lr=0.01, eps=1e-6, weight_decay=0.1)
    torch.nn.utils.clip_grad_norm_(net.parameters(), 0.05)
    clipped = [p.grad.numpy().astype(np.float64) for p in net.parameters()]
    topt.step()
    if adam_mode == 1:  # step 1 of Hugging Face's rule, in float64
        want = [(p - 0.01 * np.sqrt(1 - 0.999) / (1 - 0.9) * ((1 - 0.9) * g) / (np.sqrt((1 - 0.999) * g * g) + 1e-6))
                * (1 - 0.01 * 0.1) for p, g in zip(params, clipped)]
    else:
        want = [p.detach().numpy() for p in net.parameters()]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    zeros = [np.zeros_like(p) for p in params]
    got_flag, new_params = sess.run([flag, "params.out"], {
        "learning_rate": np.array([0.01], np.float32), "step": np.array([1], np.int64), "params": params,
        "gradients": grads, "first_order_moments": zeros, "second_order_moments": zeros})
    assert got_flag.all()
    for got, w in zip(new_params, want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
