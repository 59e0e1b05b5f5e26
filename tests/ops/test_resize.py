"""Forward kernels of ConvTranspose, Resize and Upsample against onnx's ReferenceEvaluator and
onnxruntime, for every attribute torch emits (and the rest of the spec).

Where the two oracles disagree, the tests say which one pytrain follows and why:
* ConvTranspose with group > 1, or with output_shape and no auto_pad: onnx.reference fails
  (reshape errors, or it keeps pads at 0 instead of deriving them from output_shape), onnxruntime only.
* Resize align_corners / tf_crop_and_resize with a scale whose ``in * scale`` is not an integer:
  onnx.reference divides by the unrounded output length, onnxruntime (and pytrain) by the real one.
* Resize nearest floor/ceil when ``x_original`` is exactly an integer: onnxruntime computes the
  coordinate in float32 and may land just below it; pytrain computes in float64 (exact), as
  onnx.reference does. Those cases are checked against onnx.reference only.
* Resize-10 and Upsample with non-integer scales: onnx.reference has no Resize-10 and its Upsample
  handles integer nearest scales only; onnxruntime is the oracle.
"""
from __future__ import annotations

import numpy as np
import pytest

from ops_oracle import assert_same, check, run_pytrain

from pytrain.errors import GraphError, InputError, UnsupportedOpError


def rnd(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def f32(*v):
    return np.array(v, dtype=np.float32)


def i64(*v):
    return np.array(v, dtype=np.int64)


# ---------------------------------------------------------------- ConvTranspose
CT_CASES = [
    # x_shape, w_shape, bias, attrs
    ((2, 3, 4, 5), (3, 2, 3, 3), True, {}),
    ((2, 3, 4, 5), (3, 4, 2, 2), False, {"strides": [2, 2]}),                            # U-Net up 2x
    ((1, 4, 5, 4), (4, 3, 3, 3), True, {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((1, 2, 5, 4), (2, 2, 3, 2), True, {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), False, {"strides": [2, 2], "output_shape": [10, 9]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), False, {"strides": [2, 2], "output_shape": [7, 8]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), False, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 4, 4), (3, 2, 3, 3), False, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 4, 3), (3, 2, 2, 3), False, {"strides": [3, 2], "auto_pad": "SAME_UPPER", "output_shape": [11, 7]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), True, {"strides": [2, 2], "auto_pad": "VALID", "output_padding": [1, 0]}),
    ((2, 3, 7), (3, 2, 3), True, {}),                                                     # 1-D
    ((2, 3, 7), (3, 5, 4), True, {"strides": [3], "pads": [1, 2], "dilations": [2], "output_padding": [2]}),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), True, {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),  # 3-D
    ((1, 2, 3, 3), (2, 2, 3, 3), False, {"kernel_shape": [3, 3]}),
]


@pytest.mark.parametrize("x_shape,w_shape,bias,attrs", CT_CASES)
def test_conv_transpose(x_shape, w_shape, bias, attrs):
    b = rnd(w_shape[1], seed=2) if bias else None
    ins = [rnd(*x_shape), rnd(*w_shape, seed=1), b]
    if not ("output_shape" in attrs and "auto_pad" not in attrs):
        check("ConvTranspose", ins, attrs, oracle="ref", atol=1e-5)
    check("ConvTranspose", ins, attrs, oracle="ort", atol=1e-5)


GROUP_CASES = [
    ((2, 4, 4, 5), (4, 3, 3, 3), {"group": 2}),
    ((1, 4, 5, 4), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((1, 6, 3, 4), (6, 2, 2, 3), {"group": 3, "strides": [2, 1], "dilations": [2, 2], "pads": [0, 1, 1, 0]}),
    ((2, 4, 6), (4, 2, 3), {"group": 2, "strides": [2], "output_padding": [1]}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", GROUP_CASES)
def test_conv_transpose_groups(x_shape, w_shape, attrs):
    # onnx.reference fails on group > 1 (reshape error): onnxruntime is the oracle
    ins = [rnd(*x_shape), rnd(*w_shape, seed=1), rnd(w_shape[1] * attrs["group"], seed=2)]
    check("ConvTranspose", ins, attrs, oracle="ort", atol=1e-5)


def test_conv_transpose_float64_and_errors():
    check("ConvTranspose", [rnd(1, 2, 3, 3, dtype=np.float64), rnd(2, 3, 2, 2, seed=1, dtype=np.float64)],
          {"strides": [2, 2]})
    with pytest.raises(InputError, match="W.shape\\[0\\] must be C"):
        run_pytrain("ConvTranspose", [rnd(1, 2, 3, 3), rnd(3, 3, 2, 2)], {})
    with pytest.raises(InputError, match="divisible by group"):
        run_pytrain("ConvTranspose", [rnd(1, 3, 3, 3), rnd(3, 3, 2, 2)], {"group": 2})
    with pytest.raises(InputError, match="kernel_shape"):
        run_pytrain("ConvTranspose", [rnd(1, 2, 3, 3), rnd(2, 3, 2, 2)], {"kernel_shape": [3, 3]})
    with pytest.raises(InputError, match="bias B"):
        run_pytrain("ConvTranspose", [rnd(1, 2, 3, 3), rnd(2, 3, 2, 2), rnd(2)], {})
    with pytest.raises(GraphError, match="strides"):
        run_pytrain("ConvTranspose", [rnd(1, 2, 3, 3), rnd(2, 3, 2, 2)], {"strides": [2]})
    with pytest.raises(GraphError, match="auto_pad"):
        run_pytrain("ConvTranspose", [rnd(1, 2, 3, 3), rnd(2, 3, 2, 2)], {"auto_pad": "SAME"})
    with pytest.raises(InputError, match="empty"):
        run_pytrain("ConvTranspose", [rnd(1, 2, 2, 2), rnd(2, 3, 2, 2)], {"pads": [2, 2, 2, 2]})


def test_conv_transpose_matches_torch_layers():
    torch = pytest.importorskip("torch")
    for layer, x_shape in [
        (torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1), (2, 4, 5, 6)),
        (torch.nn.ConvTranspose2d(3, 2, (3, 2), stride=(2, 3), padding=(1, 0), dilation=(2, 1), bias=False), (1, 3, 4, 4)),
        (torch.nn.ConvTranspose1d(4, 4, 4, stride=2, padding=1, groups=4), (2, 4, 7)),
    ]:
        x = rnd(*x_shape, seed=3)
        want = layer(torch.from_numpy(x)).detach().numpy()
        attrs = {"strides": list(layer.stride), "pads": list(layer.padding) * 2, "dilations": list(layer.dilation),
                 "output_padding": list(layer.output_padding), "group": layer.groups}
        b = None if layer.bias is None else layer.bias.detach().numpy()
        got = run_pytrain("ConvTranspose", [x, layer.weight.detach().numpy(), b], attrs)[0]
        assert_same(got, want, rtol=1e-5, atol=1e-5, what=repr(layer))


# ---------------------------------------------------------------- Resize
X4 = (1, 2, 4, 5)
UP = f32(1, 1, 2, 1.5)
DOWN = f32(1, 1, 0.6, 0.5)
SIZES = i64(1, 2, 7, 3)
COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def _resize_inputs(kind, x):
    return {"up": [x, None, UP], "down": [x, None, DOWN], "sizes": [x, None, None, SIZES]}[kind]


def _oracles(mode, coord, nearest, kind):
    """Which oracles agree with the spec for this case (see the module docstring)."""
    oracles = ["ref", "ort"]
    if coord == "align_corners" and kind != "sizes":
        oracles.remove("ref")  # in * scale is not an integer for UP and DOWN
    if mode == "nearest" and nearest in ("floor", "ceil") and (kind == "down" or coord == "half_pixel_symmetric"):
        oracles.remove("ort")  # exact-integer coordinates: onnxruntime's float32 rounds them down
    return oracles


@pytest.mark.parametrize("kind", ["up", "down", "sizes"])
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode,nearest", [("nearest", m) for m in NEAREST] + [("linear", None), ("cubic", None)])
def test_resize_modes(mode, nearest, coord, kind):
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if nearest:
        attrs["nearest_mode"] = nearest
    opset = 19 if coord == "half_pixel_symmetric" else 13
    ins = _resize_inputs(kind, rnd(*X4))
    for oracle in _oracles(mode, coord, nearest, kind):
        check("Resize", ins, attrs, opset=opset, oracle=oracle, atol=2e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_opset11_tf_half_pixel_for_nn(mode):
    # opset 11 only, where scales is a required input (empty when sizes are given); onnx.reference lacks it
    x, empty = rnd(*X4), np.zeros(0, np.float32)
    check("Resize", [x, empty, UP], {"mode": mode, "coordinate_transformation_mode": "tf_half_pixel_for_nn"},
          opset=11, oracle="ort", atol=2e-6)
    check("Resize", [x, empty, empty, SIZES], {"mode": mode}, opset=11, oracle="ort", atol=2e-6)
    check("Resize", [x, empty, UP], {"mode": mode, "coordinate_transformation_mode": "asymmetric"}, opset=11,
          oracle="ref", atol=2e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize(mode):
    x = rnd(*X4)
    roi = f32(0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2)  # reaches outside on the last axis: extrapolation
    attrs = {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.0}
    got = check("Resize", [x, roi, None, i64(1, 2, 5, 6)], attrs, opset=13, oracle="ref", atol=2e-6)[0]
    assert (got == 7.0).any()
    check("Resize", [x, roi, None, i64(1, 2, 5, 6)], attrs, opset=13, oracle="ort", atol=2e-6)
    check("Resize", [x, roi, UP], attrs, opset=13, oracle="ort", atol=3e-6)
    with pytest.raises(InputError, match="roi"):
        run_pytrain("Resize", [x, None, UP], attrs, opset=13)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_opset18_axes_and_aspect_ratio(mode):
    x = rnd(*X4)
    for oracle in ("ref", "ort"):
        check("Resize", [x, None, None, i64(6, 3)], {"mode": mode, "axes": [3, 2]}, opset=18, oracle=oracle, atol=2e-6)
        check("Resize", [x, None, f32(1.5, 2)], {"mode": mode, "axes": [2, 3]}, opset=18, oracle=oracle, atol=2e-6)
        for policy in ("not_larger", "not_smaller"):
            check("Resize", [x, None, None, i64(7, 9)], {"mode": mode, "axes": [2, 3], "keep_aspect_ratio_policy": policy},
                  opset=18, oracle=oracle, atol=2e-6)
    # negative axes: onnx.reference fails on them (transpose error)
    check("Resize", [x, None, f32(1.5, 2)], {"mode": mode, "axes": [-2, -1]}, opset=18, oracle="ort", atol=2e-6)
    for oracle in ("ref", "ort"):
        # antialias does nothing when every axis grows (both oracles refuse it for nearest, as pytrain does)
        if mode != "nearest":
            check("Resize", [x, None, UP], {"mode": mode, "antialias": 1}, opset=18, oracle=oracle, atol=2e-6)


def test_resize_cubic_attributes():
    x = rnd(*X4)
    for ins in ([x, None, UP], [x, None, DOWN], [x, None, None, i64(1, 2, 1, 3)]):
        for attrs in ({"cubic_coeff_a": -0.5}, {"exclude_outside": 1}, {"exclude_outside": 1, "cubic_coeff_a": -0.6}):
            check("Resize", ins, dict(attrs, mode="cubic"), opset=13, oracle="ort", atol=3e-6)
    # pytorch_half_pixel with a length-1 output: the spec (and onnxruntime) say x_original = 0;
    # onnx.reference uses -0.5, which only cubic can tell apart
    check("Resize", [x, None, None, i64(1, 2, 1, 3)], {"mode": "cubic", "coordinate_transformation_mode":
                                                         "pytorch_half_pixel"}, opset=13, oracle="ort", atol=3e-6)


def test_resize_3d_and_dtypes():
    x5 = rnd(1, 2, 3, 4, 3)
    for oracle in ("ref", "ort"):
        check("Resize", [x5, None, f32(1, 1, 2, 1.5, 2)], {"mode": "linear", "coordinate_transformation_mode":
                                                            "align_corners"}, opset=13, oracle=oracle, atol=2e-6)
    xi = np.random.default_rng(0).integers(0, 100, (1, 2, 3, 4)).astype(np.uint8)
    check("Resize", [xi, None, UP], {"mode": "nearest"}, opset=13, oracle="ort")
    check("Resize", [rnd(*X4, dtype=np.float64), None, UP], {"mode": "linear"}, opset=13, oracle="ref", atol=1e-12)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [UP, f32(1, 1, 0.5, 0.6), f32(1, 1, 3, 2)])
def test_resize_opset10(mode, scales):
    # Resize-10: (X, scales), asymmetric coordinates, onnxruntime's nearest rounding
    check("Resize", [rnd(*X4), scales], {"mode": mode}, opset=10, oracle="ort", atol=2e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    x = rnd(*X4)
    for scales in (UP, f32(1, 1, 2, 3)):
        check("Upsample", [x, scales], {"mode": mode}, opset=9, oracle="ort", atol=2e-6)
        check("Upsample", [x], {"mode": mode, "scales": [float(s) for s in scales]}, opset=7, oracle="ort", atol=2e-6)
    check("Upsample", [x, f32(1, 1, 2, 3)], {"mode": "nearest"}, opset=9, oracle="ref")


def test_resize_matches_torch_interpolate():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = rnd(2, 3, 5, 4, seed=4)
    t = torch.from_numpy(x)
    cases = [  # what torch.onnx.export writes for each call
        (F.interpolate(t, scale_factor=2, mode="nearest"), [x, None, f32(1, 1, 2, 2)],
         {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
        (F.interpolate(t, size=(7, 9), mode="nearest"), [x, None, None, i64(2, 3, 7, 9)],
         {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
        (F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False), [x, None, f32(1, 1, 2, 2)],
         {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
        (F.interpolate(t, size=(3, 7), mode="bilinear", align_corners=False), [x, None, None, i64(2, 3, 3, 7)],
         {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
        (F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=True), [x, None, f32(1, 1, 2, 2)],
         {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
        (F.interpolate(t, size=(8, 3), mode="bicubic", align_corners=False), [x, None, None, i64(2, 3, 8, 3)],
         {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel", "cubic_coeff_a": -0.75}),
    ]
    for want, ins, attrs in cases:
        got = run_pytrain("Resize", ins, attrs, opset=13)[0]
        assert_same(got, want.numpy(), rtol=1e-5, atol=2e-6, what=str(attrs))


def test_resize_errors():
    x = rnd(*X4)
    with pytest.raises(InputError, match="exactly one of"):
        run_pytrain("Resize", [x, None, UP, SIZES], {}, opset=13)
    with pytest.raises(InputError, match="exactly one of"):
        run_pytrain("Resize", [x], {}, opset=13)
    with pytest.raises(InputError, match="scales has 2 values, expected 4"):
        run_pytrain("Resize", [x, None, f32(2, 2)], {}, opset=13)
    with pytest.raises(InputError, match="positive"):
        run_pytrain("Resize", [x, None, f32(1, 1, 0, 2)], {}, opset=13)
    with pytest.raises(UnsupportedOpError, match="mode='area'"):
        run_pytrain("Resize", [x, None, UP], {"mode": "area"}, opset=13)
    with pytest.raises(UnsupportedOpError, match="coordinate_transformation_mode='center'"):
        run_pytrain("Resize", [x, None, UP], {"coordinate_transformation_mode": "center"}, opset=13)
    with pytest.raises(UnsupportedOpError, match="nearest_mode='simple'"):
        run_pytrain("Resize", [x, None, UP], {"nearest_mode": "simple"}, opset=13)
    with pytest.raises(UnsupportedOpError, match="antialias=1 when downsampling"):
        run_pytrain("Resize", [x, None, DOWN], {"mode": "linear", "antialias": 1}, opset=18)
    with pytest.raises(UnsupportedOpError, match="antialias=1 is defined for modes linear and cubic"):
        run_pytrain("Resize", [x, None, UP], {"antialias": 1}, opset=18)
    with pytest.raises(UnsupportedOpError, match="float inputs only"):
        run_pytrain("Resize", [x.astype(np.int32), None, UP], {"mode": "linear"}, opset=13)
    with pytest.raises(GraphError, match="keep_aspect_ratio_policy"):
        run_pytrain("Resize", [x, None, UP], {"keep_aspect_ratio_policy": "not_larger"}, opset=18)
    with pytest.raises(UnsupportedOpError, match="keep_aspect_ratio_policy='fit'"):
        run_pytrain("Resize", [x, None, None, SIZES], {"keep_aspect_ratio_policy": "fit"}, opset=18)
    with pytest.raises(GraphError, match="repeat an axis"):
        run_pytrain("Resize", [x, None, f32(2, 2)], {"axes": [2, -2]}, opset=18)
    with pytest.raises(UnsupportedOpError, match="mode='cubic'"):
        run_pytrain("Upsample", [x, UP], {"mode": "cubic"}, opset=9)


@pytest.mark.parametrize("scales, coord, nearest", [
    (f32(1, 1, 2, 2), "asymmetric", "floor"),           # DBNet's FPN upsampling
    (f32(1, 1, 4, 3), "asymmetric", "floor"),
    (f32(1, 1, 2, 1), "half_pixel", "round_prefer_floor"),
    (f32(1, 2, 1, 2), "asymmetric", "floor"),             # the channel axis too
    (f32(1, 1, 2, 2), "half_pixel", "round_prefer_ceil"),  # no ties at x2: o // 2 as well
    (f32(1, 1, 2, 2), "align_corners", "floor"),         # not o // 2: the general path
])
def test_resize_integer_nearest_upsampling_one_copy(scales, coord, nearest):
    from pytrain.ops.nn import op_resize

    x = rnd(2, 3, 4, 5)
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest}
    for oracle in ("ref", "ort"):
        check("Resize", [x, None, scales], attrs, opset=13, oracle=oracle)
    plan = op_resize.resize_plan("Resize", x.shape, None, scales, None, coordinate_transformation_mode=coord,
                                 mode="nearest", nearest_mode=nearest)
    assert (op_resize._repeat_factors(plan, 4) is None) == (coord == "align_corners")
    # the adjoint of the fast path is the dense-matrix adjoint
    dy = rnd(*plan.out_shape)
    got = op_resize.resample_adjoint(dy, plan)
    g = dy.astype(np.float64)
    for m in reversed(plan.maps):
        g = np.moveaxis(np.moveaxis(g, m.axis, -1) @ m.matrix(np.float64), -1, m.axis)
    assert got.shape == x.shape and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, g, rtol=1e-5, atol=1e-5)
    xi = np.arange(2 * 3 * 4 * 5, dtype=np.int64).reshape(2, 3, 4, 5)  # nearest takes any type
    check("Resize", [xi, None, scales], attrs, opset=13, oracle="ref")
