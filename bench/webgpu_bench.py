"""The WebGPU rows: each browser workload trained in headless Chromium's WebGPU adapter (pytrain/device/webgpu.py
in Pyodide 0.17.1, bench/pages/webgpu_check.html) against the same page's wasm kernels, naming the adapter and
counting the transfers per step, or the reason the GPU refuses the workload (the node without a shader).

    python bench/webgpu_bench.py [--steps 3] [mlp cnn emb mobilenet bert gpt2_lora]   # writes bench/webgpu.json

Headless Chromium here has only SwiftShader (the GPU emulated on the CPU, `--enable-unsafe-webgpu`): its speed
says nothing about a real GPU; the transfer counts and the refusals hold on any adapter. Artifacts are made
natively by pytrain from the workload's ONNX export (workloads.py), AdamW, cross-entropy, LoRA for gpt2_lora."""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

RESULTS = HERE / "webgpu.json"
GPU_ARGS = ["--no-sandbox", "--disable-gpu", "--enable-unsafe-webgpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"]

# runs in the page: the workload's steps on the CPU (wasm kernels) and on the GPU, timed by the JS between settles
SETUP = r"""
import base64, json, time
import numpy as np
from pytrain.device import api
from pytrain.device.webgpu import GpuTraining
from pytrain.ops import wasm
from pytrain.ops.webgpu import GpuTransferError, device
wasm.install()
A = {k: base64.b64decode(v) for k, v in json.loads(ARTS).items()}
X, Y = np.asarray(json.loads(XS), dtype=XDT).reshape(XSHAPE), np.asarray(json.loads(YS), np.int64).reshape(YSHAPE)

def fresh():
    m = api.Module(A["training"], api.CheckpointState.load_checkpoint(A["checkpoint"]), A["eval"])
    return m, api.Optimizer(A["optimizer"], m)

cpu_m, cpu_o = fresh()
def cpu_step():
    cpu_m.lazy_reset_grad(); out = cpu_m(X, Y); cpu_o.step()
    return float(np.asarray(out[0] if isinstance(out, list) else out))
gpu_m, gpu_o = fresh()
try:
    GPU = GpuTraining(gpu_m, gpu_o, device())
    REFUSED = None
except GpuTransferError as e:
    GPU, REFUSED = None, str(e)
"""

GPU_STEP = r"""
try:
    GPU.step(X, Y)
    r = None
except GpuTransferError as e:
    r = str(e)
r
"""


def artifacts(name: str) -> dict:
    """The workload's pytrain artifacts (bytes) and batch."""
    import onnx  # noqa: F401  (the export needs it)
    from workloads import LORA, WORKLOADS, export_onnx

    from pytrain.engine.lora import LoRA
    from pytrain.generator import artifacts as gen

    w = WORKLOADS[name]
    arts = gen.generate_artifacts(export_onnx(w), loss=gen.LossType.CrossEntropyLoss, optimizer=gen.OptimType.AdamW,
                                  lora=LoRA(**LORA) if w.lora else None)
    batch = w.batch()
    return {"arts": {"training": arts.training_model, "eval": arts.eval_model, "optimizer": arts.optimizer_model,
                     "checkpoint": arts.checkpoint}, "x": batch["input"], "y": batch["labels"]}


def run(page, name: str, steps: int) -> dict:
    a = artifacts(name)
    x, y = a["x"], a["y"]
    defs = ("ARTS = %r\nXS = %r\nXDT = %r\nXSHAPE = %r\nYS = %r\nYSHAPE = %r\n"
            % (json.dumps({k: base64.b64encode(v).decode() for k, v in a["arts"].items()}),
               json.dumps(x.reshape(-1).tolist()), str(x.dtype), tuple(x.shape), json.dumps(y.reshape(-1).tolist()),
               tuple(y.shape)))
    py = lambda code: page.evaluate("code => window.__py(code)", code)  # noqa: E731
    py(defs + SETUP)
    row = {"workload": name, "adapter": page.evaluate("window.__gpu.name"), "batch": list(x.shape), "steps": steps,
           "load": round(os.getloadavg()[0], 1)}   # (the machine's: its CPU ms mean nothing past its cores)
    cpu_ms = page.evaluate("""steps => { const t = []; for (let i = 0; i <= steps; i++) {
        const s = performance.now(); window.__py("cpu_step()"); t.push(performance.now() - s); }
        return t.slice(1).sort((a, b) => a - b)[Math.floor(steps / 2)]; }""", steps)
    row["cpu_ms"] = cpu_ms
    refused = py("REFUSED")
    if refused is None:
        refused = py(GPU_STEP)   # the first step (a refusal names the node)
    if refused:
        row["refused"] = refused
        return row
    page.evaluate("window.__settle()")
    before = page.evaluate("JSON.stringify(window.__gpu.counts)")
    gpu_ms = page.evaluate("""async (steps) => { const t = [];
        for (let i = 0; i < steps; i++) { const s = performance.now(); window.__py(arguments_step);
          await window.__settle(); t.push(performance.now() - s); }
        return t.sort((a, b) => a - b)[Math.floor(steps / 2)]; }""".replace("arguments_step", json.dumps(GPU_STEP)),
                           steps)
    after = json.loads(page.evaluate("JSON.stringify(window.__gpu.counts)"))
    before = json.loads(before)
    row["gpu_ms"] = gpu_ms
    row["per_step"] = {k: (after[k] - before[k]) / steps for k in after}
    losses = py("json.dumps(GPU.take_losses())")
    row["gpu_losses"] = json.loads(losses)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", default=["mlp", "cnn", "emb", "mobilenet", "bert", "gpt2_lora"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright
    from server import BenchServer

    sources = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pytrain").rglob("*.py"))
    server = BenchServer(ROOT, isolated=False)
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=GPU_ARGS)
        try:
            for name in args.workloads:
                page = browser.new_context().new_page()
                page.set_default_timeout(1_800_000)
                page.goto(server.origin + "/bench/pages/webgpu_check.html")
                ready = page.evaluate("window.__ready")
                if not ready.startswith("GPU: "):
                    raise SystemExit("no WebGPU adapter: " + ready)
                page.evaluate("paths => window.__loadSources(paths)", sources)
                row = run(page, name, args.steps)
                print(json.dumps(row), flush=True)
                rows.append(row)
                page.context.close()
        finally:
            browser.close()
            server.close()
    ran = {r["workload"] for r in rows}
    out = Path(args.out)
    kept = [r for r in json.loads(out.read_text())["rows"] if r["workload"] not in ran] if out.is_file() else []
    order = ["mlp", "cnn", "emb", "mobilenet", "bert", "gpt2_lora"]   # (the other workloads' rows are kept as they were)
    rows = sorted(kept + rows, key=lambda r: order.index(r["workload"]) if r["workload"] in order else len(order))
    out.write_text(json.dumps({"chromium_args": GPU_ARGS, "steps": args.steps, "rows": rows}, indent=1) + "\n")


def _steps(data: dict) -> str:
    """The steps each row's median is of: "3", or "3 (mobilenet: 2)" when a row was run with fewer."""
    other = ["%s: %d" % (r["workload"], r["steps"]) for r in data["rows"] if r.get("steps", data["steps"]) != data["steps"]]
    return "%d%s" % (data["steps"], " (%s)" % ", ".join(other) if other else "")


def section() -> list:
    """RESULTS.md's section from bench/webgpu.json (empty when absent)."""
    if not RESULTS.is_file():
        return []
    data = json.loads(RESULTS.read_text())
    out = ["## WebGPU in the tab (`bench/webgpu_bench.py`)", "",
           "Headless Chromium (`--enable-unsafe-webgpu`) has only **SwiftShader**, the GPU emulated on the CPU: its "
           "ms per step says nothing about a real GPU (the numbers are right, the speed is not meaningful); what holds "
           "on any adapter is which workloads train on the GPU, and the transfers per step (uploads: the batch and "
           "its labels, and for the text models the small tensors the step computes on the CPU from shapes and "
           "constants (an attention mask, position ids, scalars: a GPU plan does not fold them at start) and "
           "Dropout's masks when its ratio is not 0; readbacks: the loss). CPU: the same page's wasm kernels, one "
           "thread. Median of %s steps. MobileNetV2 (its frozen backbone's depthwise Conv, BatchNorm on running "
           "statistics, ReLU6, global pooling), tiny BERT and GPT-2 with LoRA train wholly on the GPU. The text rows' "
           "CPU ms were measured with the shared machine at the load shown (`os.getloadavg()`, kept in each row): "
           "SwiftShader's ms are the CPU's."
           % _steps(data), "",
           "| workload | batch | adapter | GPU ms / step | CPU ms / step | dispatches / step | uploads / step "
           "(bytes) | readbacks / step (bytes) | refused because |", "|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        c = r.get("per_step")
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["workload"], "x".join(str(d) for d in r["batch"]), r["adapter"],
            "%.0f" % r["gpu_ms"] if "gpu_ms" in r else "–",
            "%.1f" % r["cpu_ms"] + (" (load %.0f)" % r["load"] if "load" in r else ""),
            "%.0f" % c["dispatches"] if c else "–",
            "%.0f (%.0f)" % (c["uploads"], c["uploadBytes"]) if c else "–",
            "%.0f (%.0f)" % (c["readbacks"], c["readbackBytes"]) if c else "–",
            r.get("refused", "").split(": ", 1)[0] or "–"))
    return out + [""]


if __name__ == "__main__":
    main()
