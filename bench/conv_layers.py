"""Every Conv of a benchmark model timed alone, pytrain's kernel against onnxruntime's (issue 24).

    python bench/conv_layers.py [--workload mobilenet] [--repeat 30]

Runs itself under this interpreter (pytrain's Conv kernel) and under bench/.venv-ort (a one-node
onnxruntime InferenceSession per layer at ORT_ENABLE_EXTENDED, the level whose kernels match what
onnxruntime-training's per-node profile shows: its training session does not take the NCHWc
layout that ORT_ENABLE_ALL gives an inference session), one thread each, the same random input
per layer; prints median CPU ms per call (time.thread_time) and the totals by kind (depthwise,
1x1, full). The layers and their input shapes come from the workload's model.onnx in
bench/.cache/models (run.py writes it).

Alone, a kernel that allocates large fresh arrays pays page faults that it does not pay inside a
training step, where glibc hands back the blocks the previous step freed: MobileNetV2's first
conv takes 4.3 ms here and 0.9 ms CPU per call in its training step.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORT_PY = HERE / ".venv-ort" / "bin" / "python"


def layers(model_path: Path) -> list:
    """(name, input shape, weight shape, group, strides, pads) of every Conv node."""
    import onnx
    from onnx import helper, shape_inference

    m = shape_inference.infer_shapes(onnx.load(str(model_path)))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(m.graph.value_info) + list(m.graph.input)}
    inits = {i.name: list(i.dims) for i in m.graph.initializer}
    out = []
    for n in m.graph.node:
        if n.op_type == "Conv":
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            out.append(dict(name=n.name, x=shapes[n.input[0]], w=inits[n.input[1]], group=a.get("group", 1),
                            strides=list(a.get("strides", [1, 1])), pads=list(a.get("pads", [0, 0, 0, 0]))))
    return out


def _median_ms(fn, repeat: int) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t = time.thread_time()
        fn()
        ts.append(time.thread_time() - t)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def time_layers(runtime: str, specs: list, repeat: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    res = {}
    for s in specs:
        x = rng.standard_normal(s["x"]).astype(np.float32)
        w = rng.standard_normal(s["w"]).astype(np.float32)
        b = rng.standard_normal(s["w"][0]).astype(np.float32)
        attrs = dict(group=s["group"], strides=s["strides"], pads=s["pads"], kernel_shape=s["w"][2:])
        if runtime == "pytrain":
            from pytrain.ops import OpContext, get_kernel

            conv = get_kernel("Conv").fn
            res[s["name"]] = _median_ms(lambda: conv(OpContext(), x, w, b, **attrs), repeat)
        else:
            import onnxruntime as ort
            from onnx import TensorProto, helper, numpy_helper

            g = helper.make_graph([helper.make_node("Conv", ["x", "W", "B"], ["y"], **attrs)], "conv",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, s["x"])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
            model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            model.ir_version = 8
            so = ort.SessionOptions()
            so.intra_op_num_threads = so.inter_op_num_threads = 1
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            res[s["name"]] = _median_ms(lambda: sess.run(None, {"x": x}), repeat)
    return res


def kind(s: dict) -> str:
    if s["group"] > 1:
        return "depthwise"
    return "1x1" if all(k == 1 for k in s["w"][2:]) else "full"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="mobilenet")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--runtime", choices=["pytrain", "ort"], help="internal: time one runtime, print JSON")
    ap.add_argument("--specs", help="internal: the layers as JSON")
    args = ap.parse_args()
    if args.runtime:
        print(json.dumps(time_layers(args.runtime, json.loads(Path(args.specs).read_text()), args.repeat)))
        return
    specs = layers(HERE / ".cache" / "models" / args.workload / "model.onnx")
    spec_file = HERE / ".cache" / f"conv_layers_{args.workload}.json"
    spec_file.write_text(json.dumps(specs))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(HERE.parent))
    got = {}
    for runtime, py in (("pytrain", sys.executable), ("ort", str(ORT_PY))):
        out = subprocess.run([py, __file__, "--runtime", runtime, "--specs", str(spec_file), "--repeat",
                              str(args.repeat)], capture_output=True, text=True, env=env, check=True)
        got[runtime] = json.loads(out.stdout.strip().splitlines()[-1])
    totals: dict = {}
    print("%-62s %-10s %10s %10s" % ("Conv node (input shape, weight shape)", "kind", "pytrain", "ORT"))
    for s in specs:
        k = kind(s)
        p, o = got["pytrain"][s["name"]], got["ort"][s["name"]]
        t = totals.setdefault(k, [0.0, 0.0])
        t[0] += p
        t[1] += o
        parts = s["name"].split("/")
        label = "%s %s %s %s" % (parts[3] if len(parts) > 4 else "", parts[-2], s["x"], s["w"])
        print("%-62s %-10s %10.3f %10.3f" % (label[:62], k, p, o))
    for k, (p, o) in totals.items():
        print("total %-56s %-10s %10.3f %10.3f" % ("", k, p, o))


if __name__ == "__main__":
    main()
