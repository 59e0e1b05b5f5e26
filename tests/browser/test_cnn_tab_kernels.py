"""The OCR CNNs' layers on the wasm kernels where they really run (issue 32): Pyodide 0.17.1 with kernels.wasm
linked into its heap (bench/pages/kernels_check.html), pytrain from this checkout. A small network with
MobileNetV3's blocks (a strided stem Conv + BatchNorm + HardSwish, depthwise + Relu, squeeze-excite with
HardSigmoid and its (N, C, 1, 1) Mul), DBNet's (a dilated 5x5 Conv, x2 nearest Resize, ConvTranspose) and
CRNN's (3x3 Conv + MaxPool, a bidirectional LSTM over the columns) runs in an InferenceSession after
pytrain.ops.wasm.install(): its output equals onnxruntime's within float32 tolerance, and each new kernel
(conv.c conv2d and conv_transpose_tiles, elementwise.c hard_activation and binary_rows, pool.c upsample_nearest
and row_means, lstm.c lstm_steps) was really called, not silently left to numpy. A training step of a smaller
network with the same blocks (strided stem + BatchNorm + HardSwish, depthwise, squeeze-excite's HardSigmoid, a
dilated 3x3 Conv, a bidirectional LSTM over the columns, per-pixel class logits under the cross-entropy loss)
gives in the tab the gradients of the numpy path natively, with conv.c conv2d_grad and depthwise_conv2d_grad,
elementwise.c hard_activation_grad, batchnorm.c batchnorm_training and batchnorm_grad, lstm.c lstm_grad_steps
and softmax_ce.c softmax_ce_planes with its gradient answering (the depthwise gradient over 10x9 planes of 4
images by depthwise.c's lanes path)."""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
from browser_helpers import checkout_page, pytrain_sources

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
PYODIDE = ROOT / "node_modules" / "@pyodide" / "pyodide" / "dist" / "pyodide.js"


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.se1, self.se2 = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)
        self.wide = nn.Conv2d(8, 6, 5, 1, 4, dilation=2)
        self.up = nn.ConvTranspose2d(6, 4, 2, 2)
        self.crnn = nn.Sequential(nn.Conv2d(10, 5, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2))
        self.rnn = nn.LSTM(5, 6, bidirectional=True)

    def forward(self, x):
        x = self.dw(self.stem(x))
        pooled = torch.nn.functional.adaptive_avg_pool2d(x, 1)  # (GlobalAveragePool)
        s = torch.nn.functional.hardsigmoid(self.se2(torch.relu(self.se1(pooled))))
        x = self.wide(x * s)
        x = torch.cat([self.up(x), torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")], 1)
        x = torch.nn.functional.hardswish(x)  # (a HardSwish no Conv precedes: unfused)
        x = self.crnn(x)
        seq = x.mean(2).permute(2, 0, 1)  # CRNN's columns as time steps: (W, N, C)
        return torch.cat([x.flatten(1), self.rnn(seq)[0].permute(1, 0, 2).flatten(1)], 1)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    net = _Net()
    for m in net.modules():  # statistics that are not the identity
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    net.eval()
    x = torch.randn(3, 3, 33, 38)  # (the squeeze-excite Mul past MIN_BINARY_ELEMENTS)
    buf = io.BytesIO()
    torch.onnx.export(net, (x,), buf, opset_version=17, input_names=["x"], output_names=["y"], dynamo=False,
                      do_constant_folding=False)
    onnx_bytes = buf.getvalue()
    want = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    return onnx_bytes, x.numpy(), want


RUN = r"""
import base64, json
import numpy as np
from pytrain.ops import wasm
from pytrain.engine.runtime import InferenceSession

assert wasm.install()
calls = {}
for name in ("conv2d", "hard_activation", "binary_rows", "upsample_nearest", "depthwise_conv2d", "relu", "lstm_steps",
             "conv_transpose_tiles", "row_means"):
    fn = getattr(wasm.kernels, name)
    def counted(*a, _fn=fn, _name=name):
        calls[_name] = calls.get(_name, 0) + 1
        return _fn(*a)
    setattr(wasm.kernels, name, counted)
x = np.frombuffer(base64.b64decode(X_B64), dtype=np.float32).reshape(X_SHAPE)
sess = InferenceSession(base64.b64decode(MODEL_B64))
y1 = sess.run(None, {"x": x})[0]
y2 = sess.run(None, {"x": x})[0]   # the kept (folded) weights a second time
json.dumps({"y": base64.b64encode(np.ascontiguousarray(y1, np.float32).tobytes()).decode(),
            "shape": list(y1.shape), "same": bool(np.array_equal(y1, y2)), "calls": calls})
"""


class _TrainNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.se = nn.Conv2d(8, 8, 1)
        self.wide = nn.Conv2d(8, 6, 3, 2, 2, dilation=2)
        self.head = nn.Conv2d(6, 4, 1)
        self.rnn = nn.LSTM(6, 5, bidirectional=True)
        self.fc = nn.Linear(10, 4)

    def forward(self, x):
        x = self.dw(self.stem(x))
        x = x * torch.nn.functional.hardsigmoid(self.se(torch.nn.functional.adaptive_avg_pool2d(x, 1)))
        x = torch.nn.functional.hardswish(self.wide(x))
        seq = x.mean(2).permute(2, 0, 1)  # CRNN's columns as time steps: (W, N, C)
        cols = self.fc(self.rnn(seq)[0]).permute(1, 2, 0).unsqueeze(2)  # (N, 4, 1, W)
        return self.head(x) + cols  # DBNet's per-pixel class logits (N, 4, H, W)


@pytest.fixture(scope="module")
def training():
    """A training step's artifacts and batch, and the gradients the numpy path gives natively."""
    from pytrain.generator import artifacts
    from pytrain.device.api import CheckpointState, Module

    torch.manual_seed(1)
    x = torch.randn(4, 3, 19, 17)
    buf = io.BytesIO()
    torch.onnx.export(_TrainNet().eval(), (x,), buf, opset_version=17, input_names=["x"], output_names=["y"],
                      dynamo=False, do_constant_folding=False)
    arts = artifacts.generate_artifacts(buf.getvalue(), loss=artifacts.LossType.CrossEntropyLoss)
    labels = np.random.default_rng(1).integers(0, 4, (4, 5, 5)).astype(np.int64)  # (N, H, W)
    module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint))
    module(x.numpy(), labels)
    grads = {n: module.state.parameters[n].grad for n in module.trainable_names}
    return arts, x.numpy(), labels, grads


TRAIN = r"""
from pytrain.device.api import CheckpointState, Module

calls.clear()
for name in ("conv2d_grad", "depthwise_conv2d_grad", "hard_activation_grad", "batchnorm_training",
             "batchnorm_grad", "lstm_grad_steps", "softmax_ce_planes", "softmax_ce_planes_grad"):
    fn = getattr(wasm.kernels, name)
    def counted(*a, _fn=fn, _name=name):
        calls[_name] = calls.get(_name, 0) + 1
        if _name == "depthwise_conv2d_grad" and a[-1]:  # (given scratch: the images as SIMD lanes)
            calls["depthwise lanes"] = calls.get("depthwise lanes", 0) + 1
        return _fn(*a)
    setattr(wasm.kernels, name, counted)
module = Module(base64.b64decode(TRAIN_B64), CheckpointState.load_checkpoint(base64.b64decode(CKPT_B64)))
module(np.frombuffer(base64.b64decode(TX_B64), dtype=np.float32).reshape(TX_SHAPE), np.array(LABELS, np.int64))
json.dumps({"grads": {n: base64.b64encode(np.ascontiguousarray(module.state.parameters[n].grad, np.float32)
                                          .tobytes()).decode() for n in module.trainable_names}, "calls": calls})
"""


@pytest.fixture(scope="module")
def tab(browser, model, training):
    if not PYODIDE.exists():
        pytest.skip("needs node_modules (npm ci; python build.py test runs it)")
    onnx_bytes, x, _ = model
    code = ("MODEL_B64 = %r\nX_B64 = %r\nX_SHAPE = %r\n" % (base64.b64encode(onnx_bytes).decode(),
                                                          base64.b64encode(x.tobytes()).decode(), x.shape)) + RUN
    with checkout_page(browser, "/bench/pages/kernels_check.html", timeout_ms=120_000) as page:
        page.evaluate("window.__ready")
        page.evaluate("paths => window.__loadSources(paths)", pytrain_sources())
        out = json.loads(page.evaluate("code => window.__py(code)", code))
        arts, tx, labels, _ = training
        train = ("TRAIN_B64 = %r\nCKPT_B64 = %r\nTX_B64 = %r\nTX_SHAPE = %r\nLABELS = %r\n"
                 % (base64.b64encode(arts.training_model).decode(), base64.b64encode(arts.checkpoint).decode(),
                    base64.b64encode(tx.tobytes()).decode(), tx.shape, labels.tolist())) + TRAIN
        out["train"] = json.loads(page.evaluate("code => window.__py(code)", train))
        return out


def test_cnn_layers_in_the_tab_equal_onnxruntime(tab, model):
    _, _, want = model
    got = np.frombuffer(base64.b64decode(tab["y"]), dtype=np.float32).reshape(tab["shape"])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert tab["same"]


@pytest.mark.parametrize("kernel", ["conv2d", "hard_activation", "binary_rows", "upsample_nearest",
                                    "depthwise_conv2d", "relu", "lstm_steps", "conv_transpose_tiles",
                                    "row_means"])
def test_each_cnn_kernel_answered(tab, kernel):
    assert tab["calls"].get(kernel, 0) >= 2, tab["calls"]


def test_training_step_gradients_in_the_tab_equal_the_numpy_path(tab, training):
    """Every trainable parameter's gradient of one step (the BatchNorms in training mode) as natively."""
    want = training[3]
    got = tab["train"]["grads"]
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        g = np.frombuffer(base64.b64decode(got[name]), dtype=np.float32).reshape(w.shape)
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5 * float(np.abs(w).max() + 1e-30), err_msg=name)


@pytest.mark.parametrize("kernel", ["conv2d_grad", "depthwise_conv2d_grad", "hard_activation_grad",
                                    "batchnorm_training", "batchnorm_grad", "lstm_grad_steps", "softmax_ce_planes",
                                    "softmax_ce_planes_grad", "depthwise lanes"])
def test_each_gradient_kernel_answered(tab, kernel):
    assert tab["train"]["calls"].get(kernel, 0) >= 1, tab["train"]["calls"]
