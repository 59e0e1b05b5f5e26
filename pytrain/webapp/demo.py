"""The demo data and models: the site's MNIST binary and the digits MLP/CNN artifacts."""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import DataError
from pytrain.webapp.common import LOSSES, MNIST_MAGIC, MNIST_PART_MAGIC, OPTIMIZERS, WebappError, core_api


def read_mnist(blob: bytes) -> Tuple[np.ndarray, np.ndarray]:
    """Parse the site's MNIST binary (see build.py) into (uint8 images [N, rows, cols], int64 labels)."""
    blob = bytes(blob)
    if len(blob) < 16 or blob[:8] != MNIST_MAGIC:
        raise DataError("the digits file is not a pytrain MNIST binary (bad magic)")
    count = int.from_bytes(blob[8:12], "little")
    rows = int.from_bytes(blob[12:14], "little")
    cols = int.from_bytes(blob[14:16], "little")
    need = 16 + count + count * rows * cols
    if len(blob) < need:
        raise DataError("the digits file is truncated: %d bytes, expected %d" % (len(blob), need))
    labels = np.frombuffer(blob, dtype=np.uint8, count=count, offset=16).astype(np.int64)
    pixels = np.frombuffer(blob, dtype=np.uint8, count=count * rows * cols, offset=16 + count)
    return pixels.reshape(count, rows, cols), labels


def mnist_part(blob: bytes, indices: Sequence[int]) -> bytes:
    """The first part of the site's digits (build.py writes it beside the whole file, which the page
    fetches after it): every label, and the pixels of the samples ``indices`` only, the ones the
    page's default run draws first, so its first steps need not wait for the whole file.

    Layout (little endian): magic b"PTMNPART", uint32 count, uint16 rows, uint16 cols, uint32 k,
    count uint8 labels, k uint32 sample indices, k*rows*cols uint8 pixels.
    """
    images, labels = read_mnist(blob)
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    if len(idx) and (idx.min() < 0 or idx.max() >= len(labels) or len(np.unique(idx)) != len(idx)):
        raise DataError("the digits' first part needs distinct sample indices below %d" % len(labels))
    head = bytes(blob[8:16]) + len(idx).to_bytes(4, "little")
    return (MNIST_PART_MAGIC + head + labels.astype(np.uint8).tobytes() + idx.astype("<u4").tobytes()
            + np.ascontiguousarray(images[idx]).tobytes())


def read_mnist_part(blob: bytes) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parse :func:`mnist_part`'s bytes: (uint8 images [k, rows, cols] of the samples ``indices``,
    int64 labels [count] of every sample, int64 indices [k])."""
    blob = bytes(blob)
    if len(blob) < 20 or blob[:8] != MNIST_PART_MAGIC:
        raise DataError("the digits' first part is not a pytrain MNIST part (bad magic)")
    count = int.from_bytes(blob[8:12], "little")
    rows = int.from_bytes(blob[12:14], "little")
    cols = int.from_bytes(blob[14:16], "little")
    k = int.from_bytes(blob[16:20], "little")
    if len(blob) != 20 + count + 4 * k + k * rows * cols:
        raise DataError("the digits' first part is truncated or too long: %d bytes, expected %d"
                        % (len(blob), 20 + count + 4 * k + k * rows * cols))
    labels = np.frombuffer(blob, dtype=np.uint8, count=count, offset=20).astype(np.int64)
    idx = np.frombuffer(blob, dtype="<u4", count=k, offset=20 + count).astype(np.int64)
    if k and (idx.max() >= count or len(np.unique(idx)) != k):
        raise DataError("the digits' first part names samples that are not in the file")
    pixels = np.frombuffer(blob, dtype=np.uint8, count=k * rows * cols, offset=20 + count + 4 * k)
    return pixels.reshape(k, rows, cols), labels, idx


def digits_model(kind: str = "mlp", seed: int = 0) -> Any:
    """The inference model of the digits demo: ``mlp`` (784-128-10) or ``cnn`` (LeNet-like)."""
    _, models, _ = core_api()
    if kind == "mlp":
        return models.mlp(input_size=784, hidden_sizes=[128], output_size=10, activation="relu", seed=seed)
    if kind == "cnn":
        return models.cnn(input_shape=(1, 28, 28), num_classes=10, seed=seed)
    raise WebappError("unknown digits model %r: expected 'mlp' or 'cnn'" % kind)


class Trains(NamedTuple):
    """What trains and what the eval model reports, for :func:`generate_bytes`: ``requires_grad`` (parameter
    names) or ``frozen`` ones, ``output_name`` (the eval model's extra output), ``batchnorm`` (see
    generate_artifacts), ``trainable_ops`` (only the last that many layers holding weights train: "Last N
    layers"), ``lora`` (a :class:`pytrain.engine.lora.LoRA`: only its adapters train)."""
    requires_grad: Optional[Sequence[str]] = None
    frozen: Optional[Sequence[str]] = None
    output_name: Optional[str] = None
    batchnorm: Any = "auto"
    trainable_ops: Optional[int] = None
    lora: Any = None


def generate_bytes(model: Any, loss: str, optimizer: str, **trains: Any) -> Dict[str, bytes]:
    """The page's four artifacts (by role) for ``model`` with one of its loss names (or a loss Block) and
    optimizer names; ``trains``: the fields of :class:`Trains` chosen (the others keep their defaults)."""
    requires_grad, frozen, output_name, batchnorm, trainable_ops, lora = Trains(**trains)
    artifacts, _, _ = core_api()
    if isinstance(loss, str) and loss not in LOSSES:
        raise WebappError("unknown loss %r: expected one of %s" % (loss, ", ".join(LOSSES)))
    if optimizer not in OPTIMIZERS:
        raise WebappError("unknown optimizer %r: expected one of %s" % (optimizer, ", ".join(OPTIMIZERS)))
    arts = artifacts.generate_artifacts(
        model, requires_grad=list(requires_grad) if requires_grad is not None else None,
        frozen_params=list(frozen) if frozen else None,
        loss=getattr(artifacts.LossType, loss) if isinstance(loss, str) else loss,
        optimizer=getattr(artifacts.OptimType, optimizer), lora=lora,
        additional_output_names=[output_name] if output_name else None, batchnorm=batchnorm,
        # a loss Block reads the output the page trains on, not every output (a with-past LM's present.*)
        loss_input_names=[output_name] if output_name and not isinstance(loss, str) else None,
        trainable_ops=int(trainable_ops) if trainable_ops is not None else None)
    return {"training": bytes(arts.training_model), "eval": bytes(arts.eval_model),
            "optimizer": bytes(arts.optimizer_model), "checkpoint": bytes(arts.checkpoint)}


def digits_artifacts(kind: str = "mlp", optimizer: str = "AdamW") -> Dict[str, bytes]:
    """Training artifacts of the digits demo (build.py ships these; the page can also build them)."""
    return generate_bytes(digits_model(kind), "CrossEntropyLoss", optimizer, output_name="output")


