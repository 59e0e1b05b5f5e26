"""Small inference models built in pure Python (no torch, no onnx): what the web page and the
command line start from when the user brings data but no model. Weights use PyTorch's default
initialisation (Kaiming-uniform with a = sqrt(5)), so they train like torch's layers do."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import ArtifactError
from pytrain.engine.graph import NameScope, all_names
from pytrain.proto import (ModelProto, from_array, make_graph, make_model, make_node, make_opsetid,
                           make_value_info)

OPSET = 17
_ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu", "leaky_relu")


def _uniform(rng: np.random.Generator, bound: float, shape: Tuple[int, ...]) -> np.ndarray:
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def _linear(rng: np.random.Generator, fan_in: int, fan_out: int) -> Tuple[np.ndarray, np.ndarray]:
    bound = 1.0 / math.sqrt(fan_in)  # torch.nn.Linear's default init
    return _uniform(rng, bound, (fan_out, fan_in)), _uniform(rng, bound, (fan_out,))


def _activation(kind: str, x: str, y: str, name: str) -> list:
    if kind == "relu":
        return [make_node("Relu", [x], [y], name=name)]
    if kind == "tanh":
        return [make_node("Tanh", [x], [y], name=name)]
    if kind == "sigmoid":
        return [make_node("Sigmoid", [x], [y], name=name)]
    if kind == "leaky_relu":
        return [make_node("LeakyRelu", [x], [y], name=name, alpha=0.01)]
    if kind == "gelu":  # erf form, valid at opset 17 (Gelu the op arrives in opset 20)
        s, e, a, m = (name + "/" + t for t in ("scaled", "erf", "plus1", "half"))
        return [make_node("Div", [x, "gelu_sqrt2"], [s], name=s), make_node("Erf", [s], [e], name=e),
                make_node("Add", [e, "gelu_one"], [a], name=a), make_node("Mul", [x, a], [m], name=m),
                make_node("Mul", [m, "gelu_half"], [y], name=name)]
    raise ArtifactError("unknown activation %r; choose one of %s" % (kind, ", ".join(_ACTIVATIONS)))


def mlp(input_size: int, hidden_sizes: Sequence[int], output_size: int, activation: str = "relu",
        seed: int = 0, input_name: str = "input", output_name: str = "output") -> ModelProto:
    """A multi-layer perceptron: [Gemm -> activation] * len(hidden_sizes) -> Gemm.

    Input ``input`` float32 [N, input_size]; output ``output`` float32 [N, output_size] (raw scores).
    """
    if activation not in _ACTIVATIONS:
        raise ArtifactError("unknown activation %r; choose one of %s" % (activation, ", ".join(_ACTIVATIONS)))
    rng = np.random.default_rng(seed)
    sizes = [int(input_size)] + [int(h) for h in hidden_sizes] + [int(output_size)]
    if any(s < 1 for s in sizes):
        raise ArtifactError("layer sizes must be positive, got %s" % sizes)
    nodes, inits = [], []
    x = input_name
    for i in range(len(sizes) - 1):
        w, b = _linear(rng, sizes[i], sizes[i + 1])
        wn, bn = "fc%d.weight" % (i + 1), "fc%d.bias" % (i + 1)
        inits += [from_array(w, wn), from_array(b, bn)]
        last = i == len(sizes) - 2
        y = output_name if last else "fc%d" % (i + 1)
        nodes.append(make_node("Gemm", [x, wn, bn], [y], name="fc%d" % (i + 1), transB=1))
        if not last:
            nodes += _activation(activation, y, "act%d" % (i + 1), "act%d" % (i + 1))
            x = "act%d" % (i + 1)
    if activation == "gelu":
        inits += [from_array(np.array(math.sqrt(2.0), np.float32), "gelu_sqrt2"),
                  from_array(np.array(1.0, np.float32), "gelu_one"),
                  from_array(np.array(0.5, np.float32), "gelu_half")]
    graph = make_graph(nodes, "mlp", [make_value_info(input_name, dtypes.FLOAT, ["N", sizes[0]])],
                       [make_value_info(output_name, dtypes.FLOAT, ["N", sizes[-1]])], inits)
    return make_model(graph, [make_opsetid("", OPSET)])


def cnn(input_shape: Sequence[int] = (1, 28, 28), num_classes: int = 10, channels: Sequence[int] = (8, 16),
        hidden: int = 64, seed: int = 0, input_name: str = "input", output_name: str = "output") -> ModelProto:
    """A small LeNet-like CNN: [Conv 3x3 pad 1 -> Relu -> MaxPool 2] per entry of ``channels``,
    then Flatten -> Gemm(hidden) -> Relu -> Gemm(num_classes). Input float32 [N, C, H, W]."""
    c, h, w = (int(d) for d in input_shape)
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = input_name
    for i, out_c in enumerate(channels):
        fan_in = c * 9
        bound = 1.0 / math.sqrt(fan_in)
        wn, bn = "conv%d.weight" % (i + 1), "conv%d.bias" % (i + 1)
        inits += [from_array(_uniform(rng, bound, (out_c, c, 3, 3)), wn), from_array(_uniform(rng, bound, (out_c,)), bn)]
        conv, act, pool = "conv%d" % (i + 1), "relu%d" % (i + 1), "pool%d" % (i + 1)
        nodes += [make_node("Conv", [x, wn, bn], [conv], name=conv, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  make_node("Relu", [conv], [act], name=act),
                  make_node("MaxPool", [act], [pool], name=pool, kernel_shape=[2, 2], strides=[2, 2])]
        x, c, h, w = pool, out_c, h // 2, w // 2
    if h < 1 or w < 1:
        raise ArtifactError("input %s is too small for %d pooling stages" % (list(input_shape), len(channels)))
    nodes.append(make_node("Flatten", [x], ["flat"], name="flatten", axis=1))
    flat = c * h * w
    for i, (fi, fo) in enumerate(((flat, hidden), (hidden, num_classes))):
        wt, b = _linear(rng, fi, fo)
        wn, bn = "fc%d.weight" % (i + 1), "fc%d.bias" % (i + 1)
        inits += [from_array(wt, wn), from_array(b, bn)]
        src = "flat" if i == 0 else "fc1_act"
        out = "fc1" if i == 0 else output_name
        nodes.append(make_node("Gemm", [src, wn, bn], [out], name="fc%d" % (i + 1), transB=1))
        if i == 0:
            nodes.append(make_node("Relu", ["fc1"], ["fc1_act"], name="fc1_relu"))
    graph = make_graph(nodes, "cnn", [make_value_info(input_name, dtypes.FLOAT, ["N"] + [int(d) for d in input_shape])],
                       [make_value_info(output_name, dtypes.FLOAT, ["N", num_classes])], inits)
    return make_model(graph, [make_opsetid("", OPSET)])


def with_standardization(model: ModelProto, mean: np.ndarray, std: np.ndarray,
                         input_name: Optional[str] = None) -> Tuple[ModelProto, List[str]]:
    """A copy of ``model`` computing ``(x - mean) / std`` on its input before anything reads it,
    so a model trained on standardised features takes the raw ones. Returns the model and the
    names of the two new initializers (mean, std), which callers freeze rather than train."""
    model = ModelProto.FromString(model.SerializeToString())
    g = model.graph
    if input_name is None:
        inits = {t.name for t in g.initializer}
        input_name = [v.name for v in g.input if v.name not in inits][0]
    scope = NameScope(all_names(g))
    mean_name, std_name = scope.fresh(input_name + ".mean"), scope.fresh(input_name + ".std")
    centred, scaled = scope.fresh(input_name + ".centred"), scope.fresh(input_name + ".standardized")
    for n in g.node:
        n.input[:] = [scaled if i == input_name else i for i in n.input]
    g.initializer.extend([from_array(np.asarray(mean, np.float32), mean_name),
                          from_array(np.asarray(std, np.float32), std_name)])
    g.node[0:0] = [make_node("Sub", [input_name, mean_name], [centred], name="standardize/sub"),
                   make_node("Div", [centred, std_name], [scaled], name="standardize/div")]
    return model, [mean_name, std_name]


def to_bytes(model: ModelProto) -> bytes:
    """The serialized model."""
    return model.SerializeToString()
