"""The gradient rule of BatchNormalization in inference mode (running statistics): what the
training model keeps for a BatchNormalization whose scale and bias do not train (a frozen
backbone). Checked through the artifact generator against float64 finite
differences of the inference forward. (Scale and bias gradients in this mode, reached with
generate_artifacts(batchnorm="eval"), are checked in tests/training/test_batchnorm_transfer.py.)"""
from __future__ import annotations

from typing import Callable, Dict, List


from grad_harness import Case, node, rand


def _batchnorm_inference() -> List[Case]:
    cases = []
    for shape, attrs in (((3, 2, 2, 2), {"epsilon": 1e-3}), ((4, 3), {}), ((2, 3, 4), {"momentum": 0.7}),
                         ((2, 2, 3, 2, 2), {"training_mode": 0})):
        c = shape[1]
        cases.append(Case("BatchNormalization inference %s %s" % (list(shape), attrs),
                          [node("BatchNormalization", ["X", "S", "B", "M", "V"], **attrs)],
                          {"X": rand(*shape), "S": rand(c), "B": rand(c), "M": rand(c), "V": rand(c, lo=0.5, hi=2)},
                          ["Y"], opset=15, params=["X"]))  # scale and bias frozen: inference mode
    return cases


CASES: Dict[str, Callable[[], List[Case]]] = {"BatchNormalization": _batchnorm_inference}


