"""The largest GPT-2-shaped model that LoRA fine-tunes in a real tab (issue 21, item 6; numbers in README "Memory"
and bench/RESULTS.md), and the memory generating its artifacts takes (the factor the page refuses an upload by).

``--generation``: natively, the tracemalloc peak of what the page does with an uploaded model before the first
step ("Your text": read the upload, generate the LoRA artifacts, build the Module) over the model's size, for a
few sizes: ``pytrain.webapp.memory.GENERATION_FACTOR`` is the largest.

``--tab``: each GPT-2-shaped model (bench/gpt2_memory.py's: vocabulary 50,257, n_embd 768, 12 heads, 128 tokens,
random init) of ``--layers`` layers goes into a headless Chromium tab through the widget's "Your text"
(``createTrainer({model, data: {text, tokenizer}, lora})``: LoRA rank 8, alpha 16 on ``c_attn``, AdamW, a
byte-level BPE of 300 tokens), trains one epoch of 2 steps at ``--batch``, and the row says: trained, refused
(with the page's estimate) or crashed; the WebAssembly memory's size at the end (it never shrinks: the peak);
seconds per step.

    PYTHONPATH=.:tests/helpers python bench/gpt2_tab_memory.py --generation 1 2 4 --merge
    PYTHONPATH=.:tests/helpers python bench/gpt2_tab_memory.py --tab --layers 12 13 --batch 1 --merge
    PYTHONPATH=.:tests/helpers python bench/gpt2_tab_memory.py --tab --layers 12 7 6 --batch 8 --merge

``--merge`` adds the rows to bench/gpt2_tab_memory.json, which report_app.py puts into RESULTS.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
import tracemalloc
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "gpt2_tab_memory.json"
MIB = 2.0 ** 20
LORA = {"rank": 8, "alpha": 16, "targets": ["c_attn"]}
TOKENS = 128


def corpus(tokenizer_json: str, blocks: int) -> str:
    """A text of ``blocks`` blocks of TOKENS tokens (tiny_lm's, repeated)."""
    from tiny_lm import TEXT
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    text = TEXT
    while len(tok.encode(text).ids) < blocks * TOKENS:
        text += TEXT
    return tok.decode(tok.encode(text).ids[:blocks * TOKENS])


def merge(kind: str, rows: list) -> None:
    """Add ``rows`` to bench/gpt2_tab_memory.json's ``kind`` table (the newest row per key kept)."""
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    key = (lambda r: (r["layers"], r.get("batch", 0)))
    keep = {key(r): r for r in old.get(kind, [])}
    keep.update({key(r): r for r in rows})
    old[kind] = [keep[k] for k in sorted(keep)]
    old.setdefault("machine", {})[kind] = {"cpu": cpu(), "load": uptime()}
    RESULTS.write_text(json.dumps(old, indent=1) + "\n")


def cpu() -> str:
    try:
        names = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")]
        return "%s, %d cores" % (names[0], len(names))
    except (OSError, IndexError):
        return "unknown"


def uptime() -> str:
    return "load average %.2f, %.2f, %.2f" % os.getloadavg()


def section(path: Path = RESULTS) -> list:
    """RESULTS.md's section on GPT-2-shaped models LoRA fine-tuned in a real tab (none without figures)."""
    if not path.exists():
        return []
    res = json.loads(path.read_text())
    machine = res.get("machine", {})
    mib = (lambda v: "{:,.1f}".format(v / MIB) if v else "–")
    out = ["## Memory in a real tab: LoRA on GPT-2-shaped models (`bench/gpt2_tab_memory.py`)", ""]
    if res.get("tab"):
        m = machine.get("tab", {})
        out += ["bench/gpt2_memory.py's GPT-2 shape (vocabulary 50,257, n_embd 768, 12 heads, random init) with N layers "
                "at 128 tokens, uploaded into a headless Chromium tab through the widget's \"Your text\" (a 300-token "
                "byte-level BPE), LoRA rank 8 on `c_attn`, AdamW, one epoch of 2 steps. Estimate: the page's "
                "(`Module.memory_estimate`); left: what the tab's heap had left for it; heap: the WebAssembly memory's "
                "size after training (it never shrinks: the peak). %s; %s." % (m.get("cpu", ""), m.get("load", "")), "",
                "| layers | batch | model MiB | outcome | estimate MiB | left MiB | wasm heap MiB | build s | s / step |",
                "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
        for r in res["tab"]:
            note = (": " + r["error"].split(", over pytrain")[0][:200].replace("|", "/")
                    if r["outcome"] != "trained" and r.get("error") else "")
            out.append("| %d | %d | %s | %s%s | %s | %s | %s | %s | %s |" % (
                r["layers"], r["batch"], mib(r["model_bytes"]), r["outcome"], note, mib(r.get("estimate")),
                mib(r.get("left")), mib(r.get("heap_peak")), "%.0f" % r["build_s"] if r.get("build_s") else "–",
                "%.1f" % r["step_s"] if r.get("step_s") else "–"))
        out.append("")
    if res.get("generation"):
        m = machine.get("generation", {})
        out += ["What the page does with an upload before the first step, natively (tracemalloc, the upload itself not "
                "counted): generating the LoRA artifacts, and the whole \"Your text\" (generation, the Module, the "
                "estimate's probe). `pytrain.webapp.memory.GENERATION_FACTOR` refuses an upload over what the tab "
                "has left. %s; %s." % (m.get("cpu", ""), m.get("load", "")), "",
                "| layers | model MiB | generating, peak MiB | × model | upload to first step, peak MiB | × model |",
                "|---:|---:|---:|---:|---:|---:|"]
        for r in res["generation"]:
            out.append("| %d | %s | %s | %.2f | %s | %.2f |" % (
                r["layers"], mib(r["model_bytes"]), mib(r["generate_peak"]), r["generate_peak"] / r["model_bytes"],
                mib(r["use_peak"]), r["use_peak"] / r["model_bytes"]))
        out.append("")
    return out + res.get("notes", []) + ([""] if res.get("notes") else [])


def generation(layers_list: list) -> list:
    """The tracemalloc peak of the page's "Your text" before the first step, over the uploaded model's size."""
    from gpt2_memory import source
    from tiny_lm import tokenizer_json

    from pytrain.webapp import Session
    from pytrain.webapp.common import load_upload
    from pytrain.webapp.demo import generate_bytes
    from pytrain.webapp.model_source import lora_spec
    from pytrain.generator.losses import CausalLMLoss

    tj = tokenizer_json()
    text = corpus(tj, 4)
    rows = []
    for layers in layers_list:
        blob = source(layers, vocab_last=True)
        tracemalloc.start()
        m = load_upload(blob, "gpt2.onnx")
        arts = generate_bytes(m, CausalLMLoss(ids_name="input_ids"), "AdamW", output_name=m.graph.output[0].name,
                              lora=lora_spec(m, LORA))
        gen = tracemalloc.get_traced_memory()[1]
        del m, arts
        tracemalloc.stop()
        tracemalloc.start()
        s = Session()
        s.configure(batch_size=1)
        s.text("use", model=blob, tokenizer=tj, text=text, block_size=TOKENS, lora=LORA)
        use = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del s
        row = {"layers": layers, "model_bytes": len(blob), "generate_peak": gen, "use_peak": use}
        print("layers %d: model %.1f MiB, generating %.1f MiB (%.2fx), the whole upload to the first step %.1f MiB "
              "(%.2fx)" % (layers, len(blob) / MIB, gen / MIB, gen / len(blob), use / MIB, use / len(blob)), flush=True)
        rows.append(row)
    return rows


HOST = """<!doctype html>
<meta charset="utf-8">
<script type="module">
import { createTrainer } from "/pytrain-widget.js";
window.__run = { status: "running", heap: 0 };
const t0 = performance.now();
const trainer = createTrainer({ model: "/bench-gpt2/model.onnx",
  data: { text: "/bench-gpt2/corpus.txt", tokenizer: "/bench-gpt2/tokenizer.json" },
  lora: %(lora)s, epochs: 1, batchSize: %(batch)d, learningRate: 0.001 });
const steps = [];
trainer.on("progress", (p) => { steps.push([performance.now(), p.losses.length]);
                                window.__run.heap = Math.max(window.__run.heap, p.wasmHeap || 0); });
trainer.on("error", (e) => { window.__run.error = e.message; });
(async () => {
  await trainer.ready;
  window.__run.built = (performance.now() - t0) / 1000;
  await trainer.client.call("configure", { batchSize: %(batch)d });
  window.__run.memory = (await trainer.client.call("status")).model.memory;   // the estimate at this batch
  const t1 = performance.now();
  const done = await trainer.train();
  Object.assign(window.__run, { status: "done", done, trainSeconds: (performance.now() - t1) / 1000, steps });
})().catch((e) => { Object.assign(window.__run, { status: "failed", error: e.message || String(e) }); });
</script>
"""


@contextlib.contextmanager
def text_tabs():
    """(browser, url, work, tokenizer.json's text): build.py's site (built when needed) served with a folder of its
    own, ``bench-gpt2/`` (same origin as the widget), holding tiny_lm's tokenizer.json; a headless Chromium."""
    sys.path.insert(0, str(ROOT))
    import build
    from playwright.sync_api import sync_playwright
    from tiny_lm import tokenizer_json

    from browser import CHROMIUM, CHROMIUM_ARGS

    site = build.SITE
    if build.needs_build(site):
        build.build(site=site)
    work = site / "bench-gpt2"
    work.mkdir(exist_ok=True)
    tj = tokenizer_json()
    (work / "tokenizer.json").write_text(tj)
    server, url = build.serve_in_thread(site)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield browser, url, work, tj
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(work, ignore_errors=True)


def tab(layers_list: list, batches: list, timeout_s: float, tiny: bool = False) -> list:
    """Each model in a fresh tab through the widget's "Your text"; one row per (layers, batch). ``tiny``: tiny_lm's
    GPT-2 instead (a check of the harness)."""
    from tiny_lm import tiny_gpt2

    rows = []
    with text_tabs() as (browser, url, work, tj):
        for layers in layers_list:
            blob = tiny_gpt2(length=TOKENS, positions=TOKENS).onnx if tiny else model_bytes(layers)
            (work / "model.onnx").write_bytes(blob)
            for batch in batches:
                (work / "host.html").write_text(HOST % {"lora": json.dumps(LORA), "batch": batch})
                (work / "corpus.txt").write_text(corpus(tj, 2 * batch + 1))   # 2 steps, 10% held out
                row = one_tab(browser, url + "bench-gpt2/host.html", timeout_s)
                row.update(layers=layers, batch=batch, model_bytes=len(blob))
                print(json.dumps(row), flush=True)
                rows.append(row)
            del blob
    return rows


def model_bytes(layers: int) -> bytes:
    """bench/gpt2_memory.py's model of ``layers`` layers, logits (N, 128, vocab), kept in /tmp between runs."""
    from gpt2_memory import source

    path = Path("/tmp/pytrain-gpt2-tab/gpt2-%d.onnx" % layers)
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(source(layers, vocab_last=True))
    return path.read_bytes()


def one_tab(browser, url: str, timeout_s: float) -> dict:
    ctx = browser.new_context()
    page = ctx.new_page()
    crashed = []
    logs = []
    page.on("crash", lambda *_: crashed.append(True))
    page.on("console", lambda m: logs.append(m.text) if m.type == "error" else None)
    t0 = time.perf_counter()
    try:
        page.goto(url)
        deadline = time.time() + timeout_s
        state = {}
        while time.time() < deadline and not crashed:
            state = page.evaluate("() => window.__run || {}")
            if state.get("status") in ("done", "failed"):
                break
            page.wait_for_timeout(2000)
    except Exception as e:   # the tab died under us
        state = {"status": "crashed", "error": str(e).splitlines()[0]}
    finally:
        wall = time.perf_counter() - t0
        try:
            ctx.close()
        except Exception:
            pass
    memory = state.get("memory") or {}
    done = state.get("done") or {}
    steps = sum(n for _, n in state.get("steps", []))
    if crashed or state.get("status") == "crashed":
        outcome = "crashed"
    elif state.get("status") == "done" and done.get("reason") == "finished" and steps:
        outcome = "trained"
    elif "memory limit" in (state.get("error") or ""):
        outcome = "refused"
    elif state.get("status") in ("done", "failed"):
        outcome = "failed"
    else:
        outcome = "timed out"
    return {"outcome": outcome, "error": (state.get("error") or "")[:400], "steps": steps,
            "estimate": memory.get("total"), "left": memory.get("left"), "heap_peak": state.get("heap") or None,
            "build_s": state.get("built"), "train_s": state.get("trainSeconds"),
            "step_s": (state["trainSeconds"] / steps) if steps and state.get("trainSeconds") else None,
            "wall_s": wall, "console": logs[-3:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--generation", type=int, nargs="*", help="layers to measure generating natively")
    ap.add_argument("--tab", action="store_true", help="train in a headless Chromium tab")
    ap.add_argument("--layers", type=int, nargs="+", default=[12])
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--tiny", action="store_true", help="tiny_lm's GPT-2 instead (checks the harness)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per tab")
    ap.add_argument("--merge", action="store_true", help="add the rows to bench/gpt2_tab_memory.json")
    args = ap.parse_args()
    sys.path.insert(0, str(BENCH))
    if args.generation:
        rows = generation(args.generation)
        if args.merge:
            merge("generation", rows)
    if args.tab:
        rows = tab(args.layers, args.batch, args.timeout, args.tiny)
        if args.merge:
            merge("tab", rows)
    print(uptime())


if __name__ == "__main__":
    main()
