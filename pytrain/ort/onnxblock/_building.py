"""onnxblock's machinery: the model accessor (``base`` / ``empty_base``), ``ForwardBlock`` and
``TrainingBlock``, built on pytrain's blocks and artifact generator."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Optional, Sequence, Set, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.generator.blocks import Block, BuildContext
from pytrain.errors import ArtifactError
from pytrain.engine.graph import NameScope, all_names
from pytrain.proto import ModelProto, TensorProto, ValueInfoProto, make_model, make_opsetid, \
    make_value_info, opset_version
from pytrain.proto.onnx_pb import TypeProto, TypeProtoSequence, TypeProtoTensor

#: the default-domain opset of an empty base (ORT takes onnx's newest; 17 is what pytrain exports)
EMPTY_BASE_OPSET = 17


def _onnx() -> Any:
    try:
        import onnx
        return onnx
    except ImportError:  # Pyodide: pytrain's own protobuf classes stand in
        return None


def to_pytrain(model: Any) -> ModelProto:
    """A private pytrain copy of an onnx or pytrain ModelProto."""
    return ModelProto.FromString(model.SerializeToString())


def like(template: Any, message: Any) -> Any:
    """``message`` (a pytrain proto) as an object of ``template``'s class (onnx's or pytrain's)."""
    if isinstance(template, type(message)):
        return message
    return type(template).FromString(message.SerializeToString())


def user_class(kind: str) -> Any:
    """onnx's message class ``kind`` when onnx is installed (what ORT returns), pytrain's otherwise."""
    onnx = _onnx()
    if onnx is not None:
        return getattr(onnx, kind)
    return {"ModelProto": ModelProto, "TensorProto": TensorProto}[kind]


def as_user(message: Any, kind: str) -> Any:
    cls = user_class(kind)
    return message if isinstance(message, cls) else cls.FromString(message.SerializeToString())


def write_back(target: Any, model: ModelProto) -> None:
    """Replace ``target``'s content (the accessor's model, modified in place as ORT does)."""
    if isinstance(target, ModelProto):
        for slot in ModelProto.__slots__:
            setattr(target, slot, getattr(model, slot))
    else:
        target.Clear()
        target.ParseFromString(model.SerializeToString())


def sequence_value_info(name: str, elem_type: int = dtypes.FLOAT) -> ValueInfoProto:
    return ValueInfoProto(name=name, type=TypeProto(sequence_type=TypeProtoSequence(
        elem_type=TypeProto(tensor_type=TypeProtoTensor(elem_type=elem_type)))))


class ModelAccessor:
    """Holds the model blocks build on (ORT's ``model_accessor.ModelAccessor``)."""

    def __init__(self, model: Any) -> None:
        self._model = model

    @property
    def model(self) -> Any:
        return self._model


_ACCESSORS: List[ModelAccessor] = []


def current_accessor() -> ModelAccessor:
    if not _ACCESSORS:
        raise ArtifactError("a block builds on a base model: call it inside `with onnxblock.base(model):` "
                            "or `with onnxblock.empty_base():`")
    return _ACCESSORS[-1]


@contextlib.contextmanager
def base(model: Any) -> Iterator[ModelAccessor]:
    """Blocks called inside build on (a copy of) ``model``, an onnx or pytrain ModelProto."""
    acc = ModelAccessor(type(model).FromString(model.SerializeToString()))
    _ACCESSORS.append(acc)
    try:
        yield acc
    finally:
        _ACCESSORS.pop()


@contextlib.contextmanager
def empty_base(opset_version: Optional[int] = None) -> Iterator[ModelAccessor]:
    """Blocks called inside build on an empty model (e.g. an optimizer graph)."""
    opset = int(opset_version or EMPTY_BASE_OPSET)
    empty = make_model(_empty_graph(), [make_opsetid("", opset)])
    acc = ModelAccessor(as_user(empty, "ModelProto"))
    _ACCESSORS.append(acc)
    try:
        yield acc
    finally:
        _ACCESSORS.pop()


def _empty_graph() -> Any:
    from pytrain.proto import make_graph
    return make_graph([], "onnxblock", [], [])


def mark_sequence(ctx: BuildContext, name: str) -> None:
    """Record that ``name`` is a sequence (a ForwardBlock does not declare it as a tensor output)."""
    ctx.__dict__.setdefault("ort_sequences", set()).add(name)


def declare_output(ctx: BuildContext, vi: ValueInfoProto) -> None:
    """A graph output the block declares itself (e.g. an optimizer's updated sequences)."""
    ctx.__dict__.setdefault("ort_outputs", []).append(vi)


def add_metadata(ctx: BuildContext, key: str, value: str) -> None:
    ctx.__dict__.setdefault("ort_metadata", {})[key] = value


def build_on_base(block: Block, args: Sequence[Any], kwargs: Any) -> Tuple[ModelProto, List[str], BuildContext]:
    """Run ``block.build`` on the accessor's model; returns the extended model (pytrain proto, outputs
    not yet set), the names the block returned, and the build context."""
    acc = current_accessor()
    before = to_pytrain(acc.model)
    g = before.graph
    opset = opset_version(before) or EMPTY_BASE_OPSET
    known = list(g.input) + list(g.output) + list(g.value_info) + [
        make_value_info(t.name, t.data_type, [int(d) for d in t.dims]) for t in g.initializer]
    ctx = BuildContext(NameScope(all_names(g) | {t.name for t in g.initializer}), known, opset)
    block.base = acc.model  # ORT's blocks may read and extend the base model while building
    with ctx:
        result = block.build(*args, **kwargs)
    after = to_pytrain(acc.model)  # with what build() added to the base itself
    ag = after.graph
    ag.node.extend(ctx.nodes)
    ag.input.extend(ctx.new_inputs)
    ag.initializer.extend(ctx.initializer_protos())
    domains = {o.domain for o in after.opset_import}
    for n in ctx.nodes:
        if n.domain not in domains and n.domain != "ai.onnx":
            after.opset_import.append(make_opsetid(n.domain, 1 if n.domain else EMPTY_BASE_OPSET))
            domains.add(n.domain)
    names = list(result) if isinstance(result, (tuple, list)) else [result]
    return after, names, ctx


def output_infos(ctx: BuildContext, names: Sequence[str]) -> List[ValueInfoProto]:
    """Tensor outputs for ``names`` (their known type, float otherwise); sequences are left out."""
    seqs: Set[str] = ctx.__dict__.get("ort_sequences", set())
    out = []
    for n in names:
        if n in seqs:
            continue
        elem, shape = ctx.types.get(n, (0, None))
        out.append(make_value_info(n, elem or dtypes.FLOAT, shape))
    return out + list(ctx.__dict__.get("ort_outputs", []))


class ForwardBlock(Block):
    """A block whose call extends the base model into a forward model whose outputs are what
    ``build`` returns (ORT's ``onnxblock.ForwardBlock``)."""

    def __init__(self) -> None:
        self.base = None
        self._model: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if BuildContext.active():
            return self.build(*args, **kwargs)  # nested inside another block or generate_artifacts
        model, names, ctx = build_on_base(self, args, kwargs)
        del model.graph.output[:]
        model.graph.output.extend(output_infos(ctx, names))
        from pytrain.proto.onnx_pb import StringStringEntryProto
        for k, v in sorted(ctx.__dict__.get("ort_metadata", {}).items()):
            model.metadata_props.append(StringStringEntryProto(key=k, value=v))
        from pytrain.ort._interface import standard_ops
        standard_ops(model)
        acc = current_accessor()
        write_back(acc.model, model)
        self._model = acc.model
        return names[0] if len(names) == 1 else tuple(names)

    def to_model_proto(self) -> Any:
        if self._model is None:
            raise ArtifactError("Please build the forward model first (call the block inside onnxblock.base).")
        return self._model


class TrainingBlock(Block):
    """A block whose call builds the training model (forward, loss, gradients with ORT's
    accumulation interface) and the eval model (ORT's ``onnxblock.TrainingBlock``)."""

    def __init__(self) -> None:
        self.base = None
        self._requires_grad: List[str] = []
        self._frozen_params: List[str] = []
        self._parameters: Optional[Tuple[list, list]] = None
        self._training_model: Any = None
        self._eval_model: Any = None

    def requires_grad(self, argument_name: str, value: bool = True) -> None:
        """Mark an initializer (or a graph input) as needing a gradient, or as frozen (value False)."""
        if value:
            if argument_name not in self._requires_grad:
                self._requires_grad.append(argument_name)
            if argument_name in self._frozen_params:
                self._frozen_params.remove(argument_name)
        else:
            if argument_name in self._requires_grad:
                self._requires_grad.remove(argument_name)
            if argument_name not in self._frozen_params:
                self._frozen_params.append(argument_name)

    def parameters(self) -> Tuple[list, list]:
        """(trainable, frozen) parameters as TensorProtos, in the model's initializer order."""
        if self._parameters is None:
            raise RuntimeError("Please build the training model first before trying to retrieve the parameters.")
        return self._parameters

    def to_model_proto(self) -> Tuple[Any, Any]:
        if self._training_model is None:
            raise RuntimeError("Please build the training model first before trying to export it.")
        return self._training_model, self._eval_model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from pytrain.generator.artifacts import generate_artifacts
        from pytrain.ort._eval import ort_eval_model
        from pytrain.ort._interface import to_ort_interface

        model, names, ctx = build_on_base(self, args, kwargs)
        g = model.graph
        del g.output[:]
        g.output.extend(output_infos(ctx, names))
        inits = [t for t in g.initializer]
        trainable = [t for t in inits if t.name in self._requires_grad]
        frozen = [t for t in inits if t.name in self._frozen_params]
        input_names = {v.name for v in g.input} - {t.name for t in inits}
        input_grads = [n for n in self._requires_grad if n in input_names]
        arts = generate_artifacts(model, requires_grad=[t.name for t in trainable],
                                  frozen_params=[t.name for t in frozen], loss=None,
                                  loss_input_names=[names[0]], additional_output_names=names[1:],
                                  allow_no_trainable=True, input_grads=input_grads)
        training = to_ort_interface(ModelProto.FromString(arts.training_model))
        self._training_model = as_user(training, "ModelProto")
        self._eval_model = as_user(ort_eval_model(ModelProto.FromString(arts.eval_model), model), "ModelProto")
        self._parameters = ([as_user(t, "TensorProto") for t in trainable],
                            [as_user(t, "TensorProto") for t in frozen])
        return names[0] if len(names) == 1 else tuple(names)


def tensors_to_parameters(parameters: Tuple[Sequence[Any], Sequence[Any]], nominal: bool = False) -> Any:
    """(trainable, frozen) TensorProtos -> pytrain checkpoint Parameters."""
    from collections import OrderedDict

    from pytrain.checkpoint import Parameter
    from pytrain.proto import to_array

    out: "OrderedDict[str, Parameter]" = OrderedDict()
    trainable, frozen = parameters
    for group, trains in ((trainable, True), (frozen, False)):
        for t in group:
            pt = TensorProto.FromString(t.SerializeToString())
            arr = to_array(pt, "parameter %r" % pt.name)
            out[pt.name] = Parameter(pt.name, None if nominal else arr, trains, tuple(arr.shape), arr.dtype)
    return out


def random_uniform(shape: Sequence[int], bound: float, seed: Optional[int] = None) -> np.ndarray:
    rng = np.random.RandomState(seed)
    return rng.uniform(-bound, bound, size=tuple(shape)).astype(np.float32)
