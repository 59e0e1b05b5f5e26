/* pytrain (pure Python + numpy) in Pyodide 0.17.1, from a wheel unpacked into the virtual FS: the
 * body of pytrain.html, run in the page or, with ?threads=2 (a cross-origin isolated page), in a worker
 * with the kernels' helper threads (web/kernels/kernels.js startThreads: the calling thread waits for
 * them with Atomics.wait, which the page's main thread may not). */
"use strict";
if (typeof document === "undefined") {
  self.importScripts("common.js", "/bench/node_modules/@pyodide/pyodide/dist/pyodide.js", "/web/kernels/kernels.js");
}
// ?gemm=1 links web/kernels/kernels.wasm into Pyodide's heap and registers
// it as the Python module `pytrain_wasm_kernels` (the handshake in bench/README.md);
// ?gen=1 times artifact generation in the browser instead of training.
const PYODIDE = "/bench/node_modules/@pyodide/pyodide/dist/";

async function setup(p) {
  const pyodide = await loadPyodide({ indexURL: PYODIDE });
  await pyodide.loadPackage(["numpy"]);
  const FS = pyodide._module.FS;
  FS.writeFile("/tmp/pytrain.whl", await benchLib.fetchBytes("/bench/.cache/" + (new URLSearchParams(location.search).get("wheel") || "pytrain") + ".whl"));
  // A wheel is a zip: unpacking it onto sys.path is all a pure-Python install does
  // (and avoids micropip resolving dependencies on PyPI).
  pyodide.runPython(`
import sys, zipfile
zipfile.ZipFile('/tmp/pytrain.whl').extractall('/tmp/site')
sys.path.insert(0, '/tmp/site')
`);
  let gemmCalls = null, threads = null;
  if (p.gemm) {
    const build = pytrainKernels.kernelBuild(p.kernels || undefined);   // the app's choice unless ?kernels= says
    console.log("pytrain.html: kernels " + build.name);
    // ?kdir=NAME: another checkout's built kernels, copied to bench/.cache/NAME (tab_nodes.py --ab A/B runs)
    const kdir = p.kdir ? "/bench/.cache/" + p.kdir + "/" : "/web/kernels/";
    const g = await pytrainKernels.instantiateInPyodide(kdir + build.wasm, pyodide);
    if (p.threads > 1) {  // ?threads=N: N - 1 helper threads for the big products (needs COOP/COEP and a worker)
      g.threads = await pytrainKernels.startThreads(kdir + build.shared, g,
                                                    { count: p.threads, workerURL: "/web/kernels/threads-worker.js" });
    }
    gemmCalls = { n: 0 };
    const kernels = pytrainKernels.pythonModule(g);
    kernels.sgemm = (...args) => { gemmCalls.n++; g.sgemm(...args); };
    if (g.threads) kernels.sgemm_threads = (...args) => { gemmCalls.n++; g.threads.sgemm(...args); };
    threads = g.threads;
    if (g.gemm) kernels.gemm = (...args) => { gemmCalls.n++; g.gemm(...args); };  // Gemm nodes, bias included
    pyodide.registerJsModule("pytrain_wasm_kernels", kernels);
    // the same backend switch the web app's worker makes
    if (!pyodide.runPython("from pytrain.ops import wasm as _wg\n_wg.install()")) {
      throw new Error("pytrain.ops.wasm.install() failed");
    }
    if (p.base) {  // ?base=1: only the kernels before the real models' ones (conv.c, batchnorm.c, exp_erf.c, layernorm.c, softmax.c, gather_grad.c, gemm_ops.c), for A/B runs
      pyodide.runPython(`
from pytrain.ops import registry as _reg
for _op in ("Clip", "BatchNormalization", "Conv", "Exp", "Erf", "LayerNormalization", "Softmax", "Gemm",
            "Add", "Sub", "Mul", "Div"):
    _reg.accelerate(_op, None)
for _op in ("LayerNormalizationGrad", "GatherGrad", "FusedConv"):
    _reg.accelerate(_op, None, _reg.PYTRAIN_DOMAIN)
from pytrain.ops import backend as _backend
_backend.use("matmul_batched", None)
_backend.use("finite", None)
`);
    }
  }
  return { pyodide, FS, gemmCalls, threads };
}

/** Wall time per graph node (ms per step: the mean over the timed steps, and the fastest step's) of the Python function
 * ``fn`` (bench_step or bench_infer): every Plan's compiled step rebuilt with each kernel wrapped
 * in a timer (Plan.time_nodes), the same as native_runner.py --nodes; opt-in, the normal path untouched. */
function nodeTimes(pyodide, p, fn) {
  return JSON.parse(pyodide.runPython(`
import gc, json, time
from pytrain.engine.executor import Plan

class _Calls(dict):  # every call's seconds per node (Plan.time_nodes adds to get(k, 0.0))
    def get(self, k, d=0.0):
        return 0.0
    def __setitem__(self, k, v):
        self.setdefault(k, []).append(v)

${fn}()
_acc = _Calls()
for _plan in [o for o in gc.get_objects() if isinstance(o, Plan)]:
    _plan.time_nodes(_acc, lambda n: n.op_type + ' ' + (n.name or n.output[0]))
for _ in range(${p.warmup}): ${fn}()
_acc.clear()
_t0 = time.perf_counter()
for _ in range(${p.steps}): ${fn}()
_total = (time.perf_counter() - _t0) * 1e3 / ${p.steps}
def _min(v):  # the fastest step's time (a node's calls per step summed)
    c = max(1, len(v) // ${p.steps})
    return min(sum(v[i:i + c]) for i in range(0, len(v), c)) * 1e3

json.dumps({'step_ms': _total,
            'nodes': sorted(((k, sum(v) * 1e3 / ${p.steps}) for k, v in _acc.items()), key=lambda kv: -kv[1]),
            'nodes_min': sorted(((k, _min(v)) for k, v in _acc.items()), key=lambda kv: -kv[1])})
`));
}

/** Where the time goes inside Pyodide over the timed calls of ``fn``: cProfile, by own time. */
function profileSteps(pyodide, p, fn) {
  return pyodide.runPython(`
import cProfile, io, pstats
for _ in range(${p.warmup}): ${fn}()
_prof = cProfile.Profile()
_prof.enable()
for _ in range(${p.steps}): ${fn}()
_prof.disable()
_out = io.StringIO()
pstats.Stats(_prof, stream=_out).sort_stats('tottime').print_stats(40)
_out.getvalue()
`);
}

benchLib.runBench(async (p) => {
  const { pyodide, FS, gemmCalls, threads } = await setup(p);
  const dir = `/bench/.cache/models/${p.workload}/`;
  if (p.gen) {
    FS.writeFile("/tmp/model.onnx", await benchLib.fetchBytes(dir + "model.onnx"));
    const ms = pyodide.runPython(`
import time
from pytrain.generator import artifacts
_t0 = time.perf_counter()
artifacts.generate_artifacts(open('/tmp/model.onnx', 'rb').read(),
                             loss=artifacts.LossType.CrossEntropyLoss,
                             optimizer=artifacts.OptimType.AdamW)
(time.perf_counter() - _t0) * 1e3
`);
    return { gen_ms: ms };
  }
  if (p.infer) {  // ?infer=1: pytrain's InferenceSession on the exported model.onnx, the batch's input
    const [model, batchJson, batchBin] = await Promise.all(
      ["model.onnx", "batch.json", "batch.bin"].map((f) => benchLib.fetchBytes(dir + f)));
    FS.writeFile("/tmp/model.onnx", model);
    FS.writeFile("/tmp/batch.json", batchJson);
    FS.writeFile("/tmp/batch.bin", batchBin);
    pyodide.runPython(`
import json
import numpy as np
from pytrain.engine.runtime import InferenceSession
_m = json.load(open('/tmp/batch.json'))['input']
_x = np.frombuffer(open('/tmp/batch.bin', 'rb').read(), dtype=_m['dtype'], count=int(np.prod(_m['shape'])),
                   offset=_m['offset']).reshape(_m['shape'])
_sess = InferenceSession(open('/tmp/model.onnx', 'rb').read())
_name = _sess.input_names()[0]

def bench_infer():
    return float(_sess.run(None, {_name: _x})[0].reshape(-1)[0])
`);
    if (p.nodes) return { nodes: nodeTimes(pyodide, p, "bench_infer"), infer: true };
    if (p.profile) return { profile: profileSteps(pyodide, p, "bench_infer"), infer: true };
    const infer = pyodide.globals.get("bench_infer");
    const res = await benchLib.timeSteps(() => infer(), p.warmup, p.steps, p.warmupMs);
    Object.assign(res, { gemm: p.gemm, threads: p.threads, infer: true });
    if (gemmCalls) res.gemm_calls = gemmCalls.n;
    res.threaded_calls = threads ? threads.calls : 0;
    return res;
  }
  const art = `/bench/.cache/art/${p.art}/${p.workload}/`;
  const files = ["checkpoint", "training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"];
  const [batchJson, batchBin, ...arts] = await Promise.all([
    benchLib.fetchBytes(dir + "batch.json"), benchLib.fetchBytes(dir + "batch.bin"),
    ...files.map((f) => benchLib.fetchBytes(art + f))]);
  FS.mkdir("/tmp/art");
  files.forEach((f, i) => FS.writeFile("/tmp/art/" + f, arts[i]));
  FS.writeFile("/tmp/batch.json", batchJson);
  FS.writeFile("/tmp/batch.bin", batchBin);
  pyodide.runPython(`
import json
import numpy as np
from pytrain.device.api import CheckpointState, Module, Optimizer

def _read(name):
    with open('/tmp/art/' + name, 'rb') as f:
        return f.read()

_manifest = json.load(open('/tmp/batch.json'))
_raw = open('/tmp/batch.bin', 'rb').read()
_batch = {k: np.frombuffer(_raw, dtype=m['dtype'], count=int(np.prod(m['shape'])),
                           offset=m['offset']).reshape(m['shape'])
          for k, m in _manifest.items()}
_state = CheckpointState.load_checkpoint(_read('checkpoint'))
_module = Module(_read('training_model.onnx'), _state, _read('eval_model.onnx'))
_optimizer = Optimizer(_read('optimizer_model.onnx'), _module)
if hasattr(_optimizer, 'set_learning_rate'):
    _optimizer.set_learning_rate(1e-3)
_module.train()

def bench_step():
    loss = _module(_batch['input'], _batch['labels'])
    _optimizer.step()
    _module.lazy_reset_grad()
    return float(loss)
`);
  const step = pyodide.globals.get("bench_step");
  // ?gcoff=1: Python's cyclic collector off while timing (is it behind the spread?)
  if (p.gcoff) pyodide.runPython("import gc\ngc.collect()\ngc.disable()");
  if (p.profile) return { profile: profileSteps(pyodide, p, "bench_step") };  // ?profile=1: cProfile, by own time
  if (p.nodes) return { nodes: nodeTimes(pyodide, p, "bench_step") };  // ?nodes=1: ms per graph node
  const res = await benchLib.timeSteps(() => step(), p.warmup, p.steps, p.warmupMs);
  res.gemm = p.gemm;
  if (gemmCalls) res.gemm_calls = gemmCalls.n;
  res.threads = p.threads;
  res.threaded_calls = threads ? threads.calls : 0;   // products split across the threads
  if (threads && threads.choices) res.choices = Object.fromEntries(threads.choices);   // per shape: alone vs split ms
  res.python = pyodide.runPython("import sys, numpy; sys.version.split()[0] + ' / numpy ' + numpy.__version__");
  return res;
});
