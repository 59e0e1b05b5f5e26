"""Erf, and the vectorised ``erf`` function Gelu and its gradient share (numpy has no erf and
Pyodide has no scipy)."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel

# Least-squares polynomial fits (made for pytrain on Chebyshev nodes against math.erf):
# |x| <= 1:     erf(x)  = x * P(x^2)                     (abs error < 1e-12)
# 1 < |x| < 4:  erfc(x) = exp(-x^2) * Q((x - 2.5) / 1.5)  (abs error < 6e-10)
# |x| >= 4:     erf(x)  = sign(x)                        (erfc(4) = 1.5e-8, below float32's 6e-8 ulp at 1)
_SMALL = (1.1283791670946948, -0.3761263888986918, 0.11283791313496623, -0.02686613362525785,
          0.005223785006112979, -0.0008542670545595959, 0.0001195694654667821,
          -1.3911699342415264e-05, 1.0595271079875527e-06)
_LARGE = (0.21080636427594102, -0.11152100469538209, 0.056110472584287766, -0.027005725289740937,
          0.012489703671450964, -0.005567332909518338, 0.0024017016955141892,
          -0.0010171177743329984, 0.00041450809779073223, -0.00014394859786337133,
          5.494724823334082e-05, -3.6928723582809836e-05, 1.381908900376096e-05)


def _horner(coeffs: tuple, t: np.ndarray) -> np.ndarray:
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= t
        acc += c
    return acc


def erf(x: np.ndarray) -> np.ndarray:
    """Element-wise error function in ``x``'s float dtype; absolute error below 2e-8.

    Evaluated in float64 so float32 results are correctly rounded nearly everywhere."""
    x = np.asarray(x)
    a = np.abs(x.astype(np.float64))
    small = a <= 1.0
    t = np.minimum(a, 1.0)
    y_small = t * _horner(_SMALL, t * t)
    u = np.clip(a, 1.0, 4.0)
    y_large = 1.0 - np.exp(-u * u) * _horner(_LARGE, (u - 2.5) * (1.0 / 1.5))
    y = np.where(small, y_small, np.where(a >= 4.0, 1.0, y_large))
    y = np.where(np.isnan(x), np.nan, np.copysign(y, x))
    return np.asarray(y, dtype=x.dtype if x.dtype.kind == "f" else np.float64)


@kernel("Erf")
def erf_op(ctx, X):
    return (erf(X),)
