"""pytrain.heap: a training step reuses the previous step's memory instead of faulting in fresh
pages (counted with getrusage's minor page faults, not timed)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Ten CNN steps after warm-up; prints the minor page faults they caused.
SCRIPT = r"""
import json, resource
import numpy as np
from pytrain.generator import artifacts, models
from pytrain.device.api import CheckpointState, Module, Optimizer
a = artifacts.generate_artifacts(models.cnn(channels=(16, 32)), optimizer=artifacts.AdamW())
m = Module(a.training_model, CheckpointState.load_checkpoint(a.checkpoint), a.eval_model)
opt = Optimizer(a.optimizer_model, m)
x = np.random.default_rng(0).random((64, 1, 28, 28), dtype=np.float32)
y = np.arange(64) % 10
def step():
    m(x, y); opt.step(); m.lazy_reset_grad()
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


def _faults(keep_heap: str) -> int:
    env = dict(os.environ, PYTRAIN_KEEP_HEAP=keep_heap, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the setting is glibc's")
def test_training_steps_reuse_memory_instead_of_faulting_in_new_pages():
    kept, default = _faults("1"), _faults("0")
    # One step's temporaries are several MB (thousands of 4 KiB pages); with the heap kept, ten
    # steps fault in almost nothing new.
    assert default > 5000, default
    assert kept < default / 10, (kept, default)


def test_opt_out_and_non_glibc_leave_the_allocator_alone(monkeypatch):
    from pytrain.engine import heap

    monkeypatch.setattr(heap, "_done", False)
    monkeypatch.setenv("PYTRAIN_KEEP_HEAP", "0")
    assert heap.keep_freed_memory() is False
    monkeypatch.setenv("PYTRAIN_KEEP_HEAP", "1")
    monkeypatch.setattr(heap.sys, "platform", "emscripten")
    assert heap.keep_freed_memory() is False
