"""Every matrix product goes through pytrain.ops.linalg, so a backend swapped in there (einsum,
or the WebAssembly GEMM in the browser) changes training only by float32 rounding."""
from __future__ import annotations

import numpy as np

from pytrain import artifacts, models
from pytrain.ops import linalg
from train_helpers import train_steps


def _train(model, x, y, steps=5):
    arts = artifacts.generate_artifacts(model, optimizer=artifacts.SGD(momentum=0.9))
    losses, state = train_steps(arts, [(x, y)] * steps)
    return losses, {k: p.data.copy() for k, p in state.parameters.items()}


def test_backend_swap_changes_only_rounding():
    rng = np.random.default_rng(0)
    cases = [(models.mlp(12, [16], 4), rng.standard_normal((8, 12)).astype(np.float32)),
             (models.cnn((1, 8, 8), 4, channels=(3,), hidden=8), rng.standard_normal((8, 1, 8, 8)).astype(np.float32))]
    y = rng.integers(0, 4, 8).astype(np.int64)
    calls = []

    def einsum_product(a, b):
        calls.append(a.shape)
        return np.einsum("ij,jk->ik", a, b)

    for model, x in cases:
        ref_losses, ref_params = _train(model, x, y)
        previous = linalg.set_backend(einsum_product)
        try:
            losses, params = _train(model, x, y)
        finally:
            linalg.set_backend(previous)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
        for k in ref_params:
            np.testing.assert_allclose(params[k], ref_params[k], rtol=1e-4, atol=1e-6)
    assert calls, "the backend was never used"
