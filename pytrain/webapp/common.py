"""What every part of the web app facade shares: its error type, constants, and lazy access
to the core API."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from pytrain.engine.validate import load_model as _load_model
from pytrain.errors import ModelFormatError, PytrainError

MNIST_MAGIC = b"PTMNIST1"
MNIST_PART_MAGIC = b"PTMNPART"   # the digits' first part (pytrain.webapp.demo.mnist_part)
LOSSES = ("CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss", "L1Loss", "CausalLMLoss")
OPTIMIZERS = ("AdamW", "Adam", "SGD")
FLOAT_TYPES = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


class WebappError(PytrainError, ValueError):
    """A request from the page that cannot be honoured (no data loaded, no model yet...)."""


# ---------------------------------------------------------------- core API access

def core_api() -> Tuple[Any, Any, Any]:
    """(artifacts, models, api), imported on first use so the worker starts answering sooner."""
    from pytrain.device import api
    from pytrain.generator import artifacts, models
    return artifacts, models, api


def load_upload(blob: bytes, name: str, extra_files: Optional[Dict[str, bytes]] = None) -> Any:
    """Parse uploaded ONNX bytes; errors name the file the user chose. ``extra_files``
    ({file name: bytes}) are the files uploaded next to it, e.g. the ``.onnx.data`` that torch's
    default exporter writes (ONNX external data, matched by file name)."""
    files = {str(k): bytes(v) for k, v in (extra_files or {}).items()}
    try:
        return _load_model(bytes(blob), name, external_data=files or None)
    except ModelFormatError:
        missing = _missing_data_files(bytes(blob), files)
        if not missing:
            raise
        raise ModelFormatError("%s keeps its weights in a file of their own (external data), %s: also choose %s "
                               "in the same dialog as %s (select both files)."
                               % (name, " and ".join(missing), " and ".join(missing), name)) from None


def _missing_data_files(blob: bytes, files: Dict[str, bytes]) -> List[str]:
    """The external data files (ONNX ``location``) the model names and the upload did not include."""
    from pytrain.proto import ModelProto
    try:
        model = ModelProto.FromString(blob)
    except Exception:                     # not ONNX at all: the loader's own message says so
        return []
    given = {k.replace("\\", "/").split("/")[-1] for k in files}
    missing: List[str] = []
    for t in model.graph.initializer:
        for e in t.external_data:
            where = e.value.replace("\\", "/").split("/")[-1]
            if e.key == "location" and where not in given and where not in missing:
                missing.append(where)
    return missing


def inference_session(model_bytes: bytes) -> Any:
    """pytrain's InferenceSession over ``model_bytes`` (imported on first use)."""
    from pytrain.engine.runtime import InferenceSession
    return InferenceSession(model_bytes)


