"""One factor for every wait in the tests (PYTRAIN_TEST_TIMEOUT_SCALE, default 4). Budgets written in
the tests are what a quiet 2-core machine needs with room to spare; the default factor holds at load 6
on 2 cores (CI may run on a loaded machine). A wait ends as soon as its event happens: the factor only
delays the report of a failure, never a passing test."""
from __future__ import annotations

import os

SCALE = float(os.environ.get("PYTRAIN_TEST_TIMEOUT_SCALE") or 4)


def wait_s(budget_s: float) -> float:
    """A timeout in seconds: ``budget_s`` (a quiet machine's budget) times SCALE."""
    return budget_s * SCALE


def wait_ms(budget_ms: float) -> int:
    """A timeout in milliseconds (Playwright's unit): ``budget_ms`` times SCALE."""
    return int(budget_ms * SCALE)
