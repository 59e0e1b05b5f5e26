"""BatchNorm in transfer learning: a BatchNormalization whose scale and bias do
not train runs on its running statistics in the training model (a frozen backbone in eval()), one
whose scale/bias train uses batch statistics and updates its running statistics; the
``batchnorm=`` option overrides per model or per node. Checked against PyTorch step for step."""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from grad_harness import fd_grads, rand, reseed, train_grads, with_loss, Case, node
from pytrain.generator import artifacts
from pytrain.device.api import CheckpointState, Module, Optimizer
from pytrain.errors import ArtifactError

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
nn = torch.nn

STEPS, LR, MOMENTUM = 10, 0.05, 0.9


@pytest.fixture(autouse=True)
def _reseed(request):
    reseed(request.node.name)


class Net(nn.Module):
    """conv-BN-ReLU x2, global average pool, linear classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, padding=1, stride=2), nn.BatchNorm2d(8), nn.ReLU())
        self.classifier = nn.Linear(8, 4)

    def forward(self, x):
        return self.classifier(self.backbone(x).mean(dim=(2, 3)))


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # running statistics unlike the (0, 1) defaults, so using them matters
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    return net


def _export(net: nn.Module, mode: str) -> bytes:
    """TorchScript export keeping BatchNorm as nodes: eval mode (training_mode=0, PyTorch's
    default for inference) or training mode (training_mode=1 with running-stat outputs)."""
    net.train(mode == "train")
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(2, 3, 8, 8),), f, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "N"}, "output": {0: "N"}}, opset_version=17, dynamo=False,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING if mode == "train" else torch.onnx.TrainingMode.EVAL)
    # a TRAINING export runs the model, which moves the running statistics: both sides start from the file
    state = net.state_dict()
    for t in onnx.load_from_string(f.getvalue()).graph.initializer:
        if t.name in state:
            state[t.name].copy_(torch.from_numpy(numpy_helper.to_array(t).copy()))
    return f.getvalue()


def _batches():
    rng = np.random.default_rng(7)
    return [(rng.standard_normal((6, 3, 8, 8)).astype(np.float32) * 2 + 0.5,
             rng.integers(0, 4, 6).astype(np.int64)) for _ in range(STEPS)]


def _pytrain(model_bytes: bytes, **kw):
    arts = artifacts.generate_artifacts(model_bytes, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.SGD(momentum=MOMENTUM), **kw)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(LR)
    losses = []
    for x, y in _batches():
        losses.append(float(module(x, y)))
        opt.step()
        module.lazy_reset_grad()
    return arts, state, module, losses


def _torch(net: nn.Module, params, eval_modules):
    net.train()
    for m in eval_modules:
        m.eval()
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    losses = []
    for x, y in _batches():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _stats(state) -> dict:
    return {k: p.data.copy() for k, p in state.parameters.items() if "running" in k}


def _check_export(module, net: nn.Module, shape=(5, 3, 8, 8)) -> None:
    """The exported model in onnxruntime answers as the PyTorch model in eval()."""
    onnx_bytes = module.export_model_for_inferencing(None, ["output"])
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    got = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    net.eval()
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("export_mode", ["eval"])  # exported in train(): the next test
@pytest.mark.parametrize("freeze", ["requires_grad", "trainable_ops"])
def test_frozen_backbone_matches_torch_eval_backbone(export_mode, freeze):
    net = _net()
    model = _export(net, export_mode)
    kw = {"requires_grad": ["classifier.weight", "classifier.bias"]} if freeze == "requires_grad" else {"trainable_ops": 1}
    arts, state, module, losses = _pytrain(model, **kw)
    assert arts.summary["trainable"] == ["classifier.weight", "classifier.bias"]
    assert set(arts.summary["batchnorm"].values()) == {"eval"}
    before = {k: v.detach().numpy().copy() for k, v in net.state_dict().items() if "running" in k}
    for p in net.backbone.parameters():
        p.requires_grad_(False)
    want = _torch(net, net.classifier.parameters(), [net.backbone])
    np.testing.assert_allclose(losses, want, rtol=1e-3)
    stats = _stats(state)
    assert stats and all(np.array_equal(stats[k], before[k]) for k in stats)  # not updated at all
    for k, v in net.state_dict().items():  # the backbone did not move, the classifier did as torch's
        if k in state.parameters:
            np.testing.assert_allclose(state.parameters[k].data, v.numpy(), rtol=1e-3, atol=1e-5, err_msg=k)
    _check_export(module, net)


@pytest.mark.parametrize("freeze", ["requires_grad", "trainable_ops"])
def test_frozen_backbone_exported_in_train_mode_uses_batch_statistics(freeze):
    """BatchNorm follows the file: nodes exported with training_mode=1 (the module was in train(), ORT's
    MNIST-tutorial style) use the batch's statistics and update the running ones even with their
    scale and bias frozen, as PyTorch's model.train() and ONNX Runtime do."""
    net = _net()
    model = _export(net, "train")
    kw = {"requires_grad": ["classifier.weight", "classifier.bias"]} if freeze == "requires_grad" else {"trainable_ops": 1}
    arts, state, _, losses = _pytrain(model, **kw)
    assert arts.summary["trainable"] == ["classifier.weight", "classifier.bias"]
    assert set(arts.summary["batchnorm"].values()) == {"train"}
    for p in net.backbone.parameters():
        p.requires_grad_(False)
    want = _torch(net, net.classifier.parameters(), [])
    assert losses[0] == pytest.approx(want[0], rel=1e-5)
    np.testing.assert_allclose(losses, want, rtol=1e-3)
    for k, v in net.state_dict().items():
        if k in state.parameters:  # running statistics moved as torch's, the backbone's weights did not
            np.testing.assert_allclose(state.parameters[k].data, v.numpy(), rtol=1e-3, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("export_mode", ["eval", "train"])
def test_fully_trainable_matches_torch_train(export_mode):
    net = _net()
    arts, state, module, losses = _pytrain(_export(net, export_mode))
    assert set(arts.summary["batchnorm"].values()) == {"train"}
    want = _torch(net, net.parameters(), [])
    np.testing.assert_allclose(losses, want, rtol=1e-3)
    for k, v in net.state_dict().items():  # running statistics moved as torch's did
        if "running" in k:
            np.testing.assert_allclose(state.parameters[k].data, v.numpy(), rtol=1e-3, atol=1e-5, err_msg=k)
    _check_export(module, net)


def test_override_train_for_a_frozen_backbone():
    """batchnorm='train': batch statistics and running-stat updates even though nothing of BN trains
    (PyTorch: backbone frozen by requires_grad but left in train mode)."""
    net = _net()
    arts, state, _, losses = _pytrain(_export(net, "eval"), requires_grad=["classifier.weight", "classifier.bias"],
                                      batchnorm="train")
    assert set(arts.summary["batchnorm"].values()) == {"train"}
    for p in net.backbone.parameters():
        p.requires_grad_(False)
    want = _torch(net, net.classifier.parameters(), [])
    np.testing.assert_allclose(losses, want, rtol=1e-3)
    for k, v in net.state_dict().items():
        if "running" in k:
            np.testing.assert_allclose(state.parameters[k].data, v.numpy(), rtol=1e-3, atol=1e-5, err_msg=k)


def test_override_eval_while_training_everything():
    """batchnorm='eval': every parameter trains (BN scale/bias too, through the inference-mode
    gradient) while BN uses its running statistics (PyTorch: model.train() with BNs in eval())."""
    net = _net()
    arts, state, _, losses = _pytrain(_export(net, "train"), batchnorm="eval")
    assert "backbone.1.weight" in arts.summary["trainable"]
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    want = _torch(net, net.parameters(), bns)
    np.testing.assert_allclose(losses, want, rtol=1e-3)
    for k, v in net.state_dict().items():
        if k in state.parameters:  # weights moved as torch's, running statistics did not move
            np.testing.assert_allclose(state.parameters[k].data, v.numpy(), rtol=2e-3, atol=1e-5, err_msg=k)


def test_override_per_node():
    """A dict sets the mode per node (by node name or scale initializer); the others follow 'auto'."""
    net = _net()
    model = _export(net, "eval")
    arts = artifacts.generate_artifacts(model, requires_grad=["classifier.weight", "classifier.bias"],
                                        batchnorm={"backbone.4.weight": "train"})
    modes = arts.summary["batchnorm"]
    assert sorted(modes.values()) == ["eval", "train"]
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    before = _stats(state)
    x, y = _batches()[0]
    module(x, y)
    after = _stats(state)
    assert np.array_equal(after["backbone.1.running_mean"], before["backbone.1.running_mean"])
    assert not np.array_equal(after["backbone.4.running_mean"], before["backbone.4.running_mean"])
    with pytest.raises(ArtifactError, match="no BatchNormalization node"):
        artifacts.generate_artifacts(model, batchnorm={"nope": "eval"})
    with pytest.raises(ArtifactError, match="not one of"):
        artifacts.generate_artifacts(model, batchnorm="frozen")


# ---- the gradient of BatchNormalization in inference mode, against finite differences ----------
def _bn_case(shape, params, eps=1e-5):
    c = shape[1]
    return Case("BatchNormalization inference %s %s" % (list(shape), params),
                [node("BatchNormalization", ["X", "S", "B", "M", "V"], epsilon=eps)],
                {"X": rand(*shape), "S": rand(c), "B": rand(c), "M": rand(c), "V": rand(c, lo=0.5, hi=2)}, ["Y"],
                params=params)


@pytest.mark.parametrize("shape", [(3, 2, 2, 2), (4, 3), (2, 3, 5)])
def test_inference_mode_gradient_matches_finite_differences(shape):
    case = _bn_case(shape, ["X", "S", "B"], eps=1e-3)
    model = with_loss(case)
    got = train_grads(model, case.params, batchnorm="eval")
    want = fd_grads(case, model)
    for p in case.params:
        np.testing.assert_allclose(got[p], want[p], rtol=1e-6, atol=1e-8, err_msg=p)


def test_cli_batchnorm_option(tmp_path, capsys):
    from pytrain.cli import main

    net = _net()
    path = tmp_path / "net.onnx"
    path.write_bytes(_export(net, "eval"))
    out_dir = tmp_path / "arts"
    code = main(["generate", str(path), "-o", str(out_dir), "--requires-grad", "classifier.weight", "classifier.bias"])
    out = capsys.readouterr().out
    assert code == 0 and "BatchNormalization while training: eval (running statistics, unchanged) x2" in out
    code = main(["generate", str(path), "-o", str(out_dir), "--force", "--requires-grad", "classifier.weight",
                 "classifier.bias", "--batchnorm", "backbone.1.weight=train"])
    out = capsys.readouterr().out
    assert code == 0 and "eval (running statistics, unchanged) x1" in out and "train (batch statistics" in out
    state = CheckpointState.load_checkpoint(str(out_dir / "checkpoint"))
    module = Module(str(out_dir / "training_model.onnx"), state, str(out_dir / "eval_model.onnx"))
    before = _stats(state)
    module(*_batches()[0])
    after = _stats(state)
    assert not np.array_equal(after["backbone.1.running_var"], before["backbone.1.running_var"])
    assert np.array_equal(after["backbone.4.running_var"], before["backbone.4.running_var"])
    code = main(["generate", str(path), "-o", str(out_dir), "--force", "--batchnorm", "sideways"])
    assert code != 0 and "not one of" in capsys.readouterr().err


@pytest.mark.parametrize("freeze", ["requires_grad", "trainable_ops"])
def test_mobilenet_v2_frozen_backbone(freeze):
    """torchvision's MobileNetV2 (width 0.35, 32x32 inputs), exported in eval mode with BatchNorm kept
    (every node training_mode=0), backbone frozen: pytrain's 10 SGD-momentum steps match PyTorch's
    with backbone.eval() (the issue's case: batch statistics gave 5.67 vs 2.68 after 10 steps)."""
    import torch_zoo

    torch.manual_seed(0)
    net = torch_zoo.mobilenet_v2()
    with torch.no_grad():  # trained-looking running statistics, so that using them matters
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 2.0)
    net.eval()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(2, 3, 32, 32),), f, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "N"}, "output": {0: "N"}}, opset_version=17, dynamo=False,
                          do_constant_folding=False, training=torch.onnx.TrainingMode.EVAL)
    model = f.getvalue()
    assert sum(n.op_type == "BatchNormalization" for n in onnx.load_from_string(model).graph.node) > 10
    kw = ({"requires_grad": ["classifier." + k for k, _ in net.classifier.named_parameters()]}
          if freeze == "requires_grad" else {"trainable_ops": 1})
    arts = artifacts.generate_artifacts(model, optimizer=artifacts.SGD(momentum=MOMENTUM), **kw)
    assert arts.summary["trainable"] == ["classifier.1.weight", "classifier.1.bias"]
    assert set(arts.summary["batchnorm"].values()) == {"eval"}
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    before = _stats(state)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(LR)
    rng = np.random.default_rng(11)
    batches = [(rng.standard_normal((4, 3, 32, 32)).astype(np.float32), rng.integers(0, 4, 4).astype(np.int64))
               for _ in range(STEPS)]
    losses = []
    for x, y in batches:
        losses.append(float(module(x, y)))
        opt.step()
        module.lazy_reset_grad()

    for p in net.features.parameters():
        p.requires_grad_(False)
    net.train()
    net.features.eval()
    topt = torch.optim.SGD(net.classifier.parameters(), lr=LR, momentum=MOMENTUM)
    want = []
    for x, y in batches:
        topt.zero_grad()
        loss = nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        topt.step()
        want.append(loss.item())
    np.testing.assert_allclose(losses, want, rtol=1e-3)
    after = _stats(state)
    assert before and all(np.array_equal(after[k], before[k]) for k in before)
    _check_export(module, net, (3, 3, 32, 32))


