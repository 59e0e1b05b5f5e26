"""Layer 0, the base. The exceptions pytrain raises. Every message names the thing that is wrong and what was expected."""
from __future__ import annotations

from typing import Optional


class PytrainError(Exception):
    """Base class of every error pytrain raises on purpose."""


class ModelFormatError(PytrainError, ValueError):
    """An ONNX model (file or bytes) is malformed, truncated or unsupported in form (e.g. external data)."""


class UnsupportedOpError(PytrainError):
    """A node uses an operator pytrain has no kernel or gradient rule for."""


class GraphError(PytrainError, ValueError):
    """The graph is inconsistent: a tensor is used but never produced, a cycle, a bad attribute."""


class InputError(PytrainError, ValueError):
    """A value fed to a model has the wrong name, dtype or shape, or a required input is missing."""


class ArtifactError(PytrainError, ValueError):
    """Bad arguments to generate_artifacts (requires_grad naming a non-initializer, overlapping lists...)."""


class CheckpointError(PytrainError, ValueError):
    """A checkpoint is corrupted, truncated, of an unknown version, or does not match the model."""


class KernelError(PytrainError, RuntimeError):
    """A kernel failed while running a node; the message names the node, its op and its input shapes."""


class DataError(PytrainError, ValueError):
    """Training data is malformed: a non-numeric CSV cell, a missing label column, a shape mismatch."""


class ExportError(PytrainError, ValueError):
    """``pytrain.torch_export`` wrote a model that lost or renamed a PyTorch parameter (the message names them)."""


class LimitError(PytrainError, MemoryError):
    """A tensor, archive member or file would exceed one of pytrain's size limits (:mod:`pytrain.limits`);
    the message says which limit, the size asked for, and how to raise the limit."""


class DivergenceError(PytrainError, FloatingPointError):
    """A training step produced a non-finite loss or gradient; the step was refused before any update,
    so the parameters and optimizer state are those of the last good step. ``reason``: what diverged, in
    a few words (the message without its advice); ``loss``: the refused step's loss when it was finite."""

    def __init__(self, message: str, reason: Optional[str] = None, loss: Optional[float] = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason
        self.loss = loss


class SaveError(PytrainError, OSError):
    """A file could not be written (a directory in the way, no permission, disk full); names the path asked
    for. The previous file at that path, if any, is left as it was."""
