"""Where one app start's CPU goes in the browser tests (not part of the suite): Chromium launched as
tests/browser/conftest.py launches it (plus any flags given), then ``--rounds`` fresh contexts each opening the site
and waiting for the app to be ready (a first visit, as the tests' fresh contexts), each round's CPU s per Chromium
process type (browser, renderer, gpu-process, utility:network...) and the worker's start-up marks (ms).

    nice python bench/app_start_cpu.py --rounds 3 [--second-visits] [--idle 10] [--flag=--js-flags=--liftoff-only ...]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "browser"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
sys.path.insert(0, str(ROOT / "bench"))

TICK = float(os.sysconf("SC_CLK_TCK"))
#: this process's own CPU (the site's server thread and Playwright's client, as in a pytest process)
SELF = "python (site server, Playwright client)"


def _proc(pid: int):
    try:
        text = Path("/proc/%d/stat" % pid).read_text()
        cmd = Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").split()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), sum(float(v) for v in fields[11:15]) / TICK, [c.decode(errors="replace") for c in cmd]


def _kind(cmd: List[str]) -> str:
    if not cmd:
        return "ended"   # a zombie: its CPU goes to its parent's reaped children's time when reaped
    if "chrom" not in cmd[0]:
        return Path(cmd[0]).name
    args = dict(a[2:].split("=", 1) for a in cmd[1:] if a.startswith("--") and "=" in a)
    kind = args.get("type", "browser")
    if kind == "utility":
        kind += ":" + args.get("utility-sub-type", "?").rsplit(".", 1)[-1]
    return kind


def tree_by_kind(root: int) -> Dict[str, float]:
    """CPU s (own + reaped children's) of ``root``'s descendants, summed per Chromium process type."""
    procs = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            info = _proc(int(entry.name))
            if info:
                procs[int(entry.name)] = info
    children: Dict[int, List[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out: Dict[str, float] = {}
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        _, cpu, cmd = procs[pid]
        kind = _kind(cmd)
        out[kind] = out.get(kind, 0.0) + cpu
        todo.extend(children.get(pid, ()))
    return out


def threads_by_name(root: int, kind: str = "renderer") -> Dict[str, float]:
    """CPU s of the live ``kind`` processes' threads under ``root``, summed per thread name (digits dropped)."""
    out: Dict[str, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        info = _proc(int(entry.name))
        if not info or _kind(info[2]) != kind or not _under(int(entry.name), root):
            continue
        for task in os.scandir("/proc/%s/task" % entry.name):
            try:
                text = Path("/proc/%s/task/%s/stat" % (entry.name, task.name)).read_text()
            except OSError:
                continue
            name = re.sub(r"[0-9]+", "", text[text.index("(") + 1:text.rindex(")")]).strip()
            fields = text[text.rindex(")") + 2:].split()
            out[name] = round(out.get(name, 0.0) + sum(float(v) for v in fields[11:13]) / TICK, 2)
    return {k: v for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v >= 0.02}


def _under(pid: int, root: int) -> bool:
    while pid > 1:
        info = _proc(pid)
        if info is None:
            return False
        pid = info[0]
        if pid == root:
            return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flag", action="append", default=[], help="an extra Chromium flag (repeatable)")
    ap.add_argument("--second-visits", action="store_true", help="one context: round 1 first visit, then second")
    ap.add_argument("--json", help="write the rounds here")
    ap.add_argument("--idle", type=float, default=0.0, help="also the CPU of this many seconds with the app ready")
    args = ap.parse_args()

    import build
    from playwright.sync_api import sync_playwright
    from conftest import CHROMIUM, CHROMIUM_ARGS
    from browser_helpers import Recorder, new_context, open_app, wait_ready

    if build.needs_build(build.SITE):
        build.build(site=build.SITE)
    server, url = build.serve_in_thread(build.SITE)
    rounds = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS + args.flag)
        me = os.getpid()
        shared = new_context(b, Recorder()) if args.second_visits else None
        for i in range(args.rounds):
            before = tree_by_kind(me)
            before[SELF] = sum(os.times()[:2])
            ctx = shared or new_context(b, Recorder())
            page = open_app(ctx, url, Recorder())
            wait_ready(page)
            marks = page.evaluate("() => window.pytrainApp.timing.startup")
            after = tree_by_kind(me)
            after[SELF] = sum(os.times()[:2])
            threads = threads_by_name(me)
            if args.idle:
                page.wait_for_timeout(args.idle * 1000)
                idle = tree_by_kind(me)
                print("   idle %.0f s: %s" % (args.idle, json.dumps({k: round(idle.get(k, 0) - after.get(k, 0), 2)
                                                                     for k in idle if idle.get(k, 0) - after.get(k, 0) >= 0.01})))
            if shared is None:
                ctx.close()
            else:
                page.close()
            kinds = {k: round(after.get(k, 0) - before.get(k, 0), 2) for k in sorted(set(after) | set(before))}
            kinds = {k: v for k, v in kinds.items() if abs(v) >= 0.01}
            marks = {k: v for k, v in (marks or {}).items() if k != "timeOrigin"}
            rounds.append({"cpu": kinds, "total": round(sum(kinds.values()), 2), "marks": marks, "threads": threads})
            print("round %d: %.2f CPU s %s" % (i + 1, rounds[-1]["total"], json.dumps(kinds)))
            print("   marks (ms): %s" % json.dumps(marks))
            print("   renderer threads (CPU s): %s" % json.dumps(threads))
        b.close()
    server.shutdown()
    totals = [r["total"] for r in rounds[1:] or rounds]
    print("median CPU s a start (rounds after the first): %.2f   load %s" % (statistics.median(totals),
                                                                           Path("/proc/loadavg").read_text().split()[:3]))
    if args.json:
        Path(args.json).write_text(json.dumps({"flags": args.flag, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
