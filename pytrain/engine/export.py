"""Export for inference: a standard ONNX model (default domain only, Dropout gone, BatchNorm on
running statistics, trained weights baked in) that declares the oldest IR version and opset
that still mean what the model means, so onnxruntime releases from 2023 on load it."""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Union

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import ArtifactError, PytrainError
from pytrain.base.layout import parse_layout
from pytrain.engine.executor import Plan, live_nodes
from pytrain.engine.graph import consumers, producers
from pytrain.base.opset_versions import OLDEST_EXPORT_OPSET, SCHEMA_VERSIONS
from pytrain.ops.control.subgraph import outer_names
from pytrain.ops.quant.blocks import MS_DOMAIN
from pytrain.engine.lora import LAYOUT_KEY as LORA_LAYOUT_KEY, merge_lora
from pytrain.proto import (ModelProto, NodeProto, ValueInfoProto, from_array, make_graph, make_model, make_node,
                           make_opsetid, make_value_info, model_metadata, opset_version, value_info_type)
from pytrain.proto.helper import ir_version_for_opset


#: onnxruntime's quantized contrib ops an inference model may keep (a q4 file's MatMulNBits, GatherBlockQuantized)
QUANT_OPS = frozenset([(MS_DOMAIN, "MatMulNBits"), (MS_DOMAIN, "GatherBlockQuantized")])


def minimal_opset(nodes: Sequence[NodeProto], source_opset: int) -> int:
    """The lowest opset (from 7) at which every node has the same schema as at ``source_opset``."""
    needed = OLDEST_EXPORT_OPSET
    for n in nodes:
        versions = SCHEMA_VERSIONS.get(n.op_type)
        if not versions:
            return source_opset
        since = max([v for v in versions if v <= source_opset] or [source_opset])
        needed = max(needed, since)
    return needed


def _drop_dropout(nodes: List[NodeProto], outputs: Sequence[str]) -> List[NodeProto]:
    """Dropout is the identity at inference: rewire its readers to its input."""
    alias: Dict[str, str] = {}
    kept: List[NodeProto] = []
    read = {i for n in nodes for i in n.input} | set(outputs)
    for n in nodes:
        mask_read = len(n.output) > 1 and n.output[1] in read
        if n.op_type == "Dropout" and not n.domain and not mask_read:
            alias[n.output[0]] = alias.get(n.input[0], n.input[0])
            continue
        n.input[:] = [alias.get(i, i) for i in n.input]
        kept.append(n)
    for o in outputs:  # a graph output that was a Dropout result keeps its name through Identity
        if o in alias:
            kept.append(make_node("Identity", [alias[o]], [o], name="inference/" + o))
    return kept


def inference_rewrite(n: NodeProto) -> None:
    """Give a node its inference behaviour in place: BatchNormalization on running statistics
    (models exported in torch's TRAINING mode carry training_mode=1), Dropout as the identity."""
    if n.op_type == "BatchNormalization" and not n.domain:
        n.attribute[:] = [a for a in n.attribute if a.name != "training_mode"]
        del n.output[1:]
    elif n.op_type == "Dropout" and not n.domain and len(n.input) > 2:
        del n.input[2:]


def export_inference_model(eval_model: ModelProto, parameters: Mapping[str, np.ndarray],
                           graph_output_names: Sequence[str], merge_adapters: Union[bool, str] = True) -> ModelProto:
    """The inference model computing ``graph_output_names`` with ``parameters`` baked in; LoRA adapters
    folded into their weights (the original graph), or kept as nodes with ``merge_adapters=False``. An adapter
    on a quantized block (docs/quantized.md) merges into a float layer (True or "float") or requantized in the
    file's scheme ("requantize")."""
    meta = model_metadata(eval_model)
    layout = parse_layout(meta, "eval model")
    g = eval_model.graph
    outputs = list(graph_output_names)
    if not outputs:
        raise ArtifactError("graph_output_names is empty: name the model outputs to export, e.g. %s"
                            % layout.get("model_outputs", []))
    nodes = [NodeProto.FromString(n.SerializeToString()) for n in g.node]
    if merge_adapters and layout.get(LORA_LAYOUT_KEY):
        nodes, parameters = merge_lora(nodes, parameters, g.initializer, layout[LORA_LAYOUT_KEY],
                                       "float" if merge_adapters is True else str(merge_adapters))
    produced = producers(nodes)
    for o in outputs:
        if o not in produced:
            raise ArtifactError("cannot export output %r: the model computes no such tensor (its outputs: %s)"
                                % (o, ", ".join(layout.get("model_outputs", []))))
    nodes = _drop_dropout(live_nodes(nodes, outputs), outputs)
    nodes = live_nodes(nodes, outputs)
    for n in nodes:
        if n.domain not in ("", "ai.onnx") and (n.domain, n.op_type) not in QUANT_OPS:
            raise ArtifactError("node %r uses domain %r; an inference model keeps standard ops only"
                                % (n.name, n.domain))
        inference_rewrite(n)
    used = set(consumers(nodes)) | set(outputs) | {x for n in nodes for x in outer_names(n)}  # bodies' reads too
    labels = set(layout.get("labels", []))
    inputs = [v for v in g.input if v.name in used and v.name not in parameters and v.name not in labels]
    missing = [v.name for v in g.input if v.name in labels and v.name in used]
    if missing:
        raise ArtifactError("outputs %s depend on the label inputs %s; export model outputs, not the loss"
                            % (outputs, missing))
    inits = [from_array(np.asarray(parameters[name]), name) for name in parameters if name in used]
    inits += [t for t in g.initializer if t.name in used and t.name not in parameters]

    known: Dict[str, ValueInfoProto] = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}
    # a declared output is used when it has a type and a shape (onnx's checker wants the shape field;
    # a rank is enough): otherwise it is inferred
    typed = {o: v for o, v in known.items() if value_info_type(v)[0] and value_info_type(v)[1] is not None}
    out_vis = [typed.get(o) for o in outputs]
    if any(v is None for v in out_vis):
        out_vis = _infer_output_types(g, nodes, inputs, inits, outputs, out_vis, opset_version(eval_model))
    source_opset = opset_version(eval_model)
    opset = minimal_opset(nodes, source_opset)
    graph = make_graph(nodes, g.name.replace("_eval", "") or "model", inputs, out_vis, inits)
    imports = [make_opsetid("", opset)] + ([make_opsetid(MS_DOMAIN, 1)] if any(n.domain == MS_DOMAIN for n in nodes)
                                           else [])
    return make_model(graph, imports, ir_version=ir_version_for_opset(opset))


def _infer_output_types(g, nodes, inputs, inits, outputs, out_vis, opset) -> List[ValueInfoProto]:
    """Types for outputs the model gave none: run the graph once on a batch of one zero sample."""
    feeds = []
    for v in inputs:
        et, shape = value_info_type(v)
        if shape is None:
            raise ArtifactError("cannot infer the type of outputs %s: input %r has no shape" % (outputs, v.name))
        feeds.append(np.zeros([d if isinstance(d, int) else 1 for d in shape], dtype=dtypes.to_numpy(et)))
    graph = make_graph(nodes, "probe", inputs, [], inits)
    try:
        values = Plan(graph, [v.name for v in inputs], outputs, opset=opset).run(feeds)
    except PytrainError as e:
        raise ArtifactError("cannot infer the types of outputs %s: %s" % (outputs, e)) from None
    result = []
    for o, v, val in zip(outputs, out_vis, values):
        if v is not None:
            result.append(v)
        else:
            arr = np.asarray(val)
            result.append(make_value_info(o, dtypes.from_numpy(arr.dtype), [None] * arr.ndim))
    return result
