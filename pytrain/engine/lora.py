"""LoRA on any ONNX model: low-rank adapters beside chosen MatMul/Gemm weights, as ``peft`` inserts them.

A weight ``W`` of a MatMul (``x @ W``, W of shape (in, out)) or Gemm (``transB=1``: W of shape (out, in))
gets ``y = x W + (alpha / rank) * x A^T B^T`` with ``lora_A`` (rank, in) initialised as peft does
(kaiming-uniform with a = sqrt(5), from ``seed``) and ``lora_B`` (out, rank) zero: peft's own layouts,
so adapters move between pytrain and peft as they are. The base weights stay frozen and only the
adapters train. The eval model's layout records each adapter (key ``"lora"``), which the inference
export folds back into ``W`` (:func:`merge_lora`, which :func:`pytrain.engine.export.export_inference_model`
calls); :func:`save_adapters`
writes the adapters alone (``.npz``, or an ONNX file of initializers) and :func:`load_adapters` reads either.
A weight read through a Transpose (``x @ Transpose(W)``, as ``pytrain.torch_export`` writes a Linear on a
3-D input) takes an adapter in W's own (out, in) layout. A quantized matmul block (onnxruntime's q8
DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul, or MatMulNBits) takes a float32 adapter on its float input and
output while its weight stays quantized (QLoRA, docs/quantized.md)."""
from __future__ import annotations

import io
import json
import math
import os
import re
import zipfile
from fnmatch import fnmatchcase
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import ArtifactError, CheckpointError
from pytrain.base.opset_versions import OLDEST_EXPORT_OPSET
from pytrain.base.files import write_atomic
from pytrain.engine.graph import NameScope, all_names, consumers, node_label, producers
from pytrain.base.limits import check_file
from pytrain.engine.quant_blocks import QuantBlock, find_blocks
from pytrain.engine.quant_merge import merge_quantized
from pytrain.proto import (ModelProto, NodeProto, TensorProto, from_array, make_graph, make_model, make_node,
                           make_opsetid, make_value_info, to_array)
from pytrain.engine.validate import load_model

__all__ = ["LoRA", "insert_adapters", "merge_lora", "save_adapters", "read_adapters", "load_adapters",
           "adapters_model", "ADAPTER_FORMATS", "LAYOUT_KEY", "PROPERTY"]

#: the eval model's layout key listing the adapters insert_adapters made, which the export folds back (merge_lora)
LAYOUT_KEY = "lora"

#: the checkpoint property holding the LoRA settings and the adapter table
PROPERTY = "pytrain.lora"
_SPEC_MEMBER = "pytrain.lora"   # the npz member of save_adapters holding the same JSON


class LoRA:
    """Low-rank adaptation settings (peft's ``LoraConfig``: ``r``, ``lora_alpha``, ``target_modules``,
    ``lora_dropout``).

    targets: patterns naming MatMul/Gemm nodes or their weight initializers: a glob over the whole
        name (``"*c_attn*"``, ``"fc1.weight"``) or, as peft's ``target_modules``, a run of path
        components (``"c_attn"`` or ``"h.0.attn.c_attn"`` matches node ``/transformer/h.0/attn/c_attn/Gemm``
        and weight ``transformer.h.0.attn.c_attn.weight``). Every pattern must select at least one weight.
    seed: the random seed of ``lora_A``'s initial values.
    """

    def __init__(self, rank: int, alpha: Optional[float] = None, targets: Sequence[str] = (),
                 dropout: float = 0.0, seed: int = 0) -> None:
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank <= 0:
            raise ArtifactError("LoRA rank must be a positive integer, got %r" % (rank,))
        alpha = float(rank if alpha is None else alpha)
        if not math.isfinite(alpha) or alpha == 0:
            raise ArtifactError("LoRA alpha must be a finite non-zero number, got %r" % (alpha,))
        if isinstance(targets, str):
            targets = [targets]
        targets = [str(t) for t in targets]
        if not targets or any(not t for t in targets):
            raise ArtifactError("LoRA needs target patterns naming MatMul/Gemm nodes or weights, got %r" % (targets,))
        if not 0.0 <= float(dropout) < 1.0:
            raise ArtifactError("LoRA dropout must be in [0, 1), got %r" % (dropout,))
        self.rank, self.alpha, self.targets = int(rank), alpha, targets
        self.dropout, self.seed = float(dropout), int(seed)

    @property
    def scale(self) -> float:
        """alpha / rank, peft's ``scaling``."""
        return self.alpha / self.rank

    def describe(self) -> Dict[str, Any]:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets),
                "dropout": self.dropout, "seed": self.seed}

    def __repr__(self) -> str:
        return "LoRA(rank=%d, alpha=%g, targets=%r, dropout=%g)" % (self.rank, self.alpha, self.targets, self.dropout)


def _parts(name: str) -> List[str]:
    return [p for p in re.split(r"[/.]", name) if p]


def matches(pattern: str, name: str) -> bool:
    """Whether ``pattern`` names ``name``: a glob over the whole name, or a run of its path components."""
    if fnmatchcase(name, pattern):
        return True
    want, have = _parts(pattern), _parts(name)
    return bool(want) and any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


def _transposed_weight(name: str, inits: Dict[str, Any], producers: Dict[str, NodeProto],
                       readers: Dict[str, List[NodeProto]]) -> Optional[NodeProto]:
    """The Transpose node when ``name`` is a 2-D initializer transposed by a node read only here
    (``pytrain.torch_export`` writes ``x @ Transpose(W)`` for a Linear on a 3-D input), else None."""
    t = producers.get(name)
    if t is None or t.op_type != "Transpose" or t.domain not in ("", "ai.onnx") or t.input[0] not in inits:
        return None
    perm = [list(a.ints) for a in t.attribute if a.name == "perm"]
    if len(inits[t.input[0]].dims) != 2 or (perm and perm[0] != [1, 0]) or len(readers.get(name, [])) != 1:
        return None
    return t


def _weight_site(node: NodeProto, inits: Dict[str, Any], readers: Dict[str, List[NodeProto]],
                 producers: Dict[str, NodeProto], why: str) -> Tuple[str, bool]:
    """The weight initializer of a MatMul/Gemm node (seen through a Transpose of it) and whether it is
    stored (out, in) (Gemm transB=1, or transposed by the graph); refuses what cannot take an adapter
    that merges back exactly."""
    w = node.input[1] if len(node.input) > 1 else ""
    via = _transposed_weight(w, inits, producers, readers)
    if via is not None:
        w = via.input[0]
    if w not in inits:
        raise ArtifactError("LoRA target %s (%s) multiplies by %r, which the graph computes: only an initializer "
                            "weight takes an adapter (use a narrower pattern)" % (node_label(node), why, w))
    t = inits[w]
    if len(t.dims) != 2:
        raise ArtifactError("LoRA target weight %r of %s is %d-D %s; only 2-D weights take an adapter"
                            % (w, node_label(node), len(t.dims), list(t.dims)))
    if not dtypes.is_float(t.data_type):
        raise ArtifactError("LoRA target weight %r of %s is of type %s; only float weights take an adapter"
                            % (w, node_label(node), dtypes.NAMES.get(t.data_type, "?")))
    reader = node if via is None else via
    others = [r for r in readers.get(w, []) if r is not reader]
    if others or node.input[0] == node.input[1]:
        raise ArtifactError("LoRA target weight %r is also read by %s: its merged value would change them too"
                            % (w, ", ".join(node_label(r) for r in others) or "the same node's other operand"))
    attrs = {a.name: a for a in node.attribute}
    if node.op_type == "Gemm" and "transA" in attrs and attrs["transA"].i:
        raise ArtifactError("LoRA target %s has transA=1; adapters take Gemm with an untransposed input only"
                            % node_label(node))
    trans_b = node.op_type == "Gemm" and "transB" in attrs and bool(attrs["transB"].i)
    return w, trans_b != (via is not None)


def _graph_maps(model: ModelProto) -> Tuple[Dict[str, Any], Dict[str, List[NodeProto]], Dict[str, NodeProto]]:
    """(initializers, the nodes reading each tensor, the node producing each tensor) by name."""
    g = model.graph
    return {t.name: t for t in g.initializer}, consumers(g.node), producers(g.node)


Site = Tuple[NodeProto, str, bool, Optional[QuantBlock]]


def _quant_site(block: QuantBlock, inits: Dict[str, Any], readers: Dict[str, List[NodeProto]]) -> Site:
    """A quantized matmul block (QLoRA, docs/quantized.md) as an adapter site: the weight stays quantized and
    frozen; the adapter reads the block's float input and adds to its float output."""
    others = [r for r in readers.get(block.w, []) if r is not block.anchor]
    if block.w not in inits or others:
        raise ArtifactError("LoRA target %s: its quantized weight %r is %s" % (
            node_label(block.anchor), block.w, "computed by the graph" if block.w not in inits else
            "also read by " + ", ".join(node_label(r) for r in others)))
    if block.kind == "int8":
        dims = list(inits[block.w].dims)
        if len(dims) != 2:
            raise ArtifactError("LoRA target %s: quantized weight %r is %d-D; only 2-D weights take an adapter"
                                % (node_label(block.anchor), block.w, len(dims)))
        block.k, block.n = int(dims[0]), int(dims[1])
    return block.anchor, block.w, block.kind == "nbits", block


def _select(model: ModelProto, spec: LoRA) -> List[Site]:
    """(node, weight, weight stored as (out, in), quantized block or None) for every MatMul/Gemm and quantized
    matmul block the patterns select, in graph order."""
    g = model.graph
    inits, readers, producers = _graph_maps(model)
    layers = [n for n in g.node if n.op_type in ("MatMul", "Gemm") and n.domain in ("", "ai.onnx")]
    blocks = {id(b.anchor): b for b in find_blocks(list(g.node))}
    order = {id(n): k for k, n in enumerate(g.node)}
    layers += [b.anchor for b in blocks.values()]

    def weight_of(n: NodeProto) -> str:
        if id(n) in blocks:
            return blocks[id(n)].w
        w = n.input[1] if len(n.input) > 1 else ""
        via = _transposed_weight(w, inits, producers, readers)
        return w if via is None else via.input[0]

    chosen: Dict[int, Site] = {}
    for pattern in spec.targets:
        hit = False
        for n in layers:
            by_node = matches(pattern, n.name)
            w = weight_of(n)
            if by_node or (w in inits and matches(pattern, w)):
                why = "node name matches %r" % pattern if by_node else "weight name matches %r" % pattern
                chosen[order[id(n)]] = (_quant_site(blocks[id(n)], inits, readers) if id(n) in blocks else
                                        (n,) + _weight_site(n, inits, readers, producers, why) + (None,))
                hit = True
        if not hit:
            named = [t for t in inits if matches(pattern, t)]
            if named:
                t = inits[named[0]]
                raise ArtifactError("LoRA target %r matches initializer %r (shape %s), which is not the weight operand "
                                    "of a MatMul or Gemm (read by %s)" % (
                                        pattern, named[0], list(t.dims),
                                        ", ".join(node_label(r) for r in readers.get(named[0], [])) or "no node"))
            some = ["%s: %s" % (n.name or n.output[0], weight_of(n)) for n in layers if weight_of(n) in inits][:12]
            raise ArtifactError("LoRA target %r matches no MatMul/Gemm node or weight (MatMul/Gemm weights: %s)"
                                % (pattern, "; ".join(some) or "none"))
    return [chosen[k] for k in sorted(chosen)]


ATTENTION_WORDS = ("attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj", "query", "key", "value")
#: peft's default LoRA targets (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``) by module name: the
#: attention's query and value projections (Llama, Qwen2, Gemma, Mistral ``q_proj``/``v_proj``, BERT ``query``/
#: ``value``, T5 ``q``/``v``, DeBERTa-v2 ``query_proj``/``value_proj``, DistilBERT ``q_lin``/``v_lin``) ...
QUERY_VALUE = ("q_proj", "v_proj", "query", "value", "q", "v", "q_lin", "v_lin", "query_proj", "value_proj")
#: ... or the one projection computing query, key and value together (GPT-2 ``c_attn``, Falcon / GPT-NeoX
#: ``query_key_value``, CodeGen's and Phi-3's ``qkv_proj``, MPT ``Wqkv``, Baichuan ``W_pack``, DeBERTa ``in_proj``)
FUSED_QKV = ("c_attn", "query_key_value", "qkv_proj", "Wqkv", "W_pack", "in_proj", "qkv")
_NAME_SCOPES = "pkg.torch.onnx.name_scopes"   # the dynamo exporter's module path of a node
_FOLDED_FROM = "pkg.onnxscript.optimizer.folded_from"   # the parameter a dynamo initializer was folded from


def adaptable_weights(model: ModelProto) -> List[Tuple[str, str]]:
    """(node name, weight) of every MatMul/Gemm whose weight can take an adapter (a 2-D float initializer
    read by that node alone), in graph order."""
    return [(n.name or n.output[0], w) for n, w in _adaptable(model)]


def _adaptable(model: ModelProto) -> List[Tuple[NodeProto, str]]:
    inits, readers, producers = _graph_maps(model)
    out = []
    for n in model.graph.node:
        if n.op_type in ("MatMul", "Gemm") and n.domain in ("", "ai.onnx"):
            try:
                w, _ = _weight_site(n, inits, readers, producers, "candidate")
            except ArtifactError:
                continue
            out.append((n, w))
    for b in find_blocks(list(model.graph.node)):   # quantized matmuls (QLoRA)
        try:
            _quant_site(b, inits, readers)
        except ArtifactError:
            continue
        out.append((b.anchor, b.w))
    return out


def _module_parts(node: NodeProto, weight: str, folded: Dict[str, str]) -> List[str]:
    """The path components naming the module of a weight: the node's and the weight's names (TorchScript:
    ``/model/layers.0/self_attn/q_proj/MatMul``), and where the dynamo exporter renamed both (``node_linear``,
    ``val_26``), the node's module path and the parameter the weight was folded from (their metadata)."""
    names = [node.name or node.output[0], weight]
    for p in node.metadata_props:
        if p.key == _NAME_SCOPES:
            names.extend(re.findall(r"'([^']*)'", p.value))
    names.extend(re.findall(r"'([^']*)'", folded.get(weight, "")))
    return [part for name in names for part in _parts(name)]


def default_targets(model: ModelProto) -> List[str]:
    """The weights LoRA takes when none are named, as peft's defaults per model type choose them: the
    attention's query and value projections, or its fused query-key-value projection (a node, weight or module
    name with a :data:`QUERY_VALUE` or :data:`FUSED_QKV` component); else any attention weight (one of
    :data:`ATTENTION_WORDS`); else every weight that can take an adapter."""
    folded = {v.name: p.value for v in model.graph.value_info for p in v.metadata_props if p.key == _FOLDED_FROM}
    found = [(w, set(_module_parts(n, w, folded))) for n, w in _adaptable(model)]
    peft_like = [w for w, parts in found if parts & set(QUERY_VALUE + FUSED_QKV)]
    attention = [w for w, parts in found if {p.lower() for p in parts} & set(ATTENTION_WORDS)]
    return peft_like or attention or [w for w, _ in found]


def selected_weights(model: ModelProto, spec: LoRA) -> List[str]:
    """The weights ``spec``'s targets select in ``model`` (what takes an adapter), in graph order."""
    return [site[1] for site in _select(model, spec)]


def kaiming_uniform(rank: int, fan_in: int, rng: np.random.RandomState, dtype: Any) -> np.ndarray:
    """peft's ``lora_A`` start: ``nn.init.kaiming_uniform_(a=sqrt(5))``, i.e. U(-1/sqrt(in), 1/sqrt(in))."""
    gain = math.sqrt(2.0 / (1.0 + 5.0))
    bound = gain * math.sqrt(3.0 / fan_in)
    return rng.uniform(-bound, bound, size=(rank, fan_in)).astype(dtype)


def insert_adapters(model: ModelProto, spec: LoRA) -> List[Dict[str, Any]]:
    """Insert the adapters ``spec`` selects into ``model`` (changed in place); returns the adapter table
    (per adapter: weight, lora_A, lora_B, scale, layout, the inserted nodes and the outputs)."""
    g = model.graph
    sites = _select(model, spec)
    scope = NameScope(all_names(g))
    rng = np.random.RandomState(spec.seed)
    table = []
    for node, w, out_in, block in sites:
        if block is None:
            t = next(i for i in g.initializer if i.name == w)
            dtype = dtypes.to_numpy(t.data_type)
            rows, cols = int(t.dims[0]), int(t.dims[1])
            fan_in, fan_out = (cols, rows) if out_in else (rows, cols)
        else:   # a quantized block: a float32 adapter on its float input and output (QLoRA)
            dtype, fan_in, fan_out = np.dtype(np.float32), block.k, block.n
        stem = re.sub(r"_(quantized|Q[248])$", "", w)   # a quantized weight's adapters take the layer's name
        stem = stem[:-len(".weight")] if stem.endswith(".weight") else stem
        a_name, b_name = scope.fresh(stem + ".lora_A"), scope.fresh(stem + ".lora_B")
        alpha = next((a.f for a in node.attribute if a.name == "alpha"), 1.0) if node.op_type == "Gemm" else 1.0
        consts = {a_name: kaiming_uniform(spec.rank, fan_in, rng, dtype),
                  b_name: np.zeros((fan_out, spec.rank), dtype)}
        prefix = (node.name or node.output[0]) + "/lora/"
        last = node if block is None else block.last
        y = last.output[0]
        base = scope.fresh(prefix + "base")
        last.output[0] = base
        new: List[NodeProto] = []

        def op(op_type: str, inputs: List[str], output: str = "", **attrs: Any) -> str:
            out = output or scope.fresh(prefix + op_type + "_out")
            new.append(make_node(op_type, inputs, [out], name=scope.fresh(prefix + op_type), **attrs))
            return out

        x = node.input[0] if block is None else block.x
        if spec.dropout:
            ratio = scope.fresh(prefix + "dropout_ratio")
            consts[ratio] = np.asarray(spec.dropout, np.float32)
            x = op("Dropout", [x, ratio])
        scale = scope.fresh(prefix + "scale")
        consts[scale] = np.asarray(spec.scale, dtype)
        h = op("MatMul", [x, op("Transpose", [a_name], perm=[1, 0])])
        d = op("MatMul", [h, op("Transpose", [b_name], perm=[1, 0])])
        op("Add", [base, op("Mul", [d, scale])], output=y)
        g.node.extend(new)
        g.initializer.extend(from_array(v, k) for k, v in consts.items())
        table.append({"weight": w, "lora_A": a_name, "lora_B": b_name, "scale": spec.scale / alpha,
                      "layout": "out_in" if out_in else "in_out", "node": node.name, "base_output": base,
                      "output": y, "nodes": [n.name for n in new]})
        if block is not None:
            table[-1]["quantized"] = _block_record(block, scope)
    return table


def _block_record(block: QuantBlock, scope: NameScope) -> Dict[str, Any]:
    """What the export needs to merge an adapter into a quantized block (pytrain.engine.quant_merge); its nodes' names,
    the MatMulInteger / MatMulNBits first."""
    for n in block.nodes:   # the merge names the block's nodes
        if not n.name:
            n.name = scope.fresh("quantized/" + n.op_type)
    return {"kind": block.kind, "x": block.x, "scale": block.scale, "zero_point": block.zero_point,
            "nodes": [n.name for n in block.nodes], "K": block.k, "N": block.n}


def merge_lora(nodes: List[NodeProto], parameters: Mapping[str, np.ndarray], initializers: Sequence[TensorProto],
               adapters: Sequence[Mapping[str, Any]], quantized: str = "float"
               ) -> Tuple[List[NodeProto], Dict[str, np.ndarray]]:
    """Fold each LoRA adapter into its weight as peft's ``merge_and_unload`` does (``W + scale * (B A)``,
    transposed for a weight stored (in, out)): the adapter's nodes go, the layer writes its own output
    again, and the merged weights join ``parameters``. An adapter on a quantized block merges as
    ``quantized`` says (pytrain.engine.quant_merge: "float" or "requantize")."""
    stored = {t.name: t for t in initializers}
    merged = dict(parameters)

    def value(name: str) -> np.ndarray:
        return np.asarray(merged[name]) if name in merged else to_array(stored[name], "the eval model")

    drop = {n for a in adapters for n in a["nodes"]}
    back = {a["base_output"]: a["output"] for a in adapters}
    for a in adapters:
        if a.get("quantized"):
            nodes = merge_quantized(nodes, merged, value, a, quantized)
            continue
        w, lora_a, lora_b = value(a["weight"]), value(a["lora_A"]), value(a["lora_B"])
        delta = lora_b @ lora_a
        delta = (delta if a["layout"] == "out_in" else delta.T) * np.asarray(a["scale"], w.dtype)
        merged[a["weight"]] = (w + delta).astype(w.dtype, copy=False)
    kept = [n for n in nodes if n.name not in drop]
    for n in kept:
        n.output[:] = [back.get(o, o) for o in n.output]
    return kept, merged


def _adapter_names(table: Sequence[Dict[str, Any]]) -> List[str]:
    return [n for a in table for n in (a["lora_A"], a["lora_B"])]


def _spec_from(state: Any) -> Dict[str, Any]:
    raw = state.properties.get(PROPERTY)
    if raw is None:
        raise CheckpointError("the checkpoint holds no LoRA adapters (no %r property): generate the artifacts "
                              "with lora=LoRA(...) / pytrain generate --lora" % PROPERTY)
    return json.loads(str(raw))


#: the formats :func:`save_adapters` writes: numpy's ``.npz``, or an ONNX file of the adapters as initializers
ADAPTER_FORMATS = ("npz", "onnx")


def adapters_model(arrays: Dict[str, np.ndarray], spec: Dict[str, Any]) -> ModelProto:
    """The adapters as an ONNX model: no nodes, each adapter an initializer and a graph output (onnxruntime
    runs it and returns them), the LoRA settings as JSON in metadata ``pytrain.lora``."""
    outputs = [make_value_info(n, dtypes.from_numpy(v.dtype), list(v.shape)) for n, v in arrays.items()]
    graph = make_graph([], "lora_adapters", [], outputs, [from_array(v, n) for n, v in arrays.items()])
    return make_model(graph, [make_opsetid("", OLDEST_EXPORT_OPSET)], metadata={PROPERTY: json.dumps(spec)})


def save_adapters(state: Any, path: Union[str, "os.PathLike[str]", None] = None,
                  format: Optional[str] = None) -> bytes:
    """The adapters alone (each lora_A/lora_B under its name, the settings as JSON under ``pytrain.lora``):
    what a device ships or a federation averages. ``state``: a CheckpointState. ``format``: ``"npz"``
    or ``"onnx"`` (:func:`adapters_model`); by default ``"onnx"`` for a path ending in ``.onnx``, else
    ``"npz"``. Written atomically when ``path`` is given."""
    if format is None:
        format = "onnx" if path is not None and os.fspath(path).lower().endswith(".onnx") else "npz"
    if format not in ADAPTER_FORMATS:
        raise CheckpointError("adapters are saved as %s, not %r" % (" or ".join(ADAPTER_FORMATS), format))
    spec = _spec_from(state)
    names = _adapter_names(spec["adapters"])
    if any(state.parameters[n].data is None for n in names):
        raise CheckpointError("the checkpoint is nominal: its adapters hold no values yet")
    arrays = {n: np.asarray(state.parameters[n].data) for n in names}
    if format == "onnx":
        data = adapters_model(arrays, spec).SerializeToString()
    else:
        arrays[_SPEC_MEMBER] = np.asarray(json.dumps(spec))
        out = io.BytesIO()
        np.savez(out, **arrays)
        data = out.getvalue()
    if path is not None:
        write_atomic(path, data)
    return data


def read_adapters(adapters: Union[str, "os.PathLike[str]", bytes]) -> Dict[str, np.ndarray]:
    """{name: array} of an adapters file of either format (:func:`save_adapters`), a path or its bytes."""
    if isinstance(adapters, (bytes, bytearray, memoryview)):
        data, label = bytes(adapters), "(%d bytes)" % len(adapters)
    else:
        label = os.fspath(adapters)
        if not os.path.isfile(label):
            raise CheckpointError("LoRA adapters file %s does not exist" % label)
        check_file(os.path.getsize(label), "LoRA adapters file %s" % label)
        with open(label, "rb") as f:
            data = f.read()
    if data[:2] != b"PK":
        model = load_model(data, "LoRA adapters file %s" % label)
        return {t.name: to_array(t, "LoRA adapters file %s" % label) for t in model.graph.initializer}
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return {k: z[k] for k in z.files if k != _SPEC_MEMBER}
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise CheckpointError("LoRA adapters file %s is not a valid .npz: %s" % (label, e)) from None


def load_adapters(state: Any, adapters: Union[str, "os.PathLike[str]", bytes]) -> None:
    """Put adapters written by :func:`save_adapters` (.npz or .onnx, e.g. averaged) into ``state``, checking
    names and shapes."""
    got = read_adapters(adapters)
    want = _adapter_names(_spec_from(state)["adapters"])
    if sorted(got) != sorted(want):
        raise CheckpointError("the adapters file holds %s; the checkpoint's adapters are %s"
                              % (sorted(got), sorted(want)))
    for name in want:
        p = state.parameters[name]
        if tuple(got[name].shape) != tuple(p.shape):
            raise CheckpointError("adapter %r has shape %s in the file, %s in the checkpoint"
                                  % (name, list(got[name].shape), list(p.shape)))
        if p.data is None:
            p.data = got[name].astype(p.dtype)
        else:   # in place: a Module bound to this state reads the same arrays
            np.copyto(p.data, got[name].astype(p.dtype, copy=False))
