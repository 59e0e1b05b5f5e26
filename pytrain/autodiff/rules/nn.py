"""Gradient rules of the ops in ``pytrain/ops/nn``: products, convolutions, pooling, Softmax, Dropout,
Resize, Attention. See :mod:`pytrain.autodiff.rules` for what a rule is."""
from __future__ import annotations

from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient


@gradient("Softmax")
def _softmax(b: B, n: N, dy: G) -> G:
    return [b.pt("SoftmaxGrad", dy[0], n.y(), axis=int(n.attr("axis", -1)))]


@gradient("LogSoftmax")
def _log_softmax(b: B, n: N, dy: G) -> G:
    return [b.pt("LogSoftmaxGrad", dy[0], n.y(), axis=int(n.attr("axis", -1)))]


# ---- linear algebra and layers ----------------------------------------------------------------
@gradient("MatMul")
def _matmul(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("MatMulGrad", [dy[0], n.x(0), n.x(1)], [n.needs(0), n.needs(1)])


@gradient("Gemm")
def _gemm(b: B, n: N, dy: G) -> G:
    # Y = alpha * A' B' + beta * C with A' = A or A^T, B' = B or B^T
    a, w, c = n.x(0), n.x(1), n.x(2)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    ta, tb = int(n.attr("transA", 0)), int(n.attr("transB", 0))
    g = dy[0]
    da = dw = dc = None
    if n.needs(0):
        da = (b.op("Gemm", g, w, alpha=alpha, transB=1 - tb) if not ta
              else b.op("Gemm", w, g, alpha=alpha, transA=tb, transB=1))
    if n.needs(1):
        dw = (b.op("Gemm", a, g, alpha=alpha, transA=1 - ta) if not tb
              else b.op("Gemm", g, a, alpha=alpha, transA=1, transB=ta))
    if c is not None and n.needs(2):
        gc = g if beta == 1.0 else b.op("Mul", g, b.scalar(beta, g))
        dc = b.unbroadcast(gc, c)
    return [da, dw, dc]


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _convolution(b: B, n: N, dy: G, grad_op: str, attr_names: "tuple[str, ...]") -> G:
    """(dX, dW, dB) of Conv or ConvTranspose: one gradient kernel taking the forward's attributes."""
    attrs = {k: n.attr(k) for k in attr_names}
    return b.pt_outputs(grad_op, [dy[0], n.x(0), n.x(1)],
                        [n.needs(0), n.needs(1), n.x(2) is not None and n.needs(2)], **attrs)


@gradient("Conv")
def _conv(b: B, n: N, dy: G) -> G:
    return _convolution(b, n, dy, "ConvGrad", _CONV_ATTRS)


@gradient("MaxPool", outputs=(0,))
def _max_pool(b: B, n: N, dy: G) -> G:
    return [b.pt("MaxPoolGrad", dy[0], n.saved(1), n.x(0), storage_order=int(n.attr("storage_order", 0)))]


_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides")


@gradient("AveragePool")
def _average_pool(b: B, n: N, dy: G) -> G:
    return [b.pt("AveragePoolGrad", dy[0], n.x(0), **{k: n.attr(k) for k in _POOL_ATTRS})]


@gradient("GlobalAveragePool")
def _global_average_pool(b: B, n: N, dy: G) -> G:
    return [b.pt("GlobalAveragePoolGrad", dy[0], n.x(0))]


@gradient("Dropout", inputs=(0,), outputs=(0,))
def _dropout(b: B, n: N, dy: G) -> G:
    return [b.pt("DropoutGrad", dy[0], n.saved(1), n.x(1))]


@gradient("GlobalMaxPool")
def _global_max_pool(b: B, n: N, dy: G) -> G:
    return [b.pt("GlobalMaxPoolGrad", dy[0], n.x(0))]


# ---- transposed convolution and resizing (ConvTranspose, Resize, Upsample) -----------------------
_CONV_TRANSPOSE_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape",
                         "pads", "strides")


@gradient("ConvTranspose")
def _conv_transpose(b: B, n: N, dy: G) -> G:
    # the adjoint of ConvTranspose is a Conv: ConvTransposeGrad runs it (docs/ops.md)
    return _convolution(b, n, dy, "ConvTransposeGrad", _CONV_TRANSPOSE_ATTRS)


@gradient("Resize", inputs=(0,))
def _resize(b: B, n: N, dy: G) -> G:
    if n.n_inputs == 2:  # Resize-10 (X, scales): asymmetric coordinates, onnxruntime's nearest rounding
        return [b.pt("ResizeGrad", dy[0], n.x(0), None, n.x(1), mode=n.attr("mode", "nearest"),
                     coordinate_transformation_mode="asymmetric", nearest_mode="simple")]
    return [b.pt("ResizeGrad", dy[0], n.x(0), n.x(1), n.x(2), n.x(3), **n.attrs)]


@gradient("Upsample", inputs=(0,))
def _upsample(b: B, n: N, dy: G) -> G:
    scales = n.x(1)
    if scales is None:  # Upsample-7: scales is an attribute
        scales = b.const([float(s) for s in n.attr("scales", [])], hint="upsample_scales")
    return [b.pt("ResizeGrad", dy[0], n.x(0), None, scales, mode=n.attr("mode", "nearest"),
                 coordinate_transformation_mode="asymmetric", nearest_mode="simple")]


_ATTENTION_ATTRS = ("is_causal", "kv_num_heads", "q_num_heads", "scale", "softcap", "softmax_precision",
                    "left_window_size", "right_window_size")


@gradient("Attention", inputs=(0, 1, 2, 3, 4, 5))
def _attention(b: B, n: N, dy: G) -> G:
    # Y only: present_key/present_value (a cache for the next call) and the qk_matmul_output debug
    # output are not trained through; a loss that depends on them is refused, not silently cut.
    for i, name in ((1, "present_key"), (2, "present_value"), (3, "qk_matmul_output")):
        if i < len(dy) and dy[i] is not None:
            from pytrain.errors import UnsupportedOpError
            from pytrain.engine.graph import node_label
            raise UnsupportedOpError("Attention node %s: the loss depends on its output %s, whose gradient "
                                     "pytrain does not implement (only Y is differentiable)" % (node_label(n.node), name))
    attrs = {k: n.attr(k) for k in _ATTENTION_ATTRS if n.attr(k) is not None}
    return b.pt_outputs("AttentionGrad", [dy[0]] + [n.x(i) for i in range(min(n.n_inputs, 7))],
                        [n.needs(i) for i in range(6)], **attrs)
