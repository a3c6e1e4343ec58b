"""The captured graph's dependencies: which kernels of a network may run side by side.

``step_dependencies`` must order every pair of steps whose storages conflict (the memory
plan reuses storages in the serial order), and nothing else; any order of the steps that
respects it computes what the serial order does, which the simulator checks here on real
networks, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import backend_sim, graph
from ptxforge.runtime.graph_executor import CAPTURE_STREAMS, assign_streams, step_dependencies

from .roundtrip import roundtrip_skipped


def test_dependencies_are_the_storage_conflicts():
    acc = [
        ({"x"}, {"a"}),        # 0: a = f(x)
        ({"x"}, {"b"}),        # 1: b = g(x)      independent of 0
        ({"a", "b"}, {"c"}),   # 2: c = h(a, b)   reads after 0 and 1 write
        ({"c"}, {"a"}),        # 3: a = k(c)      overwrites a, which 2 read; after 0's write
        ({"b"}, {"d"}),        # 4: d = m(b)      only after 1
    ]
    assert step_dependencies(acc) == [set(), set(), {0, 1}, {0, 2}, {1}]


def test_streams_follow_chains_and_fork_for_independent_steps():
    deps = [set(), {0}, {0}, {0}, {1, 2}, {4}, {3, 5}]
    s = assign_streams(deps)
    assert s[1] == s[0] and s[4] == s[1] and s[5] == s[4]  # a chain stays on its stream
    assert len({s[1], s[2], s[3]}) == 3  # the three branches of step 0 fork
    serial = assign_streams([set()] + [{i} for i in range(20)])
    assert set(serial) == {0}
    wide = assign_streams([set()] * 10)
    assert max(wide) == CAPTURE_STREAMS - 1


def _order(deps, rng=None):
    """An order of the steps that puts every step after its dependencies: of the steps
    ready, a random one, or (no ``rng``) the latest."""
    left = {i: set(d) for i, d in enumerate(deps)}
    order = []
    while left:
        ready = sorted(i for i, d in left.items() if not d)
        i = ready[-1] if rng is None else ready[rng.integers(len(ready))]
        order.append(i)
        del left[i]
        for d in left.values():
            d.discard(i)
    return order


@pytest.mark.parametrize("name", ["resnet", "bert"])
def test_any_order_the_dependencies_allow_gives_the_serial_result(name):
    if name == "resnet":
        net, params, shape, _ = graph.get_network("resnet-18", 1, "NHWC", image_size=16)
        precision = None
    else:
        from ptxforge.graph.zoo.bert import bert_layer

        out, params, shape = bert_layer(1, "float32", seq_len=8, hidden=32, heads=4,
                                        intermediate=64)
        # float32: in float16 the query, key and value slices join the attention's
        # tensor-core products, and the layer's steps form one chain
        net, precision = graph.function(out), None
    # resnet-18's kernels round-trip through the IR text in test_graph_build; here only the
    # order of the steps matters
    with roundtrip_skipped(name == "resnet"):
        lib = graph.build(net, "sim", params, precision=precision)
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    m = graph.GraphModule(lib)
    m.run(data=x)
    want = m.get_output(0).numpy().copy()
    deps = step_dependencies(m._accesses)
    rng = np.random.default_rng(0)
    orders = [_order(deps)] + [_order(deps, rng) for _ in range(2)]
    assert orders[0] != sorted(orders[0])  # some steps were free to move
    for order in orders:
        m2 = graph.GraphModule(lib)
        m2.set_input(data=x)
        for i in order:
            module, arrays = m2._steps[i]
            backend_sim.run(module, arrays)
        np.testing.assert_array_equal(m2.get_output(0).numpy(), want)
