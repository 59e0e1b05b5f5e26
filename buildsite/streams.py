"""How many pytest streams ``python build.py test`` runs (``PYTRAIN_TEST_STREAMS``: a number, or ``auto``, the default,
to choose from the machine's measured idle time just before pytest starts)."""
from __future__ import annotations

import os
import time
from typing import Callable, List, Optional, Sequence, Tuple

from buildsite.paths import log

#: two streams only when this fraction of every core was idle over the sample. One stream alone keeps about
#: 1.1-1.34 cores of two busy (the browser tests' Chromium; README's Tests), so a second stream gains only when
#: the other core is free: beside one busy loop (idle 0.5) or at load 2-5 two streams lost every A/B measured
#: (tests 1.5-3x slower each). An idle machine samples 0.95-1.0 (daemons, the shell); 0.85 leaves that noise
#: room and no room for another process's steady work (0.3 of a core on two).
IDLE_FOR_TWO = 0.85
SAMPLE_SECONDS = 2.0


def cpu_times(stat_text: str) -> Tuple[float, float]:
    """(all, idle) clock ticks of every core together from /proc/stat's text (idle counts iowait too)."""
    fields = [float(v) for v in stat_text.splitlines()[0].split()[1:]]
    return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0.0)


def idle_fraction(before: str, after: str) -> float:
    """The fraction of the machine's cores idle between two /proc/stat readings (1.0 when no tick passed)."""
    (all0, idle0), (all1, idle1) = cpu_times(before), cpu_times(after)
    return (idle1 - idle0) / (all1 - all0) if all1 > all0 else 1.0


def choose_streams(idle: float, cores: int) -> int:
    """Two streams on a machine of two or more cores essentially idle (``IDLE_FOR_TWO``), one otherwise."""
    return 2 if cores >= 2 and idle >= IDLE_FOR_TWO else 1


def _read_stat() -> str:
    with open("/proc/stat") as f:
        return f.read()


def measure_idle(seconds: float = SAMPLE_SECONDS, read: Callable[[], str] = _read_stat) -> Tuple[float, str]:
    """The machine's idle fraction over ``seconds`` and how it was measured (/proc/stat, else the one-minute
    load average against the core count)."""
    try:
        before = read()
        time.sleep(seconds)
        return idle_fraction(before, read()), "/proc/stat over %.0f s" % seconds
    except (OSError, ValueError, IndexError):
        cores = os.cpu_count() or 1
        load = os.getloadavg()[0]
        return max(0.0, 1.0 - load / cores), "load average %.2f on %d cores" % (load, cores)


def streams_from_env(setting: Optional[str]) -> int:
    """PYTRAIN_TEST_STREAMS's number of streams: a number as given; unset or ``auto`` measures the machine now (and
    says what it measured and chose)."""
    if (setting or "auto").strip().lower() != "auto":
        return int(setting)
    cores = os.cpu_count() or 1
    idle, how = measure_idle()
    streams = choose_streams(idle, cores)
    log("PYTRAIN_TEST_STREAMS=auto: %.0f %% of %d cores idle (%s; two streams from %.0f %%): %d stream%s"
        % (100 * idle, cores, how, 100 * IDLE_FOR_TWO, streams, "s" if streams > 1 else ""))
    return streams


def stream_options(pytest_args: Sequence[str]) -> List[str]:
    """pytest-xdist's options running the suite as PYTRAIN_TEST_STREAMS processes (by default ``auto``: two where
    the cores are idle now, since on a quiet 2-core machine two streams took 25 min against 35 but beside other work
    they were slower, see README's Tests), each taking whole test files (their module fixtures stay
    shared), the longest folders first (tests/conftest.py); none where the caller chose (``-n``, ``-p no:xdist``)."""
    if any(a.startswith(("-n", "--numprocesses", "--dist")) or a == "no:xdist" for a in pytest_args):
        return []
    streams = streams_from_env(os.environ.get("PYTRAIN_TEST_STREAMS"))
    return [] if streams < 2 else ["-n", str(streams), "--dist", "loadfile", "--no-loadscope-reorder"]
