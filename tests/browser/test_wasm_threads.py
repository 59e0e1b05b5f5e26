"""The kernels' helper threads (web/kernels/kernels.js startThreads, threads-worker.js,
kernels-shared.wasm): where the page is cross-origin isolated, big products are split across
workers that share a WebAssembly memory, with the results of the single-thread kernel.

Kernel level in Pyodide 0.17.1 in a worker (bench/pages/threads_check.html, served isolated and
not): the threaded sgemm against the single-thread one, pytrain's routing with the threads on and
off, and a few training steps of an MLP and a CNN against CPython's losses. Site level: the app
reports its threads where the server sends COOP/COEP and trains without them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from browser_helpers import (LOAD_TIMEOUT_MS, Recorder, app_state, checkout_page, new_context, open_app,
                             pytrain_sources, wait_ms, wait_ready)

import build

ROOT = Path(__file__).resolve().parents[2]
PYODIDE = ROOT / "node_modules" / "@pyodide" / "pyodide" / "dist" / "pyodide.js"
STEPS = 6

KERNELS = r"""
import json
import numpy as np
import pytrain_wasm_kernels as k

rng = np.random.RandomState(5)
ptr = lambda x: x.__array_interface__["data"][0]
out = []
for m, n, kk in ((63, 129, 785), (200, 9, 300), (8, 4000, 50), (6, 25, 3000), (5, 7, 3), (64, 128, 784)):
    for ta in (0, 1):
        for tb in (0, 1):
            for beta in (0.0, 1.0):
                a = rng.standard_normal(((kk, m + 3) if ta else (m, kk + 3))).astype(np.float32)
                b = rng.standard_normal(((n, kk + 1) if tb else (kk, n + 1))).astype(np.float32)
                a, b = a[:, :m] if ta else a[:, :kk], b[:, :kk] if tb else b[:, :n]
                c0 = rng.standard_normal((m, n + 2)).astype(np.float32)
                c1, c2 = c0.copy(), c0.copy()
                lda, ldb = a.strides[0] // 4, b.strides[0] // 4
                args = (ta, tb, m, n, kk, 0.5, ptr(a), lda, ptr(b), ldb, beta)
                k.sgemm(*args, ptr(c1), n + 2)
                k.sgemm_threads(*args, ptr(c2), n + 2)
                oa, ob = (a.T if ta else a).astype(np.float64), (b.T if tb else b).astype(np.float64)
                scale = 0.5 * np.abs(oa) @ np.abs(ob) + beta * np.abs(c0[:, :n])
                out.append({"case": [m, n, kk, ta, tb, beta],
                            "err": float(np.max(np.abs(c1[:, :n].astype(np.float64) - c2[:, :n]) / scale)),
                            "exact": bool(np.array_equal(c1[:, :n], c2[:, :n])),
                            "padding_kept": bool(np.array_equal(c2[:, n:], c0[:, n:]))})
stacks = []
for count, m, n, kk, ta, tb in ((64, 32, 32, 64, 0, 1), (64, 32, 64, 32, 0, 0), (5, 7, 9, 11, 1, 0),
                                (3, 30, 20, 10, 1, 1), (1, 8, 8, 8, 0, 0)):
    # operands as transposed views with padded rows and gaps between the products (the strides
    # MatMulGrad's swapaxes hands matmul_batched); C likewise padded
    a = rng.standard_normal((count, (kk if ta else m) + 1, (m if ta else kk) + 3)).astype(np.float32)
    b = rng.standard_normal((count, (n if tb else kk) + 2, (kk if tb else n) + 1)).astype(np.float32)
    a = a[:, :kk, :m] if ta else a[:, :m, :kk]
    b = b[:, :n, :kk] if tb else b[:, :kk, :n]
    c0 = rng.standard_normal((count, m + 1, n + 2)).astype(np.float32)
    c1, c2 = c0.copy(), c0.copy()
    args = (count, ta, tb, m, n, kk, ptr(a), a.strides[0] // 4, a.strides[1] // 4,
            ptr(b), b.strides[0] // 4, b.strides[1] // 4)
    k.sgemm_batched(*args, ptr(c1), c1.strides[0] // 4, n + 2)
    k.sgemm_batched_threads(*args, ptr(c2), c2.strides[0] // 4, n + 2)
    want = np.matmul(np.swapaxes(a, 1, 2) if ta else a, np.swapaxes(b, 1, 2) if tb else b)
    stacks.append({"case": [count, m, n, kk, ta, tb], "exact": bool(np.array_equal(c1, c2)),
                   "err": float(np.max(np.abs(c2[:, :m, :n] - want)))})
json.dumps({"products": out, "stacks": stacks})
"""

# the training run, executed as it is by CPython (python_losses) and by Pyodide (+ ROUTED)
LOSSES = r"""
import json
import numpy as np
from pytrain.generator import artifacts, models
from pytrain.device.api import CheckpointState, Module, Optimizer

def losses(name, steps=%(steps)d):
    rng = np.random.RandomState(0)
    if name == "mlp":
        model, x = models.mlp(784, [128], 10), rng.rand(64, 784).astype(np.float32)
    else:
        model, x = models.cnn((1, 28, 28)), rng.rand(32, 1, 28, 28).astype(np.float32)
    y = rng.randint(0, 10, len(x)).astype(np.int64)
    arts = artifacts.generate_artifacts(model, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.AdamW)
    module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint), arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    out = []
    for _ in range(steps):
        out.append(float(np.asarray(module(x, y)).ravel()[0]))
        opt.step()
        module.lazy_reset_grad()
    return out
""" % {"steps": STEPS}

ROUTED = r"""
from pytrain.ops import wasm
from pytrain.ops.wasm import linalg as wl
assert wasm.install()

def run(name, threshold):
    wl.THREADS_MIN_MACS = threshold
    return json.dumps(losses(name))

def attention(threshold):
    # attention's per-head products and MatMulGrad's, through pytrain's kernels as a graph runs them
    from pytrain.ops import linalg
    from pytrain.ops.train.op_matmul_grad import matmul_grad
    from pytrain.ops.registry import OpContext
    wl.THREADS_MIN_MACS = threshold
    r = np.random.RandomState(7)
    q, kt, v = (r.standard_normal(s).astype(np.float32) for s in ((4, 2, 32, 64), (4, 2, 64, 32), (4, 2, 32, 64)))
    p = linalg.matmul(q, kt)
    ctx = OpContext(training=True, output_mask=(True, True))
    dy = r.standard_normal((4, 2, 32, 32)).astype(np.float32)
    return [p, linalg.matmul(p, v)] + list(matmul_grad(ctx, dy, q, kt))
"""

# every split element-wise / row kernel through pytrain's routing, the threads off (None) and at the shipped
# crossover: sizes just under and just over it, counts no multiple of the thread count (odd rows, odd element
# counts, Adam's parameters cut inside one), and a small case split from 0; returns (cases, splits expected)
ELEMENTWISE = r"""
from pytrain.ops import OpContext
from pytrain.ops.wasm import THREADS_MIN_ELEMENTS as T
from pytrain.ops.wasm import elementwise as welem, normalization as wnorm, optimizer as wopt, softmax as wsoftmax

shipped = dict(T)
r = np.random.RandomState(11)
f32 = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
all3 = OpContext(output_mask=(True, True, True))

def adam_run(sizes):
    def run(ctx):
        groups = [(f32(n), f32(n), f32(n) * 0.1, np.abs(f32(n))) for n in sizes]
        assert wopt.adam(groups, 0.01, 3, 0.9, 0.999, 1e-8, 0.01, 1)
        return [a for g in groups for a in (g[0], g[2], g[3])]
    return run

def seeded(fn):
    # the same inputs for the off and the on run
    def run(ctx):
        r.seed(3)
        return fn(ctx)
    return run

def rows(fn, n):  # (rows, n) inputs of about `size` elements, an odd count of rows
    return lambda size: seeded(lambda ctx: fn(ctx, (size // n) | 1, n))

kernels = {
    "exp": lambda size: seeded(lambda ctx: welem.unary("exp")(ctx, -np.abs(f32(size)))),
    "erf": lambda size: seeded(lambda ctx: welem.unary("erf")(ctx, f32(size) * 2)),
    "softmax": rows(lambda ctx, m, n: wsoftmax.softmax(ctx, f32(m, n) * 3), 32),
    "layernorm": rows(lambda ctx, m, n: wnorm.layer_normalization(all3, f32(m, n), f32(n), f32(n)), 128),
    "layernorm_grad": rows(lambda ctx, m, n: wnorm.layer_normalization_grad(
        all3, f32(m, n), f32(m, n), f32(n), f32(m, 1), np.abs(f32(m, 1)) + 0.5), 128),
    "adam": lambda size: seeded(adam_run([size // 3 - 5, 7, size - size // 3 - 2 + (size & 1 ^ 1)])),
}
cases, splits = [], 0
for name, make in kernels.items():
    t = shipped[name] or 1 << 15   # (a kernel shipped unsplit, None: its split checked from 32k)
    for size, threshold in ((t - 129, t), (t + 129, t), (1031, 0)):
        run = make(size)
        T[name] = None
        off = run(OpContext())
        T[name] = threshold
        on = run(OpContext())
        splits += size >= threshold   # (rows x n and Adam's total fall on the same side of it as size)
        cases.append({"kernel": name, "size": size, "threshold": threshold,
                      "exact": all((a is None and b is None) or np.array_equal(a, b) for a, b in zip(off, on))})
    T[name] = shipped[name]
# a NaN in the last row (a helper's part): the kernel declines the node (numpy's NaN row), split or not
x = f32(1031, 32)
x[-1, 3] = np.nan
T["softmax"] = 0
y = wsoftmax.softmax(OpContext(), x)
T["softmax"] = shipped["softmax"]
splits += 1
cases.append({"kernel": "softmax", "size": x.size, "threshold": 0, "exact": y is None})
json.dumps([cases, int(splits)])
"""

SAME_BITS = "json.dumps([bool(np.array_equal(x, y)) for x, y in zip(_on, attention(None))])"


def _run_checks(browser, isolated: bool):
    if not PYODIDE.exists():
        pytest.skip("needs node_modules (npm ci; python build.py test runs it)")
    with checkout_page(browser, "/bench/pages/threads_check.html", isolated, timeout_ms=120_000) as page:
        call = lambda op, arg=None: page.evaluate("([op, arg]) => window.__call(op, arg)", [op, arg])  # noqa: E731
        out = {"threads": call("ready"), "train": {}}
        call("sources", pytrain_sources())
        if out["threads"] > 1:
            out.update(json.loads(call("py", KERNELS)))
        call("py", LOSSES + ROUTED)
        for name in ("mlp", "cnn"):
            for label, threshold in (("on", "0"), ("off", "None")):
                before = call("calls")
                out["train"][name + "_" + label] = json.loads(call("py", "run(%r, %s)" % (name, threshold)))
                out["train"][name + "_" + label + "_threaded"] = call("calls") - before
        if out["threads"] > 1:
            before = call("calls")
            call("py", "_on = attention(0)")
            out["attention"] = {"threaded": call("calls") - before, "exact": json.loads(call("py", SAME_BITS))}
            before = call("calls")
            out["elementwise"], splits = json.loads(call("py", ELEMENTWISE))
            out["elementwise_splits"] = [splits, call("calls") - before]
        return out


@pytest.fixture(scope="module")
def isolated(browser):
    return _run_checks(browser, isolated=True)


@pytest.fixture(scope="module")
def plain(browser):
    return _run_checks(browser, isolated=False)


@pytest.fixture(scope="module")
def python_losses():
    space = {}
    exec(LOSSES, space)  # the code the browser runs, in CPython
    return {name: space["losses"](name) for name in ("mlp", "cnn")}


def test_isolated_worker_starts_helper_threads(isolated):
    assert isolated["threads"] == 2


def test_threaded_sgemm_equals_the_single_thread_kernel(isolated):
    """C is split by rows or columns, never along K: equal, or (where a thin part takes gemm.c's
    dot-product path) within float32 reassociation; C's padding between rows is left alone."""
    for r in isolated["products"]:
        assert r["err"] <= 1e-6, r
        assert r["padding_kept"], r
    assert sum(r["exact"] for r in isolated["products"]) >= len(isolated["products"]) // 2


def test_threaded_stacks_of_products_equal_the_single_thread_kernel(isolated):
    """sgemm_batched splits a stack by whole products: every product and C's padding bit for bit the
    single-thread kernel's, and numpy's product within float32 rounding."""
    for r in isolated["stacks"]:
        assert r["exact"], r
        assert r["err"] < 1e-4, r


def test_attention_products_and_gradients_split_with_the_same_bits(isolated):
    """pytrain.ops.linalg.matmul's stacks (attention's heads) and MatMulGrad's go to the helper threads
    from THREADS_MIN_MACS on, with the results of the calling thread alone."""
    assert isolated["attention"]["threaded"] >= 4
    assert all(isolated["attention"]["exact"])


def test_split_elementwise_and_row_kernels_give_the_single_thread_bits(isolated):
    """Exp, Erf, Softmax, LayerNorm, LayerNorm's gradient and Adam cut into contiguous ranges of elements or
    rows across the helper threads from THREADS_MIN_ELEMENTS on: every output bit for bit the calling thread's
    alone, just under and just over each crossover and for counts no multiple of the thread count; a NaN in a
    helper's rows of Softmax hands the node to numpy as on one thread."""
    cases = isolated["elementwise"]
    assert {c["kernel"] for c in cases} == {"exp", "erf", "softmax", "layernorm", "layernorm_grad", "adam"}
    for c in cases:
        assert c["exact"], c
    expected, split = isolated["elementwise_splits"]
    assert expected == 2 * 6 + 1 and split == expected   # over the crossover and from 0: split; under: not


@pytest.mark.parametrize("workload", ["mlp", "cnn"])
def test_training_with_threads_on_and_off_gives_cpythons_losses(isolated, python_losses, workload):
    train = isolated["train"]
    assert train[workload + "_on_threaded"] > 0 and train[workload + "_off_threaded"] == 0
    for label in ("on", "off"):
        np.testing.assert_allclose(train[workload + "_" + label], python_losses[workload], rtol=2e-4, atol=1e-5)


def test_without_isolation_no_threads_and_cpythons_losses(plain, python_losses):
    assert plain["threads"] == 1
    for workload in ("mlp", "cnn"):
        assert plain["train"][workload + "_on_threaded"] == 0
        np.testing.assert_allclose(plain["train"][workload + "_on"], python_losses[workload], rtol=2e-4, atol=1e-5)


@pytest.mark.parametrize("cross_origin_isolated", [True, False])
def test_app_reports_its_threads_and_trains(browser, cross_origin_isolated):
    """The site under COOP/COEP (build.py serve's default) runs big products on one thread per core;
    served without them (serve --no-isolation, or a host that sends neither) everything runs as before."""
    server, url = build.serve_in_thread(build.SITE, isolated=cross_origin_isolated)
    rec = Recorder()
    ctx = new_context(browser, rec)
    try:
        page = open_app(ctx, url, rec)
        wait_ready(page)
        assert page.evaluate("crossOriginIsolated") is cross_origin_isolated
        cores = page.evaluate("navigator.hardwareConcurrency")
        assert app_state(page, "a.versions.threads") == (min(cores, 8) if cross_origin_isolated and cores > 1 else 1)
        assert app_state(page, "a.versions.gemm") == "wasm-simd-fma"   # (kernels.js kernelBuild: relaxed SIMD)
        page.goto(url + "examples/widget.html")
        page.wait_for_selector("#train:not([disabled])", timeout=LOAD_TIMEOUT_MS)
        page.click("#train")
        page.wait_for_function("() => window.widgetDone !== undefined", timeout=wait_ms(180_000))
        assert page.evaluate("window.widgetDone.reason") == "finished"
        assert rec.console_errors == []
    finally:
        ctx.close()
        server.shutdown()
        server.server_close()
