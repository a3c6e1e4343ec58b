"""One small GPU kernel of every kernel family, for compute-sanitizer runs.

``bench/sanitize.sh`` runs ``memcheck`` and ``racecheck`` over the ``sanitize`` mark: the
shapes here are the smallest that still take each family's code path (a tile or two, one
pipeline of a few stages, one split of K), so a sanitizer run over all of them finishes in
minutes where the large GPU tests did not finish in 270 s. Each GPU test checks its numbers
against numpy (or the graph interpreter) as well, so a sanitizer run is also a correctness
run. On a CPU, every case is built and lowered for its target, so a case that stops
applying (a schedule change) fails here rather than on the GPU machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import ptxforge
from ptxforge import graph, te
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.cases import workload

from .lowp import f64, host

RNG = np.random.default_rng(2026)


@dataclass(frozen=True)
class KernelCase:
    """A scheduled kernel: ``make(target)`` gives ``(schedule, tensors)`` (inputs, then the
    output), ``inputs()`` host arrays, ``want(inputs)`` the float64 reference; ``tol`` is
    relative to the reference's largest magnitude. ``sm90``: wgmma, an sm_90 GPU only."""

    make: Callable
    inputs: Callable
    want: Callable
    target: str = "cuda"
    tol: float = 1e-4
    sm90: bool = False
    lower_with: str = ""  # a lowering pipeline other than the default, when given
    expect: str = ""  # text the device IR must hold (the family's instruction or pass)


def _workload_case(case: str, target: str = "cuda", tol: float = 1e-4, expect: str = "",
                   **shape) -> KernelCase:
    w = workload(case, **shape)

    def make(t):
        with t:
            return default_schedule(w.output, t), list(w.tensors)

    def want(vals):
        return np.asarray(w.expected(vals), np.float64)

    return KernelCase(make, lambda: w.random_inputs(RNG), want, target, tol, expect=expect)


def _row_sum(rows: int, cols: int) -> KernelCase:
    """A row sum whose reduce loop is bound to threadIdx.x: a cross-thread reduction."""
    def make(t):
        a = te.placeholder((rows, cols), name="A")
        k = te.reduce_axis((0, cols), name="k")
        b = te.compute((rows,), lambda i: te.sum(a[i, k], axis=k), name="B")
        s = te.create_schedule(b.op)
        s[b].bind(s[b].op.axis[0], te.thread_axis("blockIdx.x"))
        s[b].bind(s[b].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
        return s, [a, b]

    return KernelCase(make, lambda: [RNG.standard_normal((rows, cols)).astype("float32")],
                      lambda v: v[0].astype(np.float64).sum(1), tol=1e-5)


def _with_expect(case: KernelCase, expect: str) -> KernelCase:
    import dataclasses

    return dataclasses.replace(case, expect=expect)


def _shared_tree() -> KernelCase:
    from ptxforge.passes.lower import LOWERING_PIPELINE

    case = _row_sum(8, 48)  # 48 threads: not whole warps, so the shared-memory tree
    return KernelCase(case.make, case.inputs, case.want, tol=1e-5, expect="barrier",
                      lower_with=LOWERING_PIPELINE.replace(
                          "cross_thread_reduction()", "cross_thread_reduction(warp_shuffle=False)"))


def _wgmma_kn() -> KernelCase:
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig

    from .test_wgmma_kn import _matmul, _schedule

    args, y = _matmul(128, 128, 256, "float16", "float16")

    def make(t):
        with t:
            return _schedule(y, WgmmaScheduleConfig(64, 2, 3, 1), t)[0], args + [y]

    return KernelCase(make, lambda: [host(RNG, a.shape, a.dtype) for a in args],
                      lambda v: f64(v[0], "float16") @ f64(v[1], "float16"),
                      "cuda -arch=sm_90a", 2e-3, sm90=True, expect="wgmma")


def _wgmma_split_k() -> KernelCase:
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig

    from .test_wgmma_gemm import _dense, _schedule

    y, args = _dense(64, 128, 384, bias=True, residual=True)

    def make(t):
        with t:
            return _schedule(y, WgmmaScheduleConfig(64, 2, 3, 1, 2))[0], args + [y]

    def want(v):
        x, w, b, r = (f64(a, "float16") for a in v)
        return x @ w.T + b + r

    return KernelCase(make, lambda: [host(RNG, a.shape, a.dtype) for a in args], want,
                      "cuda -arch=sm_90a", 4e-3, sm90=True, expect="wgmma")


def _cp_async() -> KernelCase:
    from .test_async_copy import matmul_schedule

    def make(t):
        with t:
            return matmul_schedule(128, 128, 64, BM=64, BN=64, BK=16, stages=3,
                                   use_async=True)

    return KernelCase(make, lambda: [RNG.random((128, 64)).astype("float32"),
                                     RNG.random((64, 128)).astype("float32")],
                      lambda v: v[0].astype(np.float64) @ v[1].astype(np.float64),
                      "cuda -arch=sm_80", 1e-5, expect="async_copy")


def _row_epilogue() -> KernelCase:
    from .test_row_epilogue import _scores, _want

    a, b, p = _scores(2, 64, 64, 64)

    def make(t):
        with t:
            return default_schedule(p, t), [a, b, p]

    return KernelCase(make, lambda: [host(RNG, a.shape, "float16"),
                                     host(RNG, b.shape, "float16")],
                      lambda v: _want(v[0].astype(np.float64), v[1].astype(np.float64)),
                      "cuda -arch=sm_80", 2e-3, expect="mma")


KERNELS = {
    "cuda_core_conv2d": lambda: _workload_case(
        "conv2d_nchw", n=1, ci=8, h=10, w=10, co=16, k=3, pad=1),
    "cuda_core_dense": lambda: _workload_case("dense", batch=4, in_dim=64, out_dim=48,
                                              bias=True),
    "warp_shuffle_reduction": lambda: _with_expect(_row_sum(8, 128), "shfl_xor"),
    "cross_thread_shared_tree": _shared_tree,
    "mma_sync_gemm": lambda: _workload_case("dense", "cuda -arch=sm_80", 2e-3, "mma",
                                            batch=64, in_dim=64, out_dim=64, dtype="float16"),
    "mma_sync_conv2d": lambda: _workload_case(
        "conv2d_nhwc", "cuda -arch=sm_80", 2e-3, "mma", n=1, ci=16, h=8, w=8, co=32, k=3,
        pad=1, dtype="float16"),
    "wgmma_gemm_kn": _wgmma_kn,
    "wgmma_split_k": _wgmma_split_k,
    "cp_async_pipeline": _cp_async,
    "row_epilogue": _row_epilogue,
}


def _lower(case: KernelCase, target):
    from ptxforge.driver import scheduled_module
    from ptxforge.passes import PassContext, Pipeline

    s, tensors = case.make(target)
    with target:
        if case.lower_with:
            mod = Pipeline.parse(case.lower_with)(scheduled_module(s, tensors),
                                                  PassContext.current())
        else:
            mod = ptxforge.lower(s, tensors)
    return mod, tensors


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_each_sanitizer_case_builds_for_its_target(name):
    from ptxforge.target import as_target

    case = KERNELS[name]()
    mod, _ = _lower(case, as_target(case.target.replace("cuda", "sim", 1)))
    assert mod.kernels()
    if case.expect:
        assert case.expect in str(mod), f"{name}: the device IR holds no {case.expect}"


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_family_on_the_gpu(name):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty
    from ptxforge.target import as_target

    dev = cuda(0)
    case = KERNELS[name]()
    if case.sm90 and dev.sm != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU (sm_90a code); this one is {dev.sm}")
    target = as_target(case.target)
    mod, tensors = _lower(case, target)
    loaded = compile_module(mod, target).load(dev)
    vals = case.inputs()
    out_t = tensors[-1]
    out = empty(tuple(out_t.shape), out_t.dtype, dev)
    loaded(*[array(v, dev, t.dtype) for v, t in zip(vals, tensors)], out)
    want = case.want(vals)
    got = f64(out.numpy(), out_t.dtype)
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got - want).max() <= case.tol * scale, name


# -- networks: dependent launch and padded channels ------------------------------------------


def _dependent_chain():
    from .test_dependent_launch import chain

    net = chain(3, (64, 96))
    x = RNG.standard_normal((64, 96)).astype("float32")
    return net, {"x": x}, {}, 1e-4


def _padded_stem():
    from .test_pad_conv_channels import small_stem_net

    net, data = small_stem_net("NHWC", 3)
    return net, {"data": data}, {"precision": "float16", "pad_channels": 8}, 0.0


NETWORKS = {"dependent_launch": _dependent_chain, "padded_channels": _padded_stem}


# the padded stem builds on the simulator in test_pad_conv_channels.py already (12 s)
@pytest.mark.parametrize("name", ["dependent_launch"])
def test_each_sanitizer_network_builds(name):
    net, _, options, _ = NETWORKS[name]()
    # lowered for an sm_90 GPU (PTX is left to the GPU run)
    lib = graph.build(net, "sim -arch=sm_90", **options)
    assert lib.functions


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_network_family_on_the_gpu(name):
    net, inputs, options, tol = NETWORKS[name]()
    dev = ptxforge.cuda(0)
    lib = graph.build(net, "cuda", **options)
    m = graph.GraphModule(lib, dev, dependent_launch=True)
    m.set_input(**inputs)
    m.run()
    got = m.get_output(0).numpy().astype(np.float64)
    if options.get("pad_channels"):
        # padded and unpadded builds agree bit for bit (exact small-integer sums)
        ref_lib = graph.build(net, "cuda", **{**options, "pad_channels": 1})
        r = graph.GraphModule(ref_lib, dev)
        r.set_input(**inputs)
        r.run()
        want = r.get_output(0).numpy().astype(np.float64)
    else:
        want = np.asarray(graph.evaluate(net, inputs), np.float64)
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got - want).max() <= tol * scale, name
