"""pytrain vs its peers, natively and in the browser: one command.

    python bench/run.py [--quick] [--only native|browser|app|gemm] [--workloads mlp,cnn,emb,mobilenet,bert]
                        [--repeat N] [--merge]

Every row runs ``--repeat`` times (default 3), the repeats alternating with the row's peers over
the whole run; the report gives each row's min / median / max, each target ratio's range over
the repeats, and flags rows whose spread is over 25%.  A full run (no --only, no --quick, default
--out) appends its target ratios to bench/history.json, which RESULTS.md shows as a table.

Writes bench/results.json and bench/RESULTS.md.  Needs bench/.venv-ort and
bench/node_modules (see bench/README.md); rows whose runtime is missing are
reported as errors rather than stopping the run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache"
ORT_PY = HERE / ".venv-ort" / "bin" / "python"
RUNNER = HERE / "native_runner.py"
sys.path.insert(0, str(HERE))

import report  # noqa: E402
from app_start import AppSite, run_app_only, run_app_start  # noqa: E402
from gemm_bench import run_gemm  # noqa: E402
from report_format import log  # noqa: E402


# --- preparation ---------------------------------------------------------------------------

def prepare_models(names: List[str]) -> None:
    """Export each workload's ONNX model, batch and TF.js weights into .cache/models/<name>."""
    import workloads

    for n in names:
        workloads.write_inputs(workloads.WORKLOADS[n], CACHE / "models" / n)


def build_pytrain_wheel() -> Path:
    """pip wheel of the checkout, built from a temporary copy so the checkout gets no build/."""
    out = CACHE / "pytrain.whl"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "setup.py", "setup.cfg", "README.md", "LICENSE"):
            if (ROOT / name).exists():
                shutil.copy2(ROOT / name, src / name)
        shutil.copytree(ROOT / "pytrain", src / "pytrain",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        wheels = Path(tmp) / "wheels"
        res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                              "--no-build-isolation", "-q", str(src), "-w", str(wheels)],
                             capture_output=True, text=True)
        found = sorted(wheels.glob("pytrain-*.whl")) if res.returncode == 0 else []
        if found:
            shutil.copy2(found[0], out)
        else:  # no usable build backend: a zip of the package is all the page unpacks
            log(f"  pip wheel failed ({res.stderr.strip()[-200:]}); zipping pytrain/ instead")
            with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
                for p in sorted((ROOT / "pytrain").rglob("*")):
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                        z.write(p, p.relative_to(ROOT).as_posix())
    return out


def run_json(cmd: List[str], env: Optional[dict] = None, timeout: float = 1800) -> dict:
    """Run a runner subprocess and parse the JSON on its last stdout line."""
    full_env = dict(os.environ, **(env or {}))
    res = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {res.returncode}:\n"
                           f"{res.stderr.strip()[-1500:]}")
    return json.loads(lines[-1])


def pytrain_env(blas_threads: int = 0) -> dict:
    env = {"PYTHONPATH": str(ROOT)}
    if blas_threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(blas_threads)
    return env


def generate_artifacts(names: List[str], results: dict) -> None:
    """ORT's and pytrain's artifact generation, each timed in its own process."""
    for n in names:
        model = CACHE / "models" / n / "model.onnx"
        for runtime, py, env in (("ort", str(ORT_PY), None),
                                 ("pytrain", sys.executable, pytrain_env())):
            if runtime == "ort" and n in LORA_WORKLOADS:
                continue   # onnxruntime-training has no LoRA
            row = {"workload": n, "runtime": runtime}
            try:
                row.update(run_json([py, str(RUNNER), "gen", "--runtime", runtime, "--model",
                                     str(model), "--out", str(CACHE / "art" / runtime / n)], env))
                log(f"  gen {runtime:8s} {n}: {row['gen_ms']:.1f} ms")
            except Exception as e:  # keep going: the row shows the error
                row["error"] = str(e)
                log(f"  gen {runtime:8s} {n}: ERROR {str(e)[:300]}")
            results["gen"].append(row)


# --- rows ----------------------------------------------------------------------------------

def native_rows(steps: dict) -> List[dict]:
    """(label, runtime, python, extra args, env) of every native row."""
    ort_args = ["--warmup", str(steps["native_warmup"]), "--steps", str(steps["native_steps"])]
    rows = []
    for threads, tag in ((1, "1 thread"), (0, "default threads")):
        t = ["--threads", str(threads)]
        rows.append(dict(label=f"pytrain (CPython, numpy, {tag})", runtime="pytrain",
                         py=sys.executable, args=ort_args + t, env=pytrain_env(threads)))
    for threads, tag in ((1, "1 thread"), (0, "default threads")):
        rows.append(dict(label=f"onnxruntime-training 1.19.2 ({tag})", runtime="ort",
                         py=str(ORT_PY), args=ort_args + ["--threads", str(threads)], env=None,
                         workloads=NOT_LORA))
    for threads, tag in ((1, "1 thread"), (0, "default threads")):
        rows.append(dict(label=f"PyTorch {torch_version()} ({tag})", runtime="torch",
                         py=sys.executable, args=ort_args + ["--threads", str(threads)], env=None))
    return rows


NOISY_SPREAD = 0.25   # a row whose (max - min) / min over its repeats exceeds this is flagged


def summarize_repeats(runs: List[dict]) -> dict:
    """One row from its repeats (in repeat order): the repeat with the median step time stands for
    the row (its cold start, memory, losses); ``repeats`` keeps every repeat's median step time
    (None where that repeat failed) so the report can pair repeats of peers measured side by side."""
    ok = [r for r in runs if "error" not in r and r.get("step_ms")]
    if not ok:
        return dict(runs[-1], repeats=[None] * len(runs))
    times = sorted(r["step_ms"] for r in ok)
    med = median(times)
    rep = min(ok, key=lambda r: abs(r["step_ms"] - med))
    out = dict(rep)
    out.update(step_ms=med, step_ms_lo=times[0], step_ms_hi=times[-1],
               spread=(times[-1] - times[0]) / times[0], noisy=(times[-1] - times[0]) / times[0] > NOISY_SPREAD,
               repeats=[r.get("step_ms") if "error" not in r else None for r in runs],
               cold_ms_repeats=[r.get("cold_ms") for r in runs])
    if len(ok) < len(runs):
        out["failed_repeats"] = len(runs) - len(ok)
    return out


def median(xs: List[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _measure_rows(names: List[str], rows: List[dict], repeat: int, group: str, runtime_of,
                  measure, summary, after_pass=None) -> List[dict]:
    """Every row for every workload, ``repeat`` times over: each pass measures every row once, so
    a row's repeats alternate with its peers' and a busy spell on the shared machine hits all
    of them. ``measure(workload, row)`` gives the figures, ``summary(rec)`` a log line's tail,
    ``after_pass(i)`` runs after pass i (the web app's start-up uses it)."""
    runs: Dict[tuple, List[dict]] = {}
    for i in range(repeat):
        for n in names:
            for row in rows:
                if n not in row.get("workloads", (n,)):
                    continue  # a runtime without this workload (TF.js has only the small models)
                rec = {"workload": n, "group": group, "label": row["label"], "runtime": runtime_of(row)}
                try:
                    rec.update(measure(n, row))
                    log(f"  {n:4s} {row['label']:55s} {rec['step_ms']:9.3f} ms/step  {summary(rec)}")
                except Exception as e:
                    rec["error"] = str(e)
                    log(f"  {n:4s} {row['label']:55s} ERROR {str(e)[:400]}")
                runs.setdefault((n, group, row["label"]), []).append(rec)
        if after_pass is not None:
            after_pass(i)
    return [summarize_repeats(v) for v in runs.values()]


def run_native(names: List[str], steps: dict, results: dict, repeat: int) -> None:
    def measure(n: str, row: dict) -> dict:
        cmd = [row["py"], str(RUNNER), "train", "--runtime", row["runtime"], "--workload", n,
               "--dir", str(CACHE / "art" / row["runtime"] / n), "--batch", str(CACHE / "models" / n / "batch.npz")]
        return run_json(cmd + row["args"], row["env"])

    results["rows"] += _measure_rows(
        names, native_rows(steps), repeat, "native", lambda row: row["runtime"], measure,
        lambda rec: f"cold {rec['cold_ms']:7.0f} ms  peak {rec['peak_rss_mb']:6.1f} MB  loss {rec['first_loss']:.5f}")


TFJS_WORKLOADS = ("mlp", "cnn", "emb")   # keep in sync with workloads.TFJS_WORKLOADS (run.py imports no torch)
#: fine-tuned with LoRA (workloads.LORA_WORKLOADS): pytrain (native and in the browser) and PyTorch + peft
#: rows only (onnxruntime-training/-web and TF.js have no LoRA)
LORA_WORKLOADS = ("gpt2_lora",)
NOT_LORA = ("mlp", "cnn", "emb", "mobilenet", "bert")
#: issue 32's OCR CNNs (workloads.OCR_WORKLOADS): onnxruntime-training 1.19.2 trains none of them (RESULTS.md's
#: native CNN section says why), so the tab's peer is onnxruntime-web's inference, beside pytrain's inference
#: and its training step
OCR_WORKLOADS = ("mobilenetv3", "dbnet", "crnn")


#: step counts of the real models in the browser, where one step takes 0.05-1 s: onnxruntime-web's
#: 2,000 warm-up steps (its speed-up over the first ~1,500 is a small-model effect) would take
#: 10 minutes a row for BERT.
REAL_MODEL_STEPS = {"mobilenet": dict(ort_web_warmup=200, ort_web_steps=50, pyodide_warmup=3, pyodide_steps=15),
                    "bert": dict(ort_web_warmup=200, ort_web_steps=50, pyodide_warmup=3, pyodide_steps=15),
                    "gpt2_lora": dict(pyodide_warmup=3, pyodide_steps=15),
                    # issue 32's OCR CNNs (workloads.OCR_WORKLOADS): 0.1-0.5 s a step in the tab; their
                    # onnxruntime-web rows are inference (10-100 ms)
                    **{n: dict(pyodide_warmup=3, pyodide_steps=15, ort_web_warmup=20, ort_web_steps=50)
                       for n in OCR_WORKLOADS}}


#: every browser row warms up for at least this long as well as for its step count: V8 runs a fresh
#: wasm module from its baseline compiler and optimizes a function only after it has run a while
#: (pytrain's helper threads reached their optimized code only after hundreds of MLP steps), so
#: equal step counts would not be equal warm-ups; onnxruntime-web's 2,000 steps take 1.5 s on the MLP.
BROWSER_WARMUP_MS = 3000


def workload_steps(n: str, steps: dict) -> dict:
    """The step counts for workload ``n``: the run's, capped by REAL_MODEL_STEPS for the real models."""
    caps = REAL_MODEL_STEPS.get(n, {})
    return {k: min(v, caps[k]) if k in caps else v for k, v in steps.items()}


def browser_rows() -> List[dict]:
    """(label, page, counts: which step-count keys, extra query, isolated) of every browser row."""
    pyo, ortw, tfjs = ("pyodide_warmup", "pyodide_steps"), ("ort_web_warmup", "ort_web_steps"), ("tfjs_warmup", "tfjs_steps")
    rows = [
        dict(label="pytrain (Pyodide 0.17.1, numpy)", page="pytrain.html", counts=pyo, extra="&gemm=0", isolated=False),
        dict(label="pytrain (Pyodide 0.17.1 + wasm kernels)", page="pytrain.html", counts=pyo, extra="&gemm=1",
             isolated=False),
        # the kernels' helper threads (web/kernels/kernels.js startThreads) need COOP/COEP; pytrain.html
        # then runs in a worker (the calling thread waits for its helpers with Atomics.wait)
        dict(label="pytrain (Pyodide 0.17.1 + wasm kernels, 2 threads, COOP/COEP)", page="pytrain.html", counts=pyo,
             extra="&gemm=1&threads=2", isolated=True),
        dict(label="onnxruntime-web 1.19.2 training (1 thread)", page="ort.html", counts=ortw, extra="&threads=1",
             isolated=False),
        dict(label="onnxruntime-web 1.19.2 training (2 threads, COOP/COEP)", page="ort.html", counts=ortw,
             extra="&threads=2", isolated=True),
        dict(label="TensorFlow.js 4.22 wasm (1 thread)", page="tfjs.html", counts=tfjs, extra="&threads=1",
             isolated=False, workloads=TFJS_WORKLOADS),
        dict(label="TensorFlow.js 4.22 wasm (2 threads, COOP/COEP)", page="tfjs.html", counts=tfjs,
             extra="&threads=2", isolated=True, workloads=TFJS_WORKLOADS),
    ]
    rows += [dict(label="pytrain inference (Pyodide 0.17.1 + wasm kernels%s)" % tag, page="pytrain.html", counts=pyo,
                  extra="&gemm=1&infer=1" + q, isolated=bool(q), workloads=OCR_WORKLOADS)
             for tag, q in (("", ""), (", 2 threads, COOP/COEP", "&threads=2"))]
    rows += [dict(label="onnxruntime-web 1.19.2 inference (%s)" % tag, page="ort.html", counts=ortw,
                  extra="&infer=1&threads=%d" % t, isolated=t > 1, workloads=OCR_WORKLOADS)
             for t, tag in ((1, "1 thread"), (2, "2 threads, COOP/COEP"))]
    for row in rows:   # pytrain.html trains a LoRA workload's artifacts as any other (the adapters alone train)
        if row["page"] != "pytrain.html" and "workloads" not in row:
            row["workloads"] = NOT_LORA
    return rows


#: run.py --kernels: the query the pytrain rows add (pages/pytrain.js ?kernels=)
KERNELS_QUERY = [""]


def page_url(row: dict, n: str, steps: dict) -> str:
    st = workload_steps(n, steps)
    warmup, count = row["counts"]
    kernels = KERNELS_QUERY[0] if row["page"] == "pytrain.html" else ""
    return (f"/bench/pages/{row['page']}?workload={n}&warmup={st[warmup]}&warmup_ms={st.get('browser_warmup_ms', 0)}"
            f"&steps={st[count]}{row['extra']}{kernels}")


def run_browser(names: List[str], steps: dict, results: dict, with_gemm: bool,
                verbose: bool, repeat: int, rows: Optional[List[str]] = None) -> None:
    """Every browser row, or (``rows``: label substrings) only those rows, without the app's
    start-up, generation and GEMM sections."""
    from browser import BrowserSession

    picked = [r for r in browser_rows() if not rows or any(k in r["label"] for k in rows)]
    with BrowserSession(verbose=verbose) as s, AppSite() as site:
        results["env"]["chromium"] = s.version
        results["rows"] += _measure_rows(
            names, picked, repeat, "browser",
            lambda row: row["page"].split(".")[0],
            lambda n, row: s.run_page(page_url(row, n, steps), isolated=row["isolated"]),
            lambda rec: (f"cold {rec['cold_ms']:7.0f} ms  wasm {rec['wasm_memory_mb']:6.1f} MB  "
                         f"{rec['bytes_gzip'] / 2**20:5.1f} MB gz  loss {rec['first_loss']:.5f}"),
            after_pass=None if rows else lambda i: run_app_start(results, s, site))   # one start-up per pass
        if rows:
            return
        for n in [n for n in names if n not in LORA_WORKLOADS]:   # (pytrain.html?gen=1 adds no adapters)
            # artifact generation inside the browser (pytrain is pure Python: it can)
            rec = {"workload": n, "runtime": "pytrain-pyodide"}
            try:
                rec.update(s.run_page(f"/bench/pages/pytrain.html?workload={n}&gen=1"))
                log(f"  gen pytrain in Pyodide {n}: {rec['gen_ms']:.1f} ms")
            except Exception as e:
                rec["error"] = str(e)
                log(f"  gen pytrain in Pyodide {n}: ERROR {str(e)[:300]}")
            results["gen"].append(rec)
        if with_gemm:
            run_gemm(results, s)


# --- environment ---------------------------------------------------------------------------

def torch_version() -> str:
    try:
        import torch

        return torch.__version__.split("+")[0]
    except ImportError:
        return "?"


HISTORY = HERE / "history.json"


def load_history() -> List[dict]:
    try:
        return json.loads(HISTORY.read_text())
    except (OSError, ValueError):
        return []


def git_commit() -> str:
    """Short HEAD, with "+" when the working tree has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return head + ("+" if dirty else "") if head else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def npm_version(pkg: str) -> str:
    p = HERE / "node_modules" / pkg / "package.json"
    return json.loads(p.read_text())["version"] if p.exists() else "missing"


def environment() -> dict:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    env = {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform(),
           "python": platform.python_version(), "load_avg_start": os.getloadavg()}
    for mod in ("numpy", "onnx", "onnxruntime", "torch"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            env[mod] = "missing"
    try:
        sys.path.insert(0, str(ROOT))
        import pytrain

        env["pytrain"] = pytrain.__version__
    except ImportError:
        env["pytrain"] = "missing"
    try:
        out = subprocess.run([str(ORT_PY), "-c", "import onnxruntime, numpy, onnx; print("
                              "onnxruntime.__version__, numpy.__version__, onnx.__version__)"],
                             capture_output=True, text=True, timeout=120).stdout.split()
        env["ort_venv"] = {"onnxruntime-training": out[0], "numpy": out[1], "onnx": out[2]}
    except Exception:
        env["ort_venv"] = "missing"
    try:
        env["node"] = subprocess.run(["node", "--version"], capture_output=True,
                                     text=True).stdout.strip()
    except OSError:
        env["node"] = "missing"
    for pkg in ("@pyodide/pyodide", "onnxruntime-web", "@tensorflow/tfjs",
                "@tensorflow/tfjs-backend-wasm"):
        env[pkg] = npm_version(pkg)
    return env


# --- main ----------------------------------------------------------------------------------

def step_counts(args) -> dict:
    if args.quick:
        base = dict(native_warmup=3, native_steps=10, pyodide_warmup=1, pyodide_steps=3,
                    ort_web_warmup=20, ort_web_steps=20, tfjs_warmup=3, tfjs_steps=10, browser_warmup_ms=0)
    else:
        base = dict(native_warmup=20, native_steps=200, pyodide_warmup=10, pyodide_steps=60,
                    ort_web_warmup=2000, ort_web_steps=300, tfjs_warmup=30, tfjs_steps=100,
                    browser_warmup_ms=BROWSER_WARMUP_MS)
    for k in base:
        v = getattr(args, k.replace("-", "_"), None)
        if v is not None:
            base[k] = v
    return base


def merge_results(base: dict, new: dict, names: List[str]) -> dict:
    """``base`` with ``new``'s rows and artifact timings for ``names`` in place of its own (same
    workload and group), and a note of the merged run under "merged" (the report names it)."""
    groups = {r["group"] for r in new["rows"]}
    keep = [r for r in base.get("rows", []) if not (r["workload"] in names and r["group"] in groups)]
    if new.get("rows_only"):   # a --rows run replaces those rows alone (the workloads' other rows stay)
        measured = {(r["workload"], r["group"], r["label"]) for r in new["rows"]}
        keep = [r for r in base.get("rows", []) if (r["workload"], r["group"], r["label"]) not in measured]
    base["rows"] = keep + new["rows"]
    gens = {(g["workload"], g["runtime"]) for g in new.get("gen", [])}
    base["gen"] = [g for g in base.get("gen", []) if (g["workload"], g["runtime"]) not in gens] + new.get("gen", [])
    base.setdefault("steps_real", {}).update(new.get("steps_real") or {})
    sections = [key for key in ("network", "app_runs", "app_transfer", "widget_runs") if new.get(key)]
    for key in sections:   # (--only network / app: that section measured anew)
        base[key] = new[key]
    if not groups:   # a run of sections only: the note names them
        names = ["the first step over a network" if k == "network" else "the app's start-up"
                 for k in sections if k not in ("app_transfer", "widget_runs")]
        groups = set(sections)
    base.setdefault("merged", []).append({k: new.get(k) for k in ("started", "commit", "wall_s", "repeat", "steps",
                                                                  "rows_only")}
                                         | {"workloads": names, "groups": sorted(groups),
                                            "load_avg": [new["env"].get("load_avg_start"),
                                                         new["env"].get("load_avg_end")]})
    return base


def main(argv: Optional[list] = None) -> None:
    ap = argparse.ArgumentParser(description="pytrain vs peers (native and browser)")
    ap.add_argument("--quick", action="store_true", help="few steps: a smoke run")
    ap.add_argument("--only", choices=["native", "browser", "app", "gemm", "network"],
                    help="one part: native rows, browser rows (+ app start-up), the app start-up alone, GEMM, "
                         "the first step over an emulated network (bench/network.py)")
    ap.add_argument("--workloads", default="mlp,cnn,emb,mobilenet,bert")
    ap.add_argument("--verbose", action="store_true", help="echo browser console output")
    ap.add_argument("--rows", help="browser rows whose label contains one of these comma-separated strings "
                    "(e.g. 'wasm kernels,onnxruntime-web'); no start-up, generation or GEMM sections")
    ap.add_argument("--kernels", choices=["plain", "fma"],
                    help="the wasm kernels' build the pytrain rows run (default: the browser's, as the app picks: "
                         "kernels-fma.wasm where it has relaxed SIMD); for A/B runs")
    ap.add_argument("--out", default=str(HERE), help="where results.json/RESULTS.md go")
    ap.add_argument("--merge", action="store_true",
                    help="put this run's rows into the results.json already in --out, replacing that file's "
                         "rows of the same workloads and groups (e.g. new workloads measured after a full run)")
    ap.add_argument("--repeat", type=int,
                    help="measure every row this many times, alternating with its peers; the report "
                         "gives min / median / max (default 3; 1 with --quick)")
    for k in ("native_warmup", "native_steps", "pyodide_warmup", "pyodide_steps",
              "ort_web_warmup", "ort_web_steps", "tfjs_warmup", "tfjs_steps", "browser_warmup_ms"):
        ap.add_argument("--" + k.replace("_", "-"), dest=k, type=int)
    args = ap.parse_args(argv)
    names = [w for w in args.workloads.split(",") if w]
    args.repeat = args.repeat or (1 if args.quick else 3)
    steps = step_counts(args)
    if args.kernels:
        KERNELS_QUERY[0] = "&kernels=" + args.kernels
    t0 = time.time()
    results = {"env": environment(), "steps": steps, "quick": args.quick, "repeat": args.repeat, "rows": [], "gen": [],
               "steps_real": {n: workload_steps(n, steps) for n in names if n in REAL_MODEL_STEPS},
               "started": time.strftime("%Y-%m-%d %H:%M:%S"), "rows_only": args.rows}
    log(f"machine: {results['env']['cpu']} x{results['env']['cores']}, "
        f"load {results['env']['load_avg_start']}")
    try:
        if args.only == "gemm":
            run_gemm(results)
        elif args.only == "app":
            run_app_only(results, args.repeat, args.verbose)
        elif args.only == "network":
            import network

            network.run(results, args.repeat, args.verbose)
        else:
            log("preparing models, wheel and artifacts")
            prepare_models(names)
            if args.only != "native":
                build_pytrain_wheel()
            generate_artifacts(names, results)
            if args.only in (None, "native"):
                log("native rows")
                run_native(names, steps, results, args.repeat)
            if args.only in (None, "browser"):
                log("browser rows")
                run_browser(names, steps, results, with_gemm=True, verbose=args.verbose, repeat=args.repeat,
                            rows=args.rows.split(",") if args.rows else None)
                if not args.rows:   # --rows: those rows alone
                    log("first step over an emulated network")
                    import network

                    network.run(results, args.repeat, args.verbose)
    except Exception:
        results["fatal"] = traceback.format_exc()
        log(results["fatal"])
    results["env"]["load_avg_end"] = os.getloadavg()
    results["wall_s"] = time.time() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results["commit"] = git_commit()
    history = load_history()
    if args.only is None and not args.quick and out.resolve() == HERE and not results.get("fatal"):
        history.append(report.history_entry(results))
        HISTORY.write_text(json.dumps(history, indent=1) + "\n")
    if args.merge and (out / "results.json").exists():
        results = merge_results(json.loads((out / "results.json").read_text()), results, names)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "RESULTS.md").write_text(report.render(results, history))
    log(f"wrote {out / 'results.json'} and {out / 'RESULTS.md'} ({results['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
