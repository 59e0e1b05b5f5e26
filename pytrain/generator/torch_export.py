"""Export a PyTorch model to an ONNX file fit for training (not only for inference).

``torch.onnx.export`` is built for inference, and what it does for speed cannot be undone by any
runtime that later trains the file (measured with torch 2.13):

* the default (dynamo) exporter folds BatchNormalization into the preceding convolution, even for
  a model in training mode: BN's scale, bias and running statistics are gone;
* both exporters merge initializers whose values are identical (the TorchScript exporter does so
  for a model in eval mode): ``nn.TransformerEncoderLayer``'s ``norm1.weight`` and
  ``norm2.weight`` start as the same ones, become one tensor, and training then ties them;
* the TorchScript exporter in eval mode drops Dropout, and constant folding turns parameters into
  transposed or scaled copies under generated names;
* the dynamo exporter writes the weights to a ``.onnx.data`` side file.

:func:`torch_export` uses the TorchScript exporter with the choices that keep the model as PyTorch
trains it (the dynamo exporter, its optimizer kept from the weights, where TorchScript cannot export
it), then checks that every parameter arrived, under its ``state_dict`` name and shape.
``torch`` is imported only when the function is called (pytrain itself needs only numpy).
"""
from __future__ import annotations

import io
import json
import os
import warnings
from typing import Any, Dict, List, Optional, Sequence, Union

from pytrain.errors import ExportError

__all__ = ["FROZEN_KEY", "ROUTE_KEY", "torch_export"]

#: metadata key listing (JSON) the parameters PyTorch does not train (``requires_grad=False``);
#: ``generate_artifacts`` freezes them unless told otherwise
FROZEN_KEY = "pytrain.frozen_params"
#: metadata key naming the exporter that wrote the file ("torchscript", or "dynamo" with the reason)
ROUTE_KEY = "pytrain.export_route"
DEFAULT_OPSET = 17
#: the dynamo exporter's oldest opset
DYNAMO_MIN_OPSET = 18


def _as_tuple(example_inputs: Any) -> tuple:
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs)
    return (example_inputs,)


def torch_export(model: Any, example_inputs: Any, path: Union[str, "os.PathLike[str]", None] = None,
                 input_names: Optional[Sequence[str]] = None, output_names: Optional[Sequence[str]] = None,
                 opset: int = DEFAULT_OPSET, dynamic_batch: bool = True, training: str = "preserve") -> bytes:
    """Write ``model`` (a ``torch.nn.Module``) as a self-contained ONNX file that pytrain trains as PyTorch does.

    example_inputs: a tensor or a tuple of tensors (positional arguments of ``model.forward``).
    path: where to write the file (None: only return the bytes).
    input_names / output_names: default ``input`` / ``output`` for one, ``input_0``, ... for several.
    opset: the default-domain opset (17: every layer here exports at 17, and onnxruntime releases
        from 2022 on run it).
    dynamic_batch: axis 0 of every input and output is a symbolic ``batch`` dimension (recurrent
        layers: use ``batch_first=True``, or pass False and export at the batch size you train with).
    training: ``"preserve"`` exports each submodule in the mode it is in (Dropout kept for modules in
        train mode, BatchNorm kept as a node either way; a frozen backbone put in ``eval()`` exports
        its BatchNorm in inference mode); ``"eval"`` exports the whole model in eval mode (Dropout
        removed, BatchNorm kept as a node).

    What it does differently from a plain ``torch.onnx.export``:

    * ``dynamo=False``: the TorchScript exporter keeps BatchNormalization as a node; the dynamo
      exporter folds it into the convolutions.
    * ``keep_initializers_as_inputs=True`` while exporting: the only way to stop the exporter from
      merging initializers with equal values (its deduplication pass is skipped then, and so is
      its eval-mode Conv+BatchNorm fusion, which needs the weights as constants); the initializers
      are removed from the graph inputs afterwards, so the file is an ordinary model.
    * ``do_constant_folding=False``: parameters stay parameters under their ``state_dict`` names
      (folding makes transposed or scaled copies under generated names).
    * ``export_params=True`` and no external data: one self-contained file.
    * Tracing runs the model, which moves BatchNorm's running statistics of modules in train mode;
      the model's buffers are restored afterwards and the file holds the values from before the call.
    * When the TorchScript exporter cannot export the model (an operator it lacks, such as
      ``aten::diff`` in Hugging Face's packed-sequence check of GPT-2 called with ``input_ids``
      alone), the dynamo exporter writes it at opset ``max(opset, 18)`` with the weights kept out of
      its optimizer's reach (no folding into constants, no merging of equal initializers, BatchNorm
      kept as a node). The file's
      metadata ``pytrain.export_route`` says which exporter wrote it ("torchscript", or "dynamo:"
      and why TorchScript failed), and a ``UserWarning`` says so when it falls back.

    Parameters with ``requires_grad=False`` (and any other initializer pytrain's default rule would
    take for a parameter, e.g. a float buffer) are listed (JSON) in the model's metadata under
    ``pytrain.frozen_params``; ``generate_artifacts`` keeps them frozen by default, so what trains
    by default is exactly what PyTorch trains.

    Raises ExportError naming every trainable parameter that is missing from the file, has another
    shape, or that generate_artifacts' default rule (``pytrain.trainable``) would not train.
    Returns the model's bytes.
    """
    import torch
    from onnx import numpy_helper

    if training not in ("preserve", "eval"):
        raise ExportError("training must be 'preserve' or 'eval', got %r" % (training,))
    args = _as_tuple(example_inputs)
    n_out = _count_outputs(model, args, training, torch)
    in_names = list(input_names) if input_names is not None else _default_names("input", len(args))
    out_names = list(output_names) if output_names is not None else _default_names("output", n_out)
    if len(in_names) != len(args):
        raise ExportError("input_names has %d names for %d example inputs" % (len(in_names), len(args)))
    dynamic_axes = None
    if dynamic_batch:
        dynamic_axes = {name: {0: "batch"} for name in in_names + out_names}

    proto, route, before = _export_as_trained(model, args, (in_names, out_names), dynamic_axes, int(opset),
                                              training, torch)
    g = proto.graph
    inits = _restore_initializers(g, before, numpy_helper)
    _check_parameters(model, g, inits)
    _mark(proto, _frozen(model, proto.SerializeToString()), route)
    data = proto.SerializeToString()
    if path is not None:
        with open(os.fspath(path), "wb") as out:
            out.write(data)
    return data


def _export_as_trained(model: Any, args: tuple, names: tuple, dynamic_axes: Optional[Dict[str, Any]], opset: int,
                       training: str, torch: Any) -> tuple:
    """(the ``onnx.ModelProto``, the route that wrote it, the state_dict from before): the TorchScript exporter,
    else the dynamo one; the model's buffers and modes are as they were afterwards."""
    import onnx

    in_names, out_names = names
    state = model.state_dict()
    before = {k: v.detach().clone() for k, v in state.items()}
    was_training = {m: m.training for m in model.modules()}
    mode = torch.onnx.TrainingMode.PRESERVE if training == "preserve" else torch.onnx.TrainingMode.EVAL
    f = io.BytesIO()
    try:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, args, f, dynamo=False, export_params=True, opset_version=opset,
                                  training=mode, do_constant_folding=False, keep_initializers_as_inputs=True,
                                  input_names=in_names, output_names=out_names, dynamic_axes=dynamic_axes)
            proto, route = onnx.load_from_string(f.getvalue()), "torchscript"
        except Exception as e:  # whatever TorchScript lacks: the dynamo exporter may still export it
            reason = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
            for m, flag in was_training.items():
                m.training = flag
            if training == "eval":
                model.eval()
            proto = _dynamo_export(model, args, in_names, out_names, dynamic_axes is not None,
                                   max(opset, DYNAMO_MIN_OPSET), reason, torch)
            route = "dynamo: the TorchScript exporter failed (%s)" % reason
            warnings.warn("pytrain.torch_export: the TorchScript exporter failed (%s); exported with the dynamo "
                          "exporter (every parameter kept separate, BatchNorm as a node)" % reason,
                          stacklevel=3)
    finally:
        with torch.no_grad():
            for k, v in state.items():
                v.copy_(before[k])
        for m, flag in was_training.items():
            m.training = flag
    return proto, route, before


def _restore_initializers(g: Any, before: Dict[str, Any], numpy_helper: Any) -> Dict[str, Any]:
    """The values from before tracing (running statistics moved while tracing), and no initializer inputs;
    returns the initializers by name."""
    inits = {t.name: t for t in g.initializer}
    for name, t in inits.items():
        if name in before:
            t.CopyFrom(numpy_helper.from_array(before[name].cpu().numpy(), name))
    kept = [v for v in g.input if v.name not in inits]
    del g.input[:]
    g.input.extend(kept)
    return inits


def _check_parameters(model: Any, g: Any, inits: Dict[str, Any]) -> None:
    """Every trainable parameter a separate initializer under its state_dict name, with its shape, read by a node."""
    lost: List[str] = []
    consumed = {i for n in g.node for i in n.input} | _subgraph_inputs(g)
    for name, p in _stored_parameters(model, inits).items():
        if not p.requires_grad:
            continue  # a frozen parameter the exporter folded into a constant still does not train
        t = inits.get(name)
        if t is None:
            lost.append("%s (missing)" % name)
        elif tuple(t.dims) != tuple(p.shape):
            lost.append("%s (shape %s in the file, %s in the model)" % (name, list(t.dims), list(p.shape)))
        elif name not in consumed:
            lost.append("%s (no node uses it)" % name)
    if lost:
        raise ExportError("the ONNX export lost %d of the model's trainable parameters, so the file cannot train "
                          "as PyTorch does: %s (a parameter the forward pass never uses is not in the graph: "
                          "delete it or set requires_grad=False)" % (len(lost), "; ".join(lost)))


def _mark(proto: Any, frozen: List[str], route: str) -> None:
    """The file's metadata: the parameters PyTorch does not train (FROZEN_KEY) and the exporter's route."""
    meta = {p.key: p for p in proto.metadata_props}
    entry = meta.get(FROZEN_KEY) or proto.metadata_props.add()
    entry.key, entry.value = FROZEN_KEY, json.dumps(frozen)
    entry = meta.get(ROUTE_KEY) or proto.metadata_props.add()
    entry.key, entry.value = ROUTE_KEY, route


def _dynamo_export(model: Any, args: tuple, in_names: List[str], out_names: List[str], dynamic_batch: bool,
                   opset: int, reason: str, torch: Any) -> Any:
    """The model through torch's dynamo exporter, as an ``onnx.ModelProto`` with its weights inside.

    Exported with ``optimize=False`` (the optimizer folds BatchNorm into convolutions, merges equal
    initializers and folds parameters into constants), then optimized with the weights hidden from
    it, so every parameter stays an initializer under its ``state_dict`` name."""
    import contextlib
    import logging

    logging.disable(logging.WARNING)  # the exporter logs its progress on every call
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(model, args, None, dynamo=True, optimize=False, opset_version=opset,
                                        input_names=in_names, output_names=out_names,
                                        dynamic_shapes=_batch_shapes(model, args, torch) if dynamic_batch else None)
    except Exception as e:
        raise ExportError("neither of torch's exporters can export this model: TorchScript: %s; dynamo: %s: %s%s" % (
            reason, type(e).__name__, (str(e).strip().splitlines() or [""])[0],
            " (dynamic_batch=False may help)" if dynamic_batch else "")) from e
    finally:
        logging.disable(logging.NOTSET)
    # The optimizer's folding removes what pytrain cannot run (SplitToSequence + SequenceAt, which the
    # unoptimized graph keeps). It must not see the weights' values, or it folds them into constants,
    # drops a zero bias or fuses BatchNorm: for the while they are graph inputs without a value.
    import onnxscript

    graph = program.model.graph
    n_inputs = len(graph.inputs)
    held = [(v, v.const_value) for v in list(graph.initializers.values())]
    for v, _ in held:
        graph.initializers.pop(v.name)
        v.const_value = None
        graph.inputs.append(v)
    try:
        onnxscript.optimizer.optimize(program.model)
    finally:
        del graph.inputs[n_inputs:]
        for v, value in held:
            v.const_value = value
            graph.register_initializer(v)
    return program.model_proto


def _batch_shapes(model: Any, args: tuple, torch: Any) -> tuple:
    """torch.export's ``dynamic_shapes`` making axis 0 of every input one symbolic ``batch``, shaped as
    ``forward``'s parameters (``*args`` take one nested tuple: ``dynamic_axes`` cannot say that)."""
    import inspect

    batch = torch.export.Dim("batch")
    params = list(inspect.signature(model.forward).parameters.values())
    shapes: List[Any] = []
    for i, p in enumerate(params):
        if p.kind == p.VAR_POSITIONAL:
            shapes.append(tuple({0: batch} for _ in args[i:]))
            break
        if i < len(args):
            shapes.append({0: batch})
    return tuple(shapes)


def _frozen(model: Any, data: bytes) -> List[str]:
    """What ``generate_artifacts`` must not train by default: the parameters with requires_grad=False,
    and any other initializer its rule (``pytrain.trainable``) would take for a parameter (a float
    buffer fed to arithmetic, a constant the exporter made). Raises ExportError when the rule would
    leave out a parameter PyTorch trains."""
    from pytrain.engine.validate import load_model
    from pytrain.generator.trainable import classify_initializers

    g = load_model(data).graph
    report = classify_initializers(list(g.node), list(g.initializer), list(g.value_info) + list(g.input))
    by_rule = {r["name"]: r for r in report}
    params = _stored_parameters(model, {t.name for t in g.initializer})
    missed = ["%s (%s)" % (n, by_rule[n]["why"]) for n, p in params.items()
              if p.requires_grad and not by_rule[n]["trains"]]
    if missed:
        raise ExportError("pytrain would not train %s by default, although PyTorch does: %s. Give the parameter "
                          "at least one dimension (shape (1,) instead of ())" % (
                              "this parameter" if len(missed) == 1 else "these parameters", "; ".join(missed)))
    return [n for n, p in params.items() if not p.requires_grad] + \
        [r["name"] for r in report if r["trains"] and r["name"] not in params]


def _stored_parameters(model: Any, stored: Any) -> Dict[str, Any]:
    """{name: parameter}, each parameter under the name the file stores it by: a tied parameter (GPT-2's
    lm_head and token embedding, one tensor) has several names, and the dynamo exporter keeps one of them."""
    names: Dict[int, List[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    out = {}
    for name, p in model.named_parameters():
        out[next((n for n in names[id(p)] if n in stored), name)] = p
    return out


def _default_names(prefix: str, count: int) -> List[str]:
    return [prefix] if count == 1 else ["%s_%d" % (prefix, i) for i in range(count)]


def _count_outputs(model: Any, args: tuple, training: str, torch: Any) -> int:
    """How many tensors the model returns (flattened as the exporter flattens them)."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    was_training = {m: m.training for m in model.modules()}
    try:
        if training == "eval":
            model.eval()
        with torch.no_grad():
            out = model(*args)
    finally:
        with torch.no_grad():
            for k, v in model.state_dict().items():
                v.copy_(state[k])
        for m, flag in was_training.items():
            m.training = flag
    return len(_flatten(out))


def _flatten(out: Any) -> List[Any]:
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flatten(o)]
    return [out] if out is not None else []


def _subgraph_inputs(g: Any) -> set:
    """Names used inside If/Loop/Scan bodies (outer-scope references count as uses)."""
    used: set = set()
    for n in g.node:
        for a in n.attribute:
            for sub in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                used |= {i for m in sub.node for i in m.input} | _subgraph_inputs(sub)
    return used

