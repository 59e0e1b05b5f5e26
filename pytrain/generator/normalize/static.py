"""Values known when the training model is generated: initializers, Constant nodes, and what is
computed from them and from the static dims of declared shapes (``Shape`` of an input declared
``[1, 16000]``). Control flow's conditions and trip counts are usually such values. A float initializer
of rank 1 or more is not one: it may be a weight, whose value training changes (a condition on it is
decided at run time, pytrain/autodiff/rules/control.py)."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import PytrainError
from pytrain.engine.executor import kernel_attributes
from pytrain.ops import OpContext, get_kernel
from pytrain.proto import GraphProto, to_array, value_info_type

#: ops never folded: random draws, control flow (its bodies may read anything), and the like
_NOT_FOLDED = frozenset(["If", "Loop", "Scan", "Dropout", "RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Bernoulli", "Multinomial"])
_SHAPE_OPS = frozenset(["Shape", "Size"])
#: the largest value folded (a condition or a trip count is a few elements; weights are not folded)
_MAX_ELEMENTS = 1 << 16


class StaticValues:
    """``value(name)``: the array ``name`` always holds, or None when it depends on data."""

    def __init__(self, graph: GraphProto, opset: int) -> None:
        self.opset = opset
        self.producers = {o: n for n in graph.node for o in n.output if o}
        self.inits = {t.name: t for t in graph.initializer}
        self.declared: Dict[str, List[Optional[int]]] = {}  # declared shapes, None for a dim not a number
        for v in list(graph.input) + list(graph.value_info) + list(graph.output):
            try:
                _, shape = value_info_type(v)
            except PytrainError:
                continue
            if shape is not None:
                self.declared[v.name] = [d if isinstance(d, int) else None for d in shape]
        self.known: Dict[str, Optional[np.ndarray]] = {}

    def dims(self, name: str) -> Optional[List[int]]:
        """``name``'s shape when it is static (declared with numbers only, or a known value)."""
        dims = self.declared.get(name)
        if dims is not None and None not in dims:
            return [int(d) for d in dims]
        v = self.value(name)
        return None if v is None else list(v.shape)

    def value(self, name: str, depth: int = 0) -> Optional[np.ndarray]:
        if name in self.known:
            return self.known[name]
        got: Optional[np.ndarray] = None
        if name in self.inits:
            t = self.inits[name]
            size = int(np.prod([int(d) for d in t.dims], dtype=np.int64))
            weight = dtypes.is_float(t.data_type) and len(t.dims) > 0
            got = to_array(t, "initializer %r" % name) if size <= _MAX_ELEMENTS and not weight else None
        elif name in self.producers and depth < 64:
            got = self._fold(name, depth)
        self.known[name] = got
        return got

    def _fold(self, name: str, depth: int) -> Optional[np.ndarray]:
        n = self.producers[name]
        info = get_kernel(n.op_type, n.domain or "")
        if info is None or n.op_type in _NOT_FOLDED or n.domain not in ("", "ai.onnx"):
            return None
        if n.op_type == "Gather" and len(n.input) == 2:
            picked = self._dim_of_shape(n)
            if picked is not None:
                return picked
        args = []
        for k, i in enumerate(n.input):
            if not i:
                args.append(None)
            elif n.op_type in _SHAPE_OPS and k == 0 and self.dims(i) is not None:
                # only the shape is read: a zero-strided stand-in of the declared shape
                args.append(np.broadcast_to(np.zeros((), np.float32), self.dims(i)))
            else:
                v = self.value(i, depth + 1)
                if v is None:
                    return None
                args.append(v)
        try:
            outs = info.fn(OpContext(opset=self.opset, node_name=n.name), *args, **kernel_attributes(n, info))
        except PytrainError:
            return None
        for o, v in zip(n.output, outs):
            if o and isinstance(v, np.ndarray) and v.size <= _MAX_ELEMENTS:
                self.known[o] = v
        return self.known.get(name)

    def _dim_of_shape(self, n) -> Optional[np.ndarray]:
        """Gather of dims out of Shape(x) (``x.shape[1]``), where those dims are declared numbers
        although others (the batch) are not."""
        shape = self.producers.get(n.input[0])
        if shape is None or shape.op_type != "Shape" or len(shape.attribute) or n.attribute and any(
                a.name == "axis" and a.i != 0 for a in n.attribute):
            return None
        dims, idx = self.declared.get(shape.input[0]), self.value(n.input[1])
        if dims is None or idx is None or idx.dtype.kind not in "iu":
            return None
        try:
            picked = np.asarray(dims, dtype=object)[idx.astype(np.int64)]
        except IndexError:
            return None
        if any(d is None for d in np.ravel(picked)):
            return None
        return np.asarray(picked, dtype=np.int64)

    def axis_dim(self, name: str, axis: int) -> Optional[int]:
        """Dim ``axis`` of ``name`` when it is a declared number (or ``name`` is known)."""
        dims = self.declared.get(name)
        if dims is None:
            v = self.value(name)
            dims = None if v is None else list(v.shape)
        if dims is None or not -len(dims) <= axis < len(dims):
            return None
        return dims[axis]
