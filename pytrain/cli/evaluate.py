"""``pytrain eval``: loss and metric of the trained model on a dataset."""
from __future__ import annotations

import argparse
import json
from typing import Dict

import numpy as np

from pytrain import data
from pytrain.cli._dataset import add_data_options
from pytrain.cli._common import CliError, say
from pytrain.base.files import write_atomic
from pytrain.run import properties as P
from pytrain.run.artifact_dir import ArtifactDir
from pytrain.run.dataset import DataRequest, fit_to_model, load
from pytrain.run.evaluate import METRICS, check_metric, default_metric, evaluate_dataset
from pytrain.run.scaling import TargetScaledModule, target_scaling


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="evaluate the model in an artifact directory on a dataset",
                       description="Loss and metric of DIR's current weights on --data.")
    p.add_argument("dir", metavar="DIR", help="artifact directory")
    add_data_options(p)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--metric", choices=METRICS,
                   help="default: accuracy for ce/bce, mae otherwise")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--save-outputs", metavar="FILE.npy",
                   help="save the model's outputs (e.g. logits) for every sample")
    p.set_defaults(run=run)


def prepared_data(args: argparse.Namespace, art: ArtifactDir, state) -> data.Dataset:
    """--data read, checked and standardised exactly as training did."""
    data_inputs, label_spec = art.inputs(state)
    if len(data_inputs) != 1:
        raise CliError("the CLI handles models with one data input; this one takes {}".format(
            ", ".join(repr(s.name) for s in data_inputs)))
    task = art.task(state)
    outs = art.eval_outputs()
    num_classes = None
    if task == "classification" and outs and outs[0].shape and isinstance(outs[0].shape[-1], int):
        num_classes = outs[0].shape[-1]
    ds = load(DataRequest.of(args), data_inputs[0], task, P.json_property(state, P.P_CLASSES))
    ds = fit_to_model(ds, data_inputs[0], label_spec, task, num_classes)
    raw = state.properties.get(P.P_STANDARDIZER)
    if raw:
        std = data.Standardizer.from_json(str(raw))
        ds = data.Dataset(std.transform(ds.x), ds.y, ds.classes, ds.feature_names, ds.task, ds.source)
    return ds


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise CliError("--batch-size must be at least 1, got {}".format(args.batch_size))
    if args.save_outputs and not args.save_outputs.endswith(".npy"):
        raise CliError("--save-outputs {}: use a .npy file name".format(args.save_outputs))
    art = ArtifactDir(args.dir)
    state = art.load_state()
    loss_kind = art.loss_kind(state)
    metric = check_metric(args.metric or default_metric(loss_kind), loss_kind)
    ds = prepared_data(args, art, state)
    module, _ = art.open(state, with_optimizer=False)
    scaling = target_scaling(state)
    if scaling is not None:   # loss on the scaled targets the run trains on, outputs in the target's units
        module = TargetScaledModule(module, scaling)
    reduction = str(state.properties.get(P.P_REDUCTION, "mean"))
    result = evaluate_dataset(module, ds, args.batch_size, loss_kind, reduction, metric,
                              keep_outputs=bool(args.save_outputs))
    outputs = result.pop("outputs", None)
    if args.save_outputs:
        if outputs is None:
            raise CliError("the eval model reports only the loss, so there are no outputs to save "
                           "(generate the artifacts with --outputs)")
        import io

        buf = io.BytesIO()
        np.save(buf, np.asarray(outputs), allow_pickle=False)
        write_atomic(args.save_outputs, buf.getvalue())
    if args.json:
        say(json.dumps(result, sort_keys=True))
    else:
        say("{} samples  {}".format(result["samples"], describe(result)))
    return 0


def describe(result: Dict[str, object], prefix: str = "") -> str:
    """'loss 0.1234  accuracy 97.50%' style text."""
    parts = ["{}loss {:.4f}".format(prefix, result["loss"])]
    if "accuracy" in result:
        parts.append("{}accuracy {:.2f}%".format(prefix, 100.0 * float(result["accuracy"])))  # type: ignore[arg-type]
    if "mae" in result:
        parts.append("{}mae {:.4f}".format(prefix, result["mae"]))
    if "perplexity" in result:
        parts.append("{}perplexity {:.2f}".format(prefix, result["perplexity"]))
    return "  ".join(parts)
