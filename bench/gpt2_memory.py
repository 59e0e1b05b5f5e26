"""The largest GPT-2-shaped model that LoRA fine-tunes within pytrain's memory limit, by
``Module.memory_estimate`` (not part of the suite; numbers in docs/lora.md "Memory" and bench/RESULTS.md).

A GPT-2 of GPT-2's shape (vocabulary 50,257, n_embd 768, 12 heads, 1,024 positions, random init,
eager attention, dropout 0) with ``--layers`` layers, exported by ``pytrain.torch_export`` with logits
as (N, vocab, T), LoRA rank 8 (alpha 16) on ``c_attn``, AdamW; the estimate at 128 tokens and each
``--batch``; with ``--peak`` also the tracemalloc peak of loading the artifacts and two train steps
at the first batch size.

    PYTHONPATH=.:tests/helpers python bench/gpt2_memory.py --layers 12 --batch 1 8 --peak --merge
    PYTHONPATH=.:tests/helpers python bench/gpt2_memory.py --layers 2 7 8 37 38 --batch 1 8 --merge

``--merge`` adds the rows to bench/gpt2_memory.json, which report.py puts into RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

TOKENS = 128
VOCAB = 50257
RESULTS = Path(__file__).resolve().parent / "gpt2_memory.json"
MIB = 2.0 ** 20


def merge(rows: list, path: Path = RESULTS) -> None:
    """Add ``rows`` to the figures at ``path`` (a row per layers and batch size, the newest kept)."""
    old = json.loads(path.read_text()) if path.exists() else {"rows": []}
    keep = {(r["layers"], r["batch"]): r for r in old["rows"]}
    keep.update({(r["layers"], r["batch"]): r for r in rows})
    old["rows"] = [keep[k] for k in sorted(keep)]
    path.write_text(json.dumps(old, indent=1) + "\n")


def section(path: Path = RESULTS) -> list:
    """RESULTS.md's section on the largest GPT-2-shaped model LoRA fine-tunes within 2 GiB (none without figures)."""
    if not path.exists():
        return []
    res = json.loads(path.read_text())
    out = ["## Memory: LoRA on GPT-2-shaped models (`bench/gpt2_memory.py`)", "",
           "`Module.memory_estimate` of GPT-2's shape (vocabulary 50,257, n_embd 768, 12 heads, 1,024 positions, "
           "random init) with N layers at 128 tokens, LoRA rank 8 on `c_attn`, AdamW, against the 2 GiB limit; each "
           "frozen weight held once. Peak: tracemalloc natively from loading the artifacts through two train steps.",
           "", "| layers | batch | total MiB | parameters | gradients | optimizer state | activations | fits 2 GiB "
           "| tracemalloc peak |", "|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in res["rows"]:
        out.append("| %d | %d | %s | %s | %.1f | %.1f | %s | %s | %s |" % (
            r["layers"], r["batch"], "{:,.1f}".format(r["total"] / MIB), "{:,.1f}".format(r["parameters"] / MIB),
            r["gradients"] / MIB, r["optimizer_state"] / MIB, "{:,.1f}".format(r["activations"] / MIB),
            "yes" if r["total"] <= 2 << 30 else "no",
            ("%.1f MiB (%.2fx)" % (r["peak"] / MIB, r["peak"] / r["total"])) if r.get("peak") else ""))
    return out + [""] + res.get("notes", []) + [""]


def source(layers: int, vocab_last: bool = False):
    """The GPT-2-shaped inference model with ``layers`` layers: input_ids (N, 128) -> logits (N, vocab, 128), or
    with ``vocab_last`` (N, 128, vocab) as the page's "Your text" takes a causal LM."""
    import torch
    import transformers
    from torch_zoo import stub_torchvision_ops

    import pytrain

    stub_torchvision_ops()

    from hf_families import Logits

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=768, n_layer=layers, n_head=12, n_positions=1024,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    ids = torch.zeros((1, TOKENS), dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Logits(transformers.GPT2LMHeadModel(cfg), ["input_ids"], transpose=not vocab_last).eval()
        return pytrain.torch_export(model, (ids,), input_names=["input_ids"])


def artifacts(layers: int):
    from pytrain.generator import artifacts as A
    from pytrain.engine.lora import LoRA

    return A.generate_artifacts(source(layers), lora=LoRA(8, 16, ["c_attn"]), optimizer=A.AdamW())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[12])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--peak", action="store_true", help="also the tracemalloc peak of two steps at the first batch")
    ap.add_argument("--merge", action="store_true", help="add the rows to bench/gpt2_memory.json")
    args = ap.parse_args()
    from pytrain.base import limits
    from pytrain.device.api import CheckpointState, Module, Optimizer

    rows = []
    for layers in args.layers:
        t = time.time()
        arts = artifacts(layers)
        ids = np.random.default_rng(0).integers(0, VOCAB, (args.batch[0], TOKENS)).astype(np.int64)
        xy = (ids, (ids * 7 + 3) % VOCAB)
        if args.peak:
            tracemalloc.start()
        state = CheckpointState.load_checkpoint(arts.checkpoint)
        module = Module(arts.training_model, state, arts.eval_model)
        optimizer = Optimizer(arts.optimizer_model, module)
        if args.peak:
            for _ in range(2):
                module(*xy)
                optimizer.step()
                module.lazy_reset_grad()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        for b in args.batch:
            est = module.memory_estimate(*xy, optimizer=optimizer, batch_size=b)
            print("layers %d: %s; %s the %.0f MiB limit" % (layers, est.describe(), "fits" if est.total <= limits.max_heap_bytes
                                                           else "over", limits.max_heap_bytes / 2.0 ** 20))
            rows.append(dict(est._asdict(), layers=layers, batch=b, total=est.total,
                             peak=peak if args.peak and b == args.batch[0] else None))
            if args.peak and b == args.batch[0]:
                print("  tracemalloc peak %.1f MiB = %.2fx the estimate" % (peak / 2.0 ** 20, peak / est.total))
        print("  (%.0f s)" % (time.time() - t), flush=True)
        del arts, state, module, optimizer
    if args.merge:
        merge(rows)
        print("merged into %s (%s, load %s)" % (RESULTS, os.uname().nodename, os.getloadavg()))


if __name__ == "__main__":
    main()
