"""Gradient kernels ConvTransposeGrad and ResizeGrad against float64 finite differences of
pytrain's forward kernels, and against torch.autograd (nn.ConvTranspose1d/2d, F.interpolate) in
float32."""
from __future__ import annotations

import numpy as np
import pytest

from gradcheck import numeric_grad, run_kernel

from pytrain.errors import InputError


def rng(seed=0):
    return np.random.default_rng(seed)


def fwd(op, *inputs, opset=17, **attrs):
    """Output 0 of pytrain's standard forward kernel."""
    from pytrain.ops import OpContext, get_kernel

    return get_kernel(op, "").fn(OpContext(opset=opset), *inputs, **attrs)[0]


# ---------------------------------------------------------------------------------- ConvTranspose
CT_CASES = [
    # x_shape, w_shape, attrs
    ((2, 3, 3, 4), (3, 2, 3, 3), {}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((1, 4, 3, 3), (4, 2, 2, 3), {"group": 2, "strides": [2, 1], "dilations": [1, 2], "pads": [0, 1, 1, 0]}),
    ((1, 4, 3, 3), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0]}),
    ((2, 2, 5), (2, 3, 3), {"strides": [3], "dilations": [2], "pads": [2, 1], "output_padding": [1]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 6]}),   # crops
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [9, 8]}),   # extends past the full extent
    ((1, 2, 3, 3), (2, 2, 2, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 2, 2, 3), {"strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 3), (2, 2, 2, 2), {"strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 2, 3, 2), (2, 2, 2, 2, 2), {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1]}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CT_CASES)
def test_conv_transpose_grad_finite_differences(x_shape, w_shape, attrs):
    x = rng(1).standard_normal(x_shape)
    w = rng(2).standard_normal(w_shape)
    b = rng(4).standard_normal(w_shape[1] * attrs.get("group", 1))
    y = fwd("ConvTranspose", x, w, b, **attrs)
    dy = rng(3).standard_normal(y.shape)
    dx, dw, db = run_kernel("ConvTransposeGrad", dy, x, w, **attrs)
    f = lambda x, w, b: np.sum(dy * fwd("ConvTranspose", x, w, b, **attrs))  # noqa: E731
    for i, got in enumerate((dx, dw, db)):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, numeric_grad(f, [x, w, b], i), rtol=1e-6, atol=1e-8, err_msg=str(i))


def test_conv_transpose_grad_skips_unwanted_outputs_and_checks_dy():
    x, w = rng(1).standard_normal((1, 2, 3, 3)), rng(2).standard_normal((2, 3, 2, 2))
    dy = rng(3).standard_normal((1, 3, 4, 4))
    full = run_kernel("ConvTransposeGrad", dy, x, w)
    only_w = run_kernel("ConvTransposeGrad", dy, x, w, wants=(False, True, False))
    assert only_w[0] is None and only_w[2] is None
    np.testing.assert_array_equal(only_w[1], full[1])
    with pytest.raises(InputError, match="dY has shape"):
        run_kernel("ConvTransposeGrad", dy[:, :, :3], x, w)


@pytest.mark.parametrize("dims,cin,cout,k,stride,pad,opad,dil,groups,bias", [
    (2, 4, 6, 3, 2, 1, 1, 1, 2, True),          # U-Net / autoencoder upsampling with groups
    (2, 3, 2, (3, 2), (2, 3), (1, 0), (1, 2), (2, 1), 1, False),
    (2, 4, 4, 4, 2, 1, 0, 1, 4, True),          # depthwise
    (1, 4, 6, 4, 3, 2, 2, 1, 2, True),
    (1, 3, 2, 3, 1, 0, 0, 3, 1, True),          # dilation only
])
def test_conv_transpose_grad_matches_torch_float32(dims, cin, cout, k, stride, pad, opad, dil, groups, bias):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cls = torch.nn.ConvTranspose1d if dims == 1 else torch.nn.ConvTranspose2d
    layer = cls(cin, cout, k, stride=stride, padding=pad, output_padding=opad, groups=groups, dilation=dil, bias=bias)
    x = torch.from_numpy(rng(5).standard_normal((2, cin) + (5,) * dims).astype(np.float32)).requires_grad_()
    y = layer(x)
    dy = torch.from_numpy(rng(6).standard_normal(tuple(y.shape)).astype(np.float32))
    y.backward(dy)
    attrs = {"strides": list(layer.stride), "pads": list(layer.padding) * 2, "dilations": list(layer.dilation),
             "output_padding": list(layer.output_padding), "group": groups}
    w = layer.weight.detach().numpy()
    b = None if layer.bias is None else layer.bias.detach().numpy()
    np.testing.assert_allclose(fwd("ConvTranspose", x.detach().numpy(), w, b, **attrs), y.detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    dx, dw, db = run_kernel("ConvTransposeGrad", dy.numpy(), x.detach().numpy(), w, **attrs)
    assert dx.dtype == np.float32 and dw.dtype == np.float32
    np.testing.assert_allclose(dx, x.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, layer.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
    if bias:
        np.testing.assert_allclose(db, layer.bias.grad.numpy(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------- Resize
def f64(*v):
    return np.array(v, dtype=np.float64)


def i64(*v):
    return np.array(v, dtype=np.int64)


RESIZE_CASES = [
    # x_shape, (roi, scales, sizes), attrs
    ((1, 2, 3, 4), (None, f64(1, 1, 2, 2), None), {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                                  "nearest_mode": "floor"}),
    ((1, 2, 4, 5), (None, None, i64(1, 2, 7, 3)), {"mode": "nearest"}),
    ((1, 2, 4, 5), (None, f64(1, 1, 0.6, 1.5), None), {"mode": "nearest", "nearest_mode": "round_prefer_ceil",
                                                      "coordinate_transformation_mode": "half_pixel_symmetric"}),
    ((2, 2, 3, 4), (None, f64(1, 1, 2, 2), None), {"mode": "linear", "coordinate_transformation_mode":
                                                  "pytorch_half_pixel"}),
    ((1, 2, 4, 5), (None, None, i64(1, 2, 7, 3)), {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ((1, 2, 4, 5), (None, f64(1, 1, 1.5, 0.6), None), {"mode": "linear"}),
    ((1, 2, 4, 5), (None, f64(1, 1, 2, 1.5), None), {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}),
    ((1, 2, 3, 4, 3), (None, f64(1, 1, 2, 1.5, 2), None), {"mode": "linear"}),     # trilinear
    ((1, 1, 4, 5), (None, f64(1, 1, 2, 1.5), None), {"mode": "cubic", "exclude_outside": 1}),
    ((1, 1, 4, 5), (None, None, i64(1, 1, 6, 3)), {"mode": "cubic", "cubic_coeff_a": -0.5}),
    ((1, 2, 4, 5), (f64(0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2), None, i64(1, 2, 5, 6)),
     {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 3.0}),
    ((1, 2, 4, 5), (None, None, i64(6, 3)), {"mode": "linear", "axes": [3, 2]}),
    ((1, 2, 4, 5), (None, None, i64(7, 9)), {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}),
]


@pytest.mark.parametrize("x_shape,extra,attrs", RESIZE_CASES)
def test_resize_grad_finite_differences(x_shape, extra, attrs):
    x = rng(1).standard_normal(x_shape)
    y = fwd("Resize", x, *extra, opset=19, **attrs)
    dy = rng(3).standard_normal(y.shape)
    (dx,) = run_kernel("ResizeGrad", dy, x, *extra, **attrs)
    f = lambda x: np.sum(dy * fwd("Resize", x, *extra, opset=19, **attrs))  # noqa: E731
    assert dx.dtype == np.float64 and dx.shape == x.shape
    np.testing.assert_allclose(dx, numeric_grad(f, [x], 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [f64(1, 1, 2, 1.5), f64(1, 1, 0.5, 0.6)])
def test_resize_grad_simple_rounding(mode, scales):
    # Resize-10 and Upsample: asymmetric coordinates, "simple" nearest rounding
    x = rng(1).standard_normal((1, 2, 4, 5))
    y = fwd("Resize", x, scales, opset=10, mode=mode)
    dy = rng(3).standard_normal(y.shape)
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "simple"}
    (dx,) = run_kernel("ResizeGrad", dy, x, None, scales, **attrs)
    f = lambda x: np.sum(dy * fwd("Resize", x, scales, opset=10, mode=mode))  # noqa: E731
    np.testing.assert_allclose(dx, numeric_grad(f, [x], 0), rtol=1e-6, atol=1e-8)


def test_resize_grad_checks_dy():
    x = rng(1).standard_normal((1, 1, 2, 2))
    with pytest.raises(InputError, match="dY has shape"):
        run_kernel("ResizeGrad", np.zeros((1, 1, 3, 4)), x, None, f64(1, 1, 2, 2))


@pytest.mark.parametrize("kind,kwargs,attrs", [
    ("scale", {"scale_factor": 2, "mode": "nearest"},
     {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    ("size", {"size": (7, 9), "mode": "nearest"},
     {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    ("scale", {"scale_factor": 2, "mode": "bilinear", "align_corners": False},
     {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ("size", {"size": (3, 7), "mode": "bilinear", "align_corners": False},
     {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ("scale", {"scale_factor": 2, "mode": "bilinear", "align_corners": True},
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ("size", {"size": (8, 3), "mode": "bilinear", "align_corners": True},
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
])
def test_resize_grad_matches_torch_interpolate_float32(kind, kwargs, attrs):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rng(5).standard_normal((2, 3, 5, 4)).astype(np.float32)).requires_grad_()
    y = torch.nn.functional.interpolate(x, **kwargs)
    dy = torch.from_numpy(rng(6).standard_normal(tuple(y.shape)).astype(np.float32))
    y.backward(dy)
    # what torch.onnx.export writes: scales for scale_factor, sizes for size
    extra = ((None, np.array([1, 1, 2, 2], np.float32), None) if kind == "scale"
             else (None, None, np.array((2, 3) + tuple(kwargs["size"]), np.int64)))
    xn = x.detach().numpy()
    np.testing.assert_allclose(fwd("Resize", xn, *extra, opset=13, **attrs), y.detach().numpy(), rtol=1e-5, atol=2e-6)
    (dx,) = run_kernel("ResizeGrad", dy.numpy(), xn, *extra, **attrs)
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, x.grad.numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------- Python 3.8 + numpy 1.17
def _upsampling_model() -> bytes:
    """input (N, 4, 3, 3) -> ConvTranspose(stride 2, output_padding 1, groups 2) -> Resize linear
    (pytorch_half_pixel, scales) -> Resize nearest (asymmetric, floor; sizes computed in the graph)."""
    from onnx import TensorProto, helper, numpy_helper

    r = rng(7)
    inits = {
        "W": r.standard_normal((4, 2, 3, 3)).astype(np.float32) * 0.3, "B": r.standard_normal(4).astype(np.float32),
        "S": np.array([1, 1, 1.5, 1.5], np.float32), "Z": np.array([0, 0, 14, 12], np.int64),
    }
    nodes = [
        helper.make_node("ConvTranspose", ["input", "W", "B"], ["up"], strides=[2, 2], pads=[1, 1, 1, 1],
                         output_padding=[1, 1], group=2),
        helper.make_node("Resize", ["up", "", "S"], ["lin"], mode="linear",
                         coordinate_transformation_mode="pytorch_half_pixel"),
        helper.make_node("Shape", ["lin"], ["shp"], end=2),
        helper.make_node("Slice", ["Z", "two", "four"], ["hw"]),
        helper.make_node("Concat", ["shp", "hw"], ["size"], axis=0),
        helper.make_node("Resize", ["lin", "", "", "size"], ["output"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    ]
    inits["two"], inits["four"] = np.array([2], np.int64), np.array([4], np.int64)
    graph = helper.make_graph(nodes, "upsampling",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4, 3, 3])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


def test_upsampling_training_on_python38_numpy117(tmp_path):
    """The same artifacts (ConvTranspose + Resize linear + Resize nearest) trained 3 steps on CPython
    + numpy 2 and on Python 3.8 + numpy 1.17.5 (the browser's) give the same losses and weights."""
    import subprocess

    from test_python38_numpy117 import ROOT, SCRIPT, _python38
    from train_helpers import train_steps

    from pytrain.generator import artifacts

    py = ROOT / "build" / "py38-numpy117" / "bin" / "python"
    if _python38() is None or not py.exists():
        pytest.skip("no Python 3.8 + numpy 1.17 venv (tests/api/test_python38_numpy117.py builds it)")
    arts = artifacts.generate_artifacts(_upsampling_model(), requires_grad=["W", "B"],
                                        loss=artifacts.LossType.MSELoss, optimizer=artifacts.SGD(momentum=0.9))
    r = rng(8)
    xs = r.standard_normal((3, 2, 4, 3, 3)).astype(np.float32)
    ys = r.standard_normal((3, 2, 4, 14, 12)).astype(np.float32)
    losses, state = train_steps(arts, zip(xs, ys), 0.05)
    feed = {"cases": np.array(["up"]), "up_lr": np.array(0.05), "up_x": xs, "up_y": ys}
    for key, blob in zip(("training", "eval", "optimizer", "checkpoint"),
                         (arts.training_model, arts.eval_model, arts.optimizer_model, arts.checkpoint)):
        feed["up_" + key] = np.frombuffer(blob, dtype=np.uint8)
    np.savez(tmp_path / "in.npz", **feed)
    (tmp_path / "run.py").write_text(SCRIPT)
    subprocess.run([str(py), str(tmp_path / "run.py"), str(ROOT), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                   check=True, timeout=600)
    got = np.load(tmp_path / "out.npz")
    assert str(got["numpy_version"]) == "1.17.5"
    assert losses[-1] < losses[0]
    np.testing.assert_allclose(got["up_losses"], losses, rtol=1e-5)
    for name in ("W", "B"):
        np.testing.assert_allclose(got["up/" + name], state.parameters[name].data, rtol=1e-4, atol=1e-6)
