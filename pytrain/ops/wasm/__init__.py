"""The browser's WebAssembly kernels (web/kernels/*.c, linked into one kernels.wasm), working in
place on numpy's buffers inside Pyodide's heap, and how they plug into pytrain's numpy kernels.

The page links kernels.wasm into Pyodide and registers it as the module ``pytrain_wasm_kernels``
(see ``pythonModule`` in web/kernels/kernels.js). :func:`install` then routes operations through
them; small products and arrays stay on numpy, where the Python -> JS -> wasm call would cost
more than it saves. This module holds the access to the kernels and the helpers every family
shares; the routing itself is one module per family:

- :mod:`.linalg`: 2-D and batched matrix products, Gemm, 2-D transposes (gemm.c, gemm_ops.c,
  transpose.c)
- :mod:`.conv`: convolution columns (im2col.c), depthwise, pointwise and other ungrouped 2-D Conv
  and their ConvGrad (conv.c), FusedConv's clip and activations, MaxPool and its gradient,
  GlobalAveragePool, nearest upsampling (pool.c)
- :mod:`.normalization`: BatchNormalization in inference and training with its gradient (batchnorm.c),
  LayerNormalization and its gradient (layernorm.c)
- :mod:`.elementwise`: Relu and its gradient, Clip, Add/Sub/Mul/Div broadcasts, SumToShape's bias
  case (elementwise.c), Exp, Erf and Tanh (exp_erf.c), Pow by 2 or 3
- :mod:`.softmax`: Softmax (softmax.c), SoftmaxCrossEntropyLoss and its gradient (softmax_ce.c)
- :mod:`.gather`: GatherGrad (gather_grad.c)
- :mod:`.gelu`: Gelu and GeluGrad, tanh and erf forms (gelu.c)
- :mod:`.recurrent`: LSTM inference and LSTMGrad (lstm.c)
- :mod:`.optimizer`: the Adam update and the finite-gradient guard (optim.c)
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

try:  # only present in a page that registered the kernel
    import pytrain_wasm_kernels as _js  # type: ignore
except ImportError:
    _js = None

from pytrain.ops.wasm.address import ptr  # noqa: E402,F401  (the kernels' byte addresses: address.py says how)


class _Kernels:
    """The page's kernel functions, looked up once: reading an attribute of Pyodide 0.17's JsProxy
    module costs ~3.5 us (measured in Chromium), as much as the call itself, on every call."""

    def __init__(self, js) -> None:
        for name in dir(js):
            if not name.startswith("_"):
                value = getattr(js, name)
                if value is not None:  # an older kernels.js hands Python None for exports it lacks
                    setattr(self, name, value)


kernels = _Kernels(_js) if _js is not None else None
F32 = np.dtype(np.float32)

#: Below this many elements numpy's own pass is as quick as the call into wasm.
MIN_ELEMENTS = 1024


#: From this many elements (Exp, Erf; Adam: every parameter's together; LayerNorm, its gradient and Softmax:
#: all rows') a kernel is split across the page's helper threads (web/kernels/threads-team.js split():
#: only in a cross-origin isolated page); below it the hand-over and the copies into their shared memory cost
#: more than the second core saves. Measured in the tab by bench/threads_bench.py --only kernels,bert (2-core
#: AMD EPYC, quiet, 5 passes, median [min - max]): Erf x0.87 [0.87 - 1.00] at 16k elements, x0.71 [0.68 - 0.81]
#: at 32k, x0.52 at GELU's 524k; Exp x0.92 [0.92 - 1.08] at 16k, x0.76 [0.76 - 0.88] at 32k, x0.55 at 524k;
#: Softmax (rows of 32) x0.68 at 16k, x0.52 at 262k; the tiny BERT's step x0.94. With a busy second core
#: (another process spinning) the split cost 2-8%. LayerNorm (x0.78 alone at 1024 rows of 128, no faster in
#: the tiny BERT's step: x0.99-1.03) and its gradient (x0.93 at 131k: its sums over all rows stay on the calling
#: thread) are left to the threads' own measurements. None keeps a kernel on the calling thread: Adam
#: (x1.14-1.55 at every size: 28 bytes to copy an element for a dozen float32 operations).
#: Past the minimum the helper threads decide per call shape from what they measure (threads-team.js
#: makeChooser), so a kernel whose split loses on this machine, or while the other core is busy, runs alone.
THREADS_MIN_ELEMENTS: Dict[str, Optional[int]] = {
    "exp": 1 << 15, "erf": 1 << 15, "tanh": 1 << 15, "softmax": 1 << 15, "layernorm": 1 << 15,
    "layernorm_grad": 1 << 15, "adam": None, "softmax_ce_grad": 1 << 15,
}


def threaded(name: str, size: int, minimum: Optional[int]):
    """The page's kernel ``name`` for a call of ``size`` (elements, multiply-adds): its helper threads' form
    (``name``_threads, the same arguments and bits) from ``minimum`` on when the page started them, else the
    calling thread's."""
    fn = getattr(kernels, name + "_threads", None)
    if fn is not None and minimum is not None and size >= minimum:
        return fn
    return getattr(kernels, name)


def available() -> bool:
    return kernels is not None


def plain(*arrays: np.ndarray, min_size: int = MIN_ELEMENTS) -> bool:
    """All C-contiguous float32 of one shape, and enough elements to be worth a wasm call.
    (A plain loop: this runs before every accelerated node, and a generator under all() cost
    8 us in Pyodide against ~1 us.)"""
    a0 = arrays[0]
    if a0.size < min_size:
        return False
    shape = a0.shape
    for a in arrays:
        if a.dtype != F32 or not a.flags.c_contiguous or a.shape != shape:
            return False
    return True


def install() -> bool:
    """Install into :mod:`pytrain.ops.backend` pytrain's 2-D float32 products, stacks of products and
    transposes (pytrain.ops.linalg), Adam updates (op_optimizers), the finite-gradient guard
    (pytrain.module), convolution columns (pytrain.ops.windows), 2-D MaxPool (op_maxpool) and Resize's
    nearest integer upsampling (op_resize), and
    route through registry.accelerate Relu, ReluGrad, MaxPoolGrad,
    SumToShape's bias case, SoftmaxCrossEntropyLoss with its gradient, Clip, FusedConv's clip and
    activations, BatchNormalization (inference), Conv (depthwise, pointwise, ungrouped 2-D),
    ConvTranspose (kernel = strides), GlobalAveragePool, HardSigmoid, HardSwish, Exp, Erf, Tanh, Pow by 2 or 3,
    LayerNormalization with its gradient, Softmax, GatherGrad and LSTM (inference) through the kernels."""
    if kernels is None:
        return False
    from pytrain.ops import backend, linalg, registry
    from pytrain.ops.wasm import conv, elementwise, gather, gelu, normalization, optimizer, softmax
    from pytrain.ops.wasm import linalg as wasm_linalg

    previous = backend.use("matmul", wasm_linalg.matmul2d)  # (linalg installed its default when imported)
    if previous is not None and previous is not wasm_linalg.matmul2d:
        wasm_linalg.FALLBACK = previous
    if hasattr(kernels, "adam"):  # a page may register the GEMM alone
        backend.use("adam", optimizer.adam)
    if hasattr(kernels, "im2col") and hasattr(kernels, "col2im"):
        backend.use("columns", conv.columns)
        backend.use("columns_adjoint", conv.columns_adjoint)
    if hasattr(kernels, "maxpool2d"):
        backend.use("max_pool", conv.max_pool)
    if hasattr(kernels, "transpose"):
        backend.use("transpose", wasm_linalg.transpose)
    if getattr(kernels, "sgemm_batched", None) is not None:
        backend.use("matmul_batched", wasm_linalg.matmul_batched)
    if hasattr(kernels, "relu") and hasattr(kernels, "relu_grad"):
        registry.accelerate("Relu", elementwise.relu)
        registry.accelerate("ReluGrad", elementwise.relu_grad, registry.PYTRAIN_DOMAIN)
    if hasattr(kernels, "maxpool_grad"):
        registry.accelerate("MaxPoolGrad", conv.max_pool_grad, registry.PYTRAIN_DOMAIN)
    if hasattr(kernels, "sum_rows"):
        registry.accelerate("SumToShape", elementwise.sum_to_shape, registry.PYTRAIN_DOMAIN)
    if hasattr(kernels, "softmax_ce") and hasattr(kernels, "softmax_ce_grad"):
        registry.accelerate("SoftmaxCrossEntropyLoss", softmax.softmax_cross_entropy)
        registry.accelerate("SoftmaxCrossEntropyLossGrad", softmax.softmax_cross_entropy_grad,
                            registry.PYTRAIN_DOMAIN)
    if getattr(kernels, "binary", None) is not None:
        for code, op in enumerate(("Add", "Sub", "Mul", "Div")):
            registry.accelerate(op, elementwise.binary(code))
    if getattr(kernels, "gemm", None) is not None:
        registry.accelerate("Gemm", wasm_linalg.gemm)
    if getattr(kernels, "clip", None) is not None:
        registry.accelerate("Clip", elementwise.clip)
        registry.accelerate("FusedConv", conv.fused_conv, registry.PYTRAIN_DOMAIN)  # pytrain/engine/fusion.py's node
    if getattr(kernels, "channel_affine", None) is not None:
        registry.accelerate("BatchNormalization", normalization.batch_normalization)
    if getattr(kernels, "depthwise_conv2d", None) is not None and getattr(kernels, "conv1x1", None) is not None:
        registry.accelerate("Conv", conv.conv)
    if getattr(kernels, "exp", None) is not None:
        registry.accelerate("Exp", elementwise.unary("exp"))
    if getattr(kernels, "erf", None) is not None:
        registry.accelerate("Erf", elementwise.unary("erf"))
    if getattr(kernels, "tanh", None) is not None:
        registry.accelerate("Tanh", elementwise.unary("tanh"))
    registry.accelerate("Pow", elementwise.power)  # (numpy products: no kernel needed)
    _install_cnn()
    if getattr(kernels, "first_non_finite", None) is not None:
        backend.use("finite", optimizer.first_non_finite)
    if getattr(kernels, "layernorm", None) is not None and getattr(kernels, "layernorm_grad", None) is not None:
        registry.accelerate("LayerNormalization", normalization.layer_normalization)
        registry.accelerate("LayerNormalizationGrad", normalization.layer_normalization_grad,
                            registry.PYTRAIN_DOMAIN)
    if getattr(kernels, "softmax", None) is not None:
        registry.accelerate("Softmax", softmax.softmax)
    if getattr(kernels, "gather_grad", None) is not None:
        registry.accelerate("GatherGrad", gather.gather_grad, registry.PYTRAIN_DOMAIN)
    gelu.install()  # Gelu and GeluGrad (gelu.c)
    return True


def _install_cnn() -> None:
    """install()'s part for the OCR CNNs (issue 32): Resize's nearest upsampling, HardSigmoid/HardSwish,
    GlobalAveragePool, ConvTranspose (kernel = strides), LSTM inference, and in a training step LSTMGrad, ConvGrad
    (ungrouped or depthwise 2-D), HardSigmoidGrad/HardSwishGrad, BatchNormTraining and BatchNormGrad, each
    where the page's kernels.wasm has its kernel."""
    from pytrain.ops import backend, registry
    from pytrain.ops.wasm import conv, elementwise, normalization, recurrent

    if getattr(kernels, "upsample_nearest", None) is not None:
        backend.use("upsample", conv.upsample)
    if getattr(kernels, "hard_activation", None) is not None:
        registry.accelerate("HardSigmoid", elementwise.hard_activation(1))
        registry.accelerate("HardSwish", elementwise.hard_activation(2))
    if getattr(kernels, "row_means", None) is not None:
        registry.accelerate("GlobalAveragePool", conv.global_average_pool)
    if getattr(kernels, "conv_transpose_tiles", None) is not None:
        registry.accelerate("ConvTranspose", conv.conv_transpose)
    if getattr(kernels, "lstm_steps", None) is not None:
        registry.accelerate("LSTM", recurrent.lstm)
    if getattr(kernels, "lstm_grad_steps", None) is not None:
        registry.accelerate("LSTMGrad", recurrent.lstm_grad, registry.PYTRAIN_DOMAIN)
    if getattr(kernels, "conv2d_grad", None) is not None:  # (depthwise_conv2d_grad came with it)
        registry.accelerate("ConvGrad", conv.conv_grad, registry.PYTRAIN_DOMAIN)
    if getattr(kernels, "hard_activation_grad", None) is not None:
        registry.accelerate("HardSigmoidGrad", elementwise.hard_activation_grad(1), registry.PYTRAIN_DOMAIN)
        registry.accelerate("HardSwishGrad", elementwise.hard_activation_grad(2), registry.PYTRAIN_DOMAIN)
    if getattr(kernels, "batchnorm_training", None) is not None:
        registry.accelerate("BatchNormTraining", normalization.batchnorm_training, registry.PYTRAIN_DOMAIN)
        registry.accelerate("BatchNormGrad", normalization.batchnorm_grad, registry.PYTRAIN_DOMAIN)
