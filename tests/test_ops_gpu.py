"""On a GPU: every operator with its default schedule matches numpy on fresh random inputs;
ResNet-18's layers and the seed layer (default schedule, the tutorial's seed schedule and
the AutoTVM template's best config) match numpy and are timed.

Every test needs an NVIDIA GPU (``gpu`` mark; skipped elsewhere by conftest.py). Run with
``-s`` to see the timings.
"""

from __future__ import annotations

import zlib

import numpy as np
import ptxforge
import pytest
from ptxforge import workloads
from ptxforge.backend_ptx import array, compile_module, cuda, empty
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.cases import RESNET18, SMALL, workload
from ptxforge.ops.testing import conv2d_nchw_python

pytestmark = pytest.mark.gpu

PARAMS = [pytest.param(case, shape, id=f"{case}-{k}")
          for case, shapes in SMALL.items() for k, shape in enumerate(shapes)]


@pytest.fixture(scope="module")
def dev():
    return cuda(0)


def _rng(*parts) -> np.random.Generator:
    # a fresh seed per run: the check holds for any inputs, not one draw
    return np.random.default_rng([zlib.crc32(repr(parts).encode()),
                                  np.random.SeedSequence().entropy % 2**32])


def _load(s, tensors, dev):
    return compile_module(ptxforge.lower(s, tensors)).load(dev)


def _run(loaded, inputs, out_shape, out_dtype, dev):
    out = empty(out_shape, out_dtype, dev)
    loaded(*[array(x, dev) for x in inputs], out)
    return out.numpy()


def _graph_time_ms(loaded, arrays, number=100, repeat=5) -> float:
    timer = loaded.time_evaluator("main", number=number, repeat=repeat, graph=True)
    return timer(*arrays).median * 1e3


def _close(got, want64, rtol):
    scale = max(1.0, float(np.abs(want64).max()))
    np.testing.assert_allclose(got, want64, rtol=rtol, atol=rtol * 0.1 * scale)


@pytest.mark.parametrize("case,shape", PARAMS)
def test_default_schedule_on_the_gpu_matches_numpy(dev, case, shape):
    w = workload(case, **shape)
    loaded = _load(default_schedule(w.output), w.tensors, dev)
    inputs = w.random_inputs(_rng(case, shape))
    got = _run(loaded, inputs, w.output.shape, w.output.dtype, dev)
    np.testing.assert_allclose(got, w.expected(inputs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(RESNET18))
def test_resnet18_layers_on_the_gpu(dev, name):
    case, shape = RESNET18[name]
    w = workload(case, **shape)
    loaded = _load(default_schedule(w.output), w.tensors, dev)
    inputs = w.random_inputs(_rng(name))
    arrays = [array(x, dev) for x in inputs]
    out = empty(w.output.shape, w.output.dtype, dev)
    loaded(*arrays, out)
    want = np.asarray(w.reference(*[x.astype(np.float64) for x in inputs]))
    # reductions thousands of terms long: float32 rounding against a float64 reference
    _close(out.numpy(), want, 1e-3)
    ms = _graph_time_ms(loaded, arrays + [out])
    print(f"\n{name}: default schedule {ms:.4f} ms")
    assert 0 < ms < 100


def test_seed_layer_schedules_match_numpy_and_are_timed(dev):
    rng = _rng("seed layer")
    data, kernel, bias, out = workloads.conv2d_layer(*workloads.SEED_ARGS)
    host = [rng.uniform(-1, 1, t.shape).astype("float32") for t in (data, kernel, bias)]
    want = workloads.reference(*[x.astype(np.float64) for x in host])
    arrays = [array(x, dev) for x in host]
    times = {}

    s, tensors, _ = workloads.seed_schedule()
    seed = _load(s, tensors, dev)
    result = empty(out.shape, "float32", dev)
    seed(*arrays, result)
    _close(result.numpy(), want, 1e-3)
    times["seed schedule"] = _graph_time_ms(seed, arrays + [result])

    default = _load(default_schedule(out), [data, kernel, bias, out], dev)
    result = empty(out.shape, "float32", dev)
    default(*arrays, result)
    _close(result.numpy(), want, 1e-3)
    times["default schedule"] = _graph_time_ms(default, arrays + [result])

    # the AutoTVM template computes the convolution alone (no bias, no relu)
    s, tensors = workloads.conv2d_no_batching_schedule()
    autotvm = _load(s, tensors, dev)
    conv = empty(out.shape, "float32", dev)
    autotvm(arrays[0], arrays[1], conv)
    _close(conv.numpy(), conv2d_nchw_python(host[0].astype(np.float64),
                                            host[1].astype(np.float64), 1, 1), 1e-3)
    times["AutoTVM best config (conv only)"] = _graph_time_ms(autotvm, arrays[:2] + [conv])

    for what, ms in times.items():
        print(f"\nseed layer, {what}: {ms:.4f} ms ({231.2e-3 / ms:.2f} TFLOP/s)")
    # the default schedule is meant to be at least as good as the tutorial's hand schedule
    assert times["default schedule"] <= 2 * times["seed schedule"]
