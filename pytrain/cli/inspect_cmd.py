"""``pytrain inspect``: what an ONNX model, a checkpoint or an artifact directory holds."""
from __future__ import annotations

import argparse
import os
from collections import Counter
from typing import Dict, List

import numpy as np

from pytrain.run import artifact_dir as A
from pytrain.cli._common import count, say, shape_str, size_str, table
from pytrain.checkpoint.ort_format import is_ort_checkpoint
from pytrain.errors import ModelFormatError

_ZIP_MAGIC = b"PK\x03\x04"


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="show what a model, checkpoint or artifact directory holds",
                       description="For an ONNX model: inputs, outputs, initializers and which "
                                   "ops pytrain can run and train. For a checkpoint: parameters, "
                                   "optimizer state and properties.")
    p.add_argument("file", metavar="FILE", help="model.onnx, a checkpoint, or an artifact directory")
    p.set_defaults(run=run)


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def model_lines(path: str, model) -> List[str]:
    from pytrain.autodiff import differentiable_ops
    from pytrain.ops import supported_ops
    from pytrain.proto import model_metadata, opset_version

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    lines = ["ONNX model {} (opset {}, IR {}, {} nodes{})".format(
        path, opset_version(model), model.ir_version, len(g.node),
        ", by " + model.producer_name if model.producer_name else "")]
    lines.append("inputs:")
    lines += table([(s.name, s.dtype_name, shape_str(s.shape)) for s in A.tensor_specs(g.input)
                    if s.name not in inits], "  ")
    lines.append("outputs:")
    lines += table([(s.name, s.dtype_name, shape_str(s.shape)) for s in A.tensor_specs(g.output)], "  ")
    total = sum(_size(t.dims) for t in g.initializer)
    lines.append("initializers: {} tensors, {} values".format(len(g.initializer), count(total)))
    from pytrain.base import dtypes
    from pytrain.generator.trainable import classify_initializers

    # what trains by default (generate without --requires-grad/--frozen), and why
    verdict = {r["name"]: r for r in classify_initializers(g.node, g.initializer, list(g.value_info) + list(g.input))}
    trains = [t for t in g.initializer if verdict[t.name]["trains"]]
    lines.append("trains by default: {} tensors, {} values".format(
        len(trains), count(sum(_size(t.dims) for t in trains))))
    biggest = sorted(g.initializer, key=lambda t: (not verdict[t.name]["trains"], -_size(t.dims)))[:16]
    lines += table([(t.name, dtypes.NAMES.get(t.data_type, "?"), shape_str(list(t.dims)), count(_size(t.dims)),
                     "trains" if verdict[t.name]["trains"] else "no", verdict[t.name]["why"]) for t in biggest], "  ")
    if len(g.initializer) > len(biggest):
        lines.append("  ... and {} more".format(len(g.initializer) - len(biggest)))
    from pytrain.base.layout import ARTIFACT_KEY, LayoutError, parse_layout
    from pytrain.proto import ModelProto
    from pytrain.generator.trainable import tie_exporter_copies

    if model_metadata(model).get(ARTIFACT_KEY):
        try:
            lines += tied_lines(parse_layout(model_metadata(model), "model").get("tied") or [])
        except LayoutError:  # a damaged layout is the loader's to name when the model is used
            pass
    else:  # what generate will tie (found on a copy: tying rewrites the graph)
        lines += tied_lines(tie_exporter_copies(ModelProto.FromString(model.SerializeToString()).graph))
    grads = set(differentiable_ops())
    hist = Counter(((n.domain or ""), n.op_type) for n in g.node)
    rows = [("op", "count", "kernel", "gradient")]
    no_kernel, no_grad = [], []
    for (domain, op), c in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
        full = op if domain in ("", "ai.onnx") else "{}.{}".format(domain, op)
        has_kernel = op in supported_ops(domain)
        has_grad = full in grads
        if not has_kernel:
            no_kernel.append(full)
        elif not has_grad:
            no_grad.append(full)
        rows.append((full, c, "yes" if has_kernel else "NO", "yes" if has_grad else "-"))
    lines.append("ops:")
    lines += table(rows, "  ")
    if no_kernel:
        lines.append("pytrain cannot run: {} (no kernel)".format(", ".join(no_kernel)))
    kind = model_metadata(model).get("pytrain.artifact")
    if kind:
        lines.append("this is a pytrain {} artifact (its gradient ops need no gradient rules)".format(kind))
        no_grad = []
    if no_grad:
        lines.append("no gradient rule: {} (fine when no trainable parameter's gradient has to "
                     "flow through them; else freeze what feeds them, e.g. generate "
                     "--trainable-ops N)".format(", ".join(no_grad)))
    if not no_kernel and not no_grad and not kind:
        lines.append("pytrain can run and train every op of this model")
    return lines


def tied_lines(tied: List[Dict[str, str]]) -> List[str]:
    """The exporter copies of a tied weight (``generate_artifacts``' ``summary["tied"]``), if any."""
    if not tied:
        return []
    lines = ["tied: {} exporter {} of a tied weight, read from the weight (one tensor trains):".format(
        len(tied), "copy" if len(tied) == 1 else "copies")]
    return lines + table([(d["copy"], "= %s of" % d.get("how", "transpose"), d["parameter"]) for d in tied], "  ")


def checkpoint_lines(path: str, state, kind: str = "checkpoint") -> List[str]:
    params = list(state.parameters.values())
    trainable = [p for p in params if p.requires_grad]
    lines = ["{} {} ({})".format(kind, path, size_str(os.path.getsize(path)))
             if os.path.isfile(path) else "{} {}".format(kind, path)]
    if getattr(state, "nominal", False) and all(not list(p.shape) for p in params):
        lines.append("parameters: {} tensors ({} trainable), nominal (names only: the training model has the "
                     "shapes)".format(len(params), len(trainable)))
    else:
        lines.append("parameters: {} tensors, {} values ({} trainable in {} tensors){}".format(
            len(params), count(sum(_size(p.shape) for p in params)),
            count(sum(_size(p.shape) for p in trainable)), len(trainable),
            ", nominal (shapes only)" if getattr(state, "nominal", False) else ""))
    # ORT's nominal checkpoints record names only: no shape to show
    unknown = getattr(state, "nominal", False) and all(not list(p.shape) for p in params)
    lines += table([(p.name, str(p.dtype), "?" if unknown else shape_str(list(p.shape)),
                     "?" if unknown else count(_size(p.shape)),
                     "trains" if p.requires_grad else "frozen") for p in params[:40]], "  ")
    if len(params) > 40:
        lines.append("  ... and {} more".format(len(params) - 40))
    opt = getattr(state, "optimizer_state", None)
    if opt is None:
        lines.append("optimizer state: none")
    else:
        slots = sorted({s for per in opt.slots.values() for s in per})
        lines.append("optimizer state: step {}, learning rate {}, {} for {} parameters".format(
            opt.step, opt.learning_rate, ", ".join(slots) or "no slots", len(opt.slots)))
        norms = []
        for pname, per in sorted(opt.slots.items())[:10]:
            for slot, arr in sorted(per.items()):
                norms.append((pname, slot, shape_str(list(np.shape(arr))),
                              "norm {:.4g}".format(float(np.linalg.norm(np.asarray(arr, dtype=np.float64))))))
        lines += table(norms, "  ")
    lines.append("properties:" if len(state.properties) else "properties: none")
    for k in sorted(state.properties):
        v = repr(state.properties[k])
        lines.append("  {} = {}".format(k, v if len(v) <= 100 else v[:97] + "..."))
    return lines


def run(args: argparse.Namespace) -> int:
    path = args.file
    if os.path.isdir(path):
        art = A.ArtifactDir(path)
        lines = ["artifact directory {}".format(path)]
        lines += table([(f, size_str(os.path.getsize(art.file(f)))) for f in A.FILES], "  ")
        lines += tied_lines(art.layout().get("tied") or [])
        state = art.load_state()
        lines += checkpoint_lines(art.checkpoint_path, state)
        for line in lines:
            say(line)
        return 0
    if not os.path.exists(path):
        raise ModelFormatError("{} does not exist".format(path))
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] == _ZIP_MAGIC:
        lines = checkpoint_lines(path, A.load_state(path))
    elif is_ort_checkpoint(head):
        lines = checkpoint_lines(path, A.load_state(path), "ONNX Runtime checkpoint")
    else:
        from pytrain.cli import inspect_ort
        from pytrain.device.ort_made import read

        try:  # ONNX Runtime's training and optimizer models (sequences, its ops) are read as ORT's
            raw = read(path)
        except Exception:  # the loader below names what is wrong
            raw = None
        kind = inspect_ort.ort_made_kind(raw) if raw is not None else None
        if kind is not None:
            for line in inspect_ort.ort_model_lines(path, raw, kind):
                say(line)
            return 0
        try:
            model = A.load_model_file(path, "model")
        except ModelFormatError as e:
            raise ModelFormatError("{} is neither an ONNX model nor a pytrain or ONNX Runtime checkpoint ({})".format(
                path, e)) from None
        lines = inspect_ort.ort_eval_lines(path, model) or model_lines(path, model)
    for line in lines:
        say(line)
    return 0
