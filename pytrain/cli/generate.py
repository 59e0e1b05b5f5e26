"""``pytrain generate``: training artifacts from an inference ONNX model."""
from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from typing import Any, Dict, List

from pytrain.run import properties as P
from pytrain.run.artifact_dir import FILES, load_model_file, load_state
from pytrain.base.files import write_atomic
from pytrain.cli._common import CliError, count, say, shape_str, size_str, table

LOSSES = {"ce": "CrossEntropyLoss", "mse": "MSELoss", "bce": "BCEWithLogitsLoss", "l1": "L1Loss",
          "clm": "CausalLMLoss"}
_HYPER = {"momentum": ("sgd",), "nesterov": ("sgd",), "beta1": ("adam", "adamw"),
          "beta2": ("adam", "adamw"), "eps": ("adam", "adamw")}


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="make training artifacts from an ONNX model",
                       description="Write training_model.onnx, eval_model.onnx, "
                                   "optimizer_model.onnx and checkpoint into DIR.")
    p.add_argument("model", metavar="MODEL.onnx", help="inference model to train")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="artifact directory")
    p.add_argument("--loss", choices=sorted(LOSSES), default="ce",
                   help="ce: cross entropy on int64 'labels'; mse/l1/bce: float 'target' "
                        "shaped like the output; clm: a causal LM's next-token cross entropy from its "
                        "logits and its own input_ids, no label input (default: ce)")
    p.add_argument("--reduction", choices=("mean", "sum"), default="mean")
    p.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="adamw")
    p.add_argument("--momentum", type=float, help="SGD momentum (default 0)")
    p.add_argument("--nesterov", action="store_true", help="SGD Nesterov momentum")
    p.add_argument("--weight-decay", type=float,
                   help="default 0 for sgd/adam, 0.01 for adamw (decoupled)")
    p.add_argument("--beta1", type=float, help="Adam beta1 (default 0.9)")
    p.add_argument("--beta2", type=float, help="Adam beta2 (default 0.999)")
    p.add_argument("--eps", type=float, help="Adam epsilon (default 1e-8)")
    p.add_argument("--max-grad-norm", type=float, help="clip the global gradient norm")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--requires-grad", nargs="+", metavar="NAME",
                       help="train only these initializers")
    which.add_argument("--frozen", nargs="+", metavar="NAME", help="keep these initializers fixed")
    which.add_argument("--trainable-ops", type=int, metavar="N",
                       help="train only the parameters of the last N ops that have parameters")
    p.add_argument("--batchnorm", nargs="+", metavar="MODE|NAME=MODE",
                   help="how BatchNormalization runs while training: auto (default: batch statistics "
                        "where its scale/bias train, running statistics where they are frozen), train, "
                        "eval, or per node NAME=MODE (node or scale initializer name)")
    p.add_argument("--lora", metavar="RANK[:ALPHA]",
                   help="train low-rank adapters (LoRA, as peft) beside the --lora-targets weights instead of "
                        "the model's parameters; ALPHA defaults to RANK")
    p.add_argument("--lora-targets", nargs="+", metavar="PATTERN",
                   help="MatMul/Gemm node or weight names (globs, or path components as peft's "
                        "target_modules: c_attn) that get adapters")
    p.add_argument("--lora-dropout", type=float, default=0.0, help="dropout on the adapters' input (default 0)")
    p.add_argument("--outputs", nargs="+", metavar="NAME",
                   help="model outputs the eval model reports next to the loss (default: all)")
    p.add_argument("--nominal", action="store_true",
                   help="checkpoint with parameter shapes only (weights supplied at run time)")
    p.add_argument("--force", action="store_true", help="overwrite existing artifacts in DIR")
    p.set_defaults(run=run)


def _optimizer(args: argparse.Namespace):
    from pytrain.generator import artifacts

    for opt_name, allowed in _HYPER.items():
        value = getattr(args, opt_name)
        if value not in (None, False) and args.optimizer not in allowed:
            raise CliError("--{} applies to --optimizer {} only, not {}".format(
                opt_name.replace("_", "-"), " / ".join(allowed), args.optimizer))
    kw: Dict[str, Any] = {}
    if args.weight_decay is not None:
        kw["weight_decay"] = args.weight_decay
    if args.max_grad_norm is not None:
        kw["max_grad_norm"] = args.max_grad_norm
    if args.optimizer == "sgd":
        if args.momentum is not None:
            kw["momentum"] = args.momentum
        if args.nesterov:
            kw["nesterov"] = True
        return artifacts.SGD(**kw)
    if args.beta1 is not None or args.beta2 is not None:
        kw["betas"] = (0.9 if args.beta1 is None else args.beta1,
                       0.999 if args.beta2 is None else args.beta2)
    if args.eps is not None:
        kw["eps"] = args.eps
    return (artifacts.Adam if args.optimizer == "adam" else artifacts.AdamW)(**kw)


def _batchnorm(values):
    """--batchnorm: one MODE for every node, or NAME=MODE pairs (other nodes: auto)."""
    if not values:
        return "auto"
    if len(values) == 1 and "=" not in values[0]:
        return values[0]
    modes = {}
    for v in values:
        name, sep, mode = v.rpartition("=")
        if not sep or not name:
            raise CliError("--batchnorm takes one of auto/train/eval, or NAME=MODE pairs; got {!r}".format(v))
        modes[name] = mode
    return modes


def _lora(args: argparse.Namespace):
    """--lora RANK[:ALPHA] with --lora-targets: a pytrain.engine.lora.LoRA, or None."""
    from pytrain.engine.lora import LoRA

    if args.lora is None:
        if args.lora_targets:
            raise CliError("--lora-targets needs --lora RANK[:ALPHA]")
        return None
    if not args.lora_targets:
        raise CliError("--lora needs --lora-targets PATTERN... naming the MatMul/Gemm weights to adapt")
    if args.trainable_ops is not None:
        raise CliError("--lora and --trainable-ops both choose what trains; use one")
    rank, _, alpha = args.lora.partition(":")
    try:
        return LoRA(int(rank), float(alpha) if alpha else None, args.lora_targets, dropout=args.lora_dropout)
    except ValueError as e:
        raise CliError("--lora takes RANK[:ALPHA], e.g. 8:16; got {!r} ({})".format(args.lora, e)) from None


def run(args: argparse.Namespace) -> int:
    from pytrain.generator import artifacts

    out_dir = args.output
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise CliError("-o {} is a file, expected a directory".format(out_dir))
    existing = [f for f in FILES if os.path.exists(os.path.join(out_dir, f))]
    if existing and not args.force:
        raise CliError("{} already holds training artifacts ({}); pass --force to overwrite them"
                       .format(out_dir, ", ".join(existing)))
    model = load_model_file(args.model, "model")
    outputs = [o.name for o in model.graph.output]
    extra = args.outputs if args.outputs else outputs
    arts = artifacts.generate_artifacts(
        model, requires_grad=args.requires_grad, frozen_params=args.frozen,
        loss=artifacts.LossType(LOSSES[args.loss]), optimizer=_optimizer(args),
        additional_output_names=extra, nominal_checkpoint=args.nominal,
        trainable_ops=args.trainable_ops, loss_reduction=args.reduction,
        batchnorm=_batchnorm(args.batchnorm), lora=_lora(args))

    # record how the artifacts were made, so train/eval/export need no repeated options
    state = load_state(arts.checkpoint)
    state.properties[P.P_LOSS] = args.loss
    state.properties[P.P_REDUCTION] = args.reduction
    state.properties[P.P_OUTPUTS] = json.dumps(outputs)
    checkpoint = state.to_bytes(include_optimizer_state=True)

    os.makedirs(out_dir, exist_ok=True)
    blobs = (arts.training_model, arts.eval_model, arts.optimizer_model, checkpoint)
    for fname, blob in zip(FILES, blobs):
        write_atomic(os.path.join(out_dir, fname), blob)
    for line in summary_lines(args, model, state, arts, blobs):
        say(line)
    return 0


def summary_lines(args: argparse.Namespace, model, state, arts, blobs) -> List[str]:
    """One screen: files, loss/optimizer, what trains, what is frozen, the op histogram."""
    lines = ["wrote training artifacts to {}/".format(args.output.rstrip("/\\"))]
    lines += table([(f, size_str(len(b))) for f, b in zip(FILES, blobs)])
    info = getattr(arts, "summary", None) or {}
    labels = ", ".join(repr(n) for n in info.get("labels", []))
    lines.append("loss: {} ({}), {}".format(LOSSES[args.loss], args.reduction, "label input " + labels if labels else
                                            "no label input (next tokens of 'input_ids')" if args.loss == "clm"
                                            else "label input ?"))
    lines.append("optimizer: {}".format(info.get("optimizer", args.optimizer)))
    trainable = [p for p in state.parameters.values() if p.requires_grad]
    frozen = [p for p in state.parameters.values() if not p.requires_grad]

    def n_params(ps) -> int:
        total = 0
        for p in ps:
            size = 1
            for d in p.shape:
                size *= int(d)
            total += size
        return total

    lines.append("trainable: {} parameters in {} tensors".format(count(n_params(trainable)), len(trainable)))
    shown = trainable[:12]
    lines += table([(p.name, shape_str(list(p.shape)), count(n_params([p]))) for p in shown], "    ")
    if len(trainable) > len(shown):
        lines.append("    ... and {} more".format(len(trainable) - len(shown)))
    lines.append("frozen: {} parameters in {} tensors".format(count(n_params(frozen)), len(frozen)))
    not_trained = [r for r in info.get("initializers", []) if not r["trains"]]
    if not_trained:
        lines.append("not trained ({} initializers):".format(len(not_trained)))
        lines += table([(r["name"], shape_str(r["shape"]), r["why"]) for r in not_trained[:12]], "    ")
        if len(not_trained) > 12:
            lines.append("    ... and {} more".format(len(not_trained) - 12))
    bn = info.get("batchnorm") or {}
    if bn:
        lines.append("BatchNormalization while training: " + ", ".join(
            "{} {}".format(mode, "(batch statistics, running stats updated)" if mode == "train" else
                           "(running statistics, unchanged)") + " x{}".format(
                sum(1 for m in bn.values() if m == mode)) for mode in sorted(set(bn.values()))))
    lora = info.get("lora")
    if lora:
        lines.append("LoRA: rank {}, alpha {:g} on {} weights: {}".format(
            lora["rank"], lora["alpha"], len(lora["adapters"]), ", ".join(a["weight"] for a in lora["adapters"][:6])
            + (" ..." if len(lora["adapters"]) > 6 else "")))
    if args.nominal:
        lines.append("nominal checkpoint: weights are not stored; load them before training")
    hist = Counter(n.op_type for n in model.graph.node)
    lines.append("ops: " + ", ".join("{} x{}".format(op, c) for op, c in sorted(
        hist.items(), key=lambda kv: (-kv[1], kv[0]))))
    lines.append("next: pytrain train {} {}".format(args.output, "--text FILE --tokenizer tokenizer.json"
                                                      if args.loss == "clm" else "--data FILE"))
    return lines
