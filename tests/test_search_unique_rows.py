"""The search's de-duplication of populations: ``first_rows`` gives what ``np.unique(pop,
axis=0, return_index=True)`` gives (the evolution's order of ties depends on it), in a
fraction of the time, for populations whose rows fit one mixed-radix code and for those
that do not."""

from __future__ import annotations

import numpy as np
import pytest
from ptxforge.autosched.evolution import first_rows, unique_rows


@pytest.mark.parametrize("high", [2, 5, 60, 2**40])
def test_first_rows_is_np_unique_return_index(high):
    rng = np.random.default_rng(high)
    for _ in range(60):
        n, w = int(rng.integers(1, 400)), int(rng.integers(1, 20))
        pop = rng.integers(-1, high, size=(n, w)).astype(np.int64)
        if n > 3:
            pop[n // 2] = pop[0]  # a repeat, at least one
        _, expect = np.unique(pop, axis=0, return_index=True)
        assert np.array_equal(first_rows(pop), expect)


def test_unique_rows_keeps_the_first_seen_order():
    pop = np.array([[1, 2], [0, 5], [1, 2], [0, 5], [3, 0]], dtype=np.int64)
    assert unique_rows(pop).tolist() == [[1, 2], [0, 5], [3, 0]]
    assert first_rows(np.zeros((0, 3), dtype=np.int64)).shape == (0,)
    assert unique_rows(np.zeros((0, 3), dtype=np.int64)).shape == (0, 3)
