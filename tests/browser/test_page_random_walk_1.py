"""The page's seeded random walk (tests/browser/page_walk.py says what it does and checks) for the 1st, 3rd, ... seeds of
``PYTRAIN_WALK_SEEDS`` (by default seed 1); test_page_random_walk_2.py walks the others, so that two pytest-xdist
streams each take one."""
from __future__ import annotations

import pytest

from page_walk import SEEDS, walk_the_page

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


@pytest.mark.parametrize("seed", SEEDS[0::2])
def test_random_walk_over_the_page(context, site_url, tmp_path, seed):
    walk_the_page(context, site_url, tmp_path, seed)
