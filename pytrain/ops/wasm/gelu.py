"""GELU and its gradient on the wasm side (gelu.c), each one pass: the training model's Gelu and GeluGrad nodes
(pytrain.autodiff.gelu_forms fuses the exporters' chains into them), and onnxruntime's com.microsoft Gelu and
GeluGrad (the erf form) in a training model it made. The tanh form in float32 (expf32.h's exp, within a few
ulps of the numpy kernels), the erf form in double precision rounded once (within float32 rounding of them).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.ops.elementwise.op_gelu import approximate_form
from pytrain.ops.wasm import kernels, plain, ptr, threaded

#: From this many elements a call is split across the page's helper threads, as exp_erf.c's Tanh and Erf
#: (pytrain.ops.wasm.THREADS_MIN_ELEMENTS: GPT-2's and BERT's activations are 64k-512k elements); past it the
#: threads decide per call shape from what they measure.
THREADS_MIN_ELEMENTS = 1 << 15

#: op_ort_training's domain, not imported from it: install() imports no kernel module
_ORT_DOMAIN = "com.microsoft"

_FORMS = {"tanh": "gelu_tanh", "none": "gelu_erf"}


def _kernel(approximate: object) -> Optional[str]:
    return _FORMS.get(approximate_form(approximate))  # type: ignore[arg-type]  (None: the numpy kernel names it)


def gelu(ctx, X: np.ndarray, *, approximate: object = "none") -> Optional[Tuple[np.ndarray]]:
    """Gelu of a float32 tensor (gelu.c gelu_tanh / gelu_erf), for registry.accelerate."""
    name = _kernel(approximate)
    if name is None or not plain(X):
        return None
    y = np.empty_like(X)
    threaded(name, X.size, THREADS_MIN_ELEMENTS)(ptr(X), ptr(y), X.size)
    return (y,)


def gelu_grad(ctx, dY: np.ndarray, X: np.ndarray, *, approximate: object = "none") -> Optional[Tuple[np.ndarray]]:
    """GeluGrad of float32 tensors of one shape (gelu.c gelu_tanh_grad / gelu_erf_grad), for registry.accelerate."""
    name = _kernel(approximate)
    if name is None or not plain(dY, X):
        return None
    dx = np.empty_like(X)
    threaded(name + "_grad", X.size, THREADS_MIN_ELEMENTS)(ptr(dY), ptr(X), ptr(dx), X.size)
    return (dx,)


def install() -> None:
    """Route Gelu and GeluGrad (pytrain's and onnxruntime's) through gelu.c where the page's kernels.wasm has it."""
    from pytrain.ops import registry


    if getattr(kernels, "gelu_tanh", None) is None or getattr(kernels, "gelu_erf_grad", None) is None:
        return
    registry.accelerate("Gelu", gelu)
    registry.accelerate("Gelu", gelu, registry.PYTRAIN_DOMAIN)
    registry.accelerate("GeluGrad", gelu_grad, registry.PYTRAIN_DOMAIN)
    registry.accelerate("Gelu", gelu, _ORT_DOMAIN)
    registry.accelerate("GeluGrad", gelu_grad, _ORT_DOMAIN)
