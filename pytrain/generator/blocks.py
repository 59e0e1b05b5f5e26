"""Building blocks for losses and other graph pieces, composed in Python (the role ORT's
onnxblock plays). A Block's ``build`` receives tensor names and returns the name of its result;
blocks run inside a :class:`BuildContext` that owns the graph being extended::

    class TwoLosses(blocks.Block):
        def __init__(self):
            self.mse, self.bce, self.add = MSELoss(), BCEWithLogitsLoss(), blocks.Add()
        def build(self, out1, out2):
            return self.add(self.mse(out1, "target1"), self.bce(out2, "target2"))
"""
from __future__ import annotations

import inspect
from typing import Any, List, Optional, Sequence

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import ArtifactError
from pytrain.engine.graph import NameScope, NodeBuilder
from pytrain.proto import ValueInfoProto, make_value_info, value_info_type


class BuildContext(NodeBuilder):
    """The graph a block writes into: nodes, constants, and the new graph inputs (labels)."""

    _stack: List["BuildContext"] = []

    def __init__(self, scope: NameScope, known: Sequence[ValueInfoProto], opset: int) -> None:
        super().__init__(scope)
        self.opset = opset
        self.types = {v.name: value_info_type(v) for v in known}
        self.new_inputs: List[ValueInfoProto] = []

    def __enter__(self) -> "BuildContext":
        self._stack.append(self)   # the class's one stack (shared list), pushed through the instance
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.pop()

    @classmethod
    def active(cls) -> bool:
        """True inside generate_artifacts or another block's build (a BuildContext is open)."""
        return bool(cls._stack)

    @classmethod
    def current(cls) -> "BuildContext":
        if not cls._stack:
            raise ArtifactError("blocks build graphs only inside generate_artifacts (no BuildContext is active)")
        return cls._stack[-1]

    def shape_of(self, name: str) -> Optional[list]:
        return self.types.get(name, (0, None))[1]

    def elem_type_of(self, name: str) -> int:
        return self.types.get(name, (dtypes.FLOAT, None))[0] or dtypes.FLOAT

    def add_input(self, name: str, elem_type: int, shape: Optional[Sequence[Any]]) -> str:
        """Declare a new graph input (a label); reusing a name already declared returns it."""
        if name in self.types:
            if any(v.name == name for v in self.new_inputs):
                return name
            raise ArtifactError("label input name %r is already a tensor of the model; choose another" % name)
        self.scope.taken.add(name)
        vi = make_value_info(name, elem_type, shape)
        self.new_inputs.append(vi)
        self.types[name] = (elem_type, list(shape) if shape is not None else None)
        return name


class Block:
    """A reusable piece of graph. Subclasses implement ``build(*input_names) -> output_name``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.build(*args, **kwargs)

    def build(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def outputs_taken(self, count: int) -> int:
        """How many of a model's first ``count`` outputs this block, as a loss, takes: all of them for
        ``build(*outputs)``, else its parameters without a default (a label's name with a default is not an
        output: a model's second output, e.g. a with-past LM's ``present.0.key``, must not become it)."""
        params = inspect.signature(self.build).parameters.values()
        if any(p.kind == p.VAR_POSITIONAL for p in params):
            return count
        return sum(1 for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))

    @staticmethod
    def ctx() -> BuildContext:
        return BuildContext.current()


class _OpBlock(Block):
    op_type = ""

    def __init__(self, **attrs: Any) -> None:
        self.attrs = attrs

    def build(self, *inputs: str) -> str:
        return self.ctx().op(self.op_type, *inputs, **self.attrs)


def op_block(op_type: str, doc: str) -> type:
    """A block class emitting one ONNX node of ``op_type`` (attributes from its keyword arguments)."""
    return type(op_type, (_OpBlock,), {"op_type": op_type, "__doc__": doc})


Add = op_block("Add", "a + b (broadcasting)")
Sub = op_block("Sub", "a - b (broadcasting)")
Mul = op_block("Mul", "a * b (broadcasting)")
Div = op_block("Div", "a / b (broadcasting)")
Pow = op_block("Pow", "a ** b")
Neg = op_block("Neg", "-x")
Abs = op_block("Abs", "|x|")
Exp = op_block("Exp", "e ** x")
Log = op_block("Log", "ln x")
Sigmoid = op_block("Sigmoid", "1 / (1 + e ** -x)")
Softplus = op_block("Softplus", "ln(1 + e ** x), computed without overflow")
Relu = op_block("Relu", "max(x, 0)")


class Constant(Block):
    """A constant tensor with the dtype of ``like`` when given (float32 otherwise)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def build(self, like: Optional[str] = None) -> str:
        c = self.ctx()
        name = c.const(np.asarray(self.value, dtype=np.float32))
        return c.op("CastLike", name, like) if like else name


class _Reduce(_OpBlock):
    def __init__(self) -> None:
        super().__init__(keepdims=0)  # no axes: every element, in every opset


class ReduceMean(_Reduce):
    """Mean over all elements (a scalar)."""

    op_type = "ReduceMean"


class ReduceSum(_Reduce):
    """Sum over all elements (a scalar)."""

    op_type = "ReduceSum"


def reduce(x: str, reduction: str) -> str:
    """Apply a loss reduction: 'mean', 'sum', or 'none'."""
    if reduction == "mean":
        return ReduceMean()(x)
    if reduction == "sum":
        return ReduceSum()(x)
    if reduction == "none":
        return x
    raise ArtifactError("loss reduction must be 'mean', 'sum' or 'none', got %r" % (reduction,))
