"""The kernels' helper threads in the tab: products and training steps with the threads on and off.

    python bench/threads_bench.py [--passes 5] [--out bench/.cache/threads.json]

Pyodide 0.17.1 in a worker of bench/pages/threads_check.html, served cross-origin isolated by
bench/server.py, so kernels.js starts one helper thread (two threads in all). Each pass times
every case with the threads off, then on (pytrain.ops.wasm.linalg.THREADS_MIN_MACS None / 0), so a
busy spell of the shared machine hits both; a case's ratio is on/off per pass, shown as median
[min - max] with the load average (uptime) before and after. The products go through
pytrain.ops.wasm.linalg.matmul2d, the path every 2-D product of a model takes (stacks: matmul_batched,
attention's per-head products); the smallest
product whose median ratio stays under 1 is the crossover, which THREADS_MIN_MACS is set from.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "threads.json"

# (name, m, k, n[, stack]): the bench workloads' products (pytrain's models.mlp / models.cnn shapes,
# the tiny BERT's at batch 32 x 32 tokens: projections and FFN on 1024 rows, attention's per-head
# products as stacks of 64) and a size sweep for the crossover; a stack goes through matmul_batched
CASES = [
    ("mlp fwd 64x784 @ 784x128", 64, 784, 128),
    ("mlp dW 128x64 @ 64x784", 128, 64, 784),
    ("mlp dX 64x128 @ 128x784", 64, 128, 784),
    ("cnn conv1 8x9 @ 9x25088", 8, 9, 25088),
    ("cnn conv2 16x72 @ 72x6272", 16, 72, 6272),
    ("cnn conv2 dW 16x6272 @ 6272x72", 16, 6272, 72),
    ("cnn conv2 dcols 72x16 @ 16x6272", 72, 16, 6272),
    ("bert qkv 1024x128 @ 128x128", 1024, 128, 128),
    ("bert qkv dW 128x1024 @ 1024x128", 128, 1024, 128),
    ("bert ffn 1024x128 @ 128x512", 1024, 128, 512),
    ("bert ffn2 1024x512 @ 512x128", 1024, 512, 128),
    ("bert attention 64 x (32x64 @ 64x32)", 32, 64, 32, 64),
    ("bert attention 64 x (32x32 @ 32x64)", 32, 32, 64, 64),
] + [("square %d" % s, s, s, s) for s in (64, 128, 192, 256, 320, 384, 512)] \
  + [("stack 8 x square %d" % s, s, s, s, 8) for s in (64, 128)]

# (name, kernel, elements, row length): the element-wise and row kernels the threads split (pytrain.ops.wasm
# THREADS_MIN_ELEMENTS), at the tiny BERT's sizes (GELU's 1024 x 512 activations, attention's 32 x 2 x 32 x 32
# softmax, LayerNorm on 1024 x 128, Adam over its ~0.6M parameters; the MLP's Adam: 101,770) and a sweep
KERNEL_CASES = [("%s %s" % (k, "{:,}".format(n)), k, n, 0) for k in ("erf", "exp") for n in (
    8192, 16384, 32768, 65536, 131072, 524288)] \
  + [("softmax rows of 32, %s" % "{:,}".format(n), "softmax", n, 32) for n in (16384, 32768, 65536, 262144)] \
  + [("%s rows of 128, %s" % (k, "{:,}".format(n)), k, n, 128) for k in ("layernorm", "layernorm_grad")
     for n in (16384, 32768, 65536, 131072)] \
  + [("adam %s" % "{:,}".format(n), "adam", n, 0) for n in (32768, 101770, 262144, 606000)]

CODE = r"""
import json, time
import numpy as np
from pytrain.ops import wasm
from pytrain.ops.wasm import linalg as wl
assert wasm.install()
rng = np.random.RandomState(0)

def time_case(m, k, n, threshold, stack=0, budget=0.25):
    a = rng.standard_normal(((stack,) if stack else ()) + (m, k)).astype(np.float32)
    b = rng.standard_normal(((stack,) if stack else ()) + (k, n)).astype(np.float32)
    product = wl.matmul_batched if stack else wl.matmul2d
    wl.THREADS_MIN_MACS = threshold
    for _ in range(3):
        product(a, b)
    times = []
    t_end = time.perf_counter() + budget
    while time.perf_counter() < t_end or len(times) < 5:
        t0 = time.perf_counter()
        product(a, b)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3

def time_kernel(kernel, size, n, threshold, budget=0.25):
    from pytrain.ops import OpContext
    from pytrain.ops.wasm import THREADS_MIN_ELEMENTS
    from pytrain.ops.wasm import elementwise as welem, normalization as wnorm, optimizer as wopt, softmax as wsoftmax
    ctx = OpContext(output_mask=(True, True, True))
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    if kernel in ("exp", "erf"):
        x = f32(size)
        fn = lambda: welem.unary(kernel)(ctx, x)
    elif kernel == "softmax":
        x = f32(size // n, n)
        fn = lambda: wsoftmax.softmax(ctx, x)
    elif kernel == "layernorm":
        x, s = f32(size // n, n), f32(n)
        fn = lambda: wnorm.layer_normalization(ctx, x, s, s)
    elif kernel == "layernorm_grad":
        x, s, m = f32(size // n, n), f32(n), f32(size // n, 1)
        fn = lambda: wnorm.layer_normalization_grad(ctx, x, x, s, m, np.abs(m) + 0.5)
    else:
        sizes = [size // 4, size // 2, size - size // 4 - size // 2]
        groups = [(f32(k), f32(k) * 0.01, f32(k) * 0.1, np.abs(f32(k))) for k in sizes]
        fn = lambda: wopt.adam(groups, 1e-3, 3, 0.9, 0.999, 1e-8, 0.01, 1)
    THREADS_MIN_ELEMENTS[kernel] = threshold
    for _ in range(3):
        fn()
    times = []
    t_end = time.perf_counter() + budget
    while time.perf_counter() < t_end or len(times) < 5:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3
"""

STEPS = r"""
from pytrain.generator import artifacts, models
from pytrain.device.api import CheckpointState, Module, Optimizer

def make_step(model, x, y):
    arts = artifacts.generate_artifacts(model, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.AdamW)
    module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint), arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    def step():
        module(x, y)
        opt.step()
        module.lazy_reset_grad()
    return step

_r = np.random.RandomState(0)
step_fns = {
    "mlp step (64x784, 128 hidden)": make_step(models.mlp(784, [128], 10), _r.rand(64, 784).astype(np.float32),
                                               _r.randint(0, 10, 64).astype(np.int64)),
    "cnn step (32x1x28x28, 8/16 ch)": make_step(models.cnn((1, 28, 28)), _r.rand(32, 1, 28, 28).astype(np.float32),
                                                _r.randint(0, 10, 32).astype(np.int64)),
}

def load_bench_step(workload):
    # bench/run.py's prepared artifacts and batch (bench/.cache, written under /tmp/src by the page's "sources")
    import json as _json
    root = "/tmp/src/bench/.cache/"
    read = lambda path: open(root + path, "rb").read()
    manifest, raw = _json.loads(read("models/%s/batch.json" % workload)), read("models/%s/batch.bin" % workload)
    batch = {k: np.frombuffer(raw, dtype=m["dtype"], count=int(np.prod(m["shape"])), offset=m["offset"]).reshape(
        m["shape"]) for k, m in manifest.items()}
    art = "art/pytrain/%s/" % workload
    module = Module(read(art + "training_model.onnx"), CheckpointState.load_checkpoint(read(art + "checkpoint")),
                    read(art + "eval_model.onnx"))
    opt = Optimizer(read(art + "optimizer_model.onnx"), module)
    module.train()
    def step():
        module(batch["input"], batch["labels"])
        opt.step()
        module.lazy_reset_grad()
    step_fns[workload + " step (bench/run.py's)"] = step

def time_settings(name, off, on, steps=10):
    # (off ms, on ms) as time_steps, between two settings {"macs": THREADS_MIN_MACS, "elements": {kernel: min}}
    from pytrain.ops.wasm import THREADS_MIN_ELEMENTS
    fn = step_fns[name]
    def use(setting):
        wl.THREADS_MIN_MACS = setting["macs"]
        THREADS_MIN_ELEMENTS.update(setting["elements"])
    for setting in (off, on, off):
        use(setting)
        fn()
    times = ([], [])
    for _ in range(steps):
        for i, setting in enumerate((off, on)):
            use(setting)
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [sorted(v)[len(v) // 2] * 1e3 for v in times]

def time_steps(name, threshold, steps=10):
    # (off ms, on ms): medians over `steps` pairs, the threads off then on in each pair (blocks of
    # steps let Python's collector and the machine's load move between them)
    fn = step_fns[name]
    for _ in range(3):
        fn()
    times = {None: [], threshold: []}
    for _ in range(steps):
        for t in (None, threshold):
            wl.THREADS_MIN_MACS = t
            t0 = time.perf_counter()
            fn()
            times[t].append(time.perf_counter() - t0)
    return [sorted(v)[len(v) // 2] * 1e3 for v in (times[None], times[threshold])]
"""


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


def run(passes: int, threshold: int, only: str = "products,kernels,steps", spin: Optional[float] = None) -> dict:
    from browser import BrowserSession
    from playwright.sync_api import TimeoutError  # noqa: F401

    out = {"load_before": load(), "cases": {}, "steps": {}}
    with BrowserSession() as s:
        ctx = s.browser.new_context()
        page = ctx.new_page()
        page.set_default_timeout(900_000)
        page.goto(s.isolated.origin + "/bench/pages/threads_check.html" + ("" if spin is None else "?spin=%g" % spin))
        out["threads"] = page.evaluate("window.__call('ready')")
        out["chromium"] = s.version
        sources = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pytrain").rglob("*.py"))
        page.evaluate("paths => window.__call('sources', paths)", sources)
        py = lambda code: page.evaluate("code => window.__call('py', code)", code)  # noqa: E731
        py(CODE)
        py(STEPS)
        py("from pytrain.ops.wasm import THREADS_MIN_ELEMENTS\n_T = dict(THREADS_MIN_ELEMENTS)")
        from pytrain.ops.wasm.linalg import THREADS_MIN_MACS as shipped
        if "bert" in only:
            cache = ROOT / "bench" / ".cache"
            files = sorted(list((cache / "models" / "bert").glob("batch.*"))
                           + list((cache / "art" / "pytrain" / "bert").iterdir()))
            page.evaluate("paths => window.__call('sources', paths)", [p.relative_to(ROOT).as_posix() for p in files])
            py("load_bench_step('bert')")
        for p in range(passes):
            for name, m, k, n, *stack in CASES if "products" in only else ():
                stack = stack[0] if stack else 0
                r = out["cases"].setdefault(name, {"macs": m * k * n * max(stack, 1), "off": [], "on": []})
                r["off"].append(py("time_case(%d, %d, %d, None, %d)" % (m, k, n, stack)))
                r["on"].append(py("time_case(%d, %d, %d, 0, %d)" % (m, k, n, stack)))
            for name, kernel, size, n in KERNEL_CASES if "kernels" in only else ():
                r = out["cases"].setdefault(name, {"elements": size, "off": [], "on": []})
                r["off"].append(py("time_kernel(%r, %d, %d, None)" % (kernel, size, n)))
                r["on"].append(py("time_kernel(%r, %d, %d, 0)" % (kernel, size, n)))
            for name in ["bert step (bench/run.py's)"] if "bert" in only else ():
                # the element-wise/row kernels split (shipped THREADS_MIN_ELEMENTS) or not; products as shipped
                r = out["steps"].setdefault(name, {"off": [], "on": []})
                off, on = json.loads(py("json.dumps(time_settings(%r, {'macs': %d, 'elements': {k: None for k in _T}}, "
                                        "{'macs': %d, 'elements': _T}, steps=5))" % (name, shipped, shipped)))
                r["off"].append(off)
                r["on"].append(on)
            for name in ("mlp step (64x784, 128 hidden)", "cnn step (32x1x28x28, 8/16 ch)") if "steps" in only else ():
                r = out["steps"].setdefault(name, {"off": [], "on": []})
                off, on = json.loads(py("json.dumps(time_steps(%r, %d))" % (name, threshold)))
                r["off"].append(off)
                r["on"].append(on)
            print("pass %d done, load %s" % (p + 1, load()), flush=True)
        ctx.close()
    out["load_after"] = load()
    return out


def table(res: dict) -> str:
    lines = ["Chromium %s, %d threads; load average before %s, after %s" % (
        res.get("chromium", "?"), res["threads"], res["load_before"], res["load_after"]), "",
        "| case | MACs or elements | off ms (median) | on ms (median) | on/off median [min - max] |",
        "|---|---:|---:|---:|---|"]
    for kind in ("cases", "steps"):
        for name, r in res[kind].items():
            ratios = [b / a for a, b in zip(r["off"], r["on"])]
            lines.append("| %s | %s | %.3f | %.3f | %.2f [%.2f - %.2f] |" % (
                name, "{:,}".format(r.get("macs", r.get("elements", 0))) if "macs" in r or "elements" in r else "",
                statistics.median(r["off"]),
                statistics.median(r["on"]), statistics.median(ratios), min(ratios), max(ratios)))
    return "\n".join(lines)


#: (label substring of pytrain's row, of its peer's row, target name) for the rows section
PAIRS = (("2 threads", "onnxruntime-web 1.19.2 training (2 threads",
          "2 threads (isolated): pytrain / onnxruntime-web 2 threads"),
         ("wasm kernels)", "onnxruntime-web 1.19.2 training (1 thread)",
          "not isolated: pytrain / onnxruntime-web 1 thread"))


def _loads(v) -> str:
    return " ".join("%.1f" % x for x in v) if v else "?"


def rows_table(run: dict) -> list:
    """The threads rows of a `run.py --rows` results.json: each workload's ms/step (median over the
    passes) and pytrain's ratio to its peer per pass, median [min - max], and whether <= 1.0 held in
    every pass."""
    rows = run.get("rows", [])
    out = ["Rows from `%s` (%s, %s passes, load average %s at the start, %s at the end):" % (
        run.get("command", "python bench/run.py --only browser --rows \"wasm kernels,onnxruntime-web\""),
        run.get("started", "?"), run.get("repeat", "?"), _loads(run.get("env", {}).get("load_avg_start")),
        _loads(run.get("env", {}).get("load_avg_end"))), "",
        "| workload | target | pytrain ms/step | peer ms/step | ratio per pass, median [min - max] | met |",
        "|---|---|---:|---:|---|---|"]
    for w in dict.fromkeys(r["workload"] for r in rows):
        for mine, peer, title in PAIRS:
            a = [r for r in rows if r["workload"] == w and r["label"].startswith("pytrain") and mine in r["label"]]
            b = [r for r in rows if r["workload"] == w and r["label"].startswith(peer)]
            if not a or not b or "error" in a[0] or "error" in b[0]:
                continue
            ratios = [x / y for x, y in zip(a[0].get("repeats") or [], b[0].get("repeats") or []) if x and y]
            if not ratios:
                continue
            out.append("| %s | %s | %.2f | %.2f | %.2f [%.2f - %.2f] | %s |" % (
                w, title, a[0]["step_ms"], b[0]["step_ms"], statistics.median(ratios), min(ratios), max(ratios),
                "yes" if max(ratios) <= 1.0 else "in %d of %d passes" % (sum(x <= 1.0 for x in ratios), len(ratios))))
    return out


def section(path: Path = RESULTS) -> list:
    """RESULTS.md's "Helper threads" section from the last run's figures (none without them)."""
    if not path.exists():
        return []
    res = json.loads(path.read_text())
    return ["## Helper threads (cross-origin isolated tab)", "",
            "`python bench/threads_bench.py --passes %d` (%s): Pyodide in a worker with one helper thread; "
            "every product timed with the threads off, then on, in each pass (through "
            "`pytrain.ops.wasm.linalg.matmul2d`, `THREADS_MIN_MACS = 0`); training steps alternate off/on step "
            "by step, on with `THREADS_MIN_MACS = %s`; on/off per pass." % (res.get("passes", 0), res.get("date", "?"), "{:,}".format(res.get("threshold", 0))),
            ""] + table(res).splitlines() + [""] + sum((rows_table(r) + [""] for r in res.get("runs", [])), []) \
        + res.get("notes", []) + [""]


def main(argv: Optional[list] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--threshold", type=int, default=None,
                    help="THREADS_MIN_MACS for the step rows' 'on' (default: the shipped value)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the figures go (default bench/threads.json, "
                    "which report.py puts into RESULTS.md)")
    ap.add_argument("--rows-from", nargs="*", help="results.json files of `run.py --only browser --rows ...` "
                    "runs whose rows RESULTS.md shows against the thread targets")
    ap.add_argument("--only", default="products,kernels,steps",
                    help="comma-separated: products (CASES), kernels (KERNEL_CASES: element-wise and row kernels), "
                    "steps (the MLP and CNN training steps), bert (bench/run.py's tiny BERT step, prepared by a "
                    "run.py run: the element-wise/row kernels split or not)")
    ap.add_argument("--spin", type=float, default=None, help="ms each helper spins after its part before it "
                    "sleeps (kernels.js helperSpinMs; default: the shipped HELPER_SPIN_MS)")
    args = ap.parse_args(argv)
    import sys
    sys.path.insert(0, str(ROOT))
    if args.threshold is None:
        from pytrain.ops.wasm.linalg import THREADS_MIN_MACS
        args.threshold = THREADS_MIN_MACS
    res = run(args.passes, args.threshold, args.only, args.spin)
    import time
    res.update(passes=args.passes, threshold=args.threshold, spin=args.spin,
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    if args.out.exists():   # notes (causes, the crossover; by hand) and the rows runs are kept
        old = json.loads(args.out.read_text())
        res["notes"], res["runs"] = old.get("notes", []), old.get("runs", [])
    for path in args.rows_from or []:   # a `run.py --only browser --rows ...` results.json: its threads rows
        res.setdefault("runs", []).append(json.loads(Path(path).read_text()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    print(table(res))


if __name__ == "__main__":
    main()
