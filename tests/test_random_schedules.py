"""Property test: random schedules (random pass parameters) of conv2d, dense, pooling,
softmax and an element-wise chain run on the simulator and match numpy; the reductions
also with cp.async shared caches and software pipelining."""

from __future__ import annotations

import os

import numpy as np
import ptxforge
import pytest
from ptxforge.ir.expr import IRError

from .random_schedules import WORKLOADS, random_schedule

# 300 valid schedules in the default run; PTXFORGE_FUZZ_SCHEDULES raises it for soak runs
N_SCHEDULES = int(os.environ.get("PTXFORGE_FUZZ_SCHEDULES", "300"))


# schedules with cp.async and software pipelining, per reduction workload
N_PIPELINED = int(os.environ.get("PTXFORGE_FUZZ_PIPELINED", "10"))


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_random_schedules_match_numpy(name, monkeypatch):
    _check_random_schedules(name, -(-N_SCHEDULES // len(WORKLOADS)), 1234, monkeypatch)


@pytest.mark.parametrize("name", ["conv2d", "conv2d_relu", "dense"])
def test_random_pipelined_schedules_match_numpy(name, monkeypatch):
    _check_random_schedules(name, N_PIPELINED, 4321, monkeypatch, pipelines=True)


ROUNDTRIP_SCHEDULES = 3
"""Schedules per workload built with the print / parse round trip of every pass (the
suite's default); the rest without it, which took about three quarters of the time."""


def _check_random_schedules(name, per_workload, seed, monkeypatch, pipelines=False):
    rng = np.random.default_rng(sorted(WORKLOADS).index(name) + seed)
    valid = invalid = 0
    attempts = 0
    while valid < per_workload:
        if valid == ROUNDTRIP_SCHEDULES:
            monkeypatch.setenv("PTXFORGE_CHECK_ROUNDTRIP", "0")
        attempts += 1
        assert attempts < 4 * per_workload, f"too many invalid schedules ({invalid})"
        tensors, reference = WORKLOADS[name]()
        try:
            s = random_schedule(tensors, rng, pipelines)
            f = ptxforge.build(s, tensors, target="sim")
        except IRError as e:
            # a schedule over a GPU limit is invalid, not a failure; anything else is a bug
            assert "allows at most" in str(e) or "exceeds the limit" in str(e), str(e)
            invalid += 1
            continue
        data_rng = np.random.default_rng(attempts)
        inputs = [data_rng.uniform(-1, 1, size=t.shape).astype("float32")
                  for t in tensors[:-1]]
        dev = ptxforge.sim()
        arrays = [ptxforge.nd.array(x, dev) for x in inputs]
        out = ptxforge.nd.empty(tensors[-1].shape, "float32", dev)
        f(*arrays, out)
        np.testing.assert_allclose(
            out.numpy(), reference(*inputs), rtol=1e-4, atol=1e-5,
            err_msg=f"schedule: {s.pipeline.text}")
        valid += 1
    assert valid == per_workload
