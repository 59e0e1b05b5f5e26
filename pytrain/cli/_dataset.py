"""Loading data for a model: the file-format options shared by ``train`` and ``eval``, and the
checks that the data fits the training model's data and label inputs."""
from __future__ import annotations

import argparse
import os
from typing import List, Optional, Sequence

import numpy as np

from pytrain import data
from pytrain.cli._artifacts import TensorSpec
from pytrain.errors import DataError


def add_data_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--data and the options that say how to read it."""
    p.add_argument("--data", required=required, metavar="FILE",
                   help=".npz (arrays x, y), .csv (needs --label), an image folder "
                        "(one sub-folder per class), or a raw float32 input file (with --expected)")
    p.add_argument("--label", metavar="COL", help="label column of a CSV file")
    p.add_argument("--expected", metavar="FILE",
                   help="raw little-endian float32 expected outputs (onert_train format)")
    p.add_argument("--input-shape", type=int, nargs="+", metavar="D",
                   help="one sample's shape in a raw input file (default: the model input's)")
    p.add_argument("--image-size", type=int, nargs=2, metavar=("H", "W"),
                   help="resize images to H x W (default: the model input's)")


def _known(dims: Optional[Sequence[object]]) -> bool:
    return dims is not None and all(isinstance(d, int) and d > 0 for d in dims)


def load(path: str, args: argparse.Namespace, inp: TensorSpec, task: str,
         classes: Optional[List[str]] = None, label: Optional[str] = None) -> data.Dataset:
    """Read ``path`` with the format options in ``args`` for a model whose data input is ``inp``."""
    sample = inp.sample_shape()
    expected = getattr(args, "expected", None)
    if expected is not None:
        shape = args.input_shape
        if shape is None:
            if not _known(sample):
                raise DataError("give --input-shape: the model input {!r} has no fixed sample shape "
                                "({})".format(inp.name, sample))
            shape = sample
        return data.load_raw(path, expected, shape, task=task)
    size = getattr(args, "image_size", None)
    color = "L"
    if os.path.isdir(path) and _known(sample) and len(sample) == 3:
        if size is None:
            size = sample[1:]
        color = "RGB" if sample[0] == 3 else "L"
    return data.load_dataset(path, label=label if label is not None else args.label, task=task,
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
