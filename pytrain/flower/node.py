"""A Flower node (what ``flower-supernode`` is) in pure Python: join, poll, answer, heartbeat, leave.

One message at a time, no threads (so it also runs in Pyodide): between polls, and between the
batches of a long round, the node sends its heartbeat when it is due. Bad server input (an object
whose bytes do not match its id, a malformed object, parameters of the wrong name, shape or dtype)
is refused with an error reply naming the problem, and the local model stays as it was.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional

from pytrain.errors import PytrainError
from pytrain.flower import messages as pb
from pytrain.flower import objects as ob
from pytrain.flower.fleet import FleetClient, HttpStatusError
from pytrain.flower.transport import FederationError, Transport

#: flwr's ErrorCode.CLIENT_APP_RAISED_EXCEPTION
ERROR_CODE = 2
HEARTBEAT_MIN, HEARTBEAT_MAX = 10.0, 1800.0


class Reply:
    """What the node sent for one message (kept for inspection: tests, the page, logs)."""

    def __init__(self, message_type: str, server_round: Optional[int], arrays: "Optional[Dict[str, Any]]",
                 metrics: "Optional[Dict[str, Any]]", error: Optional[str], nbytes: int) -> None:
        self.message_type, self.server_round = message_type, server_round
        self.arrays, self.metrics, self.error, self.nbytes = arrays, metrics, error, nbytes

    def __repr__(self) -> str:
        return "Reply(%s, round=%s, %s)" % (self.message_type, self.server_round,
                                           "error=%r" % self.error if self.error else self.metrics)


class FlowerNode:
    """Joins the SuperLink at ``url`` (its Fleet API, e.g. ``http://127.0.0.1:9092``) and answers its
    ``train`` and ``evaluate`` messages with ``trainer`` (a :class:`PytrainTrainer` or any object
    with ``fit(arrays, config)`` and ``evaluate(arrays, config)``)."""

    def __init__(self, url: str, trainer, signer=None, transport: Optional[Transport] = None,
                 heartbeat_interval: float = 30.0, poll_interval: float = 0.5,
                 log: Optional[Callable[[str], None]] = None, keep_replies: bool = False) -> None:
        if not HEARTBEAT_MIN <= heartbeat_interval <= HEARTBEAT_MAX:
            raise FederationError("heartbeat_interval must be within [%g, %g] seconds (the SuperLink's "
                                  "limits), got %g" % (HEARTBEAT_MIN, HEARTBEAT_MAX, heartbeat_interval))
        if signer is None:
            from pytrain.flower.transport import EcdsaSigner
            signer = EcdsaSigner()
        self.fleet = FleetClient(url, signer, transport)
        self.trainer = trainer
        self.heartbeat_interval = float(heartbeat_interval)
        self.poll_interval = float(poll_interval)
        self.log = log or (lambda s: None)
        self.replies: List[Reply] = []
        self.keep_replies = keep_replies
        self._next_beat = 0.0
        self.joined = False
        if hasattr(trainer, "on_batch"):
            trainer.on_batch = self.beat_if_due

    @property
    def node_id(self) -> Optional[int]:
        return self.fleet.node_id

    # -- membership ---------------------------------------------------------------------------------
    def join(self) -> int:
        """register-node (a fresh key) then activate-node; returns the node id."""
        try:
            self.fleet.register()
        except HttpStatusError as e:
            if e.status != 409:  # already registered (same key): activation decides
                raise
        self.fleet.activate(self.heartbeat_interval)
        self.joined = True
        self._next_beat = time.monotonic() + 0.8 * self.heartbeat_interval
        self.log("joined as node %d" % self.fleet.node_id)
        return int(self.fleet.node_id)  # type: ignore[arg-type]

    def leave(self) -> None:
        """deactivate-node then unregister-node; the SuperLink stops sampling this node at once."""
        if not self.joined:
            return
        self.joined = False
        try:
            self.fleet.deactivate()
        finally:
            self.fleet.unregister()
        self.log("left the federation")

    def beat_if_due(self) -> None:
        if self.joined and time.monotonic() >= self._next_beat:
            self._next_beat = time.monotonic() + 0.8 * self.heartbeat_interval
            if not self.fleet.heartbeat(self.heartbeat_interval):
                raise FederationError("the SuperLink no longer knows this node (heartbeat refused)")

    # -- the loop -------------------------------------------------------------------------------------
    def poll_once(self) -> int:
        """Pull and answer the waiting messages; returns how many were answered."""
        self.beat_if_due()
        n = 0
        for msg, tree in self.fleet.pull_messages():
            self.handle(msg, tree)
            n += 1
        return n

    def run(self, stop: Optional[Callable[[], bool]] = None, max_messages: Optional[int] = None,
            timeout: Optional[float] = None) -> int:
        """Answer messages until ``stop()`` is true, ``max_messages`` were answered or ``timeout``
        seconds passed; joins first if needed and always leaves. Returns the messages answered."""
        deadline = None if timeout is None else time.monotonic() + timeout
        answered = 0
        if not self.joined:
            self.join()
        try:
            while True:
                if stop is not None and stop():
                    break
                if max_messages is not None and answered >= max_messages:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    break
                got = self.poll_once()
                answered += got
                if not got:
                    time.sleep(self.poll_interval)
        finally:
            try:
                self.leave()
            except PytrainError as e:
                self.log("could not leave cleanly: %s" % e)
        return answered

    # -- one message ----------------------------------------------------------------------------------
    def handle(self, msg: pb.FlwrMessage, tree: pb.ObjectTree) -> Reply:
        md = msg.metadata if msg.metadata is not None else pb.Metadata()
        run_id = int(md.run_id)
        mid = tree.object_id
        mtype = md.message_type
        t0 = time.monotonic()
        cache: Dict[str, bytes] = {}
        server_round = None
        arrays = metrics = None
        error = None
        try:
            ids = ob.tree_ids(tree)

            def fetch(oid: str) -> bytes:
                if oid not in cache:
                    if oid not in ids:
                        raise ob.ObjectError("object %s is not in the message's object tree" % oid)
                    cache[oid] = self.fleet.pull_object(run_id, oid)
                return cache[oid]
            for oid in ids:
                fetch(oid)
            self.fleet.confirm_received(run_id, mid)
            body, content = ob.inflate_message(mid, fetch)
            if body.metadata is not None and body.metadata.message_type:
                md = body.metadata
            content = content or OrderedDict()
            array_recs = [r for r in content.values() if isinstance(r, ob.ArrayRecord)]
            config: Dict[str, Any] = {}
            for r in content.values():
                if isinstance(r, ob.ConfigRecord):
                    config.update(r)
            sr = config.get("server-round")
            server_round = sr if isinstance(sr, int) and not isinstance(sr, bool) else None
            if mtype not in ("train", "evaluate"):
                raise FederationError("message type %r is not handled (this node answers 'train' and "
                                      "'evaluate')" % mtype)
            if len(array_recs) != 1:
                raise ob.ObjectError("a %s message must carry exactly one ArrayRecord, got %d"
                                     % (mtype, len(array_recs)))
            if mtype == "train":
                params, num, metrics = self.trainer.fit(array_recs[0], config)
                arrays = params
                reply = OrderedDict([("arrays", ob.ArrayRecord(params)), ("metrics", ob.MetricRecord(metrics))])
            else:
                num, metrics = self.trainer.evaluate(array_recs[0], config)
                reply = OrderedDict([("metrics", ob.MetricRecord(metrics))])
            self.log("round %s: %s answered (%s)" % (server_round, mtype, _short(metrics)))
        except (PytrainError, ValueError) as e:
            error = "pytrain refused the %s message: %s" % (mtype or "server's", e)
            self.log(error)
            reply = None
        nbytes = self._reply(md, mid, reply, error, time.monotonic() - t0)
        rec = Reply(mtype, server_round, arrays if self.keep_replies else None, metrics, error, nbytes)
        if self.keep_replies:
            self.replies.append(rec)
        return rec

    def _reply(self, ins: pb.Metadata, ins_id: str, content, error: Optional[str], runtime: float) -> int:
        now = time.time()
        # a reply must not outlive the instruction: the SuperLink drops it silently otherwise
        ttl = float(ins.created_at) + float(ins.ttl) - now
        md = ob.metadata(run_id=ins.run_id, src_node_id=ins.dst_node_id, dst_node_id=ins.src_node_id,
                         reply_to_message_id=ins_id, group_id=ins.group_id, ttl=ttl,
                         message_type=ins.message_type, created_at=now,
                         src_task_id=ins.dst_task_id if ins.HasField("dst_task_id") else None,
                         dst_task_id=ins.src_task_id if ins.HasField("src_task_id") else None)
        err = pb.Error(code=pb.zigzag(ERROR_CODE), reason=error) if error is not None else None
        deflated = ob.deflate_message(md, content if error is None else None, err)
        md.message_id = deflated.id
        # the message itself travels without content (that goes as objects) but the field must be there
        wire = pb.FlwrMessage(metadata=md, content=pb.RecordDict() if error is None else None, error=err)
        objs = deflated.all_objects()
        self.fleet.push_message(wire, deflated.tree(), objs, runtime)
        return sum(len(b) for b in objs.values())


def _short(metrics) -> str:
    return ", ".join("%s=%.4g" % (k, v) if isinstance(v, float) else "%s=%s" % (k, v)
                     for k, v in (metrics or {}).items())
