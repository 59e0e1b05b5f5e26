"""Erf, and the vectorised ``erf`` function Gelu shares (numpy has no erf and Pyodide has no scipy)."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel

# Least-squares polynomial fits (made for pytrain on Chebyshev nodes against math.erf):
# |x| <= 1:     erf(x)  = x * P(x^2)                     (abs error < 1.2e-9)
# 1 < |x| < 4:  erfc(x) = exp(-x^2) * Q((x - 2.5) / 1.5)  (abs error < 6e-10)
# |x| >= 4:     erf(x)  = sign(x)                        (erfc(4) = 1.5e-8, below float32's 6e-8 ulp at 1)
_SMALL = (1.1283791658815017, -0.37612626903580376, 0.1128359746348734, -0.026854328796029652,
          0.005189311942604131, -0.0008018854991977837, 7.882497107054017e-05)
_LARGE = (0.21080636427594102, -0.11152100469538209, 0.056110472584287766, -0.027005725289740937,
          0.012489703671450964, -0.005567332909518338, 0.0024017016955141892,
          -0.0010171177743329984, 0.00041450809779073223, -0.00014394859786337133,
          5.494724823334082e-05, -3.6928723582809836e-05, 1.381908900376096e-05)

# Work in blocks that stay in cache: the polynomial makes ~20 passes over each block.
_BLOCK = 1 << 14


def _horner(coeffs: tuple, t: np.ndarray) -> np.ndarray:
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= t
        acc += c
    return acc


def _erf_block(x: np.ndarray, out: np.ndarray) -> None:
    a = np.abs(x, dtype=np.float64)
    t = np.minimum(a, 1.0)
    y = _horner(_SMALL, t * t)
    y *= t
    big = np.flatnonzero(a > 1.0)  # usually a minority: only they pay for exp and the long fit
    if big.size:
        u = np.minimum(a[big], 4.0)
        yl = _horner(_LARGE, (u - 2.5) * (1.0 / 1.5))
        yl *= np.exp(-(u * u))
        np.subtract(1.0, yl, out=yl)
        yl[u >= 4.0] = 1.0
        y[big] = yl
    np.copysign(y, x, out=out, casting="unsafe")  # NaN stays NaN: it fails every comparison


def erf(x: np.ndarray) -> np.ndarray:
    """Element-wise error function, in ``x``'s dtype for floats (float64 otherwise); absolute
    error below 2e-8. Evaluated in float64 so float32 results are correctly rounded nearly always."""
    x = np.asarray(x)
    flat = x.reshape(-1)
    out = np.empty(flat.shape, dtype=x.dtype if x.dtype.kind == "f" else np.float64)
    for s in range(0, flat.size, _BLOCK):
        _erf_block(flat[s:s + _BLOCK], out[s:s + _BLOCK])
    return out.reshape(x.shape)


@kernel("Erf")
def erf_op(ctx, X):
    return (erf(X),)
