"""Where the suite waits (opt-in: ``PYTRAIN_TEST_IDLE=<file.tsv> python -m pytest ...``): per test, its wall
seconds, the CPU seconds of pytest and every process it started (Chromium, flwr, subprocesses) and the machine's
busy cores over it. ``wall - cpu`` is time the test spent waiting (timers, polls, network, another process's
start-up) rather than computing; the file lists the tests by it, the terminal the worst 15."""
from __future__ import annotations

import os
import resource
import time
from typing import Dict, List, Tuple

import pytest

_TICK = float(os.sysconf("SC_CLK_TCK"))
_ROWS: List[Tuple[float, float, float, float, str]] = []
_LOST: List[str] = []   # tests whose process tree lost a member's CPU seconds: not measured


def _machine_busy() -> float:
    """Busy CPU seconds of the whole machine since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [float(v) for v in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / _TICK


def _tree_cpu() -> float:
    """CPU seconds of this process, its reaped children and every live descendant (with what they reaped)."""
    stats: Dict[int, Tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name) as f:
                    rest = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(name)] = (int(rest[1]), sum(float(v) for v in rest[11:15]) / _TICK)
    me, tree, total = os.getpid(), {os.getpid()}, 0.0
    grew = True
    while grew:
        grew = False
        for pid, (ppid, cpu) in stats.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                total += cpu
                grew = True
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert me in tree
    return total + own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0, c0, m0 = time.monotonic(), _tree_cpu(), _machine_busy()
    yield
    wall, cpu, busy = time.monotonic() - t0, _tree_cpu() - c0, _machine_busy() - m0
    if cpu < 0:   # (a process left the tree unreaped, e.g. re-parented to init: its CPU seconds cannot be told)
        _LOST.append(item.nodeid)
        return
    _ROWS.append((wall - cpu, wall, cpu, busy / wall if wall else 0.0, item.nodeid))


def pytest_sessionfinish(session):
    rows = sorted(_ROWS, reverse=True)
    with open(os.environ["PYTRAIN_TEST_IDLE"], "a") as f:
        for idle, wall, cpu, cores, nodeid in rows:
            f.write("%.2f\t%.2f\t%.2f\t%.2f\t%s\n" % (idle, wall, cpu, cores, nodeid))


def pytest_terminal_summary(terminalreporter):
    rows = sorted(_ROWS, reverse=True)
    terminalreporter.write_sep("=", "most waiting (PYTRAIN_TEST_IDLE): idle s, wall s, cpu s, machine busy cores")
    for idle, wall, cpu, cores, nodeid in rows[:15]:
        terminalreporter.write_line("%7.2f %7.2f %7.2f %5.2f  %s" % (idle, wall, cpu, cores, nodeid))
    terminalreporter.write_line("total: wall %.0f s, cpu %.0f s, idle %.0f s" % (
        sum(r[1] for r in rows), sum(r[2] for r in rows), sum(r[0] for r in rows)))
    if _LOST:
        terminalreporter.write_line("not measured (a process left the tree unreaped): " + ", ".join(_LOST))
