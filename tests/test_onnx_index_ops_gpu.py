"""Indexing operators on a GPU: an embedding lookup of BERT's size against numpy (and its
time), every indexing operator at small shapes against the reference executor, and indices
far out of range that must be clamped, never read outside the table (run these under
compute-sanitizer with ``-m sanitize``)."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.graph.opdefs import index as GI
from ptxforge.graph.opdefs import transform as GT

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(7)


def run_on_gpu(net, feeds: dict, params: dict | None = None):
    lib = graph.build(net, "cuda", params or {})
    m = graph.GraphModule(lib, ptxforge.cuda(0))
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    return m, [m.get_output(k).numpy() for k in range(len(net.outputs))]


def test_bert_embedding_lookup_matches_numpy_and_is_timed():
    vocab, width, batch, seq = 30522, 768, 8, 512
    table = RNG.standard_normal((vocab, width)).astype(np.float32)
    positions = RNG.standard_normal((seq, width)).astype(np.float32)
    ids = RNG.integers(0, vocab, (batch, seq)).astype(np.int64)
    w, p, i = graph.var("word", table.shape), graph.var("pos", positions.shape), graph.var(
        "ids", ids.shape, "int64")
    net = graph.function(graph.add(GI.take(w, i), p), [i, w, p])
    params = {"word": table, "pos": positions}
    m, (got,) = run_on_gpu(net, {"ids": ids}, params)
    np.testing.assert_array_equal(got, table[ids] + positions)
    result = m.benchmark(ptxforge.cuda(0), repeat=5, min_repeat_ms=200)
    moved = 2 * batch * seq * width * 4 + positions.nbytes + ids.nbytes
    print(f"embedding lookup {batch}x{seq} of {vocab}x{width}: {result.mean * 1e6:.1f} us, "
          f"{moved / result.mean / 1e9:.0f} GB/s")


@pytest.mark.sanitize
def test_indices_out_of_range_are_clamped_on_the_gpu():
    table = RNG.standard_normal((16, 8)).astype(np.float32)
    ids = np.array([0, 10**12, -10**12, 15, -1, 7], np.int64)
    w, i = graph.var("w", table.shape), graph.var("ids", ids.shape, "int64")
    upd = graph.var("u", (6, 8))
    net = graph.function([GI.take(w, i), GI.scatter_nd(w, GT.reshape(i, (6, 1)), upd, "add")],
                         [i, w, upd])
    u = RNG.standard_normal((6, 8)).astype(np.float32)
    _, (got, scattered) = run_on_gpu(net, {"ids": ids, "w": table, "u": u})
    np.testing.assert_array_equal(got, table[[0, 15, 0, 15, 15, 7]])
    want = table.copy()
    for k, idx in enumerate(ids):  # out of range: lands nowhere
        if -16 <= idx < 16:
            want[idx] += u[k]
    np.testing.assert_allclose(scattered, want, rtol=1e-6)


def _cases():
    x = graph.var("x", (4, 6))
    i = graph.var("i", (4, 3), "int64")
    return x, i, {
        "gather_elements": GI.gather_elements(x, i, 1),
        "gather_nd": GI.gather_nd(x, GT.strided_slice(i, [0], [2], [1], [1])),
        "scatter_elements_max": GI.scatter_elements(x, i, GT.strided_slice(x, [0], [3], [1],
                                                                          [1]), 1, "max"),
        "scatter_nd_none": GI.scatter_nd(x, GT.strided_slice(i, [0], [1], [1], [1]),
                                         GT.strided_slice(x, [0], [4], [1], [0])),
        "one_hot": GI.one_hot(i, graph.const(np.array([0.0, 1.0], np.float32)), 6),
        "cumsum": GI.cumsum(x, 1, exclusive=True, reverse=True),
        "topk": GI.topk_indices(x, 3, 1),
        "trilu": GI.trilu(x, -1, upper=False),
        "tile": GT.tile(x, (2, 3)),
        "reflect_pad": GT.border_pad(x, [(2, 1), (3, 3)], "reflect"),
        "wrap_pad": GT.border_pad(x, [(2, 1), (3, 3)], "wrap"),
        "reverse": GT.reverse(x, [0, 1]),
        "depth_to_space": GT.depth_to_space(GT.reshape(x, (1, 4, 2, 3)), 2, "CRD"),
    }


@pytest.mark.sanitize
@pytest.mark.parametrize("name", list(_cases()[2]))
def test_indexing_operators_on_the_gpu_match_the_reference(name):
    x, i, cases = _cases()
    net = graph.function(cases[name], [x, i])
    feeds = {"x": RNG.standard_normal((4, 6)).astype(np.float32),
             "i": RNG.integers(-4, 4, (4, 3)).astype(np.int64)}
    _, (got,) = run_on_gpu(net, feeds)
    np.testing.assert_allclose(got, graph.evaluate(net, feeds), rtol=1e-5, atol=1e-6)
