"""pytrain.ops.wasm.linalg.matmul_batched on attention's operands (GPT-2 LoRA in the tab, issue 34): (batch, heads)
views split off a (batch, tokens, heads * size) row, whose two batch axes do not fold into one stride, go to the
kernel one call per entry of the shorter axis at the operands' own strides (no copy), with numpy's products; the
kernel is stood in for by numpy reading the same addresses (the wasm kernel itself: test_wasm_layer_kernels)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pytrain.ops.wasm import linalg


def _view(address: int, shape: tuple, strides: tuple) -> np.ndarray:
    base = np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_float)), shape=(1,))
    return np.lib.stride_tricks.as_strided(base, shape, strides)


class _NumpyBatched:
    """pytrain_sgemm_batched's arguments, computed by numpy at those addresses (element strides and leading
    dimensions, as the wasm kernel reads them); records each call's product count."""

    def __init__(self) -> None:
        self.calls = []

    def sgemm_batched(self, count, ta, tb, m, n, k, a, sa, lda, b, sb, ldb, c, sc, ldc):
        self.calls.append(count)
        for i in range(count):
            opa = _view(a + 4 * i * sa, (m, k), (4, 4 * lda) if ta else (4 * lda, 4))
            opb = _view(b + 4 * i * sb, (k, n), (4, 4 * ldb) if tb else (4 * ldb, 4))
            _view(c + 4 * i * sc, (m, n), (4 * ldc, 4))[...] = opa @ opb


@pytest.fixture
def kernel(monkeypatch):
    fake = _NumpyBatched()
    monkeypatch.setattr(linalg, "kernels", fake)
    monkeypatch.setattr(linalg, "THREADS_MIN_MACS", None)
    monkeypatch.setattr(linalg, "MIN_MACS", 1)
    monkeypatch.setattr(linalg, "threaded", lambda name, size, minimum: getattr(fake, name))
    return fake


def _heads(x: np.ndarray, lo: int, heads: int, perm: tuple) -> np.ndarray:
    b, t, _ = x.shape
    size = 64 if heads == 2 else 5
    return x[..., lo:lo + heads * size].reshape(b, t, heads, size).transpose(perm)


def test_attention_views_run_without_copies_as_numpy(kernel):
    rng = np.random.default_rng(34)
    x = rng.standard_normal((8, 64, 384)).astype(np.float32)
    q, k, v = (_heads(x, lo, 2, (0, 2, 1, 3)) for lo in (0, 128, 256))
    odd = rng.standard_normal((3, 7, 15)).astype(np.float32)
    oq, ok = _heads(odd, 0, 3, (0, 2, 1, 3)), _heads(odd, 0, 3, (0, 2, 3, 1))
    cases = [(q, np.swapaxes(k, -1, -2), [8, 8]),                      # scores: q @ k^T
             (q, np.ascontiguousarray(v), [8, 8]),                       # one operand folds, the other not
             (np.swapaxes(q, -1, -2), v, [8, 8]),                        # a gradient: q^T @ v
             (oq, ok[..., :5], [3, 3, 3]),                              # odd sizes: 3 heads of 5 over 7 tokens
             (q.transpose(1, 0, 2, 3), k.transpose(1, 0, 3, 2), [8, 8]),  # heads first: the longer axis inside
             (np.ascontiguousarray(q), np.swapaxes(k, -1, -2).copy(), [16])]   # folding axes: one call
    for a, b, calls in cases:   # (a list of each call's product count)
        kernel.calls.clear()
        got = linalg.matmul_batched(a, b)
        np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-5)
        assert kernel.calls == calls
