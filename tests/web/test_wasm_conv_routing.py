"""pytrain/ops/wasm/conv.py's routing (conv and conv_grad: the per-geometry plans, the depthwise lanes path for
narrow rows, the row walk, conv2d_grad for the 1x1 layers, squeeze-excite's dB over planes of one) run in Node.js
through kernels.js against the numpy Conv and ConvGrad kernels they stand in for, on MobileNetV3's blocks at odd
sizes. The committed kernels.wasm (test_wasm_gemm.py's harness; the kernels themselves are tested on every build
in test_wasm_layer_kernels.py)."""
from __future__ import annotations

import weakref

import numpy as np
import pytest

from test_wasm_gemm import COMMITTED_WASM, NODE, _call_kernels

from pytrain.ops import OpContext, get_kernel
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.ops.wasm import conv as wasm_conv

pytestmark = pytest.mark.skipif(NODE is None or not COMMITTED_WASM.exists(), reason="no Node or no kernels.wasm")

#: per kernel: how many pointer arguments lead its argument list, which of them it writes, and that its last
#: argument is a pointer too (the scratch)
_POINTERS = {"depthwise_conv2d": (4, (3,)), "depthwise_conv2d_grad": (5, (3, 4)), "conv2d_grad": (5, (3, 4)),
             "conv1x1": (4, (3,)), "conv2d": (4, (3,))}


class _NodeKernels:
    """pytrain.ops.wasm's ``kernels`` and ``ptr`` for conv.py, in Node: a pointer is 1 + an index into the arrays
    handed over (0 stays "none"); calls are kept and run together by :meth:`run`, which writes back what each
    kernel wrote into the arrays conv.py returned. Only weak references are kept until the call: an array freed
    before the kernel runs (its memory reused in the tab) fails the test."""

    def __init__(self) -> None:
        self.refs, self.arrays, self.calls = [], [], []

    def ptr(self, a: np.ndarray) -> int:
        assert a.dtype == np.float32 and a.flags.c_contiguous
        self.refs.append(weakref.ref(a))
        return len(self.refs)

    def __getattr__(self, name: str):
        if name not in _POINTERS:
            raise AttributeError(name)
        return lambda *args: self._call(name, args)

    def _call(self, name: str, args: tuple) -> None:
        lead = _POINTERS[name][0]
        for p in list(args[:lead]) + [args[-1]]:
            if p:
                assert self.refs[p - 1]() is not None, "%s: an argument's array was freed before the call" % name
        self.arrays = [r() for r in self.refs]  # (held from here on)
        self.calls.append((name, args))

    def run(self, tmp_path) -> None:
        cases, inputs, targets = [], [], []
        for name, args in self.calls:
            lead, written = _POINTERS[name]
            ptrs = list(args[:lead]) + [args[-1]]
            bufs, refs, read = [], [], []
            for i, p in enumerate(ptrs):
                if not p:
                    refs.append(0)
                    continue
                a = self.arrays[p - 1]
                if i in written:
                    read.append(len(bufs))
                    targets.append(a)
                refs.append("$%d" % len(bufs))
                bufs.append({"len": a.size, "fill": True})
                inputs.append(a)
            cases.append({"fn": name, "buffers": bufs, "read": read,
                          "args": refs[:lead] + list(args[lead:-1]) + refs[lead:]})
        for a, g in zip(targets, _call_kernels(COMMITTED_WASM, tmp_path, cases, inputs)):
            a.ravel()[...] = g


#: (X shape, W shape, group, strides, pads): MobileNetV3's depthwise 5x5 over 2x6 and 3x12 planes (lanes, N odd),
#: the same with one image (the row walk), a strided one, squeeze-excite's 1x1 over planes of one, a pointwise 1x1
CASES = {
    "depthwise-lanes": ((5, 7, 2, 6), (7, 1, 5, 5), 7, (1, 1), (2, 2, 2, 2)),
    "depthwise-lanes-strided": ((3, 6, 3, 13), (12, 1, 5, 5), 6, (2, 2), (2, 1, 2, 2)),
    "depthwise-rows": ((1, 5, 3, 12), (5, 1, 5, 5), 5, (1, 1), (2, 2, 2, 2)),
    "squeeze-excite": ((5, 36, 1, 1), (9, 36, 1, 1), 1, (1, 1), (0, 0, 0, 0)),
    "pointwise": ((3, 24, 3, 12), (40, 24, 1, 1), 1, (1, 1), (0, 0, 0, 0)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_conv_and_conv_grad_routing_equal_numpy(tmp_path, monkeypatch, name):
    """conv.py's Conv and ConvGrad (every gradient, and dX or dW alone) give the numpy kernels' values within float32
    rounding of the sum of |terms|; a second call of the same geometry (its cached plan) gives the same."""
    kern = _NodeKernels()
    monkeypatch.setattr(wasm_conv, "kernels", kern)
    monkeypatch.setattr(wasm_conv, "ptr", kern.ptr)
    monkeypatch.setattr(wasm_conv, "_KEPT", {})  # (the kept scratch's address is this test's stub's)
    xs, ws, group, strides, pads = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    attrs = dict(group=group, strides=list(strides), pads=list(pads), dilations=[1, 1])
    conv, conv_grad = get_kernel("Conv").numpy_fn, get_kernel("ConvGrad", PYTRAIN_DOMAIN).numpy_fn
    y_want = conv(OpContext(), x, w, b, **attrs)[0]
    dy = rng.standard_normal(y_want.shape).astype(np.float32)
    masks = [(True, True, True), (True, False, False), (False, True, True)]
    got = [wasm_conv.conv(OpContext(), x, w, b, **attrs), wasm_conv.conv(OpContext(), x, w, b, **attrs)]
    got += [wasm_conv.conv_grad(OpContext(output_mask=m), dy, x, w, **attrs) for m in masks]
    assert len(kern.calls) == 5 and all(g is not None for g in got)
    if name.startswith("depthwise"):  # the lanes path is the one given scratch
        assert all(bool(args[-1]) == ("lanes" in name) for _, args in kern.calls)
    kern.run(tmp_path)
    y_mag = conv(OpContext(), np.abs(x), np.abs(w), np.abs(b), **attrs)[0]
    for (y,) in got[:2]:
        assert np.all(np.abs(y - y_want) <= 1e-6 * y_mag + 1e-30)
    want = conv_grad(OpContext(output_mask=(True, True, True)), dy, x, w, **attrs)
    mag = conv_grad(OpContext(output_mask=(True, True, True)), np.abs(dy), np.abs(x), np.abs(w), **attrs)
    for mask, grads in zip(masks, got[2:]):
        for on, g, ref, m in zip(mask, grads, want, mag):
            if not on:
                assert g is None
                continue
            assert g.shape == ref.shape and g.dtype == np.float32
            assert np.all(np.abs(g - ref) <= 4e-6 * m + 1e-30), np.max(np.abs(g - ref))
