"""``PYTRAIN_TEST_STREAMS=auto`` (buildsite/streams.py): two pytest streams only when the cores were
essentially idle over the sample taken just before pytest, one otherwise; from made-up /proc/stat readings."""
from __future__ import annotations

import pytest

from buildsite import streams


def stat(user: int, system: int, idle: int, iowait: int = 0) -> str:
    """/proc/stat's text with the given tick counts on its first (all cores) line."""
    return ("cpu  %d 0 %d %d %d 0 0 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\nintr 12345\n"
            % (user, system, idle, iowait))


@pytest.mark.parametrize("busy,idle,expected", [
    (0, 400, 2),       # a quiet machine: 2 cores x 2 s x 100 ticks all idle
    (20, 380, 2),      # daemons and the shell: 5 % busy
    (80, 320, 1),      # 20 %: another process's steady work
    (200, 200, 1),     # one busy loop beside it on two cores
    (400, 0, 1),       # every core busy
])
def test_two_streams_only_when_the_cores_were_essentially_idle(busy, idle, expected):
    before, after = stat(1000, 500, 90000), stat(1000 + busy // 2, 500 + busy - busy // 2, 90000 + idle)
    fraction = streams.idle_fraction(before, after)
    assert fraction == pytest.approx(idle / (busy + idle))
    assert streams.choose_streams(fraction, cores=2) == expected


def test_iowait_counts_as_idle_and_one_core_runs_one_stream():
    assert streams.idle_fraction(stat(10, 10, 100, 5), stat(10, 10, 300, 205)) == 1.0
    assert streams.choose_streams(1.0, cores=1) == 1


def test_no_tick_between_the_readings_reads_as_idle():
    assert streams.idle_fraction(stat(5, 5, 5), stat(5, 5, 5)) == 1.0


def test_a_number_is_taken_as_given_and_unset_is_auto(monkeypatch):
    monkeypatch.setattr(streams, "measure_idle", lambda: pytest.fail("measured without auto"))
    assert streams.streams_from_env("1") == 1 and streams.streams_from_env("2") == 2
    monkeypatch.setattr(streams, "measure_idle", lambda: (0.99, "/proc/stat over 2 s"))
    monkeypatch.setattr(streams.os, "cpu_count", lambda: 2)
    assert streams.streams_from_env(None) == 2


def test_auto_measures_then_chooses_and_says_so(monkeypatch, capsys):
    monkeypatch.setattr(streams, "measure_idle", lambda: (0.5, "/proc/stat over 2 s"))
    monkeypatch.setattr(streams.os, "cpu_count", lambda: 2)
    assert streams.streams_from_env("auto") == 1
    out = capsys.readouterr().out
    assert "50 % of 2 cores idle (/proc/stat over 2 s" in out and ": 1 stream" in out
    monkeypatch.setattr(streams, "measure_idle", lambda: (0.97, "/proc/stat over 2 s"))
    monkeypatch.setenv("PYTRAIN_TEST_STREAMS", "auto")
    assert streams.stream_options(["tests/web"]) == ["-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]
    assert streams.stream_options(["-p", "no:xdist"]) == []


def test_measure_idle_falls_back_to_the_load_average(monkeypatch):
    def unreadable() -> str:
        raise OSError("no /proc here")

    monkeypatch.setattr(streams.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    monkeypatch.setattr(streams.os, "cpu_count", lambda: 2)
    idle, how = streams.measure_idle(0.0, read=unreadable)
    assert idle == pytest.approx(0.25) and "load average 1.50 on 2 cores" in how
