"""The network tuner's builder workers can run at a lower CPU priority than its process, so
that the search and the GPU runner beside them get the cores first."""

from __future__ import annotations

import os

import pytest
from ptxforge.measure import LocalBuilder
from ptxforge.measure.build import BUILDER_NICENESS, _use_scratch
from ptxforge.measure.pool import WorkerPool


def _niceness() -> int:
    return os.nice(0)


def test_builder_workers_are_nicer_than_the_tuner(tmp_path):
    mine = os.nice(0)
    with WorkerPool(1, "fork", _use_scratch, (str(tmp_path), BUILDER_NICENESS)) as pool:
        (o,) = pool.run([(0, _niceness, ())])
    assert o.status == "ok"
    assert o.value == min(mine + BUILDER_NICENESS, 19)
    assert os.nice(0) == mine  # the tuner's own priority is unchanged
    with WorkerPool(1, "fork", _use_scratch, (str(tmp_path), 0)) as pool:
        (o,) = pool.run([(0, _niceness, ())])
    assert o.value == mine


def test_local_builder_takes_its_niceness():
    # 0 by default: a build's timeout is wall time, which niced workers can overrun on a
    # busy machine; the network tuner's GPU path asks for BUILDER_NICENESS
    assert LocalBuilder(n_parallel=1).niceness == 0
    assert LocalBuilder(n_parallel=1, niceness=BUILDER_NICENESS).niceness == BUILDER_NICENESS > 0
    with pytest.raises(ValueError, match="niceness"):
        LocalBuilder(n_parallel=1, niceness=-1)

