"""CPU seconds of a pytest run's whole process tree, per test file and per test (not part of the suite).

The machine is shared, so wall time says little: this counts the CPU time of every process the run starts
(pytest, its xdist workers, Chromium, node, flwr's processes, venv builds), including orphans, by making itself
the tree's child subreaper (prctl PR_SET_CHILD_SUBREAPER) and reaping with os.wait4. Per file and per test, a
plugin loaded into each pytest process (``-p suite_cpu``) adds up the CPU of the whole tree (this wrapper's, whose
reaped orphans count in its children's time) around each test's set-up, call and tear-down (module fixtures go to the
test that set them up or tore them down; session fixtures such as the site build and Chromium's launch to the first
test that asked for them). Run one stream (``-p no:xdist``) for exact per-file numbers; under xdist each worker
counts only its own process subtree (a process orphaned mid-test, such as Chromium when playwright's driver ends
first, then leaves it), so per-file numbers are rough there and only the total is exact.

    nice python bench/suite_cpu.py [--out cpu.json] [--top 20] -- tests/browser/test_webgpu.py -x -q
    python bench/suite_cpu.py --compare before.json after.json
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

PR_SET_CHILD_SUBREAPER = 36
TICK = float(os.sysconf("SC_CLK_TCK"))
_DIR_ENV = "SUITE_CPU_DIR"
_ROOT_ENV = "SUITE_CPU_ROOT"


# ---------------------------------------------------------------------------- a process subtree's CPU time
def _stats() -> Iterator[tuple]:
    """(pid, ppid, own + waited-for children's CPU s) of every process /proc shows."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry.name) as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # after the command name, which may hold spaces
        yield int(entry.name), int(fields[1]), sum(float(v) for v in fields[11:15]) / TICK


def tree_cpu(root: int) -> float:
    """CPU s of ``root`` and its live descendants, each with its reaped children's (so nothing ended is lost)."""
    stats = list(_stats())
    children: Dict[int, List[int]] = {}
    cpu = {}
    for pid, ppid, seconds in stats:
        children.setdefault(ppid, []).append(pid)
        cpu[pid] = seconds
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


# ---------------------------------------------------------------------------- the plugin in each pytest process
class _Account:
    def __init__(self, root: int) -> None:
        self.tests: Dict[str, float] = {}
        self.root = root
        self.last = tree_cpu(root)

    def charge(self, nodeid: str) -> None:
        now = tree_cpu(self.root)
        self.tests[nodeid] = self.tests.get(nodeid, 0.0) + now - self.last
        self.last = now


_ACCOUNT: Optional[_Account] = None


def pytest_sessionstart(session) -> None:
    global _ACCOUNT
    if os.environ.get(_DIR_ENV):
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        _ACCOUNT = _Account(os.getpid() if worker else int(os.environ[_ROOT_ENV]))


def pytest_collection_finish(session) -> None:
    if _ACCOUNT is not None:
        _ACCOUNT.charge("(collection)")


def pytest_runtest_logfinish(nodeid, location) -> None:
    if _ACCOUNT is not None:
        _ACCOUNT.charge(nodeid)


def pytest_sessionfinish(session) -> None:
    if _ACCOUNT is None:
        return
    _ACCOUNT.charge("(session end)")
    path = Path(os.environ[_DIR_ENV]) / ("%d.json" % os.getpid())
    path.write_text(json.dumps(_ACCOUNT.tests))


# ---------------------------------------------------------------------------- the wrapper
def _reap_all(child: subprocess.Popen) -> int:
    """Wait for pytest and every orphan reparented to us; pytest's exit status."""
    status = None
    while True:
        try:
            pid, raw, _ = os.wait4(-1, 0)
        except ChildProcessError:
            return status if status is not None else 1
        if pid == child.pid:
            child.returncode = status = os.waitstatus_to_exitcode(raw)


def run(pytest_args: List[str]) -> dict:
    """Run pytest with the plugin under this process as subreaper; the whole tree's CPU s and the per-test split."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    here = str(Path(__file__).resolve().parent)
    with tempfile.TemporaryDirectory() as parts:
        env = dict(os.environ, **{_DIR_ENV: parts, _ROOT_ENV: str(os.getpid())})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        start = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "suite_cpu"] + pytest_args, env=env)
        status = _reap_all(child)
        wall = time.monotonic() - start
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        tests: Dict[str, float] = {}
        for part in Path(parts).glob("*.json"):
            for nodeid, seconds in json.loads(part.read_text()).items():
                tests[nodeid] = tests.get(nodeid, 0.0) + seconds
    return {"args": pytest_args, "status": status, "wall_s": round(wall, 1),
            "cpu_s": round(used.ru_utime + used.ru_stime, 1), "tests": {k: round(v, 2) for k, v in tests.items()},
            "load_avg": os.getloadavg()[0]}


def per_file(tests: Dict[str, float]) -> Dict[str, float]:
    files: Dict[str, float] = {}
    for nodeid, seconds in tests.items():
        key = nodeid.split("::")[0]
        files[key] = files.get(key, 0.0) + seconds
    return files


def report(result: dict, top: int) -> str:
    files = per_file(result["tests"])
    lines = ["pytest exit %s, wall %.0f s, CPU of the whole tree %.1f s (per file below: %.1f s), load %.1f"
             % (result["status"], result["wall_s"], result["cpu_s"], sum(files.values()), result["load_avg"])]
    lines += ["%8.1f  %s" % (s, f) for f, s in sorted(files.items(), key=lambda kv: -kv[1])]
    lines.append("slowest tests (CPU s, set-up and tear-down included):")
    lines += ["%8.1f  %s" % (s, t) for t, s in sorted(result["tests"].items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(lines)


def compare(before: dict, after: dict) -> str:
    b, a = per_file(before["tests"]), per_file(after["tests"])
    lines = ["%8s %8s %8s  file" % ("before", "after", "saved")]
    for f in sorted(set(b) | set(a), key=lambda f: -(b.get(f, 0.0))):
        lines.append("%8.1f %8.1f %8.1f  %s" % (b.get(f, 0.0), a.get(f, 0.0), b.get(f, 0.0) - a.get(f, 0.0), f))
    lines.append("%8.1f %8.1f %8.1f  whole tree" % (before["cpu_s"], after["cpu_s"], before["cpu_s"] - after["cpu_s"]))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the result as JSON here")
    parser.add_argument("--top", type=int, default=20, help="how many of the slowest tests to list")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="two --out files, per file")
    opts = parser.parse_args(own)
    if opts.compare:
        print(compare(*(json.loads(Path(p).read_text()) for p in opts.compare)))
        return 0
    result = run(pytest_args)
    print(report(result, opts.top))
    if opts.out:
        Path(opts.out).write_text(json.dumps(result, indent=1))
    return result["status"]


if __name__ == "__main__":
    sys.exit(main())
