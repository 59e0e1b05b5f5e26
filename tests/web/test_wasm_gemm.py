"""The WebAssembly SIMD sgemm (web/kernels/kernels.wasm), run in Node.js against numpy.

The kernel is rebuilt with clang when clang is installed (and the committed
kernels.wasm is tested as well), then driven through the real loader, kernels.js,
with a WebAssembly.Memory standing in for Pyodide's heap. Every test runs on both builds:
kernels.wasm and the FMA build, kernels-fma.wasm (gemm.c's multiply-adds as relaxed SIMD's
f32x4.relaxed_madd; its fresh build needs a newer clang than Debian's: $FMA_CC or PyPI's ziglang).
The two builds round differently (fused or not): nothing here compares one build's bits with the other's.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "web" / "kernels"
COMMITTED_WASM = KERNELS / "kernels.wasm"
COMMITTED_FMA = KERNELS / "kernels-fma.wasm"

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed")


def node(wasm: Path) -> list:
    """The command running Node on ``wasm``: Node 20 validates the FMA build's relaxed SIMD only behind a flag."""
    return [NODE, "--experimental-wasm-relaxed-simd"] if "-fma" in wasm.name else [NODE]


def shared_build(wasm: Path) -> Path:
    """The helper threads' build (build.sh's shared-memory twin) of ``wasm``."""
    return wasm.with_name(wasm.stem + "-shared.wasm")

# (transA, transB, M, N, K, alpha, beta, extra leading-dimension padding)
CASES = [
    (0, 0, 63, 129, 785, 1.0, 0.0, 0),
    (0, 1, 63, 129, 785, 1.0, 0.0, 0),
    (1, 0, 63, 129, 785, 1.0, 0.0, 0),
    (1, 1, 63, 129, 785, 1.0, 0.0, 0),
    (0, 0, 64, 128, 784, 1.0, 0.0, 0),
    (0, 1, 64, 128, 784, 1.0, 0.0, 0),
    (1, 0, 128, 784, 64, 1.0, 0.0, 0),
    (0, 0, 64, 784, 128, 1.0, 0.0, 0),
    (0, 0, 63, 129, 785, 0.5, 2.0, 3),
    (0, 1, 17, 33, 300, -1.5, 1.0, 5),
    (1, 0, 5, 7, 3, 2.0, -0.5, 1),
    (1, 1, 9, 13, 11, 1.0, 0.25, 2),
    (0, 0, 1, 1, 1, 1.0, 0.0, 0),
    (0, 1, 1, 10, 600, 1.0, 0.0, 0),
    (1, 0, 600, 1, 1, 1.0, 1.0, 0),
    (0, 0, 130, 520, 257, 1.0, 0.0, 0),  # crosses MC, NC and KC block edges
    (0, 1, 6, 25, 4099, 0.5, 1.0, 3),  # the dot-product path: DOT_KC chunks, k tail, ragged N
    (0, 1, 3, 2, 2051, 1.0, 0.0, 0),
    (0, 0, 6, 8, 0, 1.0, 0.5, 0),  # K == 0: C = beta * C
    (0, 0, 6, 8, 5, 0.0, 2.0, 0),  # alpha == 0
]


def _fma_cc() -> dict:
    """build.sh's environment for the FMA build ($FMA_CC as given, else PyPI's ziglang), {} when there is none."""
    if os.environ.get("FMA_CC"):
        return {"FMA_CC": os.environ["FMA_CC"]}
    if importlib.util.find_spec("ziglang") is not None:
        return {"FMA_CC": "%s -m ziglang cc" % sys.executable, "FMA_TARGET": "wasm32-freestanding"}
    return {}


def _build(tmp: Path, fma: bool = False) -> Path:
    """build.sh into ``tmp``: the plain pair, or (``fma``) the FMA pair as well; the main build's path."""
    out = tmp / "kernels.wasm"
    env = dict(os.environ, **(_fma_cc() if fma else {"FMA": "0"}))
    subprocess.run(["sh", str(KERNELS / "build.sh"), str(out)], check=True, capture_output=True, env=env)
    return out.with_name("kernels-fma.wasm") if fma else out


@pytest.fixture(scope="module", params=["committed", "fresh", "committed-fma", "fresh-fma"])
def wasm_path(request, tmp_path_factory) -> Path:
    fma = request.param.endswith("-fma")
    if request.param.startswith("committed"):
        wasm = COMMITTED_FMA if fma else COMMITTED_WASM
        if not wasm.exists():
            pytest.skip("no committed %s" % wasm.name)
        return wasm
    if shutil.which("clang") is None:
        pytest.skip("clang is not installed; the committed kernels.wasm is tested instead")
    if fma and not _fma_cc():
        pytest.skip("no clang with standard relaxed SIMD ($FMA_CC or ziglang); the committed kernels-fma.wasm is tested")
    return _build(tmp_path_factory.mktemp("wasm"), fma)


def _op(x: np.ndarray, trans: int) -> np.ndarray:
    return x.T if trans else x


def _run_cases(wasm: Path, tmp: Path, rng: np.random.Generator):
    """Every case through the kernel-call driver in one Node process, operands 4 bytes off
    16-byte alignment on purpose; returns (cases, inputs, outputs)."""
    meta, calls, inputs = [], [], []
    for ta, tb, m, n, k, alpha, beta, pad in CASES:
        a_rows, a_cols = (k, m) if ta else (m, k)
        b_rows, b_cols = (n, k) if tb else (k, n)
        lda, ldb, ldc = a_cols + pad, b_cols + pad, n + pad
        a = rng.standard_normal((a_rows, lda)).astype(np.float32)
        b = rng.standard_normal((b_rows, ldb)).astype(np.float32)
        c = rng.standard_normal((m, ldc)).astype(np.float32)
        if beta == 0.0:
            c[:, :n] = np.nan  # BLAS semantics: beta == 0 ignores C entirely
        inputs.append((a, b, c))
        meta.append(dict(ta=ta, tb=tb, m=m, n=n, k=k, alpha=alpha, beta=beta))
        calls.append({"fn": "sgemm", "skew": 4, "read": [2],
                      "buffers": [{"len": x.size, "fill": True} for x in (a, b, c)],
                      "args": [ta, tb, m, n, k, alpha, "$0", lda, "$1", ldb, beta, "$2", ldc]})
    flat = _call_kernels(wasm, tmp, calls, [x for abc in inputs for x in abc])
    return meta, inputs, [got.reshape(c.shape) for got, (_, _, c) in zip(flat, inputs)]


def test_sgemm_matches_numpy(wasm_path: Path, tmp_path: Path):
    rng = np.random.default_rng(0)
    meta, inputs, outs = _run_cases(wasm_path, tmp_path, rng)
    for mt, (a, b, c0), got in zip(meta, inputs, outs):
        m, n, k = mt["m"], mt["n"], mt["k"]
        op_a = _op(a[:, : (m if mt["ta"] else k)], mt["ta"])
        op_b = _op(b[:, : (k if mt["tb"] else n)], mt["tb"])
        c_in = np.nan_to_num(c0[:, :n]) if mt["beta"] == 0.0 else c0[:, :n]
        alpha, beta = np.float32(mt["alpha"]), np.float32(mt["beta"])
        want = alpha * (op_a @ op_b) + beta * c_in
        # Error allowed: float32 rounding relative to the size of the terms summed.
        magnitude = abs(alpha) * (np.abs(op_a) @ np.abs(op_b)) + abs(beta) * np.abs(c_in) + 1e-30
        err = np.abs(got[:, :n] - want) / magnitude
        assert np.all(np.isfinite(got[:, :n])), mt
        assert err.max() < 1e-5, (mt, float(err.max()))
        # Padding columns beyond n (ldc > n) must be untouched.
        np.testing.assert_array_equal(got[:, n:], c0[:, n:], err_msg=str(mt))


THREADS_DRIVER = r"""
const [kernelsJs, wasm, shared, casesJson] = process.argv.slice(2);
const K = require(kernelsJs);
(async () => {
  const memory = new WebAssembly.Memory({ initial: 256 });
  const g = await K.instantiateWithMemory(wasm, memory);
  const team = await K.startThreads(shared, g, { count: 3 });
  const out = [];
  let seed = 1;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
  for (const [ta, tb, M, N, KK, alpha, beta, pad] of JSON.parse(casesJson)) {
    const lda = (ta ? M : KK) + pad, ldb = (tb ? KK : N) + pad, ldc = N + pad;
    const fa = (ta ? KK : M) * lda, fb = (tb ? N : KK) * ldb, fc = M * ldc;
    const A = 64 * 65536 + 4, B = A + fa * 4, C1 = B + fb * 4, C2 = C1 + fc * 4;
    if (C2 + fc * 4 > memory.buffer.byteLength) memory.grow(Math.ceil((C2 + fc * 4 - memory.buffer.byteLength) / 65536));
    let f = new Float32Array(memory.buffer);
    for (let i = 0; i < fa + fb; i++) f[A / 4 + i] = rand();
    for (let i = 0; i < fc; i++) f[C1 / 4 + i] = f[C2 / 4 + i] = rand();
    g.sgemm(ta, tb, M, N, KK, alpha, A, lda, B, ldb, beta, C1, ldc);
    team.sgemm(ta, tb, M, N, KK, alpha, A, lda, B, ldb, beta, C2, ldc);
    f = new Float32Array(memory.buffer);
    let diff = 0, scale = 0;
    for (let i = 0; i < fc; i++) {
      diff = Math.max(diff, Math.abs(f[C1 / 4 + i] - f[C2 / 4 + i]));
      scale = Math.max(scale, Math.abs(f[C1 / 4 + i]));
    }
    out.push({ diff, scale });
  }
  console.log(JSON.stringify({ out, split: team.calls }));
  team.stop();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_threaded_sgemm_equals_the_single_thread_kernel(wasm_path: Path, tmp_path: Path):
    """kernels.js startThreads (two helper threads on kernels-shared.wasm, Node's worker_threads): every
    case, padding columns included, equals the single-thread kernel's result (float32 reassociation at
    most, where a thin part takes the dot-product path)."""
    shared = shared_build(wasm_path)
    driver = tmp_path / "threads.js"
    driver.write_text(THREADS_DRIVER)
    res = json.loads(subprocess.run([*node(wasm_path), str(driver), str(KERNELS / "kernels.js"), str(wasm_path), str(shared),
                                     json.dumps(CASES)], check=True, capture_output=True, text=True,
                                    timeout=120).stdout)
    assert res["split"] >= len(CASES) // 2   # most cases are big enough to split
    for case, r in zip(CASES, res["out"]):
        assert r["diff"] <= 1e-5 * max(1.0, r["scale"]), (case, r)


def test_build_has_no_shadow_stack_use(tmp_path: Path):
    """build.sh refuses binaries that spill to the C stack (it would land in Pyodide's heap); the committed
    FMA builds (another clang) do not either. Debian's llvm-objdump 14 shows relaxed_madd (fd 85 02) as
    <unknown>: the check holds only if that is the one opcode it does not know (the listing stays in step)."""
    if shutil.which("clang") is None or shutil.which("llvm-objdump") is None:
        pytest.skip("needs clang and llvm-objdump")
    builds = [_build(tmp_path)] + [w for w in (COMMITTED_FMA, shared_build(COMMITTED_FMA)) if w.exists()]
    for wasm in builds:
        dis = subprocess.run(["llvm-objdump", "-d", str(wasm)], capture_output=True, text=True,
                             check=True).stdout
        assert "global.get" not in dis and "global.set" not in dis, wasm.name
        unknown = [line for line in dis.splitlines() if "<unknown>" in line]
        assert all(line.split(":", 1)[1].split() == ["fd", "85", "02", "<unknown>"] for line in unknown), wasm.name
        assert bool(unknown) == ("-fma" in wasm.name), wasm.name   # (the FMA build's products do use it)


@pytest.mark.parametrize("wasm", [COMMITTED_WASM, COMMITTED_FMA, shared_build(COMMITTED_WASM), shared_build(COMMITTED_FMA)],
                         ids=lambda p: p.name)
def test_committed_wasm_exports(wasm):
    """Each committed build imports its memory alone (the shared twins a shared one) and exports the same kernels."""
    if not wasm.exists():
        pytest.skip("no committed %s" % wasm.name)
    script = ("const m = new WebAssembly.Module(require('fs').readFileSync(process.argv[1]));"
              "console.log(JSON.stringify([WebAssembly.Module.imports(m), "
              "WebAssembly.Module.exports(m).map(e => e.name).sort()]))")
    res = subprocess.run([*node(wasm), "-e", script, str(wasm)], capture_output=True,
                         text=True, check=True)
    imports, exports = json.loads(res.stdout)
    assert imports == [{"module": "env", "name": "memory", "kind": "memory"}]
    assert exports == ["pytrain_adam", "pytrain_batchnorm_grad", "pytrain_batchnorm_training", "pytrain_binary", "pytrain_binary_rows", "pytrain_channel_affine",
                       "pytrain_clip", "pytrain_col2im", "pytrain_conv1x1", "pytrain_conv2d",
                       "pytrain_conv2d_grad", "pytrain_conv_transpose_tiles", "pytrain_depthwise_conv2d",
                       "pytrain_depthwise_conv2d_grad", "pytrain_erf", "pytrain_exp",
                       "pytrain_first_non_finite", "pytrain_gather_grad", "pytrain_gelu_erf",
                       "pytrain_gelu_erf_grad", "pytrain_gelu_tanh", "pytrain_gelu_tanh_grad", "pytrain_gemm", "pytrain_hard_activation",
                       "pytrain_hard_activation_grad",
                       "pytrain_im2col", "pytrain_layernorm", "pytrain_layernorm_grad", "pytrain_lstm_grad_steps", "pytrain_lstm_steps",
                       "pytrain_maxpool2d", "pytrain_maxpool_grad", "pytrain_relu", "pytrain_relu_grad",
                       "pytrain_row_means", "pytrain_sgemm", "pytrain_sgemm_batched", "pytrain_sgemm_work_bytes",
                       "pytrain_softmax", "pytrain_softmax_ce", "pytrain_softmax_ce_grad", "pytrain_softmax_ce_planes",
                       "pytrain_softmax_ce_planes_grad", "pytrain_sum_rows",
                       "pytrain_tanh", "pytrain_transpose", "pytrain_upsample_nearest"]  # tests/web/test_wasm_layer_kernels.py tests the second batch


# Calls one kernel (an export, or kernels.js's sgemm) per case of calls.json. Each case lists float32
# buffers ("fill": the next values of in.bin, or zeros; or "ints": int32 values, "$i" = the address
# of buffer i), placed one after another ("skew" bytes off 16-byte alignment), the arguments (the
# same "$i") and the buffers to read back, which are written one after the other to out.bin (then
# the kernel's return value when "ret" is set).
CALL_DRIVER = r"""
const fs = require("fs");
const [gemmJs, wasm, dir] = process.argv.slice(2);
const { instantiateWithMemory } = require(gemmJs);
(async () => {
  const cases = JSON.parse(fs.readFileSync(dir + "/calls.json"));
  const data = new Float32Array(new Uint8Array(fs.readFileSync(dir + "/in.bin")).buffer);
  const memory = new WebAssembly.Memory({ initial: 16 });
  const k = await instantiateWithMemory(wasm, memory);
  const out = [];
  let off = 0;
  for (const c of cases) {
    const ptrs = [];
    let end = k.workPtr + k.workBytes + 64 + (c.skew || 0);
    for (const b of c.buffers) { ptrs.push(end); end += 4 * b.len; }
    if (end + 64 > memory.buffer.byteLength) memory.grow(Math.ceil((end + 64 - memory.buffer.byteLength) / 65536));
    const resolve = (a) => (typeof a === "string" ? ptrs[Number(a.slice(1))] : a);
    c.buffers.forEach((b, i) => {
      if (b.ints) { new Int32Array(memory.buffer, ptrs[i], b.len).set(b.ints.map(resolve)); return; }
      const view = new Float32Array(memory.buffer, ptrs[i], b.len);
      if (b.fill) { view.set(data.subarray(off, off + b.len)); off += b.len; } else view.fill(0);
    });
    const args = c.args.map(resolve);
    const ret = k[c.fn](...args);
    for (const i of c.read) out.push(new Float32Array(memory.buffer, ptrs[i], c.buffers[i].len).slice());
    if (c.ret) out.push(new Float32Array([ret]));
  }
  const all = new Float32Array(out.reduce((s, x) => s + x.length, 0));
  let o = 0;
  for (const x of out) { all.set(x, o); o += x.length; }
  fs.writeFileSync(dir + "/out.bin", Buffer.from(all.buffer));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def _call_kernels(wasm: Path, tmp: Path, cases: list, inputs: list) -> list:
    """Run CALL_DRIVER on ``cases`` with the filled buffers' values ``inputs`` (in order);
    returns every read-back buffer as a flat float32 array."""
    (tmp / "calls.json").write_text(json.dumps(cases))
    np.concatenate([np.asarray(x, np.float32).ravel() for x in inputs]).tofile(tmp / "in.bin")
    driver = tmp / "calls.js"
    driver.write_text(CALL_DRIVER)
    subprocess.run([*node(wasm), str(driver), str(KERNELS / "kernels.js"), str(wasm), str(tmp)],
                   check=True, capture_output=True, timeout=120)
    flat = np.fromfile(tmp / "out.bin", dtype=np.float32)
    lens = [n for c in cases for n in [c["buffers"][i]["len"] for i in c["read"]] + [1] * bool(c.get("ret"))]
    return np.split(flat, np.cumsum(lens)[:-1])


def test_adam_kernel_equals_the_numpy_update_bit_for_bit(wasm_path: Path, tmp_path: Path):
    """web/kernels/optim.c makes the same float32 operations as AdamStep's numpy path, for every
    parameter of the node in one call (SIMD body and scalar tail)."""
    import math

    from pytrain.ops import OpContext, get_kernel
    from pytrain.ops.registry import PYTRAIN_DOMAIN

    adam_step = get_kernel("AdamStep", PYTRAIN_DOMAIN).fn
    rng = np.random.default_rng(7)
    cases, inputs, expected = [], [], []
    for sizes, lr, step, wd, decoupled in (((1000, 7), 1e-3, 1, 0.01, 1), ((333, 64), 0.1, 7, 0.05, 0),
                                           ((64,), 3e-3, 50, 0.0, 1)):
        b1, b2, eps = 0.9, 0.999, 1e-8
        lr = float(np.float32(lr))  # the optimizer model feeds the learning rate as float32
        buffers, table, read, tensors = [], [], [], []
        for n in sizes:
            p, g = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
            m, v = (rng.standard_normal(n) * 0.1).astype(np.float32), (rng.random(n) * 0.01).astype(np.float32)
            first = len(buffers)
            inputs += [p, g, m, v]
            buffers += [{"len": n, "fill": True}] * 4
            table += [n] + ["$%d" % (first + i) for i in range(4)]
            read += [first, first + 2, first + 3]
            tensors += [p.copy(), g, m.copy(), v.copy()]
        buffers.append({"len": len(table), "ints": table})
        cases.append({"fn": "adam", "buffers": buffers, "read": read,
                      "args": ["$%d" % (len(buffers) - 1), len(sizes), 1.0 - b1, b1, 1.0 - b2, b2,
                               1.0 / math.sqrt(1.0 - b2 ** step), eps, lr / (1.0 - b1 ** step), wd,
                               decoupled, 1.0 - lr * wd]})
        expected += adam_step(OpContext(), np.array(lr, np.float32), np.array(step), *tensors, beta1=b1,
                              beta2=b2, epsilon=eps, weight_decay=wd, decoupled=decoupled)
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate(expected))


def test_im2col_kernels_equal_conv_columns_and_its_adjoint(wasm_path: Path, tmp_path: Path):
    """web/kernels/im2col.c builds exactly pytrain.ops.windows.conv_columns' matrix, and its
    col2im equals conv_columns_adjoint (before the padding is cropped)."""
    from pytrain.ops.windows import batch_first, batch_last, conv_columns, conv_columns_adjoint, geometry, pad_spatial

    rng = np.random.default_rng(3)
    cases, inputs, checks = [], [], []
    for shape, kernel, strides, dilations, pads in (
            ((2, 3, 9, 8), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
            ((3, 1, 28, 28), (5, 5), (1, 1), (1, 1), (0, 0, 0, 0)),
            ((2, 4, 11, 10), (3, 2), (2, 3), (2, 1), (0, 1, 2, 0))):
        x = rng.standard_normal(shape).astype(np.float32)
        win = geometry("Conv", x.shape, kernel, strides, dilations, pads, "NOTSET")
        xt = batch_last(pad_spatial(x, win))  # (C, H, W, N), as conv_columns hands it over
        cols = np.ascontiguousarray(conv_columns(x, win, 1)[0])
        dims = [shape[0], shape[1], *win.padded_shape, *win.kernel, *win.out_shape, *win.strides, *win.dilations]
        cases.append({"fn": "im2col", "buffers": [{"len": xt.size, "fill": True}, {"len": cols.size, "fill": False}],
                      "read": [1], "args": ["$0", "$1"] + dims})
        inputs.append(xt)
        checks.append(lambda got, want=cols: np.testing.assert_array_equal(got, want.ravel()))
        # col2im of random columns, checked on the input area against the numpy adjoint
        dcols = rng.standard_normal(cols.shape).astype(np.float32)
        cases.append({"fn": "col2im", "buffers": [{"len": dcols.size, "fill": True}, {"len": xt.size, "fill": False}],
                      "read": [1], "args": ["$0", "$1"] + dims})
        inputs.append(dcols)
        inner = (slice(None), slice(None)) + tuple(slice(pb, pb + i) for pb, i in zip(win.pads_begin, shape[2:]))
        checks.append(lambda got, want=conv_columns_adjoint(dcols, win, x.shape), shp=xt.shape, inner=inner:
                      np.testing.assert_allclose(batch_first(got.reshape(shp))[inner], want, rtol=1e-6, atol=1e-6))
    for got, check in zip(_call_kernels(wasm_path, tmp_path, cases, inputs), checks):
        check(got)


def test_maxpool_kernel_equals_the_numpy_kernel(wasm_path: Path, tmp_path: Path):
    """web/kernels/pool.c gives MaxPool's Y and Indices exactly as pytrain/ops/nn/op_maxpool.py does:
    padding, strides, dilations, ceil_mode, storage_order, ties and NaNs included."""
    from pytrain.ops import OpContext, get_kernel
    from pytrain.ops.nn.op_maxpool import _lowest
    from pytrain.ops.windows import geometry, pad_spatial

    max_pool = get_kernel("MaxPool").fn
    rng = np.random.default_rng(11)
    cases, inputs, expected = [], [], []
    for shape, attrs in (
            ((2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
            ((1, 2, 7, 9), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
            ((2, 1, 9, 9), {"kernel_shape": [2, 3], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]}),
            ((1, 2, 6, 5), {"kernel_shape": [3, 3], "storage_order": 1, "pads": [1, 1, 1, 1]}),
            ((1, 1, 6, 6), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]})):
        # rounded values make ties common; a few NaNs check np.maximum's propagation
        x = np.round(rng.standard_normal(shape) * 2).astype(np.float32)
        x.ravel()[rng.choice(x.size, 2, replace=False)] = np.nan
        y, idx = max_pool(OpContext(output_mask=[True, True]), x, **attrs)
        win = geometry("MaxPool", x.shape, attrs["kernel_shape"], attrs.get("strides"), attrs.get("dilations"),
                       attrs.get("pads"), attrs.get("auto_pad", "NOTSET"), attrs.get("ceil_mode", 0))
        xp = np.ascontiguousarray(pad_spatial(x, win, _lowest(x.dtype)))
        args = [shape[0] * shape[1], *win.padded_shape, *win.kernel, *win.out_shape, *win.strides,
                *win.dilations, *win.in_shape, *win.pads_begin, attrs.get("storage_order", 0)]
        # Indices are int64: their buffer is read back as pairs of float32 words
        cases.append({"fn": "maxpool2d", "read": [1, 2], "args": ["$0", "$1", "$2"] + args,
                      "buffers": [{"len": xp.size, "fill": True}, {"len": y.size, "fill": False},
                                  {"len": 2 * y.size, "fill": False}]})
        inputs.append(xp)
        expected.append((y, idx))
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for (y, idx), got_y, got_idx in zip(expected, got[0::2], got[1::2]):
        np.testing.assert_array_equal(got_y, y.ravel())  # NaNs in the same places
        np.testing.assert_array_equal(got_idx.view(np.int64), idx.ravel())


def test_maxpool_grad_kernel_equals_the_numpy_kernel(wasm_path: Path, tmp_path: Path):
    """pool.c's MaxPoolGrad scatters dY like the numpy kernel (exactly for disjoint windows,
    within float32 rounding where windows overlap) and stops at an out-of-range index."""
    from pytrain.ops import OpContext, get_kernel
    from pytrain.ops.registry import PYTRAIN_DOMAIN

    max_pool, grad = get_kernel("MaxPool").fn, get_kernel("MaxPoolGrad", PYTRAIN_DOMAIN).numpy_fn
    rng = np.random.default_rng(12)
    cases, inputs, expected = [], [], []
    for shape, attrs in (((4, 6, 24, 24), {"kernel_shape": [2, 2], "strides": [2, 2]}),
                         ((2, 3, 9, 9), {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]})):
        x = rng.standard_normal(shape).astype(np.float32)
        y, idx = max_pool(OpContext(output_mask=[True, True]), x, **attrs)
        dy = rng.standard_normal(y.shape).astype(np.float32)
        expected.append(grad(OpContext(), dy, idx, x)[0])
        cases.append({"fn": "maxpool_grad", "read": [2], "args": ["$0", "$1", "$2", dy.size, x.size],
                      "buffers": [{"len": dy.size, "fill": True}, {"len": 2 * idx.size, "fill": True},
                                  {"len": x.size, "fill": False}]})
        inputs += [dy, idx.view(np.float32)]
    bad = np.array([0, 5, 7, -1, 2], dtype=np.int64)  # the fourth index is out of range
    cases.append({"fn": "maxpool_grad", "read": [2], "args": ["$0", "$1", "$2", 5, 8],
                  "buffers": [{"len": 5, "fill": True}, {"len": 10, "fill": True}, {"len": 8, "fill": False}]})
    inputs += [np.ones(5, np.float32), bad.view(np.float32)]
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    np.testing.assert_array_equal(got[0], expected[0].ravel())          # 2x2 stride 2: disjoint
    np.testing.assert_allclose(got[1], expected[1].ravel(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got[2], [1, 0, 0, 0, 0, 1, 0, 1])    # stopped before -1


def test_elementwise_and_transpose_kernels_equal_numpy_bit_for_bit(wasm_path: Path, tmp_path: Path):
    """web/kernels/elementwise.c gives Relu's and ReluGrad's numpy results (NaN, inf and -0.0
    included; ReluGrad and transpose to the bit, Relu up to the sign of a zero, which numpy
    versions disagree on) and the bias gradient's column sums to the bit, and transpose.c the
    transpose of any shape (ragged 4x4 tiles)."""
    from pytrain.ops import OpContext, get_kernel
    from pytrain.ops.registry import PYTRAIN_DOMAIN

    relu, relu_grad = get_kernel("Relu").numpy_fn, get_kernel("ReluGrad", PYTRAIN_DOMAIN).numpy_fn
    rng = np.random.default_rng(5)
    n = 1031  # a SIMD body and a tail
    x = rng.standard_normal(n).astype(np.float32)
    x[:6] = [np.nan, -0.0, 0.0, np.inf, -np.inf, -np.nan]
    y = relu(OpContext(), x)[0]
    dy = rng.standard_normal(n).astype(np.float32)
    dy[6:9] = [np.nan, -0.0, np.inf]
    dx = relu_grad(OpContext(), dy, y)[0]
    cases = [{"fn": "relu", "buffers": [{"len": n, "fill": True}, {"len": n, "fill": False}],
              "read": [1], "args": ["$0", "$1", n]},
             {"fn": "relu_grad", "buffers": [{"len": n, "fill": True}, {"len": n, "fill": True},
                                             {"len": n, "fill": False}],
              "read": [2], "args": ["$0", "$1", "$2", n]}]
    inputs, expected = [x, dy, y], [y, dx]
    for rows, cols in ((64, 128), (64, 10), (2, 1031)):  # the bias gradient, numpy's summation order
        g = rng.standard_normal((rows, cols)).astype(np.float32) * 10
        cases.append({"fn": "sum_rows", "buffers": [{"len": g.size, "fill": True}, {"len": cols, "fill": False}],
                      "read": [1], "args": ["$0", "$1", rows, cols]})
        inputs.append(g)
        expected.append(np.sum(g, axis=0))
    for rows, cols in ((64, 864), (7, 10), (5, 3), (1, 9)):
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        cases.append({"fn": "transpose", "buffers": [{"len": a.size, "fill": True}, {"len": a.size, "fill": False}],
                      "read": [1], "args": ["$0", "$1", rows, cols]})
        inputs.append(a)
        expected.append(a.T)
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    np.testing.assert_array_equal(got[0], y)
    for g, want in zip(got[1:], expected[1:]):
        assert g.tobytes() == np.ascontiguousarray(want, dtype=np.float32).tobytes()
