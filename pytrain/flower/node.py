"""A Flower node (what ``flower-supernode`` is) in pure Python: join, poll, answer, heartbeat, leave.

One message at a time, no threads (so it also runs in Pyodide): between polls, and between the
batches of a long round, the node sends its heartbeat when it is due. Every method has a step-wise
twin (``*_steps``, generators of :mod:`pytrain.flower.fleet` steps): the blocking methods drive them
with the transport; a browser worker drives the same steps with ``fetch`` (:mod:`pytrain.flower.steps`). Bad server input (an object
whose bytes do not match its id, a malformed object, parameters of the wrong name, shape or dtype)
is refused with an error reply naming the problem, and the local model stays as it was.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from pytrain.errors import PytrainError
from pytrain.flower import messages as pb
from pytrain.flower import intake, privacy, secagg
from pytrain.flower import objects as ob
from pytrain.flower.fleet import FleetClient, HttpStatusError, SleepStep, Steps
from pytrain.flower.mods import Answer, Mod, Task, make_handler, with_fixed_clipping
from pytrain.flower.trainer import Trainer
from pytrain.flower.transport import AnswerTooLarge, FederationError, Transport

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


class Incoming(NamedTuple):
    """A message's content as the node reads it: its type, the ArrayRecord it trains or evaluates (None
    for a SecAgg+ stage), its config, server round, and whether it is a SecAgg+ stage (``secure``)."""
    message_type: str
    content: Mapping[str, Any]
    arrays: Optional[ob.ArrayRecord]
    config: Dict[str, Any]
    server_round: Optional[int]
    secure: bool


def read_content(mtype: str, content: Mapping[str, Any]) -> Incoming:
    """What a ``train`` or ``evaluate`` message asks (FederationError for any other type; ObjectError
    unless it carries exactly one ArrayRecord, or is a SecAgg+ stage)."""
    array_recs = [r for r in content.values() if isinstance(r, ob.ArrayRecord)]
    config: Dict[str, Any] = {}
    for r in content.values():
        if isinstance(r, ob.ConfigRecord):
            config.update(r)
    sr = config.get("server-round")
    server_round = sr if isinstance(sr, int) and not isinstance(sr, bool) else None
    secure = mtype == "train" and secagg.is_secagg(content)
    if mtype not in ("train", "evaluate"):
        raise FederationError("message type %r is not handled (this node answers 'train' and "
                              "'evaluate')" % mtype)
    if len(array_recs) != 1 and not secure:
        raise ob.ObjectError("a %s message must carry exactly one ArrayRecord, got %d" % (mtype, len(array_recs)))
    return Incoming(mtype, content, None if secure else array_recs[0], config, server_round, secure)


class NodeOptions(NamedTuple):
    """How a :class:`FlowerNode` keeps in touch: its heartbeat and poll intervals (seconds), a ``log`` of lines,
    whether it keeps its replies (tests, the page), whether a blocking node heartbeats between the batches of a
    long round, and how long it waits at most for the ServerApp to take its last replies when leaving."""
    heartbeat_interval: float = 30.0
    poll_interval: float = 0.5
    log: Optional[Callable[[str], None]] = None
    keep_replies: bool = False
    beat_during_training: bool = True
    claim_wait: float = 60.0


class FlowerNode:
    """Joins the SuperLink at ``url`` (its Fleet API, e.g. ``http://127.0.0.1:9092``) and answers its
    ``train`` and ``evaluate`` messages with ``trainer`` (a :class:`~pytrain.flower.trainer.Trainer`)
    wrapped in ``mods`` (:mod:`pytrain.flower.mods`, e.g. :func:`~pytrain.flower.mods.privacy_mods`; the
    server's fixed clipping is always among them); a SecAgg+ stage wraps the whole handler."""

    def __init__(self, url: str, trainer: Trainer, signer=None, transport: Optional[Transport] = None,
                 mods: Sequence[Mod] = (), options: Optional[NodeOptions] = None, **fields: Any) -> None:
        opts = options if options is not None else NodeOptions(**fields)
        heartbeat_interval, beat_during_training = float(opts.heartbeat_interval), opts.beat_during_training
        if not HEARTBEAT_MIN <= heartbeat_interval <= HEARTBEAT_MAX:
            raise FederationError("heartbeat_interval must be within [%g, %g] seconds (the SuperLink's "
                                  "limits), got %g" % (HEARTBEAT_MIN, HEARTBEAT_MAX, heartbeat_interval))
        if signer is None:
            from pytrain.flower.transport import EcdsaSigner
            signer = EcdsaSigner()
        self.fleet = FleetClient(url, signer, transport)
        self.trainer = trainer
        #: the trainer wrapped in the node's mods: Task -> Answer
        self.handler = make_handler(trainer, with_fixed_clipping(mods))
        self.heartbeat_interval = heartbeat_interval
        self.poll_interval = float(opts.poll_interval)
        self.log = opts.log or (lambda s: None)
        self.replies: List[Reply] = []
        self.keep_replies = opts.keep_replies
        self._next_beat = 0.0
        self.joined = False
        #: (run id, message id, give up at) of pushed replies the SuperLink has not handed on yet
        self._unclaimed: "List[Tuple[int, str, float]]" = []
        #: seconds leave() waits at most for the ServerApp to take the node's last replies
        self.claim_wait = float(opts.claim_wait)
        #: a list to collect what happens (joined, received, answered, refused, left) as dicts, or None
        self.events: Optional[List[Dict[str, Any]]] = None
        #: run id -> this node's SecAgg+ state (pytrain.flower.secagg), made when a run uses it
        self.secagg: "Dict[int, secagg.SecAggPlusClient]" = {}
        #: True: the node's driver performs SecAgg+'s CryptoSteps (a browser tab, with WebCrypto)
        self.crypto_outside = False
        #: the last message's objects (id -> bytes; ids are their sha256): those the next message holds
        #: too (FedAvg's training message carries the model its evaluate message did) are not pulled again
        self.last_objects: Dict[str, bytes] = {}
        #: objects pulled from the SuperLink and objects taken from ``last_objects``, for measurements
        self.objects_pulled = self.objects_reused = 0
        # between batches of a long round; only a blocking driver can (a stepping one beats between steps)
        if beat_during_training:
            trainer.on_batch = self.beat_if_due

    @property
    def node_id(self) -> Optional[int]:
        return self.fleet.node_id

    # -- membership ---------------------------------------------------------------------------------
    def join_steps(self, node_id: Optional[int] = None) -> Steps:
        """register-node then activate-node; returns the node id.

        The same key joining again (a restarted process, a reloaded tab) gets 412 ("public key
        already in use") from register-node, which is fine, and 412 from activate-node while its earlier session still counts as online:
        then ``node_id`` (that session's node, if known) is deactivated first; otherwise the node
        retries until the SuperLink marks the old session offline (2 heartbeat intervals)."""
        try:
            yield from self.fleet.register()
        except HttpStatusError as e:
            if e.status not in (409, 412):  # the key is registered already: activation decides
                raise
        retry_until = time.monotonic() + 2 * max(self.heartbeat_interval, 30.0) + 10.0
        while True:
            try:
                yield from self.fleet.activate(self.heartbeat_interval)
                break
            except HttpStatusError as e:
                if e.status != 412 or time.monotonic() > retry_until:
                    raise
                if node_id is not None:
                    self.log("node %d is still online from an earlier session: deactivating it" % node_id)
                    try:
                        yield from self.fleet.deactivate(node_id)
                    except HttpStatusError:
                        pass  # it went offline meanwhile, or is not ours: activation says which
                    node_id = None
                else:
                    yield SleepStep(2.0)
        self.joined = True
        self._next_beat = time.monotonic() + 0.8 * self.heartbeat_interval
        self.log("joined as node %d" % self.fleet.node_id)
        self._emit("joined", node_id=str(self.fleet.node_id))
        return int(self.fleet.node_id)  # type: ignore[arg-type]

    def claimed_steps(self, timeout: Optional[float] = None) -> Steps:
        """Wait (heartbeating) until the ServerApp has taken every reply this node pushed, at most
        ``timeout`` seconds (default ``claim_wait``); returns how many are still untaken.

        flwr's SuperLink hands a reply to the ServerApp only while its sender is online, so a node
        that deactivated right after pushing loses it ("Node Unavailable"). Once the ServerApp has
        pulled a reply it confirms it and the SuperLink deletes the reply's objects: pull-object then
        finds nothing. A run that ended answers pull-object with an error: nothing left to wait for."""
        deadline = time.monotonic() + (self.claim_wait if timeout is None else float(timeout))
        while self._unclaimed and self.joined:
            now = time.monotonic()
            self._unclaimed = [u for u in self._unclaimed if u[2] > now]
            still = []
            for run_id, mid, until in self._unclaimed:
                try:
                    found = yield from self.fleet.object_found(run_id, mid)
                except HttpStatusError:
                    found = False  # the run is over (or the SuperLink forgot it): nobody will pull it
                if found:
                    still.append((run_id, mid, until))
            self._unclaimed = still
            if not still or time.monotonic() > deadline:
                break
            yield from self.beat_steps()
            yield SleepStep(min(self.poll_interval, 1.0))
        if self._unclaimed:
            self.log("leaving with %d reply(ies) the ServerApp has not taken yet" % len(self._unclaimed))
        return len(self._unclaimed)

    def leave_steps(self) -> Steps:
        """Wait until the ServerApp has taken this node's replies (:meth:`claimed_steps`), then
        deactivate-node and unregister-node; the SuperLink stops sampling this node at once."""
        if not self.joined:
            return
        try:
            yield from self.claimed_steps()
        except PytrainError as e:
            self.log("could not check that the last replies were taken: %s" % e)
        self.joined = False
        try:
            yield from self.fleet.deactivate()
        finally:
            yield from self.fleet.unregister()
        self.log("left the federation")
        self._emit("left")

    def beat_steps(self) -> Steps:
        """send-node-heartbeat, when it is due."""
        if self.joined and time.monotonic() >= self._next_beat:
            self._next_beat = time.monotonic() + 0.8 * self.heartbeat_interval
            ok = yield from self.fleet.heartbeat(self.heartbeat_interval)
            if not ok:
                raise FederationError("the SuperLink no longer knows this node (heartbeat refused)")

    # -- the loop -------------------------------------------------------------------------------------
    def poll_steps(self) -> Steps:
        """Pull and answer the waiting messages; returns how many were answered."""
        yield from self.beat_steps()
        n = 0
        try:
            pulled = yield from self.fleet.pull_messages()
        except AnswerTooLarge as e:  # not read: its messages are refused, the node goes on
            return (yield from self.refuse_unread_steps(e))
        for msg, tree in pulled:
            yield from self.handle_steps(msg, tree)
            n += 1
        return n

    def refuse_unread_steps(self, e: AnswerTooLarge) -> Steps:
        """An error reply to each message whose metadata begins the unread answer's head; returns
        how many (none when the head shows no whole metadata: those messages are skipped)."""
        found = intake.metadata_in_head(e.head)
        if not found:
            error = "pytrain skipped a pull-messages answer: %s" % e
            self.log(error)
            self._emit("refused", message_type=None, round=None, error=error)
        for md in found:
            error = "pytrain refused the %s message: %s" % (md.message_type, e)
            self.log(error)
            nbytes = yield from self._reply(md, md.message_id, None, error, 0.0)
            if self.keep_replies:
                self.replies.append(Reply(md.message_type, None, None, None, error, nbytes))
            self._emit("refused", message_type=md.message_type, round=None, error=error)
        return len(found)

    def run_steps(self, stop: Optional[Callable[[], bool]] = None, max_messages: Optional[int] = None,
                  timeout: Optional[float] = None) -> Steps:
        """The steps of :meth:`run`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        answered = 0
        if not self.joined:
            yield from self.join_steps()
        try:
            while True:
                if stop is not None and stop():
                    break
                if max_messages is not None and answered >= max_messages:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    break
                got = yield from self.poll_steps()
                answered += got
                if not got:
                    yield SleepStep(self.poll_interval)
        finally:
            try:
                yield from self.leave_steps()
            except PytrainError as e:
                self.log("could not leave cleanly: %s" % e)
        return answered

    # -- blocking versions (native) -------------------------------------------------------------------
    def join(self, node_id: Optional[int] = None) -> int:
        return self.fleet.drive(self.join_steps(node_id))

    def leave(self) -> None:
        self.fleet.drive(self.leave_steps())

    def beat_if_due(self) -> None:
        self.fleet.drive(self.beat_steps())

    def poll_once(self) -> int:
        return self.fleet.drive(self.poll_steps())

    def handle(self, msg: pb.FlwrMessage, tree: pb.ObjectTree) -> Reply:
        return self.fleet.drive(self.handle_steps(msg, tree))

    def run(self, stop: Optional[Callable[[], bool]] = None, max_messages: Optional[int] = None,
            timeout: Optional[float] = None) -> int:
        """Answer messages until ``stop()`` is true, ``max_messages`` were answered or ``timeout``
        seconds passed; joins first if needed and always leaves. Returns the messages answered."""
        return self.fleet.drive(self.run_steps(stop, max_messages, timeout))

    def _emit(self, kind: str, **data: Any) -> None:
        if self.events is not None:
            data["kind"] = kind
            self.events.append(data)

    # -- one message ----------------------------------------------------------------------------------
    def handle_steps(self, msg: pb.FlwrMessage, tree: pb.ObjectTree) -> Steps:
        """Fetch one message's objects, read it, answer it (through the mods), reply; returns its Reply."""
        md = msg.metadata if msg.metadata is not None else pb.Metadata()
        mid, mtype, t0 = tree.object_id, md.message_type, time.monotonic()
        server_round = answer = error = reply = None
        stopped = False
        try:
            fetch = yield from self._fetch_steps(int(md.run_id), tree)
            body, content = ob.inflate_message(mid, fetch)
            if body.metadata is not None and body.metadata.message_type:
                md = body.metadata
            incoming = read_content(mtype, content or OrderedDict())
            server_round = incoming.server_round
            if self.events is not None:  # a step between, so that a stepping driver shows it first
                self._emit("received", message_type=mtype, round=server_round,
                           config={k: v for k, v in incoming.config.items() if isinstance(v, (int, float, str))})
                yield SleepStep(0.0)
            reply, answer = yield from self._answer_steps(int(md.run_id), int(md.dst_node_id), incoming)
            self.log("round %s: %s answered (%s)%s" % (server_round, mtype, _short(answer.metrics),
                                                       "; " + privacy.describe(answer.privacy) if answer.privacy else ""))
        except (PytrainError, ValueError, MemoryError) as e:
            error = "pytrain refused the %s message: %s" % (mtype or "server's", e)
            self.log(error)
        except KeyboardInterrupt:  # Ctrl-C mid-message: say so, so the round need not wait for us
            error, stopped = "the node was stopped while handling the %s message" % mtype, True
            self.log(error)
        nbytes = yield from self._reply(md, mid, reply if error is None else None, error, time.monotonic() - t0)
        if stopped:
            raise KeyboardInterrupt
        return self._record(mtype, server_round, answer, error, nbytes, time.monotonic() - t0)

    def _fetch_steps(self, run_id: int, tree: pb.ObjectTree) -> Steps:
        """The message's objects, top down, every declared size checked against the model before what it
        declares is fetched; confirms the message received. Returns fetch(object id) -> bytes."""
        ob.tree_ids(tree)  # its depth, before walking it
        check = secagg.declared_check(self.trainer.check_declared, self.trainer.names)
        cache = yield from intake.fetch_message(tree, lambda oid: self.object_steps(run_id, oid), check)
        self.last_objects = cache

        def fetch(oid: str) -> bytes:
            if oid not in cache:
                raise ob.ObjectError("object %s is not in the message's object tree" % oid)
            return cache[oid]
        yield from self.fleet.confirm_received(run_id, tree.object_id)
        return fetch

    def _answer_steps(self, run_id: int, node_id: int, incoming: Incoming) -> Steps:
        """(reply content, Answer): a SecAgg+ stage through its mod around the handler, else the handler."""
        if incoming.secure:  # a SecAgg+ stage: only masked, quantized parameters leave (pytrain.flower.secagg)
            return (yield from secagg.mod_steps(self.secagg, run_id, node_id, incoming.content, self.handler,
                                                self.trainer.names, self.crypto_outside))
        answer = self.handler(Task(incoming.message_type, incoming.arrays, incoming.config, incoming.server_round))
        reply: "OrderedDict[str, Any]" = OrderedDict()
        if answer.arrays is not None:
            reply["arrays"] = ob.ArrayRecord(answer.arrays)
        reply["metrics"] = ob.MetricRecord(answer.metrics)
        return reply, answer

    def _record(self, mtype: str, server_round: Optional[int], answer: Optional[Answer], error: Optional[str],
                nbytes: int, seconds: float) -> Reply:
        """The Reply kept (``keep_replies``) and the event emitted for one answered or refused message."""
        arrays = answer.arrays if answer is not None else None
        metrics = answer.metrics if answer is not None else None
        rec = Reply(mtype, server_round, arrays if self.keep_replies else None, metrics, error, nbytes)
        if self.keep_replies:
            self.replies.append(rec)
        if error is not None:
            self._emit("refused", message_type=mtype, round=server_round, error=error)
        else:
            dp = answer.privacy if answer is not None else None
            sent = [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype), "bytes": int(v.nbytes)}
                    for k, v in (arrays or {}).items()]
            self._emit("answered", message_type=mtype, round=server_round, metrics=dict(metrics or {}),
                       sent=sent, nbytes=nbytes, seconds=seconds, privacy=dict(dp) if mtype == "train" and dp else None)
        return rec

    def object_steps(self, run_id: int, oid: str) -> Steps:
        """One object of a message: the last message's copy when it had it (checked against its id
        like any), else pulled."""
        got = self.last_objects.get(oid)
        if got is None:
            got = yield from self.fleet.pull_object(run_id, oid)
            self.objects_pulled += 1
        else:
            self.objects_reused += 1
        return got

    def _reply(self, ins: pb.Metadata, ins_id: str, content, error: Optional[str], runtime: float) -> Steps:
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
        yield from self.fleet.push_message(wire, deflated.tree(), objs, runtime)
        self._unclaimed.append((int(ins.run_id), deflated.id, time.monotonic() + max(ttl, 0.0)))
        return sum(len(b) for b in objs.values())


def _short(metrics) -> str:
    return ", ".join("%s=%.4g" % (k, v) if isinstance(v, float) else "%s=%s" % (k, v)
                     for k, v in (metrics or {}).items())
