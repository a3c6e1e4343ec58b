"""Every operator of ``ptxforge.ops`` built unscheduled (one thread, serial loops) runs on
the simulator and matches its numpy reference on small random shapes."""

from __future__ import annotations

import zlib

import numpy as np
import ptxforge
import ptxforge.ops as ops
import pytest
from ptxforge.ops.schedules.cases import CASES, SMALL, workload

# every public operator and the case that exercises it (wrappers map to the case of the
# compute they build)
CASE_OF_OP = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
    "floor_divide": "floor_divide", "floor_mod": "floor_mod", "maximum": "maximum",
    "minimum": "minimum", "power": "power", "abs": "abs", "cast": "cast", "clip": "clip",
    "erf": "erf", "exp": "exp", "log": "log", "negative": "negative", "rsqrt": "rsqrt",
    "sigmoid": "sigmoid", "sqrt": "sqrt", "tanh": "tanh", "sum": "sum", "max": "max",
    "min": "min", "mean": "mean", "reshape": "reshape", "transpose": "transpose",
    "concatenate": "concatenate", "strided_slice": "strided_slice", "squeeze": "squeeze",
    "expand_dims": "expand_dims",
    "avg_pool2d": "avg_pool2d", "batch_flatten": "flatten", "batch_matmul": "batch_matmul",
    "batch_norm": "batch_norm", "bias_add": "bias_add", "conv2d": "conv2d_nchw",
    "conv2d_nchw": "conv2d_nchw", "conv2d_nhwc": "conv2d_nhwc", "dense": "dense",
    "depthwise_conv2d_nchw": "depthwise_conv2d_nchw",
    "depthwise_conv2d_nhwc": "depthwise_conv2d_nhwc", "flatten": "flatten",
    "global_avg_pool2d": "global_pool2d", "global_max_pool2d": "global_pool2d",
    "global_pool2d": "global_pool2d", "leaky_relu": "leaky_relu", "matmul": "matmul",
    "max_pool2d": "max_pool2d", "pad": "pad", "pool2d": "max_pool2d", "relu": "relu",
    "softmax": "softmax", "attention": "attention",
}
NOT_OPERATORS = {"broadcast", "nn", "reduction", "tag", "testing", "transform", "get_pad_tuple",
                 "precision", "allow_tf32", "tf32"}

PARAMS = [pytest.param(case, shape, id=f"{case}-{k}")
          for case, shapes in SMALL.items() for k, shape in enumerate(shapes)]


def test_every_public_operator_has_a_case():
    public = (set(ops.__all__) | set(ops.nn.__all__)) - NOT_OPERATORS
    missing = sorted(public - set(CASE_OF_OP))
    assert not missing, f"operators without a case: {missing}"
    assert set(CASE_OF_OP.values()) <= set(CASES)
    assert set(CASES) == set(SMALL), "every case needs small shapes"


def _run(f, w, inputs):
    dev = ptxforge.sim()
    out = ptxforge.nd.empty(w.output.shape, w.output.dtype, dev)
    f(*[ptxforge.nd.array(x, dev) for x in inputs], out)
    return out.numpy()


@pytest.mark.parametrize("case,shape", PARAMS)
def test_unscheduled_operator_matches_numpy(case, shape):
    w = workload(case, **shape)
    module = ptxforge.lower(w.tensors)
    for k in module.kernels():
        assert k.launch.grid == (1, 1, 1) and k.launch.block == (1, 1, 1), (
            f"an unscheduled DAG runs on one thread, got {k.launch.grid} x {k.launch.block}")
    f = ptxforge.build(w.tensors, target="sim")
    rng = np.random.default_rng(zlib.crc32(f"{case}{shape}".encode()))
    inputs = w.random_inputs(rng)
    got = _run(f, w, inputs)
    want = w.expected(inputs)
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
