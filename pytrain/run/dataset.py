"""The data of a run, fitted to its model: files read with the options the CLI takes, checked
against the training model's data and label inputs, split, standardised and target-scaled as the
run trains on them. The CLI trains on it, and the page's run file checks with it that
``pytrain train --resume`` will see its table as the page does."""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from pytrain import data
from pytrain.errors import DataError, PytrainError
from pytrain.run.artifact_dir import ArtifactDir, TensorSpec
from pytrain.run.properties import P_CLASSES, P_STANDARDIZER, P_TARGET_SCALING, json_property
from pytrain.run.scaling import TargetScaling, target_scaling


class RunError(PytrainError):
    """A run that cannot go on as asked (data that does not fit the run, a resume that would differ)."""


class DataRequest(NamedTuple):
    """Where a run's data comes from and how to read it (the CLI's data options)."""
    data: Any                                   # a path, or bytes (a CSV table)
    label: Optional[str] = None                 # label column of a CSV file
    expected: Optional[str] = None              # raw float32 expected outputs (onert_train format)
    input_shape: Optional[Sequence[int]] = None  # one sample's shape in a raw input file
    image_size: Optional[Sequence[int]] = None  # resize images to H x W
    validation: Optional[str] = None            # separate validation data
    validation_expected: Optional[str] = None   # raw expected file of ``validation``
    resume: bool = False                        # continue the run recorded in the checkpoint

    @classmethod
    def of(cls, args: Any) -> "DataRequest":
        """The request an argparse namespace makes (options it lacks take their defaults)."""
        return cls(**{k: getattr(args, k, d) for k, d in cls._field_defaults.items()}, data=args.data)

    def read_as(self, path: Any, expected: Optional[str]) -> "DataRequest":
        """The same options for another file (e.g. the validation data)."""
        return self._replace(data=path, expected=expected)


class PreparedData(NamedTuple):
    """A run's data as the model trains on it (see :func:`prepare_data`)."""
    train: data.Dataset
    val: Optional[data.Dataset]
    standardizer: Optional[data.Standardizer]
    scaling: Optional[TargetScaling]


def _known(dims: Optional[Sequence[object]]) -> bool:
    return dims is not None and all(isinstance(d, int) and d > 0 for d in dims)


def load(req: DataRequest, inp: TensorSpec, task: str, classes: Optional[List[str]] = None) -> data.Dataset:
    """Read ``req.data`` with ``req``'s format options for a model whose data input is ``inp``."""
    sample = inp.sample_shape()
    expected = req.expected
    if expected is not None:
        shape = req.input_shape
        if shape is None:
            if not _known(sample):
                raise DataError("give --input-shape: the model input {!r} has no fixed sample shape "
                                "({})".format(inp.name, sample))
            shape = sample
        return data.load_raw(req.data, expected, shape, task=task)
    size = req.image_size
    color = "L"
    if isinstance(req.data, str) and os.path.isdir(req.data) and _known(sample) and len(sample) == 3:
        if size is None:
            size = sample[1:]
        color = "RGB" if sample[0] == 3 else "L"
    return data.load_dataset(req.data, label=req.label, task=task,
                             classes=classes, image_size=size, color=color)


def fit_to_model(ds: data.Dataset, inp: TensorSpec, label: TensorSpec, task: str,
                 num_classes: Optional[int]) -> data.Dataset:
    """Reshape ``ds`` to the model's input/label shapes or raise DataError saying why it cannot."""
    x = ds.x
    sample = inp.sample_shape()
    if sample is not None:
        if len(sample) == x.ndim - 1 and all(
                not isinstance(d, int) or d == s for d, s in zip(sample, x.shape[1:])):
            pass
        elif _known(sample) and int(np.prod(sample)) == int(np.prod(x.shape[1:])):
            x = x.reshape([len(x)] + list(sample))  # e.g. 8x8 images for a 64-input MLP
        else:
            raise DataError("{}: samples have shape {} ({} values) but model input {!r} takes {}"
                            .format(ds.source, list(x.shape[1:]), int(np.prod(x.shape[1:])),
                                    inp.name, _shape(inp.shape)))
    y = ds.y
    if task == "classification":
        if y.ndim != 1:
            raise DataError("{}: class labels must be one id per sample, got shape {}".format(
                ds.source, list(y.shape)))
        if num_classes is not None and len(y) and int(y.max()) >= num_classes:
            i = int(np.argmax(y))
            raise DataError("{}: sample {} has class id {} but the model has {} outputs (ids 0..{})"
                            .format(ds.source, i, int(y[i]), num_classes, num_classes - 1))
    else:
        target = label.sample_shape()
        y = y.astype(np.float32)
        if target is not None and _known(target):
            if int(np.prod(target)) != int(np.prod(y.shape[1:])):
                raise DataError("{}: targets have shape {} but the model's {!r} takes {}".format(
                    ds.source, list(y.shape[1:]), label.name, _shape(label.shape)))
            y = y.reshape([len(y)] + list(target))
    out = data.Dataset(x, y, ds.classes, ds.feature_names, ds.task, ds.source)
    return out


def _shape(shape: Optional[Sequence[object]]) -> str:
    if shape is None:
        return "any shape"
    return "[" + ", ".join("N" if i == 0 and not isinstance(d, int) else
                           ("?" if d is None else str(d)) for i, d in enumerate(shape)) + "]"


def digest(*arrays: np.ndarray) -> str:
    """A short hash of the arrays' dtypes, shapes and bytes: what a resumed run's data must match."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def prepare_data(req: DataRequest, art: ArtifactDir, state: Any, settings: Dict[str, Any], inp: TensorSpec,
                 label_spec: TensorSpec, task: str) -> PreparedData:
    """(train set, validation set or None, standardizer or None, target scaling or None) fitted
    to the model: the training set as the model trains on it (standardised features, targets in
    the units of the run's target scaling), the validation set with standardised features and raw
    targets (it is evaluated through :class:`pytrain.run.scaling.TargetScaledModule`).

    ``req.data`` may be bytes (a CSV table): the web app's run file checks with this very
    function that ``pytrain train --resume`` will see its data as the page does.
    """
    out_specs = art.eval_outputs()
    num_classes = None
    if task == "classification" and out_specs and out_specs[0].shape:
        last = out_specs[0].shape[-1]
        num_classes = last if isinstance(last, int) and last > 0 else None
    classes = json_property(state, P_CLASSES) if req.resume else None
    full = fit_to_model(load(req, inp, task, classes), inp,
                                 label_spec, task, num_classes)
    if task == "classification" and len(full) and len(np.unique(full.y)) < 2:
        only = full.y[0] if full.classes is None else full.classes[int(full.y[0])]
        raise RunError("{} holds one class only ({!r}, {} samples): a classifier learns nothing from it; "
                       "add samples of other classes, or train a regression (--task regression)"
                       .format(full.source or req.data, only, len(full)))
    val: Optional[data.Dataset] = None
    train = full
    if settings["validation_split"] is not None:
        tr, va = data.split_indices(len(full), settings["validation_split"], settings["seed"],
                                    stratify=full.y if task == "classification" else None)
        train, val = full.subset(tr), full.subset(va)
    elif req.validation is not None:
        val = fit_to_model(load(req.read_as(req.validation, req.validation_expected), inp, task, full.classes),
                           inp, label_spec, task, num_classes)
    elif req.validation_expected is not None:
        raise RunError("--validation-expected needs --validation FILE")
    std = None
    if settings["standardize"]:
        if req.resume and state.properties.get(P_STANDARDIZER):
            std = data.Standardizer.from_json(str(state.properties[P_STANDARDIZER]))
        else:
            std = data.Standardizer.fit(train.x)
        train = data.Dataset(std.transform(train.x), train.y, train.classes, train.feature_names,
                             train.task, train.source)
        if val is not None:
            val = data.Dataset(std.transform(val.x), val.y, val.classes, val.feature_names,
                               val.task, val.source)
    # a property of the model (the units its output learnt), so new runs on its weights keep it too
    scaling = target_scaling(state)
    if scaling is not None:
        if task != "regression":
            raise RunError("the checkpoint scales regression targets ({}) but the model's {} loss trains "
                           "classes".format(P_TARGET_SCALING, art.loss_kind(state)))
        train = data.Dataset(train.x, scaling.scale(train.y), train.classes, train.feature_names, train.task,
                             train.source)
    return PreparedData(train, val, std, scaling)
