"""Layer 9, a face: the Python side of the web app: one :class:`Session` the browser worker drives through
:func:`call` (a method name, JSON arguments and binary blobs in; JSON and blobs out)."""
# The worker never writes long Python. Everything here uses only the public pytrain API and runs on Python 3.8
# + numpy 1.17 (Pyodide 0.17) as well as on current CPython.
from __future__ import annotations

from typing import Any

from pytrain.webapp.bridge import call
from pytrain.base.layout import ARTIFACT_FILES
from pytrain.webapp.common import LOSSES, MNIST_MAGIC, OPTIMIZERS, WebappError
from pytrain.webapp.demo import digits_artifacts, digits_model, read_mnist
from pytrain.webapp.session import Session
from pytrain.webapp import memory

memory.install()   # in the page's worker: the run's memory check counts what the tab's heap already holds

__all__ = ["ARTIFACT_FILES", "LOSSES", "MNIST_MAGIC", "OPTIMIZERS", "Session", "WebappError", "call",
           "describe_model", "digits_artifacts", "digits_model", "read_mnist"]


def __getattr__(name: str) -> Any:
    # describe_model when first asked for: inspect_model imports the generator and autodiff, which the tab's
    # start and its first training step with prebuilt artifacts do not need
    if name == "describe_model":
        from pytrain.webapp.inspect_model import describe_model
        return describe_model
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
