"""``pytrain export``: the trained inference model as a standalone ONNX file."""
from __future__ import annotations

import argparse

from pytrain import data
from pytrain.cli._common import say, shape_str, size_str
from pytrain.base.files import write_atomic
from pytrain.run import properties as P
from pytrain.run.artifact_dir import ArtifactDir
from pytrain.run import rows
from pytrain.run.scaling import target_scaling


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write the trained model for inference",
                       description="Write DIR's model with its current weights as an inference "
                                   "ONNX model (onnxruntime or pytrain.runtime run it).")
    p.add_argument("dir", metavar="DIR", help="artifact directory")
    p.add_argument("-o", "--output", required=True, metavar="MODEL.onnx",
                   help="the ONNX file; with --format transformers.js a folder, or a .zip of it")
    p.add_argument("--format", choices=("onnx", "transformers.js"), default="onnx",
                   help="onnx (default): one ONNX file; transformers.js: the folder transformers.js loads as it is "
                        "(config.json and tokenizer files from --hub, onnx/model.onnx, and onnx/model_quantized.onnx "
                        "requantized in the file's scheme when the trained model is quantized)")
    p.add_argument("--hub", metavar="FOLDER",
                   help="with --format transformers.js: the Hub folder (or its .zip) the model came from; its "
                        "config.json and tokenizer files go with the export")
    p.add_argument("--outputs", nargs="+", metavar="NAME",
                   help="graph outputs to keep (default: the original model's outputs)")
    p.add_argument("--lora", choices=("merged", "adapters", "unmerged"), default="merged",
                   help="for artifacts made with --lora: merged (default) folds the adapters into the weights "
                        "(the original graph); adapters writes the adapters alone (an ONNX file of initializers when "
                        "MODEL ends in .onnx, else .npz); unmerged keeps them as nodes")
    p.add_argument("--raw-inputs", action="store_true",
                   help="do not build the training run's --standardize step (nor a page table's encoding of "
                        "text columns and missing values) into the model")
    p.set_defaults(run=run)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _transformers_js(args: argparse.Namespace, module, outputs) -> int:
    import os

    from pytrain.run.hub_export import export_transformers_js
    from pytrain.text.hub_folder import unpack, zip_folder

    if not args.hub:
        raise SystemExit("pytrain export: --format transformers.js needs --hub FOLDER, the Hub folder (or .zip) "
                         "with the model's config.json and tokenizer files")
    if os.path.isdir(args.hub):
        files = {os.path.relpath(os.path.join(d, f), args.hub).replace(os.sep, "/"): os.path.join(d, f)
                 for d, _, names in os.walk(args.hub) for f in names}
        hub = {k: _read(v) for k, v in files.items() if not k.lower().endswith((".onnx", "_data", ".data"))}
    else:
        hub = unpack({os.path.basename(args.hub): _read(args.hub)})
    folder = export_transformers_js(module, outputs, hub)
    if args.output.lower().endswith(".zip"):
        write_atomic(args.output, zip_folder(folder))
    else:
        for path, blob in folder.items():
            target = os.path.join(args.output, *path.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            write_atomic(target, blob)
    say("wrote {}: {}".format(args.output, ", ".join("{} ({})".format(k, size_str(len(v)))
                                                    for k, v in sorted(folder.items()))))
    return 0


def run(args: argparse.Namespace) -> int:
    from pytrain.proto import ModelProto, value_info_type

    art = ArtifactDir(args.dir)
    state = art.load_state()
    if args.lora == "adapters":
        from pytrain.engine.lora import save_adapters

        blob = save_adapters(state, args.output)
        say("wrote {} ({}): the LoRA adapters {}".format(args.output, size_str(len(blob)), ", ".join(
            n for n, p in state.parameters.items() if p.requires_grad)))
        return 0
    outputs = args.outputs or art.outputs(state)
    module, _ = art.open(state, with_optimizer=False)
    if args.format == "transformers.js":
        return _transformers_js(args, module, outputs)
    blob = module.export_model_for_inferencing(None, outputs, merge_adapters=args.lora == "merged")
    blob = bytes(blob)
    raw = state.properties.get(P.P_STANDARDIZER)
    baked = False
    if raw and not args.raw_inputs:
        from pytrain.generator.models import with_standardization

        data_inputs, _ = art.inputs(state)
        st = data.Standardizer.from_json(str(raw))
        blob = with_standardization(ModelProto.FromString(blob), st.mean, st.std,
                                    data_inputs[0].name)[0].SerializeToString()
        baked = True
    scaling = target_scaling(state)
    unscaled = scaling is not None and scaling.output in outputs
    if unscaled:   # the model learnt standard units; the export answers in the target's own
        blob = scaling.bake(blob)
    columns = None if args.raw_inputs else P.json_property(state, P.P_ROWS)
    blob = rows.bake(blob, columns)   # a page's table with text or missing values: its rows as typed
    write_atomic(args.output, blob)
    model = ModelProto.FromString(blob)

    def describe(vis) -> str:
        parts = []
        for v in vis:
            _, shape = value_info_type(v)
            parts.append("{} {}".format(v.name, shape_str(shape)))
        return ", ".join(parts)

    init_names = {t.name for t in model.graph.initializer}
    say("wrote {} ({})".format(args.output, size_str(len(blob))))
    say("  inputs: {}".format(describe([v for v in model.graph.input if v.name not in init_names])))
    say("  outputs: {}".format(describe(model.graph.output)))
    if baked:
        say("  includes the training run's standardisation (x - mean) / std of its inputs")
    if columns:
        say("  takes the table's rows as typed: {} (number columns as floats, NaN when missing), {} (text "
            "columns as strings)".format(", ".join(rows.numbers(columns)) or "-", ", ".join(rows.texts(columns)) or "-"))
    if unscaled:
        say("  answers in the target's units: {} * std + mean of the run's target scaling".format(scaling.output))
    if state.properties.get(P.P_CLASSES):
        say("  class ids are positions in: {}".format(", ".join(P.json_property(state, P.P_CLASSES))))
    return 0
