"""gelu.c's Gelu and GeluGrad split by ranges of elements across the kernels' helper threads (web/kernels/
threads-team.js, kernels.js THREADED_KERNELS): every element is computed alone, so a split call gives the
single-thread kernel's bits, for both forms, on an odd length. Run in Node.js (worker_threads stand in for the
page's Web Workers)."""
from __future__ import annotations

from pathlib import Path

from test_wasm_threads_choice import KERNELS, _node, pytestmark  # noqa: F401  (skipped without Node.js)

SPLIT = r"""
const [kernelsJs, wasm, shared] = process.argv.slice(2);
const K = require(kernelsJs);
(async () => {
  const memory = new WebAssembly.Memory({ initial: 256 });
  const g = await K.instantiateWithMemory(wasm, memory);
  const team = await K.startThreads(shared, g, { count: 2, adaptive: false });   // every call split
  const n = 100003, X = 64 * 65536, DY = X + n * 4, Y1 = DY + n * 4, Y2 = Y1 + n * 4;
  if (Y2 + n * 4 > memory.buffer.byteLength) memory.grow(Math.ceil((Y2 + n * 4 - memory.buffer.byteLength) / 65536));
  const f = new Float32Array(memory.buffer);
  let seed = 11;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  for (let i = 0; i < n; i++) { f[X / 4 + i] = 12 * rand() - 6; f[DY / 4 + i] = rand() - 0.5; }
  const out = {};
  for (const name of ["gelu_tanh", "gelu_erf"]) {
    const before = team.calls;
    g[name](X, Y1, n);
    team[name](X, Y2, n);
    const grad = name + "_grad";
    const same = f.subarray(Y1 / 4, Y1 / 4 + n).every((v, i) => Object.is(v, f[Y2 / 4 + i]));
    g[grad](DY, X, Y1, n);
    team[grad](DY, X, Y2, n);
    const sameGrad = f.subarray(Y1 / 4, Y1 / 4 + n).every((v, i) => Object.is(v, f[Y2 / 4 + i]));
    out[name] = { same, sameGrad, split: team.calls - before };
  }
  console.log(JSON.stringify(out));
  team.stop();
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_split_gelu_kernels_give_the_single_thread_bits(tmp_path: Path):
    res = _node(SPLIT, tmp_path, str(KERNELS / "kernels.js"), str(KERNELS / "kernels.wasm"),
                str(KERNELS / "kernels-shared.wasm"))
    for name in ("gelu_tanh", "gelu_erf"):
        assert res[name] == {"same": True, "sameGrad": True, "split": 2}, (name, res[name])
