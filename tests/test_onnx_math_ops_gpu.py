"""The element-wise math, logic, activation and reduction operators on a GPU: each at a small
shape against the reference executor (``-m sanitize`` runs them under compute-sanitizer),
and a fused activation chain at a large shape timed against the copy bandwidth; plus a CPU
test that their kernels compile to PTX."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.graph.ir import Call

RNG = np.random.default_rng(3)


def _net():
    f = graph.var("f", (5, 67))
    i = graph.var("i", (5, 67), "int32")
    u = graph.var("u", (5, 67), "uint8")
    h = graph.var("h", (5, 67), "float16")
    cases = {op: Call(op, [f]) for op in (
        "floor", "ceil", "round", "reciprocal", "sin", "tan", "asin", "acos", "atan", "sinh",
        "cosh", "asinh", "acosh", "atanh", "sign", "isnan", "nn.mish", "nn.softplus",
        "nn.selu", "nn.hard_swish")}
    cases["gelu_tanh_f16"] = Call("nn.gelu", [h], {"approximate": "tanh"})
    for op in ("trunc_divide", "floor_mod", "fmod", "bitwise_and", "bitwise_xor", "int_power"):
        cases[op] = Call(op, [i, Call("maximum", [i, graph.const(np.array([1], np.int32))])])
    cases["fmod_f32"] = Call("fmod", [f, graph.const(np.array([0.7], np.float32))])
    cases["shift_left_u8"] = Call("bit_shift", [u, u], {"direction": "left"})
    cases["shift_right_i32"] = Call("bit_shift", [i, i], {"direction": "right"})
    cases["where_less"] = Call("where", [Call("less", [f, graph.const(
        np.array([0.1], np.float32))]), f, Call("negative", [f])])
    cases["argmax"] = Call("argmax", [f], {"axis": 1})
    cases["prod"] = Call("reduce.prod", [f], {"axis": (0,)})
    cases["sum_square_f16"] = Call("reduce.sum_square", [h], {"axis": (1,)})
    return [f, i, u, h], cases


def _feeds():
    x = RNG.uniform(-0.9, 0.9, (5, 67)).astype(np.float32)
    return {"f": x, "i": RNG.integers(-40, 40, (5, 67)).astype(np.int32),
            "u": RNG.integers(0, 12, (5, 67)).astype(np.uint8), "h": (x * 3).astype(np.float16)}


def test_kernels_compile_to_ptx():
    inputs, cases = _net()
    # the kernels with unusual code: fma, float64 pow, unsigned views, float16, two reductions
    subset = ["fmod_f32", "int_power", "shift_right_i32", "gelu_tanh_f16", "argmax"]
    net = graph.function([cases[k] for k in subset], inputs)
    lib = graph.build(net, "cuda", {})
    ptx = [cf.ptx for cf in lib.functions.values()]
    assert len(ptx) == len(subset) and all(p is not None for p in ptx)


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("name", list(_net()[1]))
def test_operator_on_the_gpu_matches_the_reference(name):
    inputs, cases = _net()
    net = graph.function(cases[name], inputs)
    feeds = _feeds()
    if name == "acosh":
        feeds["f"] = np.abs(feeds["f"]) + 1
    lib = graph.build(net, "cuda", {})
    m = graph.GraphModule(lib, ptxforge.cuda(0))
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    got, want = m.get_output(0).numpy(), graph.evaluate(net, feeds)
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 2e-3 if got.dtype == np.float16 else 2e-5
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.gpu
def test_fused_activation_chain_runs_at_memory_speed():
    n = 1 << 24
    x = graph.var("x", (n,))
    y = Call("nn.gelu", [Call("nn.mish", [x])], {"approximate": "tanh"})
    net = graph.function(y, [x])
    feeds = {"x": RNG.standard_normal(n).astype(np.float32)}
    lib = graph.build(net, "cuda", {})
    assert len(lib.functions) == 1  # the two activations fuse into one kernel
    m = graph.GraphModule(lib, ptxforge.cuda(0))
    m.set_input(**feeds)
    m.run()
    head = graph.var("x", (4096,))
    small = graph.function(Call("nn.gelu", [Call("nn.mish", [head])], {"approximate": "tanh"}))
    np.testing.assert_allclose(m.get_output(0).numpy()[:4096],
                               graph.evaluate(small, {"x": feeds["x"][:4096]}),
                               rtol=2e-5, atol=2e-6)
    result = m.benchmark(ptxforge.cuda(0), repeat=5, min_repeat_ms=200)
    print(f"mish -> gelu(tanh) over {n} floats: {result.mean * 1e6:.1f} us, "
          f"{2 * 4 * n / result.mean / 1e9:.0f} GB/s")
