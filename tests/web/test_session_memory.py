"""The page's model summary carries the model's memory estimate (pytrain/webapp/memory.py): its parts are the
Module's estimate at the session's batch size, natively against the whole limit; with the tab's heap hook
(``limits.heap_now``) against what is left; and the session's first train slice is refused by the same check."""
from __future__ import annotations

import numpy as np
import pytest

from pytrain.base import limits
from pytrain import webapp
from pytrain.errors import LimitError


def _session() -> webapp.Session:
    s = webapp.Session()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 6)).astype(np.float32)
    s.use_arrays(x, (x[:, 0] > 0).astype(np.int64), classes=["no", "yes"])
    s.build_mlp(hidden=[16])
    return s


def test_model_summary_shows_the_estimate_by_part_against_what_is_left(monkeypatch):
    s = _session()
    memory = s.model_summary()["memory"]
    x, y = s.batch(np.arange(2))
    est = s.run.module.memory_estimate(x, y, optimizer=s.run.optimizer, batch_size=s.run.batch_size)
    assert memory == {"batch_size": 32, "parameters": est.parameters, "gradients": est.gradients,
                      "optimizer_state": est.optimizer_state, "activations": est.activations, "total": est.total,
                      "limit": limits.max_heap_bytes, "left": limits.max_heap_bytes, "fits": True,
                      "describe": est.describe()}
    assert est.optimizer_state == 2 * est.gradients > 0   # AdamW

    held = s.run.module.held_bytes(est)
    monkeypatch.setattr(limits, "heap_now", lambda: (held + (30 << 20), est.total + (30 << 20) - 1))
    memory = s.model_summary()["memory"]
    assert memory["limit"] == est.total + (30 << 20) - 1 and memory["left"] == est.total - 1
    with pytest.raises(LimitError, match="less the 31457280 bytes"):
        s.train_for(budget_ms=1e9, max_steps=1)
    assert s.run.at.step == 0


def test_an_upload_whose_generation_would_not_fit_is_refused_before_generating(monkeypatch):
    from pytrain.generator import models
    from pytrain.webapp import memory as webapp_memory

    blob = models.to_bytes(models.mlp(6, [16], 2, seed=0))
    need = int(webapp_memory.GENERATION_FACTOR * len(blob))
    monkeypatch.setattr(limits, "heap_now", lambda: (50 << 20, (50 << 20) + need - 1))   # one byte short
    s = webapp.Session()
    with pytest.raises(LimitError, match=r"generating training artifacts for m\.onnx \(0\.0 MiB\) needs about 0\.0 MiB "
                                         r"more \(3\.1x its size\) \(%d bytes\), over pytrain's memory limit of %d bytes"
                                         r".*choose a smaller model" % (need, (50 << 20) + need - 1)):
        s.generate(blob, name="m.onnx")
    assert s.run.module is None and s.model_summary() == {"ready": False}
    monkeypatch.setattr(limits, "heap_now", lambda: (50 << 20, (50 << 20) + need))     # just enough
    assert s.generate(blob, name="m.onnx")["ready"]
