"""The Fleet API calls a node makes, one method per route (``POST /v1/fleet/<route>``, protobuf in
and out). Any non-200 answer raises :class:`FederationError` with the route, status and the
SuperLink's own message.

Every call is a generator of *steps* so that one implementation serves two drivers: it yields
``HttpStep(route, body, timeout)`` and is sent back ``(status, response body)``, or yields
``SleepStep(seconds)`` and is sent ``None``; its return value is the call's result. Natively,
:meth:`FleetClient.drive` runs the steps with the transport and signer (blocking). In a browser
worker, where Python cannot wait on a JavaScript promise, JavaScript drives the same generators:
it signs and ``fetch``-es each request and sends the answer back (see :mod:`pytrain.flower.steps`).
"""
from __future__ import annotations

import json
import time
from typing import Any, Dict, Generator, Optional, Type

from pytrain.errors import ModelFormatError
from pytrain.flower import messages as pb
from pytrain.flower.transport import (MAX_RESPONSE, AnswerTooLarge, FederationError, HttpTransport, Transport,
                                      signed_headers)

#: seconds a pull-object waits for an object the SuperLink has announced but not yet stored
OBJECT_WAIT = 30.0


class HttpStep:
    """POST ``body`` to the Fleet API's ``route``; the driver answers ``(status, response body)``."""
    __slots__ = ("route", "body", "timeout")

    def __init__(self, route: str, body: bytes, timeout: float) -> None:
        self.route, self.body, self.timeout = route, body, timeout


class SleepStep:
    """Wait ``seconds`` (the driver answers ``None``)."""
    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


#: what a Fleet call yields, is sent, and returns
Steps = Generator[Any, Any, Any]


class HttpStatusError(FederationError):
    def __init__(self, route: str, status: int, detail: str) -> None:
        super().__init__("SuperLink refused %s: HTTP %d %s" % (route, status, detail))
        self.route, self.status, self.detail = route, status, detail


def _detail(body: bytes) -> str:
    text = body[:2000].decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(obj, dict):
        return str(obj.get("detail") or obj.get("message") or obj)[:300]
    return text[:300]


class FleetClient:
    """Signed protobuf-over-HTTP calls to one SuperLink (``base_url`` as ``http://host:9092``)."""

    def __init__(self, base_url: str, signer, transport: Optional[Transport] = None, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.signer = signer
        self.transport = transport or HttpTransport()
        self.timeout = timeout
        self.node_id: Optional[int] = None
        #: bytes sent and received in request/response bodies, for measurements
        self.bytes_sent = 0
        self.bytes_received = 0
        #: pull-object answers "not available yet" (the object announced, not stored yet), for measurements
        self.object_waits = 0

    def drive(self, steps: Steps) -> Any:
        """Run a call's steps here, blocking: the transport sends, ``time.sleep`` waits. A failure
        (or Ctrl+C) while sending or waiting is thrown into the steps, so they can still leave."""
        answer: Any = None
        error: Optional[BaseException] = None
        while True:
            try:
                step = steps.send(answer) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value
            answer, error = None, None
            try:
                if isinstance(step, SleepStep):
                    time.sleep(step.seconds)
                else:
                    answer = self.transport(self.base_url + "/v1/fleet/" + step.route, step.body,
                                            signed_headers(self.signer), step.timeout)
            except BaseException as e:  # noqa: B902 - handed to the steps, which re-raise it
                error = e

    def call(self, route: str, request: pb.Message, response_type: Type[pb.Message],
             timeout: Optional[float] = None) -> Steps:
        body = request.SerializeToString()
        status, data = yield HttpStep(route, body, self.timeout if timeout is None else timeout)
        self.bytes_sent += len(body)
        self.bytes_received += len(data)
        if len(data) > MAX_RESPONSE:  # a driver that read past the limit (a test's transport)
            raise AnswerTooLarge(route, len(data), data)
        if status != 200:
            raise HttpStatusError(route, status, _detail(data))
        try:
            return response_type.FromString(data)
        except ModelFormatError as e:
            raise FederationError("the SuperLink's answer to %s is not a %s: %s"
                                  % (route, response_type.__name__, e)) from None

    def _node(self) -> pb.Node:
        if self.node_id is None:
            raise FederationError("this node has not joined (activate-node) yet")
        return pb.Node(node_id=self.node_id)

    # -- membership ---------------------------------------------------------------------------------
    def register(self) -> Steps:
        r = yield from self.call("register-node", pb.RegisterNodeRequest(public_key=self.signer.public_key_pem),
                                 pb.NodeIdResponse)
        return int(r.node_id)

    def activate(self, heartbeat_interval: float) -> Steps:
        r = yield from self.call("activate-node", pb.ActivateNodeRequest(
            public_key=self.signer.public_key_pem, heartbeat_interval=float(heartbeat_interval)), pb.NodeIdResponse)
        self.node_id = int(r.node_id)
        return self.node_id

    def heartbeat(self, interval: float) -> Steps:
        r = yield from self.call("send-node-heartbeat", pb.SendNodeHeartbeatRequest(
            node=self._node(), heartbeat_interval=float(interval)), pb.SendNodeHeartbeatResponse, timeout=5.0)
        return bool(r.success)

    def deactivate(self, node_id: Optional[int] = None) -> Steps:
        """This node, or ``node_id`` (the same key's node from an earlier session that is still online)."""
        nid = self._node().node_id if node_id is None else int(node_id)
        yield from self.call("deactivate-node", pb.NodeIdRequest(node_id=nid), pb.Empty)

    def unregister(self) -> Steps:
        yield from self.call("unregister-node", pb.NodeIdRequest(node_id=self._node().node_id), pb.Empty)

    # -- messages and objects ------------------------------------------------------------------------
    def pull_messages(self) -> Steps:
        r = yield from self.call("pull-messages", pb.PullMessagesRequest(node=self._node()), pb.PullMessagesResponse)
        if len(r.messages_list) != len(r.message_object_trees):
            raise FederationError("pull-messages answered %d messages with %d object trees"
                                  % (len(r.messages_list), len(r.message_object_trees)))
        return list(zip(r.messages_list, r.message_object_trees))

    def pull_object(self, run_id: int, object_id: str) -> Steps:
        """An object's bytes; one the SuperLink announced but does not hold yet (the ServerApp still
        pushing it) is asked for again after 0.1 s, then 0.2, 0.4... (at most 1 s between)."""
        deadline = time.monotonic() + OBJECT_WAIT
        pause = 0.1
        while True:
            r = yield from self.call("pull-object", pb.PullObjectRequest(
                node=self._node(), run_id=run_id, object_id=object_id), pb.PullObjectResponse)
            if not r.object_found:
                raise FederationError("the SuperLink has no object %s (run %d)" % (object_id, run_id))
            if r.object_available:
                return r.object_content
            if time.monotonic() > deadline:
                raise FederationError("object %s was announced but not available after %.0f s"
                                      % (object_id, OBJECT_WAIT))
            self.object_waits += 1
            yield SleepStep(pause)
            pause = min(2 * pause, 1.0)

    def object_found(self, run_id: int, object_id: str) -> Steps:
        """Whether the SuperLink still holds the object (one pull-object, no waiting)."""
        r = yield from self.call("pull-object", pb.PullObjectRequest(
            node=self._node(), run_id=run_id, object_id=object_id), pb.PullObjectResponse)
        return bool(r.object_found)

    def confirm_received(self, run_id: int, message_object_id: str) -> Steps:
        yield from self.call("confirm-message-received", pb.ConfirmMessageReceivedRequest(
            node=self._node(), run_id=run_id, message_object_id=message_object_id), pb.Empty)

    def push_message(self, message: pb.FlwrMessage, tree: pb.ObjectTree, objects: Dict[str, bytes],
                     runtime: float = 0.0) -> Steps:
        """Announce a reply and its object tree, then push the objects the SuperLink asks for."""
        r = yield from self.call("push-messages", pb.PushMessagesRequest(
            node=self._node(), messages_list=[message], message_object_trees=[tree],
            clientapp_runtime_list=[float(runtime)]), pb.PushMessagesResponse)
        run_id = message.metadata.run_id
        for oid in r.objects_to_push:
            if oid not in objects:
                raise FederationError("the SuperLink asks for object %s, which the reply does not hold" % oid)
            yield from self.call("push-object", pb.PushObjectRequest(
                node=self._node(), run_id=run_id, object_id=oid, object_content=objects[oid],
                session_id=r.session_id), pb.PushObjectResponse)
