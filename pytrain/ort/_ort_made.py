"""Artifacts ONNX Runtime's own ``generate_artifacts`` made: recognised and refused with the way out.

ORT 1.19's training models compute gradients with its ``com.microsoft`` ops (InPlaceAccumulatorV2,
ReluGrad, SoftmaxCrossEntropyLossGrad, ...) and its optimizer model is one ``com.microsoft``
AdamWOptimizer or SGDOptimizerV2 node over sequences of tensors. pytrain runs neither; rather than a
generic "not a pytrain artifact" or "sequence type" error, the user is told which ops and what to do.
"""
from __future__ import annotations

from typing import Any, List, Tuple

from pytrain.errors import ModelFormatError
from pytrain.ops.registry import get_kernel
from pytrain.proto import ModelProto
from pytrain.proto.value_types import describe_type

#: domains of ORT's training and gradient ops
ORT_DOMAINS = ("com.microsoft", "ai.onnx.preview.training")
WAY_OUT = ("regenerate the artifacts from the inference model with pytrain.ort.artifacts.generate_artifacts "
           "(ORT's arguments; a checkpoint ORT wrote still loads and goes on training)")


def _read(uri: Any) -> ModelProto:
    if isinstance(uri, ModelProto):
        return uri
    if hasattr(uri, "SerializeToString"):
        return ModelProto.FromString(uri.SerializeToString())
    if isinstance(uri, (bytes, bytearray, memoryview)):
        return ModelProto.FromString(bytes(uri))
    with open(uri, "rb") as f:
        return ModelProto.FromString(f.read())


def _not_run(model: ModelProto) -> List[Tuple[str, str, str]]:
    """(domain, op_type, first node name) of each op pytrain has no kernel for, once per op."""
    seen, out = set(), []
    for n in model.graph.node:
        domain = n.domain or "ai.onnx"
        key = (domain, n.op_type)
        if key in seen or get_kernel(n.op_type, n.domain or "") is not None:
            continue
        seen.add(key)
        out.append((domain, n.op_type, n.name or (n.output[0] if n.output else "?")))
    return out


def refuse_ort_made(uri: Any, what: str) -> None:
    """Raise ModelFormatError when ``uri`` is a training or optimizer model ORT generated (ops of
    ORT's training domains pytrain has no kernel for), naming the ops, their nodes and domains.
    Anything else (unreadable, pytrain's own) is left to the loader, which names what is wrong."""
    try:
        model = _read(uri)
    except Exception:  # the loader reports a missing or damaged file in its own words
        return
    missing = _not_run(model)
    if not any(domain in ORT_DOMAINS for domain, _, _ in missing):
        return
    shown = ", ".join("%s:%s (node %r)" % m for m in missing[:8])
    if len(missing) > 8:
        shown += " and %d more" % (len(missing) - 8)
    sequences = [i.name for i in model.graph.input if describe_type(i.type).startswith("sequence")]
    seq = ("; its inputs %s are sequences of tensors" % ", ".join(repr(s) for s in sequences)) if sequences else ""
    raise ModelFormatError("the %s was made by ONNX Runtime's generate_artifacts: it holds %s, which pytrain "
                           "does not run%s. To train it in pytrain, %s"
                           % (what, shown, seq, WAY_OUT))
