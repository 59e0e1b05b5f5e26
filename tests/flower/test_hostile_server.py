"""A node given hostile server input: every declared size is checked against the model and pytrain's
limits before what it declares is fetched or allocated; the message gets an error reply, the node's
memory stays bounded and it answers the next message.

The node talks to an in-memory Fleet transport (FakeLink, tests/flower/test_flower.py) that serves a
crafted message and then a good one, and records which objects the node pulled.
"""
from __future__ import annotations

import http.server
import io
import json
import threading
import tracemalloc

import numpy as np
import pytest

from pytrain.flower import FlowerNode
from pytrain.flower import messages as pb
from pytrain.flower import objects as ob
from pytrain.flower.steps import StepDriver
from pytrain.flower.transport import MAX_RESPONSE, EcdsaSigner
from pytrain.proto import wire
from test_flower import FakeLink, arts, digits_splits, make_trainer, train_message  # noqa: F401 (fixture)
from waits import wait_s

#: what a hostile message may cost the node at most (its model and data are far smaller)
MEMORY_BOUND = 64 << 20


def npy_header(shape, descr: str = "<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()  # the magic, the version and the header: no data


def array_object(shape, chunks, order, dtype: str = "float32") -> ob.Deflated:
    """An Array object declaring ``dtype``/``shape`` whose data is ``chunks`` (bytes) in ``order``."""
    kids = [ob.Deflated("ArrayChunk", [], c) for c in chunks]
    meta = {"dtype": dtype, "shape": list(shape), "stype": ob.NUMPY_STYPE, "arraychunk_ids": list(order)}
    return ob.Deflated("Array", kids, json.dumps(meta).encode())


def message_with(params, name: str, array: ob.Deflated):
    """A train message carrying ``params`` with ``name``'s Array replaced by ``array``."""
    msg, d = train_message(params)
    arrays = {k: ob.deflate_array(v) for k, v in params.items()}
    arrays[name] = array
    ar = ob.Deflated("ArrayRecord", list(arrays.values()), json.dumps({k: v.id for k, v in arrays.items()}).encode())
    cfg = ob.deflate_record(ob.ConfigRecord([("lr", 0.1), ("local-epochs", 1), ("server-round", 1)]))
    rd = ob.Deflated("RecordDict", [ar, cfg], json.dumps({"arrays": ar.id, "config": cfg.id}).encode())
    m = ob.Deflated("Message", [rd], d.content.split(b"\x00", 1)[1])
    msg.metadata.message_id = m.id
    return msg, m.tree(), m.all_objects(), array


def hostile(case: str, params):
    """(message, tree, objects, the bad Array object, what the error says, whether its chunks may be pulled)."""
    w = params["fc1.weight"]
    npy = ob.npy_bytes(w)
    if case == "header_1TiB":  # right metadata, a .npy header declaring (1<<38,) float32 and no data
        arr = array_object(w.shape, [npy_header((1 << 38,))], [0])
        return message_with(params, "fc1.weight", arr) + (".npy header", True)
    if case == "declared_1TiB":  # the metadata itself declares 1 TiB
        arr = array_object((1 << 38,), [npy_header((1 << 38,))], [0])
        return message_with(params, "fc1.weight", arr) + ("tensor limit", False)
    if case == "dedup_bomb":  # 400 references to one all-zero 5 MiB chunk: 2 GiB for an 8 KiB array
        arr = array_object(w.shape, [bytes(ob.MAX_CHUNK)], [0] * 400)
        return message_with(params, "fc1.weight", arr) + ("add up to more", True)
    if case == "endless_chunks":  # a chunk list far longer than the array's bytes could need
        arr = array_object(w.shape, [npy[:1]], [0] * 1000000)
        return message_with(params, "fc1.weight", arr) + ("chunks cannot make", False)
    if case == "extra_chunk":  # the whole array, then one chunk more than its shape needs
        arr = array_object(w.shape, [npy, b"\x00" * 100], [0, 1])
        return message_with(params, "fc1.weight", arr) + ("needs %d" % w.nbytes, True)
    if case == "wrong_shape_declared":  # the model's name, another shape: refused before its chunks
        arr = array_object((1 << 20,), [ob.npy_bytes(np.zeros(1 << 20, np.float32))], [0])
        return message_with(params, "fc1.weight", arr) + ("shape [1048576]", False)
    assert case == "id_mismatch"  # a chunk whose bytes do not hash to its id
    msg, tree, objs, arr = message_with(params, "fc1.weight", ob.deflate_array(w))
    cid = arr.children[0].id
    raw = bytearray(objs[cid])
    raw[-1] ^= 1
    objs[cid] = bytes(raw)
    return msg, tree, objs, arr, "sha256 mismatch", True


CASES = ["header_1TiB", "declared_1TiB", "dedup_bomb", "endless_chunks", "extra_chunk", "wrong_shape_declared",
         "id_mismatch"]


@pytest.mark.parametrize("case", CASES)
def test_hostile_message_is_refused_and_the_node_keeps_serving(arts, case):  # noqa: F811
    (parts, _) = digits_splits(1)
    x, y = parts[0][0][:64], parts[0][1][:64]
    trainer = make_trainer(arts, x, y)
    before = trainer.get_parameters()
    msg, tree, objs, arr, expect, chunks_may_be_pulled = hostile(case, {k: v + 0.5 for k, v in before.items()})
    good, gd = train_message({k: v + 0.25 for k, v in before.items()})
    link = FakeLink(msg, tree, objs)
    link.add(good, gd.tree(), gd.all_objects())
    node = FlowerNode("http://fleet.invalid", trainer, signer=EcdsaSigner(), transport=link, keep_replies=True,
                      poll_interval=0.01)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        assert node.run(max_messages=2, timeout=wait_s(60)) == 2
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, "the hostile message cost %.1f MiB" % (peak / 2 ** 20)
    assert len(link.pushed) == 2
    bad, ok = link.pushed
    assert bad.error is not None and expect in bad.error.reason, bad.error.reason
    assert "refused" in bad.error.reason and bad.metadata.reply_to_message_id == tree.object_id
    # the chunks a declared size already rules out are never fetched; a repeated chunk once at most
    chunk_ids = {c.id for c in arr.children}
    pulled = [c for c in link.pulled if c in chunk_ids]
    assert len(pulled) <= (len(chunk_ids) if chunks_may_be_pulled else 0), pulled
    # the node answered the next message: it trained from that message's parameters
    assert ok.error is None and node.replies[1].metrics["num-examples"] == 64
    assert not node.joined


def test_hostile_message_through_the_browser_driver(arts):  # noqa: F811
    """The tab's node (StepDriver, the worker answering each request) refuses it the same way."""
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, parts[0][0][:64], parts[0][1][:64])
    params = trainer.get_parameters()
    msg, tree, objs, arr, expect, _ = hostile("dedup_bomb", params)
    good, gd = train_message(params)
    link = FakeLink(msg, tree, objs)
    link.add(good, gd.tree(), gd.all_objects())
    node = FlowerNode("http://fleet.invalid", trainer, signer=EcdsaSigner(), poll_interval=0.01)
    driver = StepDriver(node)
    step, events = driver.next(), []
    for _ in range(10000):  # each request answered as the worker's fetch would
        events.extend(step["events"])
        if sum(1 for e in events if e["kind"] in ("answered", "refused")) == 2:
            driver.stop()
        if step["kind"] in ("done", "failed"):
            break
        if step["kind"] == "sleep":
            step = driver.next()
            continue
        headers = {h: "x" for h in ("flwr-public-key", "flwr-timestamp", "flwr-signature")}
        status, body = link("http://fleet.invalid/v1/fleet/" + step["route"], step["body"], headers, 1.0)
        step = driver.next(status=status, body=body)
    assert step["kind"] == "done", step
    kinds = [e["kind"] for e in events if e["kind"] in ("answered", "refused")]
    assert kinds == ["refused", "answered"], events
    assert expect in next(e["error"] for e in events if e["kind"] == "refused")
    assert isinstance(link.pushed[0], pb.FlwrMessage) and link.pushed[0].error is not None



# -- a pull-messages answer over 16 MiB ------------------------------------------------------------------
class OversizedFirst(FakeLink):
    """Answers the first pull-messages with ``body`` (over MAX_RESPONSE bytes), then as FakeLink."""

    def __init__(self, body: bytes) -> None:
        super().__init__(None, None, {})
        self.pending = []
        self.oversized = body

    def __call__(self, url, body, headers, timeout):
        if url.endswith("/pull-messages") and self.oversized is not None:
            out, self.oversized = self.oversized, None
            return 200, out
        return super().__call__(url, body, headers, timeout)


def oversized_answer(msg: pb.FlwrMessage, tree: pb.ObjectTree, junk_first: bool) -> bytes:
    """A PullMessagesResponse of 17 MiB: ``msg`` with 17 MiB of content after its metadata, or a
    17 MiB field before the message (then no metadata can be read within the first 16 MiB)."""
    junk = bytes(MAX_RESPONSE + (1 << 20))
    out = bytearray()
    if junk_first:
        wire.write_len(out, 1, junk)
        wire.write_len(out, 2, msg.SerializeToString())
    else:
        inner = bytearray(pb.FlwrMessage(metadata=msg.metadata).SerializeToString())
        wire.write_len(inner, 2, junk)
        wire.write_len(out, 2, bytes(inner))
    wire.write_len(out, 3, tree.SerializeToString())
    return bytes(out)


class LoopbackFleet:
    """``link`` behind a real HTTP server on 127.0.0.1, so that the node's HttpTransport reads it;
    ``keep_alive``: HTTP/1.1 connections, the ones in ``close_after`` (the n-th answer, from 1) closed
    right after that answer without saying so (as a server closing an idle connection)."""

    def __init__(self, link, keep_alive: bool = False, close_after=()) -> None:
        answered = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status, out = link(self.path, body, {k.lower(): v for k, v in self.headers.items()}, 5.0)
                self.send_response(status)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                try:
                    self.wfile.write(out)
                except OSError:
                    pass  # the node stopped reading (as it should past 16 MiB)
                answered.append(self.path)
                if len(answered) in close_after:
                    self.close_connection = True

            def log_message(self, *args):
                pass
        self.answered = answered
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "LoopbackFleet":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("junk_first", [False, True], ids=["metadata_first", "junk_first"])
@pytest.mark.parametrize("via", ["urllib", "driver"])
def test_oversized_pull_messages_answer(arts, junk_first, via):  # noqa: F811
    """An answer over 16 MiB is not read past 16 MiB: the message whose metadata shows in what was
    read gets an error reply, one that does not is skipped; the node keeps serving either way."""
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, parts[0][0][:64], parts[0][1][:64])
    before = trainer.get_parameters()
    bad, bd = train_message({k: v + 0.5 for k, v in before.items()})
    link = OversizedFirst(oversized_answer(bad, bd.tree(), junk_first))
    good, gd = train_message({k: v + 0.25 for k, v in before.items()})
    link.add(good, gd.tree(), gd.all_objects())
    expect = 1 if junk_first else 2
    with LoopbackFleet(link) as fleet:
        node = FlowerNode(fleet.url if via == "urllib" else "http://fleet.invalid", trainer, signer=EcdsaSigner(),
                          transport=None if via == "urllib" else link, keep_replies=True, poll_interval=0.01)
        node.events = []
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            assert node.run(max_messages=expect, timeout=wait_s(60)) == expect
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    assert peak < MEMORY_BOUND, "the oversized answer cost %.1f MiB" % (peak / 2 ** 20)
    refused = [e for e in node.events if e["kind"] == "refused"]
    assert len(refused) == 1 and "more than any Fleet answer takes" in refused[0]["error"], node.events
    assert not (set(bd.all_objects()) - set(gd.all_objects())) & set(link.pulled)  # nothing of the unread one
    if not junk_first:
        err = link.pushed[0]
        assert err.error is not None and err.metadata.reply_to_message_id == bd.id
        assert "refused the train message" in err.error.reason and err.metadata.ttl > 0
    ok = link.pushed[-1]
    assert len(link.pushed) == expect and ok.error is None
    assert node.replies[-1].metrics["num-examples"] == 64 and not node.joined


def test_transport_keeps_its_connection_and_reopens_a_closed_one(arts):  # noqa: F811
    """A node's requests share one HTTP/1.1 connection; one the server closed while idle is opened
    again and the request sent on it once more (nothing is lost, nothing sent twice)."""
    (parts, _) = digits_splits(1)
    trainer = make_trainer(arts, parts[0][0][:64], parts[0][1][:64])
    msg, d = train_message({k: v + 0.25 for k, v in trainer.get_parameters().items()})
    link = FakeLink(msg, d.tree(), d.all_objects())
    with LoopbackFleet(link, keep_alive=True, close_after={3}) as fleet:
        node = FlowerNode(fleet.url, trainer, signer=EcdsaSigner(), keep_replies=True, poll_interval=0.01)
        assert node.run(max_messages=1, timeout=wait_s(60)) == 1
    assert len(fleet.answered) > 3 and node.fleet.transport.opened == 2, fleet.answered
    assert len(link.pushed) == 1 and link.pushed[0].error is None
    assert sum(1 for p in fleet.answered if p.endswith("push-messages")) == 1
