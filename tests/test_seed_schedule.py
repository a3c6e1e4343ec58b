"""The seed tutorials' schedules: structure of the lowered kernel and results on the
simulator."""

from __future__ import annotations

import re
import statistics
import time

import numpy as np
import ptxforge
import pytest
from ptxforge import workloads
from ptxforge.ops.testing import conv2d_nchw_python


def _allocs(module) -> dict:
    return {m.group(1): (int(m.group(2)), m.group(3)) for m in re.finditer(
        r"alloc ([\w.]+): float32\[(\d+)\] (\w+)", str(module))}


def test_seed_schedule_lowers_to_the_tutorials_structure():
    s, tensors, _ = workloads.seed_schedule()
    mod = ptxforge.lower(s, tensors)
    kernels = mod.kernels()
    assert len(kernels) == 1
    k = kernels[0]
    assert k.launch.grid == (64, 1, 1)
    assert k.launch.block == (98, 1, 1)
    allocs = _allocs(mod)
    assert allocs["pad_temp.shared"] == (6272, "shared")
    assert allocs["kernel.shared"] == (1024, "shared")
    local = [v for v in allocs.values() if v[1] == "local"]
    assert local == [(4, "local")]
    text = str(k)
    assert text.count("barrier") == 2
    # the reduction runs over rc.outer.outer (4), ry (3), rx (3) with both fetches inside
    assert "for rc.outer.outer in 4" in text and "for rc.inner in 32" in text


@pytest.mark.slow
def test_seed_schedule_matches_numpy_on_the_simulator():
    s, tensors, _ = workloads.seed_schedule()
    f = ptxforge.build(s, tensors, target="sim")
    rng = np.random.default_rng(7)
    host = [rng.uniform(size=t.shape).astype("float32") for t in tensors[:3]]
    dev = ptxforge.sim()
    arrays = [ptxforge.nd.array(h, dev) for h in host]
    out = ptxforge.nd.empty(tensors[3].shape, "float32", dev)
    f(*arrays, out)
    np.testing.assert_allclose(out.numpy(), workloads.reference(*host), rtol=1e-4)


def test_autotvm_template_best_config_lowers_and_runs():
    # the tutorial's conv2d_no_batching template with its printed best config, on a layer
    # shrunk so the simulator run stays short (the same tiling divides it)
    args = (1, 7, 7, 64, 32, 3, 3, (1, 1), (1, 1))
    s, tensors = workloads.conv2d_no_batching_schedule(args)
    mod = ptxforge.lower(s, tensors)
    k = mod.kernels()[0]
    assert k.launch.block == (1, 1, 16)   # threadIdx.z = tile_f[2]
    assert k.launch.grid == (7, 1, 1)
    allocs = _allocs(mod)
    assert {"pad_temp.shared", "kernel.shared", "compute.local"} <= set(allocs)
    assert allocs["compute.local"][1] == "local"
    f = ptxforge.build(s, tensors, target="sim")
    rng = np.random.default_rng(3)
    data = rng.uniform(size=tensors[0].shape).astype("float32")
    kernel = rng.uniform(size=tensors[1].shape).astype("float32")
    dev = ptxforge.sim()
    out = ptxforge.nd.empty(tensors[2].shape, "float32", dev)
    f(ptxforge.nd.array(data, dev), ptxforge.nd.array(kernel, dev), out)
    np.testing.assert_allclose(out.numpy(), conv2d_nchw_python(data, kernel, 1, 1), rtol=1e-4)


def test_autotvm_template_seed_layer_structure():
    s, tensors = workloads.conv2d_no_batching_schedule()
    k = ptxforge.lower(s, tensors).kernels()[0]
    # tile_f = [-1, 2, 16, 8]: 2 blocks on z, 16 threads on z; tile_y = [-1, 7, 1, 1]
    assert k.launch.grid == (7, 1, 2)
    assert k.launch.block == (1, 1, 16)


def test_lowering_the_seed_schedule_is_fast():
    s, tensors, _ = workloads.seed_schedule()
    module = s.module
    ptxforge.lower(module)  # warm up imports and caches
    # CPU time of this process: the cost of lowering, not how busy the machine's other
    # processes (parallel test workers) keep its cores.
    times = []
    for _ in range(5):
        t0 = time.process_time()
        ptxforge.lower(module)
        times.append(time.process_time() - t0)
    median_ms = statistics.median(times) * 1e3
    print(f"lowering the seed schedule: {median_ms:.1f} ms CPU (median of 5)")
    assert median_ms < 400, f"lowering took {median_ms:.1f} ms"
