"""A fine-tuned Hub model as the folder transformers.js loads as it is (:mod:`pytrain.text.hub_folder`):
``pytrain export --format transformers.js``, the page's and the widget's download all write it with
:func:`export_transformers_js`.

``onnx/model.onnx`` is the float merge (``merge_adapters="float"``: what LoRA learned, exactly). When the trained
model is quantized (a ``model_quantized.onnx`` or q4 upload), its variant is written too, merged and requantized
in the file's own scheme (``merge_adapters="requantize"``, :mod:`pytrain.engine.quant_merge`) under the name of
the upload's dtype; docs/quantized.md says how far it is from the float merge. A quantized model without
adapters exports one form only: its own."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from pytrain.proto import ModelProto
from pytrain.text.hub_folder import DTYPE_SUFFIX, transformers_js_files
from pytrain.errors import DataError

#: ops that make a model one of transformers.js' quantized files, and the dtype its file is named for
Q8_OPS = frozenset(["MatMulInteger", "DynamicQuantizeLinear", "ConvInteger", "DequantizeLinear", "QuantizeLinear"])
Q4_OPS = frozenset(["MatMulNBits", "GatherBlockQuantized"])


def quantized_dtype(blob: bytes) -> Optional[str]:
    """``q4`` (MatMulNBits), ``q8`` (int8 quantization ops) or None (a float model) for an ONNX model's bytes."""
    ops = {n.op_type for n in ModelProto.FromString(bytes(blob)).graph.node}
    if ops & Q4_OPS:
        return "q4"
    return "q8" if ops & Q8_OPS else None


def export_transformers_js(module: Any, outputs: Sequence[str], files: Mapping[str, bytes],
                           dtype: Optional[str] = None) -> Dict[str, bytes]:
    """{path: bytes} of the transformers.js folder for ``module`` (a :class:`pytrain.device.module.Module` with its
    eval model) exporting ``outputs``, with ``files`` (the Hub folder's config.json and tokenizer files, by path).
    ``dtype``: the transformers.js dtype of the uploaded quantized file (``q8``, ``int8``, ``q4``, ...; default:
    read from the model's ops); a float upload writes ``onnx/model.onnx`` alone."""
    if dtype is not None and dtype not in DTYPE_SUFFIX:
        raise DataError("transformers.js has no dtype %r (it loads %s)" % (dtype, ", ".join(DTYPE_SUFFIX)))
    quant = bytes(module.export_model_for_inferencing(None, list(outputs), merge_adapters="requantize"))
    kind = quantized_dtype(quant)
    if kind is None:   # nothing was quantized: the requantized merge is the float merge
        return transformers_js_files({"fp32": quant}, files)
    name = dtype if dtype not in (None, "fp32") else kind
    merged = bytes(module.export_model_for_inferencing(None, list(outputs), merge_adapters="float"))
    models = {name: quant} if merged == quant else {"fp32": merged, name: quant}
    return transformers_js_files(models, files)
