"""ORT's ``onnxblock.blocks``: building blocks composed in Python (pytrain's, plus ORT's Linear,
Cast, LabelEncoder, Gemm, ...)."""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from pytrain.generator import blocks as _b
from pytrain.generator.blocks import (Abs, Add, Block, Constant, Div, Exp, Log, Mul, Neg, Pow, ReduceMean, ReduceSum,
                            Relu, Sigmoid, Softplus, Sub)
from pytrain.ort.onnxblock._building import random_uniform

__all__ = ["Block", "Abs", "Add", "Cast", "Constant", "Div", "Exp", "Gemm", "Identity", "LabelEncoder", "Linear",
           "Log", "Mul", "Neg", "Pow", "ReduceMean", "ReduceSum", "Relu", "Sigmoid", "Softmax", "Softplus",
           "Sub", "Transpose"]

Identity = _b.op_block("Identity", "x")
Transpose = _b.op_block("Transpose", "x with its axes permuted (attribute perm)")
Softmax = _b.op_block("Softmax", "softmax along an axis (attribute axis)")
Gemm = _b.op_block("Gemm", "alpha * A' B' + beta * C (attributes alpha, beta, transA, transB)")


class Cast(Block):
    """x converted to the ONNX element type ``to`` (e.g. onnx.TensorProto.FLOAT)."""

    def __init__(self, to: int) -> None:
        self.to = int(to)

    def build(self, x: str) -> str:
        return self.ctx().op("Cast", x, to=self.to)


class LabelEncoder(Block):
    """ai.onnx.ml LabelEncoder (integer and string keys and values as ONNX spells them)."""

    # Deliberately 9 parameters: ORT's onnxblock.blocks.LabelEncoder signature, which spells the ONNX operator's
    # attributes one by one (as pytrain/ops' kernels do); code written for ORT passes them by these names.
    def __init__(self, default_float: float = 0.0, default_int64: int = -1, default_string: str = "_Unused",
                 keys_floats: Optional[Any] = None, keys_int64s: Optional[Any] = None,
                 keys_strings: Optional[Any] = None, values_floats: Optional[Any] = None,
                 values_int64s: Optional[Any] = None, values_strings: Optional[Any] = None) -> None:
        self.attrs = {"default_float": float(default_float), "default_int64": int(default_int64),
                      "default_string": default_string, "keys_floats": keys_floats, "keys_int64s": keys_int64s,
                      "keys_strings": keys_strings, "values_floats": values_floats,
                      "values_int64s": values_int64s, "values_strings": values_strings}

    def build(self, x: str) -> str:
        return self.ctx().op("LabelEncoder", x, domain="ai.onnx.ml", **self.attrs)


class Linear(Block):
    """x W^T + b with new parameters W (out, in) and b (out,), initialised as torch.nn.Linear does
    (uniform in +-1/sqrt(in_features))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, alpha: float = 1.0,
                 beta: float = 1.0) -> None:
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        self.weight = random_uniform((out_features, in_features), bound)
        self.bias = random_uniform((out_features,), bound) if bias else None
        self.alpha, self.beta = float(alpha), float(beta)

    def build(self, x: str) -> str:
        c = self.ctx()
        w = c.const(self.weight, np.float32, "linear.weight")
        b = c.const(self.bias, np.float32, "linear.bias") if self.bias is not None else None
        return c.op("Gemm", x, w, b, transB=1, alpha=self.alpha, beta=self.beta)
