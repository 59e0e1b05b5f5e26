"""A :class:`FlowerNode` driven from outside, one request at a time: for a browser worker.

Python in Pyodide cannot wait on a JavaScript promise, so the node cannot call ``fetch`` itself.
Instead JavaScript asks for the next step, performs it and hands the answer back:

    driver = StepDriver(node, public_key_pem)      # the key stays in WebCrypto; only its PEM is here
    step = driver.next()                           # {"kind": "http", "route", "body", "timeout"} ...
    step = driver.next(status=200, body=b"...")    # ... until {"kind": "done"} or {"kind": "failed"}

``http``: POST ``body`` to ``<fleet url>/v1/fleet/<route>``, signed (the headers of
:func:`pytrain.flower.transport.signed_headers`), then ``next(status=, body=)`` with at most
``max_bytes + 1`` bytes of the answer (one more tells the node it was too large), or
``next(error="why")`` when the request could not be sent. ``sleep``: wait ``seconds``, then
``next()``. ``crypto``: a SecAgg+ public-key operation (``op``, ``args``: see
:class:`pytrain.flower.secagg_crypto.CryptoStep`), asked only of a driver that performs them
(``StepDriver(..., crypto_outside=True)``; a tab's worker, with WebCrypto): ``next(result=...)``,
or ``next(crypto_error="why")`` when it fails (a token that does not decrypt, a key that is not
P-384). Every answer carries ``events``: what the node did since the last one (joined, received,
answered with the parameter names and sizes it sent, refused, left). All protocol logic stays in
:class:`FlowerNode`; this only moves bytes and does the crypto it is asked to.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from pytrain.errors import PytrainError
from pytrain.flower.fleet import HttpStep, SleepStep, Steps
from pytrain.flower.node import FlowerNode
from pytrain.flower.secagg_crypto import CryptoStep, SecAggError
from pytrain.flower.transport import MAX_RESPONSE, FederationError


class PemSigner:
    """Only the public key: whoever drives the steps signs (WebCrypto in the browser)."""

    def __init__(self, public_key_pem: bytes) -> None:
        if not public_key_pem.startswith(b"-----BEGIN PUBLIC KEY-----"):
            raise FederationError("the node's public key must be a PEM SubjectPublicKeyInfo block")
        self.public_key_pem = public_key_pem

    def sign(self, data: bytes) -> bytes:
        raise FederationError("this node's requests are signed by its driver, not in Python")


class StepDriver:
    """Runs ``node`` (join, answer messages, heartbeat, leave) for an external event loop."""

    def __init__(self, node: FlowerNode, node_id: Optional[int] = None, crypto_outside: bool = False) -> None:
        self.node = node
        node.crypto_outside = crypto_outside
        node.events = []
        self._stop = False
        self._finished = False
        self._gen: Steps = self._steps(node_id)

    def _steps(self, node_id: Optional[int]) -> Steps:
        yield from self.node.join_steps(node_id)
        answered = yield from self.node.run_steps(stop=lambda: self._stop)
        return answered

    def stop(self) -> None:
        """Leave at the next step boundary (the node deactivates and unregisters first)."""
        self._stop = True

    @property
    def finished(self) -> bool:
        return self._finished

    def next(self, status: Optional[int] = None, body: Optional[bytes] = None,
             error: Optional[str] = None, result: Any = None, crypto_error: Optional[str] = None) -> Dict[str, Any]:
        """Hand in the answer to the previous step and get the next one."""
        if self._finished:
            return self._out({"kind": "done"})
        try:
            if error is not None:
                step = self._gen.throw(FederationError("the request could not be sent: %s" % error))
            elif crypto_error is not None:
                step = self._gen.throw(SecAggError(crypto_error))
            elif result is not None:
                step = self._gen.send(result)
            elif status is None:
                step = self._gen.send(None)
            else:
                step = self._gen.send((int(status), bytes(body or b"")))
        except StopIteration as done:
            self._finished = True
            return self._out({"kind": "done", "answered": done.value})
        except PytrainError as e:
            self._finished = True
            return self._out({"kind": "failed", "error": str(e), "type": type(e).__name__})
        if isinstance(step, SleepStep):
            return self._out({"kind": "sleep", "seconds": float(step.seconds)})
        if isinstance(step, HttpStep):
            return self._out({"kind": "http", "route": step.route, "body": step.body, "timeout": step.timeout,
                              "max_bytes": MAX_RESPONSE})
        if isinstance(step, CryptoStep):
            return self._out({"kind": "crypto", "op": step.op, "args": list(step.args)})
        raise FederationError("unknown step %r" % (step,))

    def _out(self, step: Dict[str, Any]) -> Dict[str, Any]:
        events: List[Dict[str, Any]] = list(self.node.events or [])
        if self.node.events is not None:
            del self.node.events[:]
        step["events"] = events
        step["node_id"] = None if self.node.node_id is None else str(self.node.node_id)
        return step
