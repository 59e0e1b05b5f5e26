"""Memory in the tab: the model's estimate (:meth:`pytrain.device.api.Module.memory_estimate`) against what is left of
the limit, for the page's model panel, and the hook through which the worker tells :mod:`pytrain.limits` how much
of Pyodide's WebAssembly heap is already in use (Python, numpy, pytrain, the data), so that a run which would not
fit in the rest is refused before its first step (:func:`pytrain.base.limits.heap_budget`)."""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pytrain.base import limits
from pytrain.errors import PytrainError
from pytrain.ops import webgpu
from pytrain.webapp.gpu_slices import heap_need


def install() -> bool:
    """In the page's worker (Pyodide), set ``pytrain.base.limits.heap_now`` to the worker's ``pytrainWasmHeap()``
    (web/worker/training.js): the heap's bytes in use and the site's limit (config.json ``maxHeapBytes``, 0 for
    none). False, and nothing changed, anywhere else."""
    if sys.platform != "emscripten":
        return False
    try:
        import js  # type: ignore  # Pyodide's view of the worker's global scope
        probe = js.pytrainWasmHeap
    except (ImportError, AttributeError):
        return False

    def now() -> Tuple[int, Optional[int]]:
        heap = probe()
        return int(heap.used), (int(heap.limit) or None)

    limits.heap_now = now
    return True


#: the most that reading an uploaded model and generating its artifacts holds at once, over the model's size (the
#: upload itself not counted): natively (tracemalloc) 3.02x-3.08x for GPT-2-shaped models of 1 to 4 layers
#: (bench/gpt2_tab_memory.py --generation, bench/RESULTS.md)
GENERATION_FACTOR = 3.1


def check_generation(model: bytes, name: str, extra_files: Optional[Dict[str, bytes]] = None) -> None:
    """Refuse (LimitError, naming the size and the limit) an upload whose artifacts would not fit what is left of
    the limit, before generating them, instead of the tab running out of memory while it does."""
    size = len(model) + sum(len(v) for v in (extra_files or {}).values())
    need = int(GENERATION_FACTOR * size)
    limits.check_heap(need, "generating training artifacts for %s (%.1f MiB) needs about %.1f MiB more (%.1fx its size)"
                      % (name, size / 2.0 ** 20, need / 2.0 ** 20, GENERATION_FACTOR),
                      advice="choose a smaller model, or generate its artifacts outside the browser (pytrain "
                      "generate) and upload those")


_last: List[Any] = [None, None]   # (key, estimate) of the last summary


def summary(session: Any) -> Optional[Dict[str, Any]]:
    """The estimate of training the session's model at its batch size, by part, in bytes, with the limit and
    what is left of it (``left``: the limit less what the heap holds besides this model); None without a model
    or data, and ``{"error": message}`` when the estimate cannot be made."""
    run, data = session.run, session.source.data
    module = run.module
    if module is None or not data or not len(data.get("train_x", ())):
        return None
    key = (id(module), id(run.optimizer), session.artifacts_version, run.batch_size, session.source.version)
    try:
        if _last[0] != key:   # status() asks often: the estimate is made once per model, optimizer, batch size, data
            batch = session.batch(np.arange(min(2, len(data["train_x"]))))
            _last[:] = [key, module.memory_estimate(*batch, optimizer=run.optimizer, batch_size=run.batch_size)]
        est = _last[1]
        limit, left = limits.heap_budget(module.held_bytes(est))
    except PytrainError as e:
        return {"error": str(e)}
    out = {"batch_size": est.batch_size, "parameters": est.parameters, "gradients": est.gradients,
           "optimizer_state": est.optimizer_state, "activations": est.activations, "total": est.total,
           "limit": limit, "left": max(0, left), "fits": est.total <= left, "describe": est.describe()}
    gpu = gpu_summary(module, est)
    if gpu is not None:   # (the GPU's memory, apart from the wasm heap's, which keeps only gpu["heap"] then)
        gpu["moments_on_gpu"] = gpu["heap"] > left   # (then the heap keeps the parameters and one moment at a time)
        gpu["heap"] = gpu["heap_least"] if gpu["moments_on_gpu"] else gpu["heap"]
        gpu["heap_fits"] = gpu["heap"] <= left
        out["gpu"] = gpu
    return out


def gpu_summary(module: Any, est: Any) -> Optional[Dict[str, Any]]:
    """When the page's WebGPU device may train: the GPU memory the step takes there (all of the estimate:
    parameters, gradients, optimizer state, activations) against what pytrain assumes the GPU has, the largest
    parameter against its largest buffer, and what the wasm heap keeps meanwhile (the parameters, and the optimizer
    state once read back for a save or an export: the gradients and activations live on the GPU only, so a step
    past the heap's budget trains there, :func:`pytrain.webapp.gpu_slices.check_heap`); None without a device."""
    dev = webgpu.device()
    if dev is None:
        return None
    largest = max([module.state.parameters[n].data.nbytes for n in module.parameter_names] or [0])
    return {"adapter": dev.adapter, "total": est.total, "memory": dev.memory, "max_buffer": dev.max_buffer,
            "largest": largest, "heap": est.parameters + est.optimizer_state,
            "heap_least": heap_need(module, est)[0],   # (past the heap's budget the optimizer state stays on the GPU)
            "fits": est.total <= dev.memory and largest <= dev.max_buffer}
