"""What every part of the web app facade shares: its error type, constants, and lazy access
to the core API."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from pytrain.validate import load_model as _load_model
from pytrain.errors import PytrainError

MNIST_MAGIC = b"PTMNIST1"
LOSSES = ("CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss", "L1Loss")
OPTIMIZERS = ("AdamW", "Adam", "SGD")
_FLOAT_TYPES = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


class WebappError(PytrainError, ValueError):
    """A request from the page that cannot be honoured (no data loaded, no model yet...)."""


# ---------------------------------------------------------------- core API access

def core_api() -> Tuple[Any, Any, Any]:
    """(artifacts, models, api), imported on first use so the worker starts answering sooner."""
    from pytrain import api, artifacts, models
    return artifacts, models, api


def load_upload(blob: bytes, name: str, extra_files: Optional[Dict[str, bytes]] = None) -> Any:
    """Parse uploaded ONNX bytes; errors name the file the user chose. ``extra_files``
    ({file name: bytes}) are the files uploaded next to it, e.g. the ``.onnx.data`` that torch's
    default exporter writes (ONNX external data, matched by file name)."""
    files = {str(k): bytes(v) for k, v in (extra_files or {}).items()}
    return _load_model(bytes(blob), name, external_data=files or None)


def _inference_session(model_bytes: bytes) -> Any:
    from pytrain.runtime import InferenceSession
    return InferenceSession(model_bytes)


