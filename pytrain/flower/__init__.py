"""Layer 9, a face: federated learning on Flower: a pure-Python pytrain node (no ``flwr``, no ``protobuf``) joining
a SuperLink through its Fleet API, and :func:`client_app`, a Flower ``ClientApp`` for devices that run flwr."""
# Pure Python (3.8+, numpy 1.17+). Natively, requests are signed with ``cryptography`` (P-256 ECDSA-SHA256)
# and sent with urllib; both are pluggable.
#
#     from pytrain.flower import FlowerNode, PytrainTrainer
#     node = FlowerNode("http://127.0.0.1:9092", PytrainTrainer(module, optimizer, x, y))
#     node.run()            # join, answer train/evaluate messages, heartbeat, leave
from __future__ import annotations

from pytrain.flower.node import FlowerNode, Reply
from pytrain.flower.objects import ArrayRecord, ConfigRecord, MetricRecord, ObjectError
from pytrain.flower.privacy import LocalDp
from pytrain.flower.trainer import PytrainTrainer
from pytrain.flower.transport import EcdsaSigner, FederationError, HttpTransport

__all__ = ["FlowerNode", "Reply", "PytrainTrainer", "EcdsaSigner", "FederationError", "ObjectError", "LocalDp",
           "ArrayRecord", "ConfigRecord", "MetricRecord", "HttpTransport", "client_app"]


def client_app(artifacts, data, **kwargs):
    """A Flower ``ClientApp`` training pytrain ``artifacts`` on ``data`` (imports flwr only here).

    See :mod:`pytrain.flower.clientapp`."""
    from pytrain.flower.clientapp import client_app as make
    return make(artifacts, data, **kwargs)
