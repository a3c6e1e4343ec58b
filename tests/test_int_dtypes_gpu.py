"""On a GPU: integer and bool computations, data-dependent indexing and networks with
integer inputs match numpy bit for bit (the CPU twins are test_int_dtypes.py,
test_data_indexing.py and test_int_graph.py)."""

from __future__ import annotations

import numpy as np
import ptxforge
import ptxforge.ops as ops
import pytest
from ptxforge import graph, te
from ptxforge.backend_ptx import array, compile_module, cuda, empty
from ptxforge.ir import dtype as dt
from ptxforge.ops.schedules import default_schedule

from .test_int_dtypes import INTS, SIGNED, N, divisors, full_range, rng_for

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def dev():
    return cuda(0)


def run_gpu(tensors, arrays, dev) -> np.ndarray:
    loaded = compile_module(ptxforge.lower(default_schedule([tensors[-1]]), tensors)).load(dev)
    out = empty(tensors[-1].shape, tensors[-1].dtype, dev)
    loaded(*[array(np.ascontiguousarray(a), dev) for a in arrays], out)
    return out.numpy()


def _trunc_div(x, y):
    q = np.floor_divide(x, y)
    return q + ((np.remainder(x, y) != 0) & ((x < 0) != (y < 0))).astype(q.dtype)


BINARY = {
    "add": (ops.add, np.add), "subtract": (ops.subtract, np.subtract),
    "multiply": (ops.multiply, np.multiply), "maximum": (ops.maximum, np.maximum),
    "minimum": (ops.minimum, np.minimum),
    "trunc_divide": (ops.broadcast.trunc_divide, _trunc_div),
    "fmod": (ops.broadcast.fmod, np.fmod), "floor_divide": (ops.floor_divide, np.floor_divide),
    "floor_mod": (ops.floor_mod, np.remainder),
}


@pytest.mark.parametrize("d", INTS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_integer_binary_ops_on_the_gpu(dev, d, name):
    fn, npfn = BINARY[name]
    rng = rng_for(d, name, "gpu")
    a = te.placeholder((N,), d, name="a")
    b = te.placeholder((N,), d, name="b")
    x = full_range(rng, d)
    y = divisors(rng, d, x) if "div" in name or "mod" in name else full_range(rng, d)
    with np.errstate(over="ignore"):
        want = npfn(x, y)
    np.testing.assert_array_equal(run_gpu([a, b, fn(a, b)], [x, y], dev), want)


@pytest.mark.parametrize("src", (*INTS, "float32", "bool"))
@pytest.mark.parametrize("dst", (*INTS, "float32", "bool"))
def test_casts_on_the_gpu(dev, src, dst):
    if src == dst:
        return
    rng = rng_for(src, dst, "gpu-cast")
    if src == "bool":
        x = rng.random(N) < 0.5
    elif src == "float32":
        lo, hi = dt.int_range(dst) if dst != "float32" and dst != "bool" else (-100, 100)
        x = rng.uniform(max(lo, -1e6), min(hi, 1e6), N).astype("float32")
    else:
        x = full_range(rng, src)
    a = te.placeholder((N,), src, name="a")
    got = run_gpu([a, ops.cast(a, dst)], [x], dev)
    np.testing.assert_array_equal(got, x.astype(dt.to_numpy(dst)))


@pytest.mark.parametrize("d", INTS)
def test_clip_and_compare_on_the_gpu(dev, d):
    rng = rng_for(d, "gpu-clip")
    lo, hi = dt.int_range(d)
    x, y = full_range(rng, d), full_range(rng, d)
    a = te.placeholder((N,), d, name="a")
    b = te.placeholder((N,), d, name="b")
    f32 = float(np.finfo(np.float32).max)
    for a_min, a_max in ((lo, hi), (float(lo), float(hi)), (-f32, f32)):
        np.testing.assert_array_equal(run_gpu([a, ops.clip(a, a_min, a_max)], [x], dev), x)
    c = te.compute((N,), lambda i: te.if_then_else(a[i] < b[i], a[i], b[i]), name="c")
    np.testing.assert_array_equal(run_gpu([a, b, c], [x, y], dev), np.where(x < y, x, y))
    if d in SIGNED:
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(run_gpu([a, ops.abs(a)], [x], dev), np.abs(x))


def test_embedding_lookup_with_out_of_range_ids_on_the_gpu(dev):
    vocab, dim, n = 1000, 64, 512
    table = te.placeholder((vocab, dim), "float32", name="table")
    ids = te.placeholder((n,), "int64", name="ids")
    out = te.compute((n, dim), lambda i, j: table[te.normalize_index(ids[i], vocab), j],
                     name="out")
    rng = np.random.default_rng(5)
    tab = rng.standard_normal((vocab, dim)).astype("float32")
    idv = rng.integers(-vocab, vocab, n).astype("int64")
    idv[:4] = [vocab, 2**40, -vocab - 1, -(2**62)]  # clamp: last, last, first, first
    want = tab[np.clip(np.where(idv < 0, idv + vocab, idv), 0, vocab - 1)]
    np.testing.assert_array_equal(run_gpu([table, ids, out], [tab, idv], dev), want)


def test_network_with_integer_inputs_on_the_gpu(dev):
    ids = graph.var("ids", (4, 8), "int64")
    mask = graph.var("mask", (4, 8), "int64")
    q = graph.divide(ids, graph.const(np.int64(-3)))
    out = graph.multiply(q, mask)
    net = graph.function(out)
    rng = np.random.default_rng(6)
    iv = rng.integers(-1000, 1000, (4, 8)).astype("int64")
    mv = (rng.random((4, 8)) < 0.7).astype("int64")
    lib = graph.build(net, target="cuda")
    m = graph.GraphModule(lib, dev)
    m.run(ids=iv, mask=mv)
    want = np.trunc(iv / -3).astype("int64") * mv
    np.testing.assert_array_equal(m.get_output(0).numpy(), want)
    np.testing.assert_array_equal(graph.evaluate(net, {"ids": iv, "mask": mv}, {}), want)
