"""Runs an ONNX graph with the numpy kernels. The graph is planned once: nodes put in
topological order, kernels and attributes bound, every tensor given a slot, and each slot freed
after its last reader; the plan is then compiled into one straight-line Python function, so a
step is a sequence of kernel calls with no graph interpretation. If/Loop/Scan bodies are planned the
same way, once, and the node passes them the outer-scope values they read (pytrain/ops/control)."""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from pytrain.engine import fusion
from pytrain.engine.legacy_forms import align_legacy_broadcasts
from pytrain.errors import KernelError, PytrainError, UnsupportedOpError
from pytrain.engine.graph import consumers, node_label, producers, topological_order
from pytrain.ops import OpContext, get_kernel, supported_ops
from pytrain.ops.control.subgraph import Subgraph, outer_names, with_outer_inputs
from pytrain.proto import GraphProto, NodeProto, node_attributes, to_array

_RANDOM_OPS = frozenset(["Dropout", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                         "Bernoulli", "Multinomial"])

_Step = Tuple[Any, OpContext, Tuple[int, ...], Tuple[int, ...], Dict[str, Any], Tuple[int, ...], NodeProto]


def unsupported_op_error(node: NodeProto) -> UnsupportedOpError:
    domain = node.domain or ""
    known = supported_ops(domain)
    return UnsupportedOpError(
        "node %s uses op %s%s, which pytrain does not support; supported%s: %s"
        % (node_label(node), (domain + ".") if domain else "", node.op_type,
           (" in domain " + domain) if domain else "", ", ".join(known) or "(none)"))


_KNOWN_ATTRS: Dict[Any, Optional[frozenset]] = {}


def kernel_attributes(node: NodeProto, info: Any) -> Dict[str, Any]:
    """The node's attributes for its kernel, refusing (UnsupportedOpError naming the node, op and
    attribute) any the kernel does not take, instead of the TypeError calling it would raise:
    pytrain never runs a node while ignoring an attribute it does not know (Cast's round_mode)."""
    attrs = node_attributes(node)
    fn = info.numpy_fn
    if fn not in _KNOWN_ATTRS:
        params = inspect.signature(fn).parameters.values()
        _KNOWN_ATTRS[fn] = None if any(p.kind == p.VAR_KEYWORD for p in params) else frozenset(
            p.name for p in params if p.kind == p.KEYWORD_ONLY)  # attributes are keyword-only
    known = _KNOWN_ATTRS[fn]
    unknown = sorted(a for a in attrs if known is not None and a not in known)
    if unknown:
        raise UnsupportedOpError("node %s has attribute%s %s, which pytrain's %s kernel does not support; "
                                 "it supports: %s" % (node_label(node), "s" if len(unknown) > 1 else "",
                                                      ", ".join(repr(a) for a in unknown), node.op_type,
                                                      ", ".join(sorted(known)) or "(no attributes)"))
    return attrs


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "%s%s" % (value.dtype, list(value.shape))
    return "None" if value is None else type(value).__name__


class Plan:
    """A graph bound to kernels: ``run(feeds)`` returns the requested outputs in order."""

    def __init__(self, graph: GraphProto, feeds: Sequence[str], outputs: Sequence[str], *,
                 opset: int, training: bool = False, seed: Optional[int] = None,
                 constants: Optional[Mapping[str, np.ndarray]] = None,
                 kernels: Optional[Callable[[str, str, Any, str], Any]] = None) -> None:
        """``kernels(op_type, domain, info, label)``, when given, picks each node's kernel instead of the
        registry's (the WebGPU device's plans: pytrain.ops.webgpu.kernels.choose)."""
        self.feed_names = list(feeds)
        self.output_names = list(outputs)
        self.rng = np.random.default_rng(seed)
        consts: Dict[str, np.ndarray] = dict(constants or {})
        fed = set(self.feed_names)
        for t in graph.initializer:
            if t.name not in fed and t.name not in consts:
                # read-only views of the model's bytes: the values are held once, and a kernel can never
                # write into a constant another run or another plan sharing it reads
                consts[t.name] = to_array(t, "the graph's initializers", view=True)
        # a control-flow node reads its bodies' outer-scope values as trailing inputs (pytrain/ops/control)
        nodes = topological_order([with_outer_inputs(n) for n in graph.node], list(fed) + list(consts))
        nodes = live_nodes(nodes, self.output_names)
        # opset 1-6's broadcast/axis as an alignment of B, then today's op (pytrain/engine/legacy_forms.py)
        nodes = align_legacy_broadcasts(nodes, list(fed) + list(consts) + self.output_names, opset)
        given = set(consts)
        if kernels is None:   # (a plan whose kernels are chosen, WebGPU's, runs the model's own nodes)
            nodes = fusion.fuse(nodes, self.output_names)  # Conv chains (pytrain/engine/fusion.py)
            nodes = _fold_constants(nodes, consts, OpContext(training=training, opset=opset), self.output_names)
        self._folded = frozenset(consts) - given   # (not the model's constants: kept out of ``constants``)
        produced = producers(nodes)
        for o in self.output_names:
            if o not in produced and o not in fed and o not in consts:
                raise PytrainError("output %r is produced by no node, input or initializer" % o)

        # slot 0 always holds None (a missing optional input); slot 1 marks outputs nobody reads,
        # which the compiled step never stores
        slot: Dict[str, int] = {"": 0, "\0discard": 1}

        def slot_of(name: str) -> int:
            if name not in slot:
                slot[name] = len(slot)
            return slot[name]

        self._feed_slots = [slot_of(n) for n in self.feed_names]
        self._const_slots = [(slot_of(k), v) for k, v in consts.items()]
        self._const_names = list(consts)
        read = set(consumers(nodes)) | set(self.output_names)
        last_use: Dict[str, int] = {}
        for idx, n in enumerate(nodes):
            for i in n.input:
                if i:
                    last_use[i] = idx
        keep = fed | set(consts) | set(self.output_names)
        frees: List[List[int]] = [[] for _ in nodes]
        for name, idx in last_use.items():
            if name not in keep:
                frees[idx].append(slot_of(name))

        steps: List[_Step] = []
        for idx, n in enumerate(nodes):
            info = get_kernel(n.op_type, n.domain or "")
            if info is None:
                raise unsupported_op_error(n)
            mask = [bool(o) and o in read for o in n.output]
            ctx = OpContext(training=training, rng=self.rng, opset=opset,
                            node_name=n.name or (n.output[0] if n.output else ""), output_mask=mask)
            ins = tuple(slot_of(i) if i else 0 for i in n.input)
            outs = tuple(slot_of(o) if (o and o in read) else 1 for o in n.output)
            attrs = kernel_attributes(n, info)
            for k, body in attrs.items():
                if isinstance(body, GraphProto):
                    attrs[k] = Subgraph(Plan(body, [v.name for v in body.input] + outer_names(n),
                                             [o.name for o in body.output], opset=opset, training=training,
                                             seed=seed), len(body.input), body)
            fn = info.fn if kernels is None else kernels(n.op_type, n.domain or "", info, node_label(n))
            steps.append((fn, ctx, ins, outs, attrs, tuple(frees[idx]), n))
        self._steps = steps
        #: whether a node draws random numbers (the caller may reseed ``rng`` per run)
        self.random = any(n.op_type in _RANDOM_OPS and not n.domain for n in nodes)
        self._out_slots = [slot_of(o) for o in self.output_names]

        self._run = self._compile()

    def _compile(self) -> Callable[[Sequence[Any]], List[Any]]:
        """The plan as one straight-line Python function: every tensor slot a local variable,
        every node a direct call, every free an assignment. A step then does no per-node
        lookups, unpacking or looping, which is most of the executor's cost in Pyodide."""
        env: Dict[str, Any] = {"PytrainError": PytrainError, "_failed": self._failed}
        body = ["    node = 0", "    try:", "        pass"]  # (a graph of no nodes still compiles)
        for k, (fn, ctx, ins, outs, attrs, frees, _node) in enumerate(self._steps):
            env["F%d" % k], env["X%d" % k] = fn, ctx
            args = ["X%d" % k] + ["s%d" % i for i in ins]
            if attrs:
                env["A%d" % k] = attrs
                args.append("**A%d" % k)
            body.append("        node = %d" % k)
            body.append("        r = F%d(%s)" % (k, ", ".join(args)))
            body += ["        s%d = r[%d]" % (o, j) for j, o in enumerate(outs) if o != 1]
            body += ["        s%d = None" % f for f in frees]
        body.append("    except PytrainError as e:")
        body.append("        raise _failed(node, None, e) from None")
        body.append("    except Exception as e:")
        body.append("        raise _failed(node, locals(), e) from e")
        body.append("    return [%s]" % ", ".join("s%d" % o for o in self._out_slots))
        head = ["def run(feeds):", "    s0 = None"]
        if self._feed_slots:
            head.append("    %s, = feeds" % ", ".join("s%d" % f for f in self._feed_slots))
        for k, (s, v) in enumerate(self._const_slots):
            env["K%d" % k] = v
            head.append("    s%d = K%d" % (s, k))
        exec(compile("\n".join(head + body) + "\n", "<pytrain plan>", "exec"), env)  # noqa: S102
        return env["run"]

    def _failed(self, k: int, scope: Optional[Dict[str, Any]], e: Exception) -> Exception:
        """The error to raise for node ``k``: a PytrainError of the same type prefixed with the
        node (``scope`` None), or for an error deep in numpy (``scope`` holding the slots) a
        KernelError naming what the node got."""
        fn, ctx, ins, outs, attrs, frees, node = self._steps[k]
        if scope is None:
            return type(e)("node %s: %s" % (node_label(node), e))
        return KernelError("node %s failed on inputs %s: %s: %s" % (
            node_label(node), ", ".join(_describe(scope.get("s%d" % i)) for i in ins), type(e).__name__, e))

    @property
    def constants(self) -> Dict[str, np.ndarray]:
        """The arrays the plan holds as constants (the graph's initializers that are not fed, and the
        ``constants`` it was given), by name; not the small tensors folded from constant nodes."""
        return {k: v for k, (_, v) in zip(self._const_names, self._const_slots) if k not in self._folded}

    def live_bytes(self, feeds: Sequence[Any]) -> List[int]:
        """Run once, step by step instead of compiled, and return after each node the bytes held by the
        tensors the plan keeps alive (the node's outputs and every earlier result a later node or an
        output still reads: for a training graph, the activations kept for backward and the gradients
        made so far). Feeds, constants and views of them count nothing; a view of a result counts once."""
        if len(feeds) != len(self._feed_slots):
            raise PytrainError("the plan takes %d feeds, got %d" % (len(self._feed_slots), len(feeds)))
        slots: Dict[int, Any] = {0: None}
        slots.update(zip(self._feed_slots, feeds))
        slots.update(self._const_slots)
        owners: Dict[int, List[Any]] = {}   # id of a base buffer -> [bytes, slots holding it]
        held = {id(buffer_of(v)) for k, v in slots.items() if isinstance(v, np.ndarray)}
        live, trace = 0, []
        for k, (fn, ctx, ins, outs, attrs, frees, _node) in enumerate(self._steps):
            try:
                result = fn(ctx, *[slots.get(i) for i in ins], **attrs)
            except PytrainError as e:
                raise self._failed(k, None, e) from None
            except Exception as e:
                raise self._failed(k, {"s%d" % i: v for i, v in slots.items()}, e) from e
            for o, value in zip(outs, result):
                if o == 1:
                    continue
                slots[o] = value
                if isinstance(value, np.ndarray) and id(buffer_of(value)) not in held:
                    entry = owners.setdefault(id(buffer_of(value)), [buffer_of(value).nbytes, 0])
                    live += entry[0] if entry[1] == 0 else 0
                    entry[1] += 1
            trace.append(live)
            for f in frees:
                value = slots.pop(f, None)
                entry = owners.get(id(buffer_of(value))) if isinstance(value, np.ndarray) else None
                if entry is not None:
                    entry[1] -= 1
                    if entry[1] == 0:
                        live -= entry[0]
                        del owners[id(buffer_of(value))]
        return trace

    def time_nodes(self, totals: Dict[Any, float], key: Callable[[NodeProto], Any]) -> None:
        """Profiling (bench/): from now on every node's kernel adds its wall time in seconds to
        ``totals[key(node)]``; the compiled step is rebuilt with each kernel wrapped in a timer."""
        import time

        def timed(fn: Callable[..., Any], k: Any) -> Callable[..., Any]:
            def run(ctx: Any, *args: Any, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return fn(ctx, *args, **kw)
                finally:
                    totals[k] = totals.get(k, 0.0) + time.perf_counter() - t
            return run

        self._steps = [(timed(s[0], key(s[6])),) + tuple(s[1:]) for s in self._steps]
        self._run = self._compile()

    def run(self, feeds: Sequence[Any]) -> List[Any]:
        """Run with feeds given in the order of ``feed_names``; returns the outputs in order."""
        if len(feeds) != len(self._feed_slots):
            raise PytrainError("the plan takes %d feeds (%s), got %d"
                               % (len(self._feed_slots), ", ".join(self.feed_names), len(feeds)))
        return self._run(feeds)


#: the largest tensor (elements) a node computed from constants alone may yield to be folded into the plan:
#: shapes and index tensors (what an exporter's Constant -> Unsqueeze -> Concat chains compute), not weights
FOLD_MAX_ELEMENTS = 4096
#: ops whose output is small whatever their input: folded even from a large constant
_SMALL_OUTPUT_OPS = frozenset(["Shape", "Size"])
#: ops that only select or move elements (no arithmetic, so nothing to round), folded from and into tensors
#: of up to FOLD_LAYOUT_MAX_ELEMENTS: an exporter's re-layout of a small weight (torch's LSTM export slices
#: and concatenates W, R and B to ONNX's gate order: CRNN's 24 nodes, ~0.35 ms of every inference run)
_LAYOUT_OPS = frozenset(["Slice", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Transpose", "Flatten", "Split",
                         "Identity", "Gather"])
FOLD_LAYOUT_MAX_ELEMENTS = 1 << 16


def _fold_constants(nodes: List[NodeProto], consts: Dict[str, np.ndarray], ctx: OpContext,
                    outputs: Sequence[str]) -> List[NodeProto]:
    """``nodes`` without those whose inputs are all constants, their small outputs added to ``consts``
    (read-only): run once when the plan is made, not on every step (GPT-2's LoRA step ran 270 such
    Constant, Unsqueeze and Concat nodes a step). A node that draws random numbers, has a body, fails
    or yields a large or non-array output stays in the plan, where it fails as it would have; a node reading a
    large constant (a weight: its Transpose, its DequantizeLinear) is not even tried, so the plan's start does
    not compute a weight-sized result to throw it away. A folded tensor that only other folded nodes read
    (a weight's re-layout steps) is not kept in ``consts``; those the kept nodes or ``outputs`` read are."""
    given = set(consts)
    kept = []
    for n in nodes:
        info = get_kernel(n.op_type, n.domain or "")
        folded = None
        limit = FOLD_LAYOUT_MAX_ELEMENTS if n.op_type in _LAYOUT_OPS and not n.domain else FOLD_MAX_ELEMENTS
        if (info is not None and not (n.op_type in _RANDOM_OPS and not n.domain)
                and all(not i or i in consts for i in n.input)
                and (n.op_type in _SMALL_OUTPUT_OPS
                     or all(not i or np.size(consts[i]) <= limit for i in n.input))):
            try:
                attrs = kernel_attributes(n, info)
                if not any(isinstance(v, GraphProto) for v in attrs.values()):
                    folded = info.fn(OpContext(training=ctx.training, opset=ctx.opset, node_name=n.name,
                                               output_mask=[bool(o) for o in n.output]),
                                     *[consts[i] if i else None for i in n.input], **attrs)
            except Exception:  # noqa: BLE001  (the step raises it, naming the node, as before)
                folded = None
        if folded is None or len(folded) < len(n.output) or not all(
                isinstance(v, np.ndarray) and v.size <= limit
                for v, o in zip(folded, n.output) if o):
            kept.append(n)
            continue
        for v, o in zip(folded, n.output):
            if o:
                v = np.array(v)   # its own copy, read-only: no kernel may write into a constant
                v.flags.writeable = False
                consts[o] = v
    wanted = set(consumers(kept)) | set(outputs)
    for name in [k for k in consts if k not in given and k not in wanted]:
        del consts[name]
    return kept


def buffer_of(a: np.ndarray) -> np.ndarray:
    """The array owning ``a``'s memory (``a`` itself unless it is a view)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def live_nodes(nodes: List[NodeProto], outputs: Sequence[str]) -> List[NodeProto]:
    """Drop nodes whose outputs nobody needs (e.g. the loss when only logits are asked for)."""
    needed = set(outputs)
    live: List[NodeProto] = []
    for n in reversed(nodes):
        if any(o in needed for o in n.output if o):
            live.append(n)
            needed.update(i for i in n.input if i)
            needed.update(outer_names(n))  # what a control-flow node's bodies read (none for other nodes)
    live.reverse()
    return live
