"""Mutation fuzzer: valid random schedules, mutated (thread tags changed, bindings duplicated
or dropped, split factors changed, compute_at moved, reduce loops bound, steps swapped or
dropped), must either be rejected with an :class:`IRError` or build a kernel that matches
numpy on the simulator (unwritten outputs start as NaN). Zero wrong results."""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest

from .random_schedules import FUZZ_WORKLOADS, fuzz_one


def _fuzz(total: int, seed: int) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    wrong = []
    names = sorted(FUZZ_WORKLOADS)
    rng = np.random.default_rng(seed)
    for k in range(total):
        outcome, detail = fuzz_one(names[k % len(names)], rng)
        counts[outcome] += 1
        if outcome == "wrong":
            wrong.append(f"{names[k % len(names)]}: {detail}")
    print(f"\nmutated schedules: {total}; built and matched numpy: {counts['built']}; "
          f"rejected with an error: {counts['rejected']}; wrong: {counts['wrong']}")
    assert not wrong, "\n".join(wrong[:5])
    assert counts["built"] > total // 4, counts  # the mutations must not all be rejected
    return counts


@pytest.fixture(autouse=True)
def _no_roundtrip(monkeypatch):
    # the print/parse round trip of every pass is checked elsewhere; here it would take
    # most of the time
    monkeypatch.setenv("PTXFORGE_CHECK_ROUNDTRIP", "0")


def test_mutated_schedules_build_right_or_are_rejected():
    _fuzz(int(os.environ.get("PTXFORGE_FUZZ_MUTATIONS", "300")), seed=16)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("PTXFORGE_FUZZ_SOAK") != "1",
                    reason="3,000 mutations take minutes: set PTXFORGE_FUZZ_SOAK=1")
def test_mutated_schedules_soak():
    _fuzz(3000, seed=1616)
