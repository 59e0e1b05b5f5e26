"""The OCR CNNs' inference in the tab (issue 32): where the time goes per op type, and A/B runs of two
checkouts' wheels against onnxruntime-web in one browser session.

    python bench/tab_nodes.py --nodes                      # ms per op type and the top nodes, 1 thread
    python bench/tab_nodes.py --ab /work/main --ort --repeat 3   # this checkout vs another, alternating, + ORT-web
    python bench/tab_nodes.py --ab /work/main --train            # the same for a training step
    python bench/tab_nodes.py --workloads gpt2_lora --train --ab /work/main --threads 2 --repeat 4   # GPT-2 LoRA

pages/pytrain.html?infer=1&nodes=1 times each node of the InferenceSession's plan (Plan.time_nodes, what
native_runner.py infer --nodes does natively); ?wheel=NAME picks bench/.cache/NAME.whl, so the same page,
kernels.wasm and Chromium run both checkouts' Python (the other checkout's pytrain/ is zipped as is: a wheel
is a zip the page unpacks onto sys.path); the other checkout's built web/kernels/*.wasm are copied to
bench/.cache/ab_other_kernels and run with its Python (?kdir=). --threads 2 runs both with a helper thread.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402
from report_format import log  # noqa: E402

WORKLOADS = run.OCR_WORKLOADS


def zip_checkout(root: Path, name: str) -> str:
    """``root``'s pytrain/ as .cache/NAME.whl; returns NAME."""
    out = run.CACHE / (name + ".whl")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted((root / "pytrain").rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                z.write(p, p.relative_to(root).as_posix())
    return name


def copy_kernels(root: Path, name: str) -> str:
    """``root``'s built web/kernels/*.wasm into .cache/NAME (pytrain.html ?kdir=NAME runs them); returns NAME."""
    import shutil

    out = run.CACHE / name
    out.mkdir(parents=True, exist_ok=True)
    for p in (root / "web" / "kernels").glob("*.wasm"):
        shutil.copyfile(p, out / p.name)
    return name


def by_op(nodes: list) -> list:
    acc: dict = {}
    for key, ms in nodes:
        op = key.split(" ", 1)[0]
        n, t = acc.get(op, (0, 0.0))
        acc[op] = (n + 1, t + ms)
    return sorted(((op, n, t) for op, (n, t) in acc.items()), key=lambda r: -r[2])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--nodes", action="store_true", help="time per node and op type (this checkout)")
    ap.add_argument("--profile", action="store_true", help="cProfile of the timed calls, by own time (this checkout)")
    ap.add_argument("--ab", help="another checkout whose pytrain/ runs alternating with this one's")
    ap.add_argument("--ort", action="store_true", help="onnxruntime-web 1.19.2 inference rows too")
    ap.add_argument("--train", action="store_true", help="a training step (pytrain's artifacts, AdamW) instead of "
                    "inference (onnxruntime-training cannot train these models: no peer row)")
    ap.add_argument("--threads", type=int, default=1, help="the kernels' threads (2: a cross-origin isolated "
                    "page with a helper thread)")
    ap.add_argument("--torch", action="store_true", help="PyTorch (+ peft for gpt2_lora) natively after each pass's "
                    "pages, 1 and the default threads (native_runner.py): the ratio at the same time, same load")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--out", help="JSON of every measurement")
    args = ap.parse_args(argv)
    names = [w for w in args.workloads.split(",") if w]
    run.prepare_models(names)
    run.build_pytrain_wheel()
    if args.train:  # this checkout's artifacts (both wheels read the same files)
        for n in names:
            art = run.CACHE / "art" / "pytrain" / n
            run.run_json([sys.executable, str(run.RUNNER), "gen", "--runtime", "pytrain", "--model",
                          str(run.CACHE / "models" / n / "model.onnx"), "--out", str(art)], run.pytrain_env())
    mode = "" if args.train else "&infer=1"
    wheels = ["pytrain"] + ([zip_checkout(Path(args.ab), "ab_other")] if args.ab else [])
    # the other checkout runs its own kernels too (its Python may route to exports this checkout's lack)
    kdirs = {"ab_other": "&kdir=" + copy_kernels(Path(args.ab), "ab_other_kernels")} if args.ab else {}
    threads = "&threads=%d" % args.threads if args.threads > 1 else ""
    from browser import BrowserSession

    rows, out = [], {}
    with BrowserSession() as s:
        for rep in range(args.repeat):
            for n in names:
                q = f"workload={n}&warmup={args.warmup}&steps={args.steps}"
                for w in (wheels if rep % 2 == 0 else wheels[::-1]):
                    extra = "&nodes=1" if args.nodes else "&profile=1" if args.profile else ""
                    # (per node: a cross-origin isolated page, whose performance.now() ticks in 5 us, not 100)
                    rec = s.run_page(f"/bench/pages/pytrain.html?{q}&gemm=1{mode}&wheel={w}{extra}"
                                     f"{kdirs.get(w, '')}{threads}", isolated=bool(extra or threads))
                    if args.profile:
                        log(f"{n} [{w}]\n" + rec["profile"])
                        continue
                    if args.nodes:  # per node: the mean over the steps, and its fastest step (less of the load)
                        nodes, fastest = rec["nodes"]["nodes"], dict(rec["nodes"].get("nodes_min", []))
                        ms = rec["nodes"]["step_ms"]
                        log(f"{n} [{w}] {ms:.1f} ms a step, nodes {sum(v for _, v in nodes):.1f} ms "
                            f"(fastest steps {sum(fastest.values()):.1f} ms)")
                        mins = {op: t for op, _, t in by_op(list(fastest.items()))}
                        for op, cnt, t in by_op(nodes):
                            log(f"   {op:24s} x{cnt:3d} {t:8.2f} ms  (fastest {mins.get(op, 0.0):7.2f})")
                        for key, t in nodes[:args.top]:
                            log(f"     {t:7.2f}  (fastest {fastest.get(key, 0.0):6.2f})  {key}")
                        out.setdefault(n, {}).setdefault(w + " min", []).append(sum(fastest.values()))
                    else:
                        ms = rec["step_ms"]
                        log(f"{n} [{w}] {ms:.1f} ms (min {rec['step_ms_min']:.1f})  load {os.getloadavg()[0]:.1f}")
                        out.setdefault(n, {}).setdefault(w + " min", []).append(rec["step_ms_min"])
                    out.setdefault(n, {}).setdefault(w, []).append(ms)
                    rows.append(dict(workload=n, wheel=w, rec=rec))
                if args.torch:
                    for t in (1, 0):
                        tag = "torch %s" % ("1 thread" if t == 1 else "default threads")
                        rec = run.run_json([sys.executable, str(run.RUNNER), "train", "--runtime", "torch",
                                            "--workload", n, "--dir", str(run.CACHE / "art" / "torch" / n),
                                            "--batch", str(run.CACHE / "models" / n / "batch.npz"),
                                            "--warmup", "3", "--steps", "20", "--threads", str(t)])
                        log(f"{n} [{tag}] {rec['step_ms']:.1f} ms (min {rec['step_ms_min']:.1f})  "
                            f"load {os.getloadavg()[0]:.1f}")
                        out.setdefault(n, {}).setdefault(tag, []).append(rec["step_ms"])
                        out.setdefault(n, {}).setdefault(tag + " min", []).append(rec["step_ms_min"])
                if args.ort and not args.train:
                    rec = s.run_page(f"/bench/pages/ort.html?workload={n}&warmup=20&steps=50&infer=1&threads=1")
                    log(f"{n} [onnxruntime-web] {rec['step_ms']:.1f} ms (min {rec['step_ms_min']:.1f})")
                    out.setdefault(n, {}).setdefault("ort-web", []).append(rec["step_ms"])
                    out.setdefault(n, {}).setdefault("ort-web min", []).append(rec["step_ms_min"])
    for n, per in out.items():  # medians over the passes of each page's median and of its fastest step
        cells = []
        for w, v in per.items():
            peer = per.get("ort-web min" if w.endswith(" min") else "ort-web")
            if peer is None and "torch 1 thread" in per:   # PyTorch's better row, pass by pass (the same load)
                tail = " min" if w.endswith(" min") else ""
                peer = [min(a, b) for a, b in zip(per["torch 1 thread" + tail], per["torch default threads" + tail])]
            med, ort = statistics.median(v), statistics.median(peer) if peer else None
            cells.append(f"{w} {med:.1f} ms" + (f" (x{med / ort:.2f})" if ort and not w.startswith(("ort-web", "torch"))
                                                 else ""))
        log(f"{n}: " + ", ".join(cells) + f"  [{len(next(iter(per.values())))} passes]")
    if args.out:
        Path(args.out).write_text(json.dumps(dict(summary=out, rows=rows), indent=1))


if __name__ == "__main__":
    main()
