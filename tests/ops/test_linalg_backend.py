"""Every matrix product goes through pytrain.ops.linalg, so an implementation installed for it in
pytrain.ops.backend (einsum, or the WebAssembly GEMM in the browser) changes training only by
float32 rounding."""
from __future__ import annotations

import numpy as np

from pytrain.generator import artifacts, models
from pytrain.ops import backend, linalg
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
        previous = backend.use("matmul", einsum_product)
        try:
            losses, params = _train(model, x, y)
        finally:
            backend.use("matmul", previous)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
        for k in ref_params:
            np.testing.assert_allclose(params[k], ref_params[k], rtol=1e-4, atol=1e-6)
    assert calls, "the backend was never used"


def test_transpose_backend_and_accelerated_kernels_are_used_and_can_decline():
    """The "transpose" backend and registry.accelerate (how the browser's wasm kernels plug
    in): used where they answer, the numpy kernels where they return None, removable."""
    from pytrain.ops import registry

    rng = np.random.default_rng(1)
    model = models.cnn((1, 8, 8), 4, channels=(3,), hidden=8)
    x = rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 4, 8).astype(np.int64)
    ref_losses, ref_params = _train(model, x, y)
    seen = {"transpose": 0, "Relu": 0, "ReluGrad": 0}

    def transpose(a):
        seen["transpose"] += 1
        return None if a.shape[0] % 2 else np.ascontiguousarray(a.T)  # declines odd row counts

    def relu(ctx, X):
        seen["Relu"] += 1
        return (np.where(X < 0, np.float32(0), X),)

    def relu_grad(ctx, dY, Y):
        seen["ReluGrad"] += 1
        return None  # always leaves it to numpy

    previous = backend.use("transpose", transpose)
    registry.accelerate("Relu", relu)
    registry.accelerate("ReluGrad", relu_grad, registry.PYTRAIN_DOMAIN)
    try:
        losses, params = _train(model, x, y)
    finally:
        backend.use("transpose", previous)
        registry.accelerate("Relu", None)
        registry.accelerate("ReluGrad", None, registry.PYTRAIN_DOMAIN)
    assert all(seen.values()), seen
    np.testing.assert_array_equal(losses, ref_losses)
    for k in ref_params:
        np.testing.assert_array_equal(params[k], ref_params[k])
    assert registry.get_kernel("Relu").fn is registry.get_kernel("Relu").numpy_fn


def test_sequence_times_matrix_goes_to_the_backend_as_one_product():
    """(batch, tokens, k) @ (k, n), forward and in MatMulGrad's dA: the rows folded into one 2-D product."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 5, 4)).astype(np.float32)
    b = rng.standard_normal((4, 6)).astype(np.float32)
    calls = []

    def einsum_product(x, y):
        calls.append((x.shape, y.shape))
        return np.einsum("ij,jk->ik", x, y)

    previous = backend.use("matmul", einsum_product)
    try:
        got = linalg.matmul(a, b)
        got_t = linalg.matmul(got, b.T)  # dA's product: dY @ B^T with a transposed view
    finally:
        backend.use("matmul", previous)
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_t, np.matmul(np.matmul(a, b), b.T), rtol=1e-5, atol=1e-5)
    assert calls == [((15, 4), (4, 6)), ((15, 6), (6, 4))]
