"""The kernels' helper threads decide per call shape from what they measure (web/kernels/threads-team.js
makeChooser, used by its startThreads): the choice follows the faster way, notices a change, and never changes
a result's bits; the loss's gradient split by rows. Run in Node.js (worker_threads stand in for the page's
Web Workers)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "web" / "kernels"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed")

# makeChooser fed made-up times (no clock): which way each call of one shape took
CHOOSER = r"""
const K = require(process.argv[2]);
const c = K.makeChooser();
const run = (calls, aloneMs, splitMs) => {
  const ways = [];
  for (let i = 0; i < calls; i++) {
    const split = c.pick("shape");
    c.record("shape", split, split ? splitMs : aloneMs);
    ways.push(split ? 1 : 0);
  }
  return ways;
};
const slowSplit = run(200, 1.0, 2.0);   // a busy second core: the split loses
const fastSplit = run(200, 3.0, 1.0);   // the core is free again
const other = K.makeChooser().pick("shape");
console.log(JSON.stringify({ slowSplit, fastSplit, other }));
"""

# real helper threads: one product shape called again and again, and a shape whose half would take
# gemm.c's dot-product path (which sums in another order): every result the single-thread kernel's bits
THREADS = r"""
const [kernelsJs, wasm, shared] = process.argv.slice(2);
const K = require(kernelsJs);
(async () => {
  const memory = new WebAssembly.Memory({ initial: 256 });
  const g = await K.instantiateWithMemory(wasm, memory);
  const team = await K.startThreads(shared, g, { count: 2 });
  const out = {};
  for (const [name, ta, tb, M, N, KK, reps] of [["repeated", 0, 0, 96, 80, 72, 40], ["thin", 0, 1, 80, 60, 600, 6]]) {
    const lda = ta ? M : KK, ldb = tb ? KK : N;
    const A = 64 * 65536, B = A + M * KK * 4, C0 = B + KK * N * 4, C = C0 + M * N * 4;
    let f = new Float32Array(memory.buffer);
    let seed = 7;
    for (let i = 0; i < M * KK + KK * N; i++) f[A / 4 + i] = ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
    g.sgemm(ta, tb, M, N, KK, 1, A, lda, B, ldb, 0, C0, N);
    const before = team.calls;
    let same = 0;
    for (let r = 0; r < reps; r++) {
      team.sgemm(ta, tb, M, N, KK, 1, A, lda, B, ldb, 0, C, N);
      f = new Float32Array(memory.buffer);
      let eq = true;
      for (let i = 0; i < M * N; i++) if (Object.is(f[C / 4 + i], f[C0 / 4 + i]) === false) { eq = false; break; }
      same += eq;
    }
    out[name] = { reps, same, split: team.calls - before };
  }
  out.choices = Object.fromEntries([...team.choices].map(([k, v]) => [k, v.seen]));
  console.log(JSON.stringify(out));
  team.stop();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def _node(script: str, tmp_path: Path, *args: str) -> dict:
    driver = tmp_path / "driver.js"
    driver.write_text(script)
    res = subprocess.run([NODE, str(driver), *args], check=True, capture_output=True, text=True, timeout=120)
    return json.loads(res.stdout)


def test_choice_follows_the_faster_way_and_notices_a_change(tmp_path: Path):
    res = _node(CHOOSER, tmp_path, str(KERNELS / "threads-team.js"))
    slow, fast = res["slowSplit"], res["fastSplit"]
    assert res["other"] is True   # a shape's first call splits (so a single call of a shape is split)
    assert slow[:6] == [1, 0, 1, 0, 1, 0]   # then both ways are timed in turn
    assert 1 <= sum(slow[6:]) <= 4   # the slower split re-timed less and less often (24, 48, 96 calls apart)
    assert sum(fast[:100]) >= 1   # a re-timing finds the split faster ...
    assert sum(fast[150:]) >= 45   # ... and the split is taken from then on (the alone way re-timed now and then)


def test_every_choice_gives_the_single_thread_bits(tmp_path: Path):
    res = _node(THREADS, tmp_path, str(KERNELS / "kernels.js"), str(KERNELS / "kernels.wasm"),
                str(KERNELS / "kernels-shared.wasm"))
    rep = res["repeated"]
    assert rep["same"] == rep["reps"]   # split or alone, the same bits every call
    assert rep["split"] >= 3   # the first calls were split (then the faster way)
    seen = res["choices"]["s00:96:80:72:0"]
    assert seen[0] >= 3 and seen[1] >= 3   # both ways timed
    thin = res["thin"]
    # its halves would take the dot-product path (another order of sums): never split
    assert thin["split"] == 0 and thin["same"] == thin["reps"]


# softmax_ce.c's gradient split by rows across the helper threads: a language model's (rows, vocabulary)
LOSS_GRAD = r"""
const [kernelsJs, wasm, shared] = process.argv.slice(2);
const K = require(kernelsJs);
(async () => {
  const memory = new WebAssembly.Memory({ initial: 256 });
  const g = await K.instantiateWithMemory(wasm, memory);
  const team = await K.startThreads(shared, g, { count: 2 });
  const rows = 301, n = 997;
  const LP = 64 * 65536, LAB = LP + Math.ceil(rows * n / 2) * 8, D1 = LAB + rows * 8, D2 = D1 + rows * n * 4;
  if (D2 + rows * n * 4 > memory.buffer.byteLength) memory.grow(Math.ceil((D2 + rows * n * 4 - memory.buffer.byteLength) / 65536));
  const f = new Float32Array(memory.buffer), lab = new BigInt64Array(memory.buffer);
  let seed = 3;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  for (let i = 0; i < rows * n; i++) f[LP / 4 + i] = -8 * rand();
  for (let r = 0; r < rows; r++) lab[LAB / 8 + r] = BigInt(Math.floor(rand() * n));
  const out = { ret: [] };
  out.ret.push(g.softmax_ce_grad(LP, LAB, rows, n, 0.25, D1));
  const before = team.calls;
  out.ret.push(team.softmax_ce_grad(LP, LAB, rows, n, 0.25, D2));
  out.split = team.calls - before;
  out.same = f.subarray(D1 / 4, D1 / 4 + rows * n).every((v, i) => Object.is(v, f[D2 / 4 + i]));
  lab[LAB / 8 + rows - 1] = BigInt(n);   // a label out of range in the helper's rows: the kernel declines
  out.ret.push(team.softmax_ce_grad(LP, LAB, rows, n, 0.25, D2));
  console.log(JSON.stringify(out));
  team.stop();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_loss_gradient_split_by_rows_gives_the_single_thread_bits(tmp_path: Path):
    res = _node(LOSS_GRAD, tmp_path, str(KERNELS / "kernels.js"), str(KERNELS / "kernels.wasm"),
                str(KERNELS / "kernels-shared.wasm"))
    assert res["split"] == 1 and res["same"]
    assert res["ret"][:2] == [0, 0] and res["ret"][2] != 0


# a read-only operand (Python's keep token, linalg.keep_token) is copied into the shared memory once and kept
KEPT = r"""
const [kernelsJs, wasm, shared] = process.argv.slice(2);
const K = require(kernelsJs);
(async () => {
  const memory = new WebAssembly.Memory({ initial: 256 });
  const g = await K.instantiateWithMemory(wasm, memory);
  const team = await K.startThreads(shared, g, { count: 2, adaptive: false });
  const M = 96, N = 80, KK = 72;
  const A = 64 * 65536, B = A + M * KK * 4, C0 = B + KK * N * 4, C = C0 + M * N * 4;
  const f = new Float32Array(memory.buffer);
  let seed = 9;
  const fill = (at, n) => { for (let i = 0; i < n; i++) f[at / 4 + i] = ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5; };
  fill(A, M * KK + KK * N);
  const same = () => f.subarray(C / 4, C / 4 + M * N).every((v, i) => Object.is(v, f[C0 / 4 + i]));
  const out = [];
  const call = (token) => {
    g.sgemm(0, 0, M, N, KK, 1, A, KK, B, N, 0, C0, N);
    const hits = team.keptHits;
    team.sgemm(0, 0, M, N, KK, 1, A, KK, B, N, 0, C, N, 0, token);
    out.push({ same: same(), hit: team.keptHits - hits });
  };
  call(5); call(5);           // copied, then found kept
  fill(B, KK * N); call(6);   // other memory under a new token (the array it named died): copied again
  call(0); call(0);           // no token: copied every call
  console.log(JSON.stringify({ out, split: team.calls }));
  team.stop();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_read_only_operand_is_kept_between_products(tmp_path: Path):
    res = _node(KEPT, tmp_path, str(KERNELS / "kernels.js"), str(KERNELS / "kernels.wasm"),
                str(KERNELS / "kernels-shared.wasm"))
    assert res["split"] == 5
    assert all(r["same"] for r in res["out"])
    assert [r["hit"] for r in res["out"]] == [0, 1, 0, 0, 0]


def test_keep_token_names_read_only_memory_while_it_lives():
    import numpy as np

    from pytrain.ops.wasm.linalg import keep_token

    w = np.arange(12, dtype=np.float32).reshape(3, 4).copy()   # (owns its memory)
    assert keep_token(w) == 0   # writeable: never kept
    w.flags.writeable = False
    token = keep_token(w)
    assert token > 0 and keep_token(w.T) == token and keep_token(w[1:]) == token   # views of it: its token
    other = np.zeros((3, 4), np.float32)
    other.flags.writeable = False
    assert keep_token(other) not in (0, token)
    view = np.arange(4, dtype=np.float32)[:]
    view.flags.writeable = False
    assert keep_token(view) == 0   # read-only view of writeable memory: may change under it
