"""The exact oracle of quantized files: onnxruntime on the same model with each MatMulInteger written as an int32
MatMul (onnxruntime's own AVX2 uint8 x int8 kernel saturates int16 pair sums; docs/quantized.md)."""
from __future__ import annotations

from onnx import TensorProto, helper


def exact_integer_matmuls(model: "onnx.ModelProto") -> bytes:
    """The model with each MatMulInteger as Cast-to-int32, Sub of the zero points, int32 MatMul: what the spec
    computes, which onnxruntime then runs without its saturating kernel."""
    nodes = []
    for n in model.graph.node:
        if n.op_type != "MatMulInteger":
            nodes.append(n)
            continue
        sides = []
        for k in (0, 1):
            c = n.output[0] + "_i%d" % k
            nodes.append(helper.make_node("Cast", [n.input[k]], [c], to=TensorProto.INT32))
            if len(n.input) > k + 2 and n.input[k + 2]:
                z = c + "_zp"
                nodes.append(helper.make_node("Cast", [n.input[k + 2]], [z], to=TensorProto.INT32))
                nodes.append(helper.make_node("Sub", [c, z], [c + "_c"]))
                c += "_c"
            sides.append(c)
        nodes.append(helper.make_node("MatMul", sides, [n.output[0]], name=n.name))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model.SerializeToString()


def ort_run(blob: bytes, feeds):
    """The first output of onnxruntime (one thread) on ``blob``."""
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(blob, opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
