"""Gradient rules of ConvTranspose, Resize and Upsample through the artifact generator, against
float64 finite differences (tests/helpers/grad_harness.py)."""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np

from grad_harness import Case, i64, node, rand


def f32(*v) -> np.ndarray:
    return np.array(v, dtype=np.float32)


def _conv_transpose() -> List[Case]:
    ct = "ConvTranspose"
    return [
        Case("ConvTranspose 3x3 bias", [node(ct, ["X", "W", "B"])],
             {"X": rand(2, 3, 3, 3), "W": rand(3, 2, 3, 3), "B": rand(2)}, ["Y"]),
        Case("ConvTranspose stride 2 pad 1 output_padding 1 groups 2",
             [node(ct, ["X", "W", "B"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1], group=2)],
             {"X": rand(1, 4, 3, 3), "W": rand(4, 3, 3, 3), "B": rand(6)}, ["Y"]),
        Case("ConvTranspose dilations no bias", [node(ct, ["X", "W"], dilations=[2, 1], strides=[1, 2], pads=[1, 0, 0, 1])],
             {"X": rand(1, 2, 3, 3), "W": rand(2, 2, 2, 3)}, ["Y"]),
        Case("ConvTranspose output_shape", [node(ct, ["X", "W"], strides=[2, 2], output_shape=[8, 6])],
             {"X": rand(1, 2, 3, 3), "W": rand(2, 2, 3, 3)}, ["Y"]),
        Case("ConvTranspose same_lower", [node(ct, ["X", "W"], strides=[2, 2], auto_pad="SAME_LOWER")],
             {"X": rand(1, 2, 3, 3), "W": rand(2, 1, 2, 3)}, ["Y"]),
        Case("ConvTranspose 1-D", [node(ct, ["X", "W", "B"], strides=[2], output_padding=[1])],
             {"X": rand(2, 2, 4), "W": rand(2, 3, 3), "B": rand(3)}, ["Y"]),
        Case("ConvTranspose frozen weight", [node(ct, ["X", "W"], strides=[2, 2])],
             {"X": rand(1, 2, 3, 3), "W": rand(2, 2, 2, 2)}, ["Y"], params=["X"]),
    ]


def _resize() -> List[Case]:
    rs = "Resize"
    return [
        Case("Resize nearest asymmetric floor (nn.Upsample)",
             [node(rs, ["X", "", "S"], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
             {"X": rand(1, 2, 3, 3), "S": f32(1, 1, 2, 2)}, ["Y"], opset=13),
        Case("Resize bilinear pytorch_half_pixel sizes",
             [node(rs, ["X", "", "", "Z"], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")],
             {"X": rand(2, 1, 3, 4), "Z": i64(2, 1, 5, 7)}, ["Y"], opset=13),
        Case("Resize bilinear align_corners",
             [node(rs, ["X", "", "S"], mode="linear", coordinate_transformation_mode="align_corners")],
             {"X": rand(1, 2, 3, 4), "S": f32(1, 1, 2, 2)}, ["Y"], opset=13),
        Case("Resize linear half_pixel downsample",
             [node(rs, ["X", "", "S"], mode="linear")], {"X": rand(1, 1, 5, 4), "S": f32(1, 1, 0.6, 0.5)}, ["Y"], opset=13),
        Case("Resize cubic axes opset 18",
             [node(rs, ["X", "", "", "Z"], mode="cubic", axes=[2, 3])], {"X": rand(1, 1, 4, 4), "Z": i64(6, 5)}, ["Y"],
             opset=18),
        Case("Resize nearest half_pixel_symmetric opset 19",
             [node(rs, ["X", "", "S"], mode="nearest", coordinate_transformation_mode="half_pixel_symmetric")],
             {"X": rand(1, 2, 3, 4), "S": f32(1, 1, 1.5, 2.5)}, ["Y"], opset=19),
        Case("Resize opset 11 roi tf_crop_and_resize",
             [node(rs, ["X", "R", "S", "Z"], mode="linear", coordinate_transformation_mode="tf_crop_and_resize")],
             {"X": rand(1, 1, 4, 4), "R": f32(0, 0, 0.1, -0.2, 1, 1, 0.8, 0.9), "S": np.zeros(0, np.float32),
              "Z": i64(1, 1, 5, 5)}, ["Y"], opset=11),
        Case("Resize opset 10 nearest", [node(rs, ["X", "S"], mode="nearest")],
             {"X": rand(1, 2, 3, 3), "S": f32(1, 1, 2, 1.5)}, ["Y"], opset=10),
        Case("Resize opset 10 linear", [node(rs, ["X", "S"], mode="linear")],
             {"X": rand(1, 2, 3, 3), "S": f32(1, 1, 2, 1.5)}, ["Y"], opset=10),
    ]


def _upsample() -> List[Case]:
    return [
        Case("Upsample-9 nearest", [node("Upsample", ["X", "S"], mode="nearest")],
             {"X": rand(1, 2, 3, 3), "S": f32(1, 1, 2, 3)}, ["Y"], opset=9),
        Case("Upsample-9 linear", [node("Upsample", ["X", "S"], mode="linear")],
             {"X": rand(1, 2, 3, 3), "S": f32(1, 1, 2, 1.5)}, ["Y"], opset=9),
        Case("Upsample-7 attribute scales", [node("Upsample", ["X"], mode="linear", scales=[1.0, 1.0, 2.0, 2.0])],
             {"X": rand(1, 2, 3, 3)}, ["Y"], opset=7),
    ]


CASES: Dict[str, Callable[[], List[Case]]] = {
    "ConvTranspose": _conv_transpose,
    "Resize": _resize,
    "Upsample": _upsample,
}


