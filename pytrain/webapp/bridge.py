"""The bridge the browser worker calls: JSON + binary blobs in, JSON + blobs out, never raising."""
from __future__ import annotations

import json
import traceback
from typing import Any, Dict, List, Tuple

import numpy as np

from pytrain.errors import PytrainError
from pytrain.webapp.common import WebappError
from pytrain.webapp.session import Session


def _decode(value: Any, blobs: List[bytes]) -> Any:
    """Replace {"$blob": i, ["dtype", "shape"]} placeholders with bytes or numpy arrays."""
    if isinstance(value, dict):
        if "$blob" in value:
            raw = blobs[int(value["$blob"])]
            if "dtype" in value:
                arr = np.frombuffer(raw, dtype=np.dtype(value["dtype"]))
                return arr.reshape(value["shape"]) if value.get("shape") else arr
            return raw
        return {k: _decode(v, blobs) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, blobs) for v in value]
    return value


def _encode(value: Any, out: List[np.ndarray]) -> Any:
    """Replace bytes with {"$blob": i} (the blob goes out as a uint8 array) and numpy scalars with floats."""
    if isinstance(value, (bytes, bytearray, memoryview)):   # (bytes and views go out as they are: no heap copy)
        out.append(np.frombuffer(value if not isinstance(value, bytearray) else bytes(value), dtype=np.uint8))
        return {"$blob": len(out) - 1}
    if isinstance(value, dict):
        return {str(k): _encode(v, out) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, out) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _as_bytes(blob: Any) -> bytes:
    # In Pyodide a JS Uint8Array arrives as a JsProxy; to_py() gives a memoryview over a copy.
    if hasattr(blob, "to_py"):
        blob = blob.to_py()
    return bytes(blob)


#: the session's methods that do not read the CheckpointState's values, so run while the GPU holds newer ones
GPU_SAFE = frozenset(("status", "train_for", "gpu_finish", "gpu_lost", "gpu_sync", "gpu_commit", "run_options",
                      "configure"))


def reads_no_parameter(method: str, args: Dict[str, Any]) -> bool:
    """Whether the session's ``method`` with ``args`` may run while the GPU holds newer parameters than the heap:
    :data:`GPU_SAFE`, and the rest of the digits joining a run that started on their first part (data only)."""
    return method in GPU_SAFE or (method == "use_digits" and bool(args.get("rest")))


def call(session: Session, method: str, args_json: str = "{}", blobs: Any = ()) -> Tuple[str, List[np.ndarray]]:
    """Run ``session.<method>(**args)`` for the worker; never raises.

    Returns (JSON text, output blobs). The JSON is {"ok": true, "result": ...} or
    {"ok": false, "error": {"type", "message", "expected", "trace"}}; ``expected`` is true for
    pytrain errors (bad input the user can fix) and false for bugs.
    """
    out: List[np.ndarray] = []
    try:
        if method.startswith("_") or not callable(getattr(session, method, None)):
            raise WebappError("unknown session method %r" % method)
        raw = [_as_bytes(b) for b in (blobs or [])]
        args = _decode(json.loads(args_json or "{}"), raw)
        if session.gpu.stale and not reads_no_parameter(method, args):   # (the worker calls gpu_sync first)
            raise WebappError("%s needs the parameters the GPU trained, not read back yet (gpu_sync)" % method)
        result = getattr(session, method)(**args)
        return json.dumps({"ok": True, "result": _encode(result, out)}), out
    except Exception as exc:  # the page shows every failure instead of losing the worker
        expected = isinstance(exc, PytrainError)
        err = {"type": type(exc).__name__, "message": str(exc) or type(exc).__name__, "expected": expected,
               "trace": "" if expected else traceback.format_exc()}
        return json.dumps({"ok": False, "error": err}), []

