"""Merging a LoRA adapter into a quantized matmul block at export (QLoRA, docs/quantized.md), two ways:

* ``"float"``: the block becomes a float MatMul by ``dequant(W) + scale * (B A)`` (a MatMulNBits' bias kept as an
  Add): what the adapter learned, exactly; that layer is float32 again (4x / 8x its quantized bytes);
* ``"requantize"``: ``dequant(W) + scale * (B A)`` quantized again with the file's own scheme (per-tensor or
  per-column int8, symmetric when the file's zero point is 0, as onnxruntime's quantize_dynamic does;
  MatMulNBits' blocks, symmetric without zero points, as its MatMul4BitsQuantizer does): the file keeps its
  form and size, and loses what the adapter changed below one quantization step."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from pytrain.errors import ExportError
from pytrain.ops.quant.blocks import NBitsLayout, nbits_dequantize, nbits_quantize
from pytrain.ops.quant.op_quantized_matmul_training import int8_dequantize
from pytrain.proto import NodeProto, make_node

#: how a quantized block takes its adapter at export (``export_inference_model(merge_adapters=...)``)
MERGE_MODES = ("float", "requantize")

Value = Callable[[str], Optional[np.ndarray]]


def int8_quantize(w: np.ndarray, dtype: np.dtype, per_column: bool, symmetric: bool) -> Tuple[np.ndarray, ...]:
    """(q, scale, zero_point) of a float (K, N) weight as onnxruntime's quantize_dynamic quantizes weights:
    the range widened to include 0; symmetric int8 over [-127, 127] with zero point 0, else over the type's range."""
    lo = np.minimum(w.min(axis=0) if per_column else w.min(), 0).astype(np.float64)
    hi = np.maximum(w.max(axis=0) if per_column else w.max(), 0).astype(np.float64)
    info = np.iinfo(dtype)
    qmin, qmax = (-127, 127) if symmetric else (int(info.min), int(info.max))
    if symmetric:
        hi = np.maximum(np.abs(lo), np.abs(hi))
        lo = -hi
    scale = (hi - lo) / (qmax - qmin)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    zp = np.zeros_like(scale) if symmetric else np.rint(qmin - lo / scale)
    q = np.clip(np.rint(w / scale) + zp, qmin, qmax).astype(dtype)
    return q, scale, zp.astype(dtype)


def _delta(a: Mapping[str, Any], value: Value) -> np.ndarray:
    """scale * (B A), (N, K)."""
    return (value(a["lora_B"]) @ value(a["lora_A"])) * np.float32(a["scale"])


def merge_quantized(nodes: List[NodeProto], merged: Dict[str, np.ndarray], value: Value, a: Mapping[str, Any],
                    mode: str) -> List[NodeProto]:
    """Fold adapter ``a`` (a LoRA table entry with a ``quantized`` record) into its block: ``merged`` takes the new
    initializers, the returned nodes the block's new form (writing the adapter's ``base_output``)."""
    if mode not in MERGE_MODES:
        raise ExportError("a quantized block merges its adapter as %s, not %r" % (" or ".join(MERGE_MODES), mode))
    q = a["quantized"]
    w, s = value(a["weight"]), value(q["scale"])
    zp = value(q["zero_point"]) if q["zero_point"] else None
    block = [n for n in nodes if n.name in set(q["nodes"])]
    anchor = next(n for n in block if n.name == q["nodes"][0])   # the MatMulInteger / MatMulNBits
    if q["kind"] == "int8":
        new_w = int8_dequantize(w, s, zp) + _delta(a, value).T            # (K, N)
        if mode == "requantize":
            symmetric = w.dtype == np.int8 and (zp is None or not np.any(zp))
            wq, ws, wzp = int8_quantize(new_w, w.dtype, s.size > 1, symmetric)
            merged[a["weight"]], merged[q["scale"]] = wq, ws.reshape(s.shape)
            if zp is not None:
                merged[q["zero_point"]] = wzp.reshape(zp.shape)
            return nodes
        bias = None
    else:
        attrs = {x.name: x.i for x in anchor.attribute}
        lay = NBitsLayout(q["K"], q["N"], int(attrs.get("bits", 4)), int(attrs["block_size"]))
        new_w = nbits_dequantize(w, s, zp, lay) + _delta(a, value)         # (N, K)
        if mode == "requantize":
            if zp is not None and zp.dtype != np.uint8:
                raise ExportError("%s has float zero points; pytrain requantizes MatMulNBits with packed uint8 zero "
                                  "points or none: export with merge_adapters='float'" % anchor.name)
            B, bs, bzp = nbits_quantize(new_w, lay, symmetric=zp is None)
            merged[a["weight"]], merged[q["scale"]] = B, bs.reshape(s.shape)
            if zp is not None:
                merged[q["zero_point"]] = bzp.reshape(zp.shape)
            return nodes
        new_w = np.ascontiguousarray(new_w.T)
        bias = anchor.input[5] if len(anchor.input) > 5 and anchor.input[5] else None
    name = a["weight"] + "_merged"
    merged[name] = new_w.astype(np.float32)
    out = a["base_output"]
    layer = [make_node("MatMul", [q["x"], name], [out if bias is None else out + "/nobias"],
                       name=anchor.name + "/merged")]
    if bias is not None:
        layer.append(make_node("Add", [out + "/nobias", bias], [out], name=anchor.name + "/merged_bias"))
    at = nodes.index(anchor)
    drop = {id(n) for n in block}
    return [n for n in nodes[:at] if id(n) not in drop] + layer + [n for n in nodes[at:] if id(n) not in drop]
