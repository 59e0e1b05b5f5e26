"""Issue 32's CNNs natively, one thread each: pytrain against onnxruntime (inference) and against
onnxruntime-training or, where it cannot train the model, PyTorch (a training step).

    python bench/cnn_speed.py [--workloads mobilenetv3,dbnet,crnn] [--passes 3] [--steps 30]
                              [--pytrain-root DIR]   # another checkout's pytrain (a before/after)
                              [--only inference]     # the inference rows alone (no training artifacts)

Every pass runs every row once, in its own process, pytrain's row next to its peer's (so a busy
spell on the shared machine hits both); a ratio is computed per pass and shown as median
[min - max] over the passes. onnxruntime 1.19.2 and onnxruntime-training 1.19.2 run in
bench/.venv-ort (see README.md); ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS`` = 1 and each
runtime's intra-op threads = 1; times are the process's CPU time per step (``time.process_time``, steadier
than wall time on a shared machine; with one thread each it is the step's compute). Prints a markdown
table (and the load, ``os.getloadavg``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "cnn_speed.json"  # --save: what report.py renders into RESULTS.md (section())
ORT_PY = HERE / ".venv-ort" / "bin" / "python"
CACHE = HERE / ".cache"


def _env(root: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(root))
    return env


def _run(py: str, args: list, root: Path) -> dict:
    p = subprocess.run([py, str(HERE / "native_runner.py")] + args, capture_output=True, text=True,
                       env=_env(root), cwd=str(HERE))
    lines = p.stdout.strip().splitlines()
    if p.returncode or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:200]}
    return json.loads(lines[-1])


def prepare(names: list, root: Path, training: bool = True) -> dict:
    """Models, batches and (``training``) both runtimes' training artifacts; {name: can ORT train it}."""
    sys.path.insert(0, str(HERE))
    import workloads

    ort_trains = {}
    for name in names:
        d = CACHE / "models" / name
        if not (d / "model.onnx").exists():
            workloads.write_inputs(workloads.WORKLOADS[name], d)
        if not training:
            ort_trains[name] = False
            continue
        art = CACHE / "art"
        _run(sys.executable, ["gen", "--runtime", "pytrain", "--model", str(d / "model.onnx"),
                              "--out", str(art / "pytrain" / name)], root)
        gen = _run(str(ORT_PY), ["gen", "--runtime", "ort", "--model", str(d / "model.onnx"),
                                 "--out", str(art / "ort" / name)], root)
        probe = {} if "error" in gen else _run(str(ORT_PY), [
            "train", "--runtime", "ort", "--threads", "1", "--dir", str(art / "ort" / name),
            "--batch", str(d / "batch.npz"), "--warmup", "0", "--steps", "1"], root)
        ort_trains[name] = "step_ms" in probe
        if not ort_trains[name]:
            print("%s: onnxruntime-training cannot train it: %s" % (name, (gen.get("error") or probe.get("error"))),
                  file=sys.stderr)
    return ort_trains


def rows(name: str, ort_trains: bool, steps: int) -> list:
    """(label, python, native_runner arguments) of one workload's rows, pytrain's first in each pair."""
    d = CACHE / "models" / name
    common = ["--threads", "1", "--batch", str(d / "batch.npz"), "--steps", str(steps), "--warmup", "5", "--cpu"]
    infer = ["infer", "--model", str(d / "model.onnx")] + common
    train = ["train", "--workload", name] + common
    peer = (["--runtime", "ort", "--dir", str(CACHE / "art" / "ort" / name)] if ort_trains
            else ["--runtime", "torch"])
    return [("inference", "pytrain", sys.executable, infer + ["--runtime", "pytrain"]),
            ("inference", "onnxruntime", str(ORT_PY), infer + ["--runtime", "ort"]),
            ("training step", "pytrain", sys.executable,
             train + ["--runtime", "pytrain", "--dir", str(CACHE / "art" / "pytrain" / name)]),
            ("training step", "onnxruntime-training" if ort_trains else "PyTorch",
             str(ORT_PY) if ort_trains else sys.executable, train + peer)]


def _span(values: list, fmt: str) -> str:
    return (fmt + " [" + fmt + " – " + fmt + "]") % (statistics.median(values), min(values), max(values))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="mobilenetv3,dbnet,crnn")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--pytrain-root", default=str(HERE.parent))
    ap.add_argument("--save", action="store_true", help="write the per-pass values to bench/cnn_speed.json")
    ap.add_argument("--only", choices=["inference", "training step"], help="one kind of row only")
    args = ap.parse_args()
    names = args.workloads.split(",")
    root = Path(args.pytrain_root).resolve()
    ort_trains = prepare(names, root, training=args.only != "inference")
    load = [os.getloadavg()[0]]
    res: dict = {}
    for _ in range(args.passes):
        for name in names:
            for what, runtime, py, argv in rows(name, ort_trains[name], args.steps):
                if args.only and what != args.only:
                    continue
                r = _run(py, argv, root)
                res.setdefault((name, what, runtime), []).append(r.get("step_ms", float("nan")))
                if "error" in r:
                    print(name, what, runtime, r["error"], file=sys.stderr)
        load.append(os.getloadavg()[0])
    data = {"passes": args.passes, "steps": args.steps, "load": load, "rows": [
        {"model": k[0], "what": k[1], "runtime": k[2], "cpu_ms": v} for k, v in res.items()]}
    if args.save:
        old = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
        RESULTS.write_text(json.dumps(dict(old, **data), indent=1))
    print("\n".join(table(data)))


def table(data: dict) -> list:
    """The rows as markdown: per model and kind, pytrain's and its peer's CPU ms and their ratio per pass."""
    out = ["| model | | pytrain CPU ms / step | peer | peer CPU ms / step | pytrain / peer |",
           "|---|---|---|---|---|---|"]
    rows = data["rows"]
    for i in range(0, len(rows) - 1, 2):
        a, b = rows[i], rows[i + 1]
        ratios = [x / y for x, y in zip(a["cpu_ms"], b["cpu_ms"])]
        out.append("| %s | %s | %s | %s | %s | ×%s |" % (a["model"], a["what"], _span(a["cpu_ms"], "%.1f"), b["runtime"],
                                                          _span(b["cpu_ms"], "%.1f"), _span(ratios, "%.2f")))
    out.append("")
    out.append("load average (1 min) over the run: %s; %d passes, %d timed steps a row"
               % (", ".join("%.1f" % x for x in data["load"]), data["passes"], data["steps"]))
    return out


def section() -> list:
    """RESULTS.md's section from bench/cnn_speed.json (empty when absent)."""
    if not RESULTS.is_file():
        return []
    data = json.loads(RESULTS.read_text())
    out = ["## Issue 32's CNNs natively, one thread (`bench/cnn_speed.py`)", ""] + data.get("intro", [])
    out += [""] + table(data) + [""]
    for name, prof in sorted(data.get("profiles", {}).items()):
        out += ["**%s**: CPU ms per step by op type (`native_runner.py --nodes --cpu`), before -> after" % name, "",
                "| op | before | after |", "|---|---|---|"]
        out += ["| %s | %.2f | %.2f |" % tuple(r) for r in prof] + [""]
    return out + data.get("notes", []) + [""]


if __name__ == "__main__":
    main()
