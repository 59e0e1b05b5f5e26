"""One native benchmark row, run in its own process so peak RSS and cold start are its own.

    python native_runner.py gen   --runtime pytrain|ort --model M.onnx --out DIR
    python native_runner.py train --runtime pytrain|ort|torch --dir DIR --workload mlp ...
    python native_runner.py train --runtime pytrain --nodes [--cpu] ...   # time per graph node (a profile)
    python native_runner.py infer --runtime pytrain|ort --model M.onnx --batch B.npz [--nodes]   # inference

Prints one JSON object on its last stdout line.  Runs under the main interpreter
(pytrain, torch) and under bench/.venv-ort (onnxruntime-training 1.19.2, numpy<2),
so it imports nothing heavy at module level and never imports torch for ORT.
"""
from __future__ import annotations

import time

T_START = time.perf_counter()  # cold start counts from here: imports are part of it

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

ART_FILES = ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint")
LR = 1e-3  # keep in sync with workloads.ADAMW
PARITY_STEP = 21  # keep in sync with pages/common.js


def peak_rss_mb() -> float:
    """VmHWM (peak resident set) of this process, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def import_ort_training():
    """onnxruntime.training's __init__ imports torch (for ORTModule/amp), which the on-device
    API does not need and the ORT venv does not have: register the package without running
    its __init__, then import only the submodules used here."""
    import onnxruntime

    if "onnxruntime.training" not in sys.modules:
        pkg = types.ModuleType("onnxruntime.training")
        pkg.__path__ = [os.path.join(os.path.dirname(onnxruntime.__file__), "training")]
        sys.modules["onnxruntime.training"] = pkg
    from onnxruntime.training import api, artifacts

    return onnxruntime, api, artifacts


# --- artifact generation -------------------------------------------------------------------

def gen_ort(model_path: Path, out: Path) -> dict:
    _, _, artifacts = import_ort_training()
    import onnx

    t_imp = time.perf_counter()
    model = onnx.load(str(model_path))
    # what PyTorch trains and what it keeps frozen (workloads.param_lists wrote it beside the model)
    lists_path = model_path.parent / "params.json"
    if lists_path.exists():
        lists = json.loads(lists_path.read_text())
        params, frozen = lists["trainable"], lists["frozen"]
    else:
        params, frozen = [i.name for i in model.graph.initializer], []
    # ORT's LayerNormalization gradient reads the node's optional Mean/InvStdDev outputs and
    # fails when (as in torch's export) the node declares only Y; declaring them is harmless.
    for i, node in enumerate(model.graph.node):
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            node.output.extend([f"ln{i}_mean", f"ln{i}_inv_std_dev"])
    out.mkdir(parents=True, exist_ok=True)
    artifacts.generate_artifacts(model, requires_grad=params, frozen_params=frozen,
                                 loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(out))
    _inference_batchnorm(model, out / "training_model.onnx")
    gen_ms = (time.perf_counter() - t_imp) * 1e3
    # ORT names the checkpoint "checkpoint"; make sure every expected file is there.
    missing = [f for f in ART_FILES if not (out / f).exists()]
    if missing:
        raise RuntimeError(f"ORT did not write {missing} in {out}")
    return {"gen_ms": gen_ms, "import_ms": (t_imp - T_START) * 1e3}


def _inference_batchnorm(model, training_path: Path) -> None:
    """ORT's pre-training transform (onnxruntime PR #7539) turns every BatchNormalization into
    com.microsoft BatchNormInternal with training_mode=1, ignoring the model's training_mode=0: a
    frozen backbone would normalise with batch statistics (MobileNetV2: first loss 2.352 instead of
    PyTorch's 2.303). Put back an inference-mode BatchNormalization where the model had one and
    nothing reads the node's statistics outputs (no gradient flows through a frozen backbone)."""
    import onnx
    from onnx import helper

    eval_bn = {n.output[0] for n in model.graph.node if n.op_type == "BatchNormalization"
               and any(a.name == "training_mode" and a.i == 0 for a in n.attribute)}
    if not eval_bn:
        return
    tm = onnx.load(str(training_path))
    used = {i for n in tm.graph.node for i in n.input} | {o.name for o in tm.graph.output}
    for i, n in enumerate(tm.graph.node):
        if n.op_type == "BatchNormInternal" and n.output[0] in eval_bn and not used & set(n.output[1:]):
            eps = [a for a in n.attribute if a.name in ("epsilon", "momentum")]
            bn = helper.make_node("BatchNormalization", list(n.input), [n.output[0]], name=n.name,
                                  training_mode=0)
            bn.attribute.extend(a for a in eps)
            tm.graph.node[i].CopyFrom(bn)
    onnx.save(tm, str(training_path))


def gen_pytrain(model_path: Path, out: Path) -> dict:
    from pytrain.generator import artifacts

    t_imp = time.perf_counter()
    lora_path = model_path.parent / "lora.json"   # a LoRA workload (workloads.LORA)
    lora = None
    if lora_path.exists():
        from pytrain.engine.lora import LoRA

        lora = LoRA(**json.loads(lora_path.read_text()))
    arts = artifacts.generate_artifacts(model_path.read_bytes(),
                                        loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.AdamW, lora=lora)
    gen_ms = (time.perf_counter() - t_imp) * 1e3
    out.mkdir(parents=True, exist_ok=True)
    for attr, name in zip(("training_model", "eval_model", "optimizer_model", "checkpoint"),
                          ART_FILES):
        (out / name).write_bytes(getattr(arts, attr))
    return {"gen_ms": gen_ms, "import_ms": (t_imp - T_START) * 1e3}


# --- training ------------------------------------------------------------------------------

def session_pytrain(d: Path, threads: int):
    from pytrain.device.api import CheckpointState, Module, Optimizer

    state = CheckpointState.load_checkpoint((d / "checkpoint").read_bytes())
    module = Module((d / "training_model.onnx").read_bytes(), state,
                    (d / "eval_model.onnx").read_bytes())
    optimizer = Optimizer((d / "optimizer_model.onnx").read_bytes(), module)
    if hasattr(optimizer, "set_learning_rate"):
        optimizer.set_learning_rate(LR)
    module.train()
    return _stepper(module, optimizer)


def _stepper(module, optimizer):
    """One training step through ORT's API, which pytrain shares."""
    def step(x, y) -> float:
        loss = module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
        return float(loss)

    return step


def session_ort(d: Path, threads: int):
    ort, api, _ = import_ort_training()
    so = ort.SessionOptions()
    if threads > 0:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    state = api.CheckpointState.load_checkpoint(str(d / "checkpoint"))
    module = api.Module(str(d / "training_model.onnx"), state, str(d / "eval_model.onnx"),
                        device="cpu", session_options=so)
    optimizer = api.Optimizer(str(d / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR)
    module.train()
    return _stepper(module, optimizer)


def session_torch(workload: str, threads: int):
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import workloads

    model = workloads.WORKLOADS[workload].module().train()
    if workloads.WORKLOADS[workload].lora:
        model = workloads.peft_model(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], **workloads.ADAMW)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y) -> float:
        loss = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def node_times(step, x, y, warmup: int, steps: int, top: int = 25, cpu: bool = False) -> dict:
    """pytrain only: wall time per graph node (ms per step, summed over ``steps`` timed steps) and
    per op type, every Plan's compiled step rebuilt with each kernel wrapped in a timer (what
    pages/pytrain.html?nodes=1 does in Pyodide). ``cpu``: this thread's CPU time instead, steadier
    on a shared machine (Plan.time_nodes reads time.perf_counter, so this process's clock is swapped)."""
    import gc

    from pytrain.engine.executor import Plan

    if cpu:
        time.perf_counter = time.thread_time

    acc: dict = {}
    for plan in [o for o in gc.get_objects() if isinstance(o, Plan)]:
        plan.time_nodes(acc, lambda n: (n.op_type, n.name or n.output[0]))
    for _ in range(warmup):
        step(x, y)
    acc.clear()
    t0 = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    total = (time.perf_counter() - t0) * 1e3 / steps
    by_op: dict = {}
    for (op, _), v in acc.items():
        by_op[op] = by_op.get(op, 0.0) + v * 1e3 / steps
    nodes = sorted(((f"{op} {name}", v * 1e3 / steps) for (op, name), v in acc.items()), key=lambda kv: -kv[1])
    return {"step_ms": total, "nodes_ms": sum(by_op.values()), "count": len(acc),
            "by_op": sorted(by_op.items(), key=lambda kv: -kv[1]), "nodes": nodes[:top]}


def infer(args) -> dict:
    """Inference of ``--model`` on the batch's input: pytrain's InferenceSession or onnxruntime's
    (the ORT venv's 1.19.2, default graph optimizations), ``--threads`` intra-op threads."""
    import numpy as np

    x = np.load(Path(args.batch))["input"]
    if args.runtime == "pytrain":
        from pytrain.engine.runtime import InferenceSession

        sess = InferenceSession(Path(args.model).read_bytes())
    else:
        import onnxruntime as ort

        so = ort.SessionOptions()
        if args.threads > 0:
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(args.model), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name

    def step(x, _y) -> float:
        return float(np.asarray(sess.run(None, {name: x})[0]).ravel()[0])

    if args.nodes:
        step(x, None)
        return node_times(step, x, None, args.warmup, args.steps, cpu=args.cpu)
    for _ in range(args.warmup + 1):
        step(x, None)
    times, clock = [], time.process_time if args.cpu else time.perf_counter
    for _ in range(args.steps):
        t0 = clock()
        step(x, None)
        times.append((clock() - t0) * 1e3)
    return {"step_ms": statistics.median(times), "step_ms_min": min(times), "steps": args.steps}


def train(args) -> dict:
    import numpy as np

    batch = np.load(Path(args.batch))
    x, y = batch["input"], batch["labels"]
    if args.runtime == "pytrain" and args.nodes:
        step = session_pytrain(Path(args.dir), args.threads)
        step(x, y)
        return node_times(step, x, y, args.warmup, args.steps, cpu=args.cpu)
    if args.runtime == "pytrain":
        step = session_pytrain(Path(args.dir), args.threads)
    elif args.runtime == "ort":
        step = session_ort(Path(args.dir), args.threads)
    else:
        step = session_torch(args.workload, args.threads)
    first_loss = step(x, y)
    cold_ms = (time.perf_counter() - T_START) * 1e3
    # The loss seen by step PARITY_STEP (after PARITY_STEP - 1 updates) compares optimisers.
    done, parity_loss = 1, None
    for _ in range(args.warmup):
        loss = step(x, y)
        done += 1
        if done == PARITY_STEP:
            parity_loss = loss
    times, loss, clock = [], first_loss, time.process_time if args.cpu else time.perf_counter
    for _ in range(args.steps):
        t0 = clock()
        loss = step(x, y)
        times.append((clock() - t0) * 1e3)
        done += 1
        if done == PARITY_STEP:
            parity_loss = loss
    return {"step_ms": statistics.median(times), "step_ms_min": min(times),
            "cold_ms": cold_ms, "first_loss": first_loss, "last_loss": loss,
            "loss_step21": parity_loss,
            "steps": args.steps, "warmup": args.warmup}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["gen", "train", "infer"])
    ap.add_argument("--runtime", choices=["pytrain", "ort", "torch"], required=True)
    ap.add_argument("--model", help="gen, infer: the ONNX model")
    ap.add_argument("--out", help="gen: artifact directory")
    ap.add_argument("--dir", help="train: artifact directory")
    ap.add_argument("--batch", help="train: batch.npz")
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--threads", type=int, default=0, help="0 = runtime default")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--nodes", action="store_true",
                    help="train, pytrain only: time every graph node instead (a profile, not a row)")
    ap.add_argument("--cpu", action="store_true", help="CPU time, not wall time (with --nodes: this thread's, "
                    "time.thread_time; else this process's, time.process_time: one thread each)")
    args = ap.parse_args()
    if args.mode == "gen":
        fn = gen_ort if args.runtime == "ort" else gen_pytrain
        res = fn(Path(args.model), Path(args.out))
    elif args.mode == "infer":
        res = infer(args)
    else:
        res = train(args)
    res["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
