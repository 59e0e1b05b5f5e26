"""Which initializers of an inference model are parameters (train by default) and which are
constants, and why: the default trainable set of ``generate_artifacts`` is what PyTorch trains.

An exported model's initializers mix PyTorch parameters with things that are not: buffers
(BatchNorm's running statistics, positional tables), integer shapes and indices, and constants the
exporter folded (the attention scale ``1/sqrt(d)`` as ``/enc/self_attn/Sqrt_2_output_0`` from the
TorchScript exporter, one-element ``val_68`` constants from the dynamo exporter). The rule, in order:

1. not a float tensor: does not train (shapes, indices, masks);
2. the dynamo exporter's graph signature says so (value-info metadata
   ``pkg.torch.export.graph_signature.InputSpec.kind``): ``PARAMETER`` trains, ``BUFFER`` and
   ``CONSTANT_TENSOR`` do not; where a model has a signature, a tensor it does not list is one the
   exporter computed: it trains only as a parameter's layout copy (rule 4), a decomposed
   normalization's affine (5b) or a folded selection of a parameter (:func:`refold_parameter_copies`,
   which marks it), never otherwise (ViT's folded all-zero ``where`` mask, a causal mask folded from buffers);
3. feeds no input a gradient flows through (BatchNorm's running mean/var, a Shape's input):
   does not train;
4. a weight: it feeds a weight position of a parameter-holding op (Conv/ConvTranspose W and B,
   Gemm's operands, MatMul's operands, a normalization's scale and bias, Gather's data (an embedding
   table), PRelu's slope, a recurrent layer's W/R/B, Einsum's operands), directly or only through
   layout ops (Identity, Cast, Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Split, Slice,
   Concat, Expand): trains. This covers the transposed copies of a parameter both exporters write
   (dynamo's ``val_0`` of shape (16, 48) for ``in_proj_weight`` feeding MatMul, TorchScript's
   ``onnx::MatMul_103``). Except an exporter's all-ones scale / all-zeros bias of a normalization whose
   result is then multiplied by an initializer (dynamo's GroupNorm: Reshape, InstanceNormalization(ones,
   zeros), Reshape, Mul ``val_21``, Add ``val_23``): that decomposition's identity affine, does not train;
5. a rank-0 scalar: does not train (``x * 0.5`` written as an initializer);
5b. feeds the Mul or Add applied to a normalization's result (through layout ops): the affine of a
   normalization the exporter decomposed (``val_21``, ``val_23`` above): trains;
6. named as an exporter's constant (``val_<n>``, a node output ``.../<Op>_output_<n>``,
   ``_onnx_const...``, or a one-element ``onnx::<Op>_<n>``) and feeding only arithmetic: a constant
   folded by the exporter, does not train;
7. anything else feeding a differentiable input (a bias added with Add, a hand-built model's
   ``scale`` fed to Mul): trains.

Without a graph signature (TorchScript exports) a buffer feeding arithmetic under its own name
(a positional table) is taken for a parameter and a rank-0 parameter (CLIP's ``logit_scale``) for
a constant: nothing in the file tells them apart; ``requires_grad``/``frozen_params`` decide then.

A tied weight (GPT-2's and T5's ``lm_head`` sharing the token embedding) is one parameter read twice;
both exporters write its transposed use as a second initializer, which :func:`tie_exporter_copies`
turns back into a Transpose of the parameter, so that it trains as one tensor.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Set

import numpy as np

from pytrain.base import dtypes
from pytrain.autodiff.engine import differentiable_inputs
from pytrain.autodiff.quant_forms import quant_params
from pytrain.ops.control.subgraph import all_nodes, subgraphs
from pytrain.proto import NodeProto

__all__ = ["WEIGHT_INPUTS", "LAYOUT_OPS", "REFOLDED_KEY", "classify_initializers", "is_exporter_constant",
           "refold_parameter_copies", "tie_exporter_copies", "why_nothing_trains"]

#: op -> input positions that hold a layer's weights (None: every input)
WEIGHT_INPUTS: Dict[str, Optional[Sequence[int]]] = {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (0, 1, 2), "MatMul": (0, 1),
    "BatchNormalization": (1, 2), "LayerNormalization": (1, 2), "InstanceNormalization": (1, 2),
    "GroupNormalization": (1, 2), "RMSNormalization": (1,), "Gather": (0,), "PRelu": (1,),
    "GRU": (1, 2, 3), "LSTM": (1, 2, 3, 7), "RNN": (1, 2, 3), "Einsum": None,
}

#: ops that only move or re-type values: a parameter seen through them is still a parameter
#: (op -> the input position the value passes through; None: every input)
LAYOUT_OPS: Dict[str, Optional[Sequence[int]]] = {
    "Identity": (0,), "Cast": (0,), "CastLike": (0,), "Transpose": (0,), "Reshape": (0,), "Flatten": (0,),
    "Squeeze": (0,), "Unsqueeze": (0,), "Split": (0,), "Slice": (0,), "Concat": None, "Expand": (0,),
}

_SIGNATURE_KEY = "pkg.torch.export.graph_signature.InputSpec.kind"
_EXPORTER_NAMES = (re.compile(r"^val_\d+$"), re.compile(r"_output_\d+$"), re.compile(r"^_onnx_const"))
_ONNX_ANON = re.compile(r"^onnx::\w+_\d+$")
#: value-info metadata pytrain writes on a parameter it re-expressed from an exporter's folded copy (the why)
REFOLDED_KEY = "pytrain.folded_copy_of"
_FOLDED_FROM_KEY = "pkg.onnxscript.optimizer.folded_from"
_PROGRAM_SIGNATURE_KEY = "pkg.torch.export.ExportedProgram.graph_signature"
_PROGRAM_SPEC = re.compile(r"^\s*\w+: (PARAMETER|BUFFER|CONSTANT_TENSOR)\b[^\n]*?target='([^']*)'", re.M)
#: aten ops that only select, repeat or move values: the dynamo exporter names a folded value after the
#: op that made it (``embedding_1``, ``expand``, ``unsqueeze``); a copy made by arithmetic is no parameter
_SELECTING = frozenset(("embedding", "expand", "unsqueeze", "squeeze", "slice", "index", "select", "view",
                        "reshape", "permute", "transpose", "t", "clone", "contiguous", "alias", "repeat", "cat",
                        "_unsafe_view", "narrow", "index_select", "gather", "flatten"))


def is_exporter_constant(name: str, size: int) -> bool:
    """Whether ``name`` is how torch's exporters name a constant they made (not a state_dict name)."""
    if any(p.search(name) for p in _EXPORTER_NAMES):
        return True
    return size == 1 and bool(_ONNX_ANON.match(name))


def _signature_kinds(value_infos: Sequence[Any], key: str = _SIGNATURE_KEY) -> Dict[str, str]:
    kinds: Dict[str, str] = {}
    for vi in value_infos:
        for p in getattr(vi, "metadata_props", None) or []:
            if p.key == key:
                kinds[vi.name] = p.value
    return kinds


def _weight_use(name: str, consumers: Dict[str, List[Any]]) -> Optional[str]:
    """The node label of the first weight position ``name`` reaches through layout ops, or None."""
    seen: Set[str] = set()
    todo = [name]
    while todo:
        cur = todo.pop()
        if cur in seen:
            continue
        seen.add(cur)
        for node, pos in consumers.get(cur, []):
            op = node.op_type if not node.domain or node.domain == "ai.onnx" else ""
            if op in WEIGHT_INPUTS and (WEIGHT_INPUTS[op] is None or pos in WEIGHT_INPUTS[op]):
                return "%s %r" % (op, node.name or node.output[0])
            if op in LAYOUT_OPS and (LAYOUT_OPS[op] is None or pos in LAYOUT_OPS[op]):
                todo.extend(o for o in node.output if o)
    return None


#: normalization ops whose result an exporter may scale and shift with separate Mul / Add nodes
NORMALIZATIONS = ("InstanceNormalization", "LayerNormalization", "GroupNormalization", "RMSNormalization",
                  "BatchNormalization")


def _normalized(value: str, producers: Dict[str, Any], through_affine: bool) -> bool:
    """Whether ``value`` is a normalization's result seen through layout ops (and, with
    ``through_affine``, through the Mul / Add of a decomposed affine)."""
    seen: Set[str] = set()
    while value and value not in seen:
        seen.add(value)
        node = producers.get(value)
        if node is None:
            return False
        if node.op_type in NORMALIZATIONS:
            return True
        if node.op_type in LAYOUT_OPS or (through_affine and node.op_type in ("Mul", "Add")):
            # follow the data operand (the non-initializer one for Mul / Add)
            ins = [i for i in node.input if i and i in producers] or list(node.input[:1])
            value = ins[0] if ins else ""
            continue
        return False
    return False


def _affine_of_normalization(name: str, consumers: Dict[str, List[Any]], producers: Dict[str, Any]) -> bool:
    """``name`` is an operand of a Mul / Add whose other operand is a normalization's result (5b)."""
    for node, pos in consumers.get(name, []):
        if node.op_type in ("Mul", "Add") and len(node.input) == 2:
            if _normalized(node.input[1 - pos], producers, through_affine=True):
                return True
    return False


def _identity_affine(t: Any, consumers: Dict[str, List[Any]], initializers: Set[str]) -> bool:
    """``t`` is an all-ones scale / all-zeros bias of a normalization whose result is then multiplied by an
    initializer (4a): the identity affine of a decomposed normalization."""
    from pytrain.proto import to_array

    for node, pos in consumers.get(t.name, []):
        if node.op_type not in NORMALIZATIONS or pos not in (1, 2):
            continue
        if not np.all(to_array(t) == (1.0 if pos == 1 else 0.0)):
            return False
        todo, seen = [o for o in node.output[:1] if o], set()
        while todo:
            value = todo.pop()
            if value in seen:
                continue
            seen.add(value)
            for c, _ in consumers.get(value, []):
                if c.op_type == "Mul" and any(i in initializers for i in c.input):
                    return True
                if c.op_type in LAYOUT_OPS:
                    todo.extend(o for o in c.output if o)
    return False


def classify_initializers(nodes: Sequence[NodeProto], initializers: Sequence[Any],
                          value_infos: Sequence[Any] = ()) -> List[Dict[str, Any]]:
    """One ``{"name", "trains", "why"}`` per initializer, in the model's order (the module's rule).
    A weight read inside a control-flow body is read there by the body's node."""
    nodes = [m for n in nodes for m in [n] + [x for g in subgraphs(n) for x in all_nodes(g)]]
    consumers: Dict[str, List[Any]] = {}
    differentiable: Dict[str, List[str]] = {}
    producers = {o: n for n in nodes for o in n.output if o}
    inits = {t.name for t in initializers}
    for n in nodes:
        diff = set(differentiable_inputs(n))
        for pos, i in enumerate(n.input):
            if not i:
                continue
            consumers.setdefault(i, []).append((n, pos))
            if pos in diff:
                differentiable.setdefault(i, []).append(n.op_type)
    kinds = _signature_kinds(value_infos)
    folded = _signature_kinds(value_infos, REFOLDED_KEY)
    quantizers = quant_params(nodes)
    report = []
    for t in initializers:
        size = 1
        for d in t.dims:
            size *= int(d)
        kind = kinds.get(t.name, "")
        if t.name in folded and dtypes.is_float(t.data_type):
            trains, why = True, "an exporter's folded copy of a parameter, trains as it: %s" % folded[t.name]
        elif not dtypes.is_float(t.data_type):
            trains, why = False, "not a float tensor (%s)" % dtypes.NAMES.get(t.data_type, t.data_type)
        elif t.name in quantizers:
            trains, why = False, "%s (quantization parameters stay frozen, docs/quantized.md)" % quantizers[t.name]
        elif kind == "PARAMETER":
            trains, why = True, "a PyTorch parameter (the exporter's graph signature)"
        elif kind in ("BUFFER", "CONSTANT_TENSOR"):
            trains, why = False, "a PyTorch %s (the exporter's graph signature)" % (
                "buffer" if kind == "BUFFER" else "constant")
        elif t.name not in differentiable:
            ops = sorted({n.op_type for n, _ in consumers.get(t.name, [])})
            if "BatchNormalization" in ops:
                why = "running statistics of BatchNormalization (a buffer)"
            else:
                why = "feeds no input a gradient flows through%s" % (
                    " (read by %s)" % ", ".join(ops) if ops else " (unused)")
            trains = False
        else:
            use = _weight_use(t.name, consumers)
            if use is not None and is_exporter_constant(t.name, size) and _identity_affine(t, consumers, inits):
                trains, why = False, ("the identity scale/shift of a normalization the exporter decomposed "
                                      "(the real affine follows as Mul/Add)")
            elif use is not None:
                trains, why = True, "a weight of %s" % use
            elif len(t.dims) == 0:
                trains, why = False, "a scalar constant (rank 0)"
            elif _affine_of_normalization(t.name, consumers, producers):
                trains, why = True, "scales or shifts a normalization's result (a decomposed normalization's affine)"
            elif is_exporter_constant(t.name, size):
                trains, why = False, "constant folded by the exporter (feeds only arithmetic: %s)" % (
                    ", ".join(sorted(set(differentiable[t.name]))))
            elif kinds:
                # the signature lists every parameter: a tensor it does not list (and that is no
                # parameter's layout copy, above) was computed by the exporter (a folded mask)
                trains, why = False, "computed by the exporter, not in its graph signature (feeds %s)" % (
                    ", ".join(sorted(set(differentiable[t.name]))))
            else:
                trains, why = True, "feeds a differentiable input of %s" % (
                    ", ".join(sorted(set(differentiable[t.name]))))
        report.append({"name": t.name, "trains": trains, "why": why,
                       "shape": [int(d) for d in t.dims], "size": size})
    return report


def _program_parameters(graph: Any) -> Set[str]:
    """The PARAMETER targets of the dynamo exporter's whole-program graph signature (graph metadata)."""
    for p in getattr(graph, "metadata_props", None) or []:
        if p.key == _PROGRAM_SIGNATURE_KEY:
            return {m.group(2) for m in _PROGRAM_SPEC.finditer(p.value) if m.group(1) == "PARAMETER"}
    return set()


def _folded_parameter(name: str, folded_from: str, parameters: Set[str], inits: Set[str]) -> Optional[str]:
    """The one PyTorch parameter a dynamo initializer ``name`` is a selection of (its value-info metadata
    ``folded_from`` names it and the op that made ``name`` only selects or repeats), or None. A parameter
    the file still holds is left alone: a second, separately trained copy of it would be wrong."""
    if re.sub(r"_\d+$", "", name) not in _SELECTING:
        return None
    found = [v for v in re.findall(r"'([^']*)'", folded_from) if v in parameters]
    return found[0] if len(found) == 1 and found[0] not in inits else None


def _may_repeat(values: np.ndarray, distinct: int) -> bool:
    """Whether equal entries of a folded copy can be one parameter entry read repeatedly: finite values, more
    than two distinct ones (not a mask, not a constant start such as Swin's all-zero table)."""
    v = values.astype(np.float32).ravel()
    return distinct > 2 and bool(np.all(np.isfinite(v))) and float(np.abs(v).max()) < 1e30


def _half_precision(values: np.ndarray) -> bool:
    """Every value a float16 or bfloat16 holds (a half-precision checkpoint's, where unrelated entries are often equal)."""
    v = values.astype(np.float32).ravel()
    return np.array_equal(v.astype(np.float16).astype(np.float32), v) or not np.any(v.view(np.uint32) & np.uint32(0xFFFF))


def _broadcast_source(values: np.ndarray) -> Optional[np.ndarray]:
    """``values`` reduced along every axis it only repeats (an expand's source), or None."""
    index = []
    for d in range(values.ndim):
        first = np.take(values, [0], axis=d)
        index.append(slice(0, 1) if values.shape[d] > 1 and np.all(values == first) else slice(None))
    source = values[tuple(index)]
    return source if source.size < values.size else None


def _distinct(flat: np.ndarray) -> int:
    """How many distinct values ``flat`` holds (NaNs one value, -0.0 equal to 0.0), by a sort: numpy's hashed
    unique is several times slower on a convolution's millions of float32 weights."""
    if flat.size == 0:
        return 0
    ordered = np.sort(flat)
    nan = int(np.count_nonzero(np.isnan(ordered[-1:]))) and int(np.count_nonzero(np.isnan(ordered)))
    return 1 + int(np.count_nonzero(ordered[1:] != ordered[:-1])) - max(nan - 1, 0)


def _rows_repeat(values: np.ndarray, distinct: int) -> bool:
    """A gather of whole rows with repeated indices: along some axis, the vectors repeat, and equal entries are
    exactly the same entry of equal vectors (two entries equal by chance are not)."""
    # equal floats have equal bits once -0.0 is 0.0 (+ 0.0 does it; the values are finite, _may_repeat): a hash
    # of each vector's bits that is exact modular arithmetic (no rounding, any order) rules an axis out cheaply
    # when no two of its vectors hash alike, before sorting the vectors themselves
    bits = (values.astype(np.float32) + np.float32(0)).view(np.uint32).astype(np.uint64)
    for d in range(values.ndim):
        size = values.shape[d]
        if size < 2 or distinct % size:
            continue   # (equal vectors' entries count size at a time)
        weights = np.random.RandomState(size).randint(1, 2 ** 62, size=size, dtype=np.int64).astype(np.uint64)
        hashes = (np.moveaxis(bits, d, -1).reshape(-1, size) * weights).sum(axis=1, dtype=np.uint64)
        hashes.sort()
        if not np.any(hashes[1:] == hashes[:-1]):
            continue
        rows = np.moveaxis(values, d, -1).reshape(-1, size)
        unique = np.unique(rows, axis=0).shape[0]
        if unique < rows.shape[0] and distinct == unique * size:
            return True
    return False


def _re_express(graph: Any, t: Any, param: Optional[str], scope: Any) -> Optional[Dict[str, Any]]:
    """Replace initializer ``t`` (a folded copy of ``param``) by the parameter's distinct entries and the
    node that re-makes ``t`` from them (Expand for a broadcast, Gather for repeated rows), in place; with
    distinct rows throughout, ``t`` stays (it is all of the parameter the model uses)."""
    from pytrain.proto import from_array, make_node, to_array

    values = to_array(t)
    entry = {"copy": t.name, "parameter": param or t.name, "trains_as": t.name}
    flat = values.ravel()
    distinct = _distinct(flat)   # (where the first reads are is asked only of a gather, below)
    selection = dict(entry, how="selection", shape=list(values.shape))
    if distinct == flat.size:
        return selection
    if not _may_repeat(values, distinct):
        return None
    source = _broadcast_source(values)
    gather = source is None and _rows_repeat(values, distinct) and not _half_precision(values)
    if source is None and not gather:
        # a few entries equal by chance in distinct rows: a selection; many, without a row structure: unknown
        return selection if flat.size - distinct <= max(2, flat.size // 100) else None
    name = param if param and param not in scope.taken else scope.fresh((param or t.name) + "/entries")
    scope.taken.add(name)
    if source is not None:
        shape = scope.fresh(t.name + "/shape")
        consts = [from_array(source, name), from_array(np.array(values.shape, np.int64), shape)]
        node = make_node("Expand", [name, shape], [t.name], name=scope.fresh(t.name + "/expand"))
        how = "expand"
    else:
        _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # the entries in the order the copy first reads them
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        source = flat[first[order]]
        index = scope.fresh(t.name + "/index")
        consts = [from_array(source, name), from_array(rank[inverse].reshape(values.shape).astype(np.int64), index)]
        node = make_node("Gather", [name, index], [t.name], axis=0, name=scope.fresh(t.name + "/gather"))
        how = "gather"
    kept = [i for i in graph.initializer if i.name != t.name]
    del graph.initializer[:]
    graph.initializer.extend(kept + consts)
    inputs = [v for v in graph.input if v.name != t.name]
    del graph.input[:]
    graph.input.extend(inputs)
    graph.node.extend([node])
    return dict(entry, trains_as=name, how=how, shape=list(source.shape))


def refold_parameter_copies(graph: Any, keep: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Make the copies of a parameter an exporter folded into new initializers train as that parameter, in place.

    The dynamo exporter's optimizer folds a selection of a parameter whose indices are constants into a new
    initializer and drops the parameter: GPT-2's ``wpe(position_ids)`` becomes ``embedding_1`` (1, T, C), ViT's
    ``cls_token.expand(batch, ...)`` becomes ``expand`` (batch, 1, C), Swin's ``relative_position_bias_table
    [index]`` becomes ``unsqueeze`` (1, heads, N, N); the value's metadata ``folded_from`` names the parameter.
    TorchScript's constant folding writes the same Swin bias as ``onnx::Add_<n>``. Such a copy holds all of the
    parameter the model can use, and trains as it: a copy whose entries are distinct trains as it is (PyTorch's
    update of the rows used; rows the file never reads do not change its outputs); repeated entries are one
    entry read several times, so the copy becomes Expand (a broadcast) or Gather (repeated indices) of the
    distinct entries, which train summing their uses' gradients as PyTorch does, under the parameter's name
    where the file does not hold it (the export writes ``cls_token`` itself). Entries that may be equal by
    chance (half-precision values, masks, non-finite values) are left alone, as are buffers, copies made by
    arithmetic, and copies of a parameter the file still holds. Returns ``[{"copy", "parameter", "how",
    "trains_as", "shape"}]``."""
    from pytrain.engine.graph import NameScope, all_names
    from pytrain.proto import make_value_info
    from pytrain.proto.onnx_pb import StringStringEntryProto

    infos = list(graph.value_info) + list(graph.input)
    kinds = _signature_kinds(infos)
    folded_from = _signature_kinds(infos, _FOLDED_FROM_KEY)
    parameters = _program_parameters(graph)
    inits = {t.name for t in graph.initializer}
    trains = {r["name"]: r["trains"] for r in classify_initializers(list(graph.node), list(graph.initializer), infos)}
    scope = NameScope(all_names(graph))
    done: List[Dict[str, Any]] = []
    for t in list(graph.initializer):
        if t.name in keep or not dtypes.is_float(t.data_type) or t.name in kinds:
            continue
        if parameters:
            param = _folded_parameter(t.name, folded_from.get(t.name, ""), parameters, inits)
            if param is None:
                continue
        elif not (_ONNX_ANON.match(t.name) and trains[t.name] and len(t.dims) > 0):
            continue  # TorchScript: only a folded constant that trains already, for its repeated entries
        else:
            param = None
        entry = _re_express(graph, t, param, scope)
        if entry is None or (param is None and entry["trains_as"] == t.name):
            continue
        why = StringStringEntryProto(key=REFOLDED_KEY, value="%s of %s (exported as %r)" % (
            entry["how"], entry["parameter"], t.name))
        info = next((v for v in graph.value_info if v.name == entry["trains_as"]), None)
        if info is None:
            info = make_value_info(entry["trains_as"], t.data_type, entry["shape"])
            info.metadata_props.append(why)
            graph.value_info.extend([info])
        else:
            info.metadata_props.append(why)
        done.append(entry)
    return done


def tie_exporter_copies(graph: Any, keep: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Tie the transposed copies of a parameter that an exporter wrote for a second use of it, in place.

    A tied weight is one PyTorch parameter read twice: GPT-2's and T5's token embedding, read by
    Gather as itself and by the ``lm_head`` MatMul transposed. Both exporters fold that transpose into
    a second initializer (dynamo: ``val_135``, outside its graph signature; TorchScript:
    ``onnx::MatMul_539``), which would train apart from the embedding. An initializer named as an
    exporter names what it computes, not a parameter in the graph signature, holding exactly the
    transpose of a 2-D parameter that trains (and not one value throughout) is such a copy: it is
    replaced by a Transpose node of the parameter, so both uses train one tensor, as in PyTorch.
    ``keep``: initializers to leave alone (named by the caller's requires_grad / frozen_params).
    The folded copies of :func:`refold_parameter_copies` are re-expressed first.
    Returns ``[{"copy", "parameter", "how"}]``: the refolded copies, then the transposed ones in the model's order."""
    from pytrain.engine.graph import NameScope, all_names
    from pytrain.proto import make_node, to_array

    refolded = refold_parameter_copies(graph, keep)

    inits = list(graph.initializer)
    infos = list(graph.value_info) + list(graph.input)
    kinds = _signature_kinds(infos)
    trains = {r["name"] for r in classify_initializers(list(graph.node), inits, infos) if r["trains"]}
    matrices = [t for t in inits if t.name in trains and len(t.dims) == 2 and t.name not in keep]
    generated = {t.name for t in matrices if kinds.get(t.name) != "PARAMETER" and is_exporter_constant(t.name, 1)}
    sources = [t for t in matrices if kinds.get(t.name) == "PARAMETER" or (not kinds and t.name not in generated)]
    tied: List[Dict[str, str]] = []
    for t in matrices:
        if t.name not in generated:
            continue
        value = to_array(t)
        if value.size < 2 or value.min() == value.max():
            continue
        for s in sources:
            if list(s.dims) == list(t.dims)[::-1] and s.data_type == t.data_type and \
                    np.array_equal(value, to_array(s).T):
                tied.append({"copy": t.name, "parameter": s.name, "how": "transpose"})
                break
    if tied:
        copies = {d["copy"] for d in tied}
        scope = NameScope(all_names(graph))
        kept = [t for t in inits if t.name not in copies]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        inputs = [v for v in graph.input if v.name not in copies]
        del graph.input[:]
        graph.input.extend(inputs)
        graph.node.extend(make_node("Transpose", [d["parameter"]], [d["copy"]], perm=[1, 0],
                                    name=scope.fresh(d["copy"] + "/tied")) for d in tied)
    return refolded + tied


def why_nothing_trains(report: Sequence[Dict[str, Any]], named: bool, frozen: Sequence[str]) -> str:
    """Why nothing would train: each initializer's reason (the first few), or that there are none."""
    head = "no parameter would train: the model has no float initializer feeding a differentiable input%s" % (
        " among requires_grad" if named else "")
    if not report:
        return head + " (it has no initializers: are its weights graph inputs, or nodes pytrain does not lift?)"
    why = ["%r: %s" % (r["name"], "frozen" if r["name"] in frozen else r["why"]) for r in report[:6]]
    more = " and %d more" % (len(report) - 6) if len(report) > 6 else ""
    return "%s; its %d initializer%s: %s%s" % (head, len(report), "s" if len(report) > 1 else "",
                                               "; ".join(why), more)
