"""LoRA training speed on a quantized base against the float one: tokens per second of a training step (forward,
backward, AdamW on the adapters), natively and in a headless Chromium tab (not part of the suite; rows in
bench/RESULTS.md, "LoRA on a quantized base: tokens per second").

The base is bench/gpt2_memory.py's GPT-2 shape (vocabulary 50,257, n_embd 768, 12 heads, random init) with
``--layers`` layers, in bench/gpt2_quantized_memory.py's three forms: float32, q8 (onnxruntime's ``quantize_dynamic``,
as transformers.js' model_quantized.onnx) and q4 (MatMul4BitsQuantizer, symmetric blocks of 32). LoRA rank 8, alpha
16 on ``c_attn``, AdamW, batch 1 of 128 tokens. Natively: ``--steps`` timed steps after one warm-up, the median.
In the tab (``--tab``): the widget's "Your text" (bench/gpt2_tab_memory.py's page and harness) trains one epoch of
``--steps`` steps; train()'s time over its steps (the epoch's validation on the held-out block included).

    PYTHONPATH=.:tests/helpers:tests/training:bench python bench/quantized_lora_speed.py --layers 2 --steps 3 --merge
    PYTHONPATH=.:tests/helpers:tests/training:bench python bench/quantized_lora_speed.py --layers 2 --steps 4 --tab --merge

``--merge`` adds the rows to bench/quantized_lora_speed.json, which report.py puts into RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "quantized_lora_speed.json"
TOKENS = 128


def merge(rows: list, layers: int) -> None:
    """Add ``rows`` to bench/quantized_lora_speed.json (the newest row per place, form and layers kept)."""
    from gpt2_tab_memory import cpu, uptime

    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"rows": [], "machine": {}}
    key = (lambda r: (r["where"], r["layers"], r["form"]))
    keep = {key(r): r for r in old["rows"]}
    rows = [dict(r, layers=layers) for r in rows]
    keep.update({key(r): r for r in rows})
    old["rows"] = [keep[k] for k in sorted(keep)]
    old["machine"][rows[0]["where"]] = {"cpu": cpu(), "load": uptime()}
    RESULTS.write_text(json.dumps(old, indent=1) + "\n")


def section(path: Path = RESULTS) -> list:
    """RESULTS.md's section on LoRA's speed on a quantized base (none without figures)."""
    if not path.exists():
        return []
    res = json.loads(path.read_text())
    out = ["## LoRA on a quantized base: tokens per second (`bench/quantized_lora_speed.py`)", "",
           "bench/gpt2_memory.py's GPT-2 shape (vocabulary 50,257, n_embd 768, 12 heads, random init) as float32, q8 "
           "(onnxruntime's quantize_dynamic, as transformers.js' model_quantized.onnx) and q4 (MatMul4BitsQuantizer, "
           "blocks of 32); LoRA rank 8, alpha 16 on `c_attn`, AdamW, batch 1 of 128 tokens. Native: the median of the "
           "timed steps after a warm-up; tab: the widget's \"Your text\", train()'s time over its steps (the epoch's "
           "validation included). " + "; ".join("%s: %s, %s" % (w, m.get("cpu", ""), m.get("load", ""))
                                                 for w, m in sorted(res.get("machine", {}).items())) + ".", "",
           "    PYTHONPATH=.:tests/helpers:tests/training:bench python bench/quantized_lora_speed.py --layers 2 --steps 3 "
           "--merge", "    PYTHONPATH=.:tests/helpers:tests/training:bench python bench/quantized_lora_speed.py --layers 2 "
           "--steps 4 --tab --merge", "",
           "| where | layers | base | file MB | s / step | tokens / s | × float32 |", "|---|---:|---|---:|---:|---:|---:|"]
    f32 = {(r["where"], r["layers"]): r.get("tokens_s") for r in res["rows"] if r["form"] == "f32"}
    for r in sorted(res["rows"], key=lambda r: (r["where"] != "native", r["layers"], ["f32", "q8", "q4"].index(r["form"]))):
        base = f32.get((r["where"], r["layers"]))
        out.append("| %s | %d | %s | %.1f | %s | %s | %s |" % (
            r["where"], r["layers"], r["form"], r["file_mb"], "%.2f" % r["step_s"] if r.get("step_s") else "–",
            "%.1f" % r["tokens_s"] if r.get("tokens_s") else r.get("outcome", "–"),
            "%.2f" % (r["tokens_s"] / base) if r.get("tokens_s") and base else "–"))
    return out + [""] + res.get("notes", []) + ([""] if res.get("notes") else [])


def native(forms: dict, steps: int) -> list:
    from pytrain.device.api import CheckpointState, Module, Optimizer
    from pytrain.generator import artifacts
    from pytrain.lora import LoRA
    from pytrain.generator.losses import CausalLMLoss

    ids = np.random.default_rng(0).integers(0, 50257, (1, TOKENS)).astype(np.int64)
    rows = []
    for name, blob in forms.items():
        arts = artifacts.generate_artifacts(blob, lora=LoRA(8, 16.0, ["c_attn"]), loss=CausalLMLoss(),
                                            optimizer=artifacts.AdamW())
        module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint), arts.eval_model)
        opt = Optimizer(arts.optimizer_model, module)
        times = []
        for _ in range(steps + 1):
            t = time.perf_counter()
            module(ids)
            opt.step()
            module.lazy_reset_grad()
            times.append(time.perf_counter() - t)
        step = statistics.median(times[1:])
        rows.append({"where": "native", "form": name, "file_mb": len(blob) / 1e6, "step_s": step,
                     "tokens_s": TOKENS / step})
        print(json.dumps(rows[-1]), flush=True)
        del arts, module, opt
    return rows


def tab(forms: dict, steps: int, timeout_s: float) -> list:
    from gpt2_tab_memory import HOST, LORA, corpus, one_tab, text_tabs

    rows = []
    with text_tabs() as (browser, url, work, tj):
        (work / "corpus.txt").write_text(corpus(tj, steps + 1))   # one epoch of `steps` steps, 10% held out
        (work / "host.html").write_text(HOST % {"lora": json.dumps(LORA), "batch": 1})
        for name, blob in forms.items():
            (work / "model.onnx").write_bytes(blob)
            r = one_tab(browser, url + "bench-gpt2/host.html", timeout_s)
            row = {"where": "tab", "form": name, "file_mb": len(blob) / 1e6, "outcome": r["outcome"],
                   "step_s": r["step_s"], "tokens_s": TOKENS / r["step_s"] if r["step_s"] else None,
                   "build_s": r["build_s"], "heap_mib": (r["heap_peak"] or 0) / 2.0 ** 20}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--forms", nargs="+", default=["f32", "q8", "q4"])
    ap.add_argument("--tab", action="store_true", help="in a headless Chromium tab (else natively)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per tab")
    ap.add_argument("--merge", action="store_true", help="add the rows to bench/quantized_lora_speed.json")
    args = ap.parse_args()
    sys.path.insert(0, str(BENCH))
    from gpt2_quantized_memory import forms

    made = {k: v for k, v in forms(args.layers).items() if k in args.forms}
    rows = tab(made, args.steps, args.timeout) if args.tab else native(made, args.steps)
    if args.merge and rows:
        merge(rows, args.layers)
    print("load average %.2f, %.2f, %.2f" % os.getloadavg())
    print("| form | file MB | s / step | tokens / s |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print("| %s | %.1f | %s | %s |" % (r["form"], r["file_mb"], "%.2f" % r["step_s"] if r["step_s"] else "–",
                                          "%.0f" % r["tokens_s"] if r["tokens_s"] else r.get("outcome", "–")))


if __name__ == "__main__":
    main()
