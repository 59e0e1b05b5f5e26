"""Scan: the body runs once per slice of the scan inputs along their axes, carrying its state; each
scan output is the body's per-iteration values stacked along its axis. Scan-8 has a batch axis first
(each batch element scanned on its own, along axis 1) and optional sequence lengths."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.common import norm_axis
from pytrain.ops.registry import kernel


def _per(attr: Optional[Sequence[int]], n: int, what: str, node: str) -> List[int]:
    values = [0] * n if attr is None else [int(v) for v in attr]
    if len(values) != n:
        raise GraphError("Scan %r: %s lists %d values for %d tensors" % (node, what, len(values), n))
    return values


class _Run:
    """One scan: the body, its outer values, and where each scan output goes."""

    def __init__(self, node: str, body: Any, outer: Sequence[Any], out_axes: List[int], out_dirs: List[int]) -> None:
        self.node, self.body, self.outer, self.out_axes, self.out_dirs = node, body, outer, out_axes, out_dirs

    def __call__(self, state: List[Any], seqs: List[np.ndarray], steps: int) -> Tuple[List[Any], List[np.ndarray]]:
        per_step: List[List[np.ndarray]] = [[] for _ in self.out_axes]
        for t in range(steps):
            out = self.body.run(state + [s[t] for s in seqs], self.outer)
            state = list(out[:len(state)])
            for k, v in enumerate(out[len(state):]):
                per_step[k].append(np.asarray(v))
        outs = []
        for k, (parts, axis, reverse) in enumerate(zip(per_step, self.out_axes, self.out_dirs)):
            if not parts:
                raise InputError("Scan %r: no iteration ran, so scan output %d has no shape" % (self.node, k))
            y = np.stack(parts[::-1] if reverse else parts)
            outs.append(np.moveaxis(y, 0, norm_axis("Scan", axis, y.ndim)))
        return state, outs


def _length(node: str, seqs: List[np.ndarray]) -> int:
    lengths = {len(s) for s in seqs}
    if len(lengths) > 1:
        raise InputError("Scan %r: the scan inputs have different lengths %s" % (node, sorted(lengths)))
    return lengths.pop() if lengths else 0


@kernel("Scan")
def scan(ctx, *rest, body=None, num_scan_inputs=None, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None, directions=None):
    node = ctx.node_name
    if body is None or num_scan_inputs is None:
        raise GraphError("Scan %r needs a body and num_scan_inputs" % node)
    m, old = int(num_scan_inputs), ctx.opset < 9
    lens = rest[0] if old else None
    inputs = rest[1 if old else 0:len(rest) - body.n_outer]
    n_state = len(inputs) - m
    if n_state < 0 or body.n_formal != len(inputs):
        raise GraphError("Scan %r: %d inputs with %d scan inputs, but its body takes %d"
                         % (node, len(inputs), m, body.n_formal))
    n_out = len(body.graph.output) - n_state
    in_dirs = _per(directions if old else scan_input_directions, m, "the scan directions", node)
    if old:
        return _scan8(ctx, inputs, n_state, in_dirs, lens, _Run(node, body, rest[len(rest) - body.n_outer:],
                                                                 [0] * n_out, [0] * n_out))
    in_axes = _per(scan_input_axes, m, "scan_input_axes", node)
    run = _Run(node, body, rest[len(rest) - body.n_outer:], _per(scan_output_axes, n_out, "scan_output_axes", node),
               _per(scan_output_directions, n_out, "scan_output_directions", node))
    seqs = []
    for x, axis, reverse in zip(inputs[n_state:], in_axes, in_dirs):
        x = np.moveaxis(np.asarray(x), norm_axis("Scan", axis, np.ndim(x)), 0)
        seqs.append(x[::-1] if reverse else x)
    state, outs = run(list(inputs[:n_state]), seqs, _length(node, seqs))
    return tuple(state) + tuple(outs)


def _scan8(ctx, inputs, n_state: int, in_dirs: List[int], lens, run: _Run) -> tuple:
    """Scan-8: axis 0 of every input is the batch, axis 1 the sequence; each element scanned alone."""
    batch = {np.shape(x)[0] for x in inputs}
    if len(batch) != 1:
        raise InputError("Scan %r: the inputs' batch sizes differ: %s" % (ctx.node_name, sorted(batch)))
    n_batch = batch.pop()
    states, outs = [], []
    for b in range(n_batch):
        seqs = [x[b][::-1] if reverse else x[b] for x, reverse in zip(inputs[n_state:], in_dirs)]
        full = _length(ctx.node_name, seqs)
        steps = full if lens is None else int(np.asarray(lens).reshape(-1)[b])
        if steps != full:
            raise InputError("Scan %r: sequence_lens %d for batch element %d is shorter than its sequence (%d); "
                             "pytrain runs Scan-8 on whole sequences only" % (ctx.node_name, steps, b, full))
        s, o = run([x[b] for x in inputs[:n_state]], seqs, steps)
        states.append(s)
        outs.append(o)
    return tuple(np.stack([s[k] for s in states]) for k in range(n_state)) + \
        tuple(np.stack([o[k] for o in outs]) for k in range(len(run.out_axes)))
