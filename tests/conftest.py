"""Fixtures for every test under tests/."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _reseed_grad_harness(request):
    """Each test draws the same data from grad_harness.RNG whatever ran before it (or was deselected)."""
    import grad_harness

    grad_harness.reseed(request.node.name)
