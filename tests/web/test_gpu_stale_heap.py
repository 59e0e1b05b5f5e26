"""While the WebGPU device holds parameters newer than the wasm heap's (pytrain/webapp/gpu_slices.py: ``stale``), the
worker's bridge (pytrain/webapp/bridge.py) refuses every session method that reads them, naming the read back it
needs, and runs the ones that read none (the browser side: tests/browser/test_webgpu.py)."""
from __future__ import annotations

import json

import numpy as np

from pytrain import webapp
from pytrain.webapp import bridge


def _call(s: webapp.Session, method: str, **args) -> dict:
    return json.loads(bridge.call(s, method, json.dumps(args))[0])


def test_the_bridge_refuses_reading_parameters_the_gpu_holds():
    s = webapp.Session()
    x = np.random.default_rng(0).standard_normal((40, 6)).astype(np.float32)
    s.use_arrays(x, (x[:, 0] > 0).astype(np.int64), classes=["no", "yes"])
    s.build_mlp(hidden=[8])
    s.gpu.stale = True   # (as after a GPU slice: the CheckpointState is older than the GPU's parameters)
    for method in ("checkpoint", "export", "evaluate", "digest", "snapshot"):
        out = _call(s, method)
        assert not out["ok"] and "not read back yet (gpu_sync)" in out["error"]["message"], (method, out)
        assert out["error"]["expected"]
    for method, args in (("status", {}), ("run_options", {}), ("configure", {"lr": 0.01})):
        assert _call(s, method, **args)["ok"], method
    s.gpu.stale = False
    assert _call(s, "checkpoint")["ok"] and _call(s, "digest")["ok"]
