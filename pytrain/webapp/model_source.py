"""Where the page's model comes from: artifacts and a model description (``info``: origin, input
and output names, loss, optimizer, sample shape, scaling...) for the digits demo, an MLP sized for
a table, a small CNN, an uploaded inference model or ready-made artifacts, and a new optimizer
model for the same parameters. The :class:`~pytrain.webapp.session.Session` takes them in."""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pytrain import data as _data
from pytrain.errors import DataError, ModelFormatError
from pytrain.base.layout import ARTIFACT_FILES
from pytrain.run import scaling
from pytrain.webapp.common import OPTIMIZERS, WebappError, core_api, load_upload
from pytrain.webapp.demo import generate_bytes, digits_artifacts
from pytrain.webapp.memory import check_generation
from pytrain.webapp.run_options import TAB_RUN

#: (artifacts by role, model description)
Model = Tuple[Dict[str, bytes], Dict[str, Any]]


def digits(kind: str = "mlp", optimizer: str = TAB_RUN.optimizer, prebuilt: Optional[Dict[str, bytes]] = None) -> Model:
    """The digits MLP/CNN: the site's prebuilt artifacts when given, else generated here."""
    arts = prebuilt if prebuilt and optimizer == "AdamW" else digits_artifacts(kind, optimizer)
    info = {"origin": "digits", "kind": kind, "input": "input", "output": "output",
            "loss": "CrossEntropyLoss", "optimizer": optimizer,
            "sample_shape": [784] if kind == "mlp" else [1, 28, 28]}
    return arts, info


def mlp(d: Dict[str, Any], hidden: Sequence[int] = TAB_RUN.hidden, activation: str = "relu",
        optimizer: str = TAB_RUN.optimizer, standardize: bool = True, seed: int = 0) -> Model:
    """An MLP sized for the loaded table ``d`` (classification: cross-entropy; regression: MSE)."""
    _, models, _ = core_api()
    n_in = int(np.prod(d["train_x"].shape[1:]))
    classification = d["task"] == "classification"
    n_out = d["num_classes"] if classification else (1 if d["train_y"].ndim == 1 else d["train_y"].shape[1])
    if classification and n_out < 2:
        raise DataError("classification needs at least 2 classes in the label column, found %d" % n_out)
    model = models.mlp(input_size=n_in, hidden_sizes=[int(h) for h in hidden], output_size=int(n_out),
                       activation=activation, seed=int(seed))
    frozen = None
    stats = None
    if standardize:
        st = _data.Standardizer.fit(d["train_x"].reshape(len(d["train_x"]), -1))
        # baked into the graph, so the exported model takes raw rows like the uploaded CSV
        model, frozen = models.with_standardization(model, st.mean, st.std)
        stats = st.to_dict()
    loss = "CrossEntropyLoss" if classification else "MSELoss"
    arts = generate_bytes(model, loss, optimizer, frozen=frozen, output_name="output")
    info = {"origin": "mlp", "hidden": [int(h) for h in hidden], "activation": activation,
            "input": "input", "output": "output", "loss": loss, "optimizer": optimizer,
            "sample_shape": [n_in], "standardizer": stats,
            # regression targets are learnt in standard units; the export answers in the column's
            "scaling": scaling.fit(None, d["train_y"]) if not classification else None}
    return arts, info


def cnn(d: Dict[str, Any], optimizer: str = TAB_RUN.optimizer, seed: int = 0) -> Model:
    """A small CNN from scratch for the loaded images ``d``."""
    _, models, _ = core_api()
    shape = [int(s) for s in d["train_x"].shape[1:]]
    if len(shape) != 3 or d["task"] != "classification" or d["num_classes"] < 2:
        raise DataError("a CNN needs images [C, H, W] of at least 2 classes; got samples of shape %s, %d class(es)"
                        % (shape, d["num_classes"]))
    model = models.cnn(input_shape=shape, num_classes=int(d["num_classes"]), seed=int(seed))
    arts = generate_bytes(model, "CrossEntropyLoss", optimizer, output_name="output")
    info = {"origin": "cnn", "input": "input", "output": "output", "loss": "CrossEntropyLoss",
            "optimizer": optimizer, "sample_shape": shape}
    return arts, info


class GenerateOptions(NamedTuple):
    """The page's choices for an uploaded inference model (``Session.generate``): its loss and optimizer; what
    trains (``requires_grad``: parameter names; ``trainable_ops``: only the last that many layers holding weights;
    ``lora``: {rank, alpha?, targets?}, LoRA adapters instead, by default on attention's weights); the output the
    loss reads; the file's ``name``; ``batchnorm``: 'auto' (BatchNorm whose scale/bias train uses batch
    statistics, a frozen one its running statistics), 'train', 'eval' or {node or scale name: mode};
    ``extra_files``: {file name: bytes} uploaded with it (its ``.onnx.data`` external data)."""
    loss: str = "CrossEntropyLoss"
    optimizer: str = TAB_RUN.optimizer
    requires_grad: Optional[Sequence[str]] = None
    output: Optional[str] = None
    name: str = "the uploaded model"
    batchnorm: Any = "auto"
    extra_files: Optional[Dict[str, bytes]] = None
    trainable_ops: Optional[int] = None
    lora: Optional[Dict[str, Any]] = None


def upload(blob: bytes, options: GenerateOptions) -> Model:
    """Artifacts generated for an uploaded inference model (see ``Session.generate``)."""
    loss, optimizer, requires_grad, output, name, batchnorm, extra_files, trainable_ops, lora = options
    from pytrain.webapp.inspect_model import describe_model, refuse_unsupported
    check_generation(blob, name, extra_files)
    model = load_upload(blob, name, extra_files)
    refuse_unsupported(model, name)
    desc = describe_model(model)
    out = output or desc["outputs"][0]["name"]
    spec = lora_spec(model, lora)
    arts = generate_bytes(model, loss, optimizer, requires_grad=requires_grad, output_name=out, batchnorm=batchnorm,
                          trainable_ops=trainable_ops, lora=spec)
    shape = desc["inputs"][0]["shape"][1:]
    info = {"origin": "upload", "input": desc["inputs"][0]["name"], "output": out, "loss": loss,
            "optimizer": optimizer, "batchnorm": batchnorm, "trainable_ops": trainable_ops,
            "lora": lora_info(model, spec),
            "sample_shape": [int(s) if isinstance(s, int) and s > 0 else None for s in shape]}
    return arts, info


def lora_spec(model: Any, lora: Optional[Dict[str, Any]], seed: int = 0) -> Any:
    """The page's LoRA setting ({rank, alpha?, targets?, dropout?}; None or rank 0: off) as a
    :class:`pytrain.engine.lora.LoRA`, its targets by default the attention's weights (:func:`pytrain.engine.lora.default_targets`)."""
    from pytrain.engine.lora import LoRA, default_targets

    if not lora or not int(lora.get("rank") or 0):
        return None
    targets = lora.get("targets") or default_targets(model)
    return LoRA(int(lora["rank"]), lora.get("alpha"), targets, float(lora.get("dropout") or 0.0), int(seed))


def lora_info(model: Any, spec: Any) -> Optional[Dict[str, Any]]:
    """What the page shows of LoRA: rank, alpha, the target patterns and the weights they chose."""
    from pytrain.engine.lora import selected_weights

    return None if spec is None else dict(spec.describe(), weights=selected_weights(model, spec))


def ready_made(training: bytes, eval: bytes, optimizer: bytes, checkpoint: bytes,
               output: Optional[str] = None) -> Model:
    """Ready-made artifacts (e.g. from ORT's or pytrain's generate_artifacts), described."""
    from pytrain.webapp.inspect_model import describe_model, label_consumer_output
    names = {"training": training, "eval": eval, "optimizer": optimizer, "checkpoint": checkpoint}
    models_ = {}
    for key in ("training", "eval", "optimizer"):
        models_[key] = load_upload(names[key], ARTIFACT_FILES[key])
    tdesc = describe_model(models_["training"])
    if len(tdesc["inputs"]) < 2:
        raise ModelFormatError("the training model should take the data and the labels as its "
                               "first two inputs; it has %d input(s)" % len(tdesc["inputs"]))
    data_in, label_in = tdesc["inputs"][0], tdesc["inputs"][1]
    eval_outs = [o["name"] for o in describe_model(models_["eval"])["outputs"]]
    out = output or (eval_outs[1] if len(eval_outs) > 1 else
                     label_consumer_output(models_["training"], label_in["name"]))
    loss = "CrossEntropyLoss" if label_in["elem_type"] == 7 else "MSELoss"  # 7 = INT64
    info = {"origin": "artifacts", "input": data_in["name"], "output": out, "loss": loss,
            "optimizer": "as uploaded",
            "sample_shape": [s if isinstance(s, int) and s > 0 else None for s in data_in["shape"][1:]]}
    return {k: bytes(v) for k, v in names.items()}, info


def optimizer_model(optimizer: str, params: Sequence[str], state: Any, current: bytes) -> bytes:
    """A new optimizer model of kind ``optimizer`` updating ``params`` (those the current optimizer
    updates), in the opset of the ``current`` one."""
    from pytrain.base import dtypes
    from pytrain.generator.optim import OptimType, build_optimizer_model, resolve
    from pytrain.proto import opset_version
    from pytrain.engine.validate import load_model

    if optimizer not in OPTIMIZERS:
        raise WebappError("unknown optimizer %r: expected one of %s" % (optimizer, ", ".join(OPTIMIZERS)))
    params = list(params)
    ps = state.parameters
    opset = opset_version(load_model(current, "optimizer model"))
    new = build_optimizer_model(resolve(getattr(OptimType, optimizer)), params,
                                {p: list(ps[p].shape) for p in params},
                                {p: dtypes.from_numpy(ps[p].dtype) for p in params}, opset)
    return new.SerializeToString()
