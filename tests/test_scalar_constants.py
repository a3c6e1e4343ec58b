"""0-d tensors (ONNX scalars such as ``Size``'s output) keep shape ``()`` through every layer:
the graph constant, the printer, the reference executor, a simulator build, the exported
archive and ``nd.array``. They used to become shape ``[1]`` (``np.ascontiguousarray`` makes
a 0-d array 1-d), which gave ONNX's ``Size`` the wrong output shape."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph.ir import Call
from ptxforge.graph.printer import print_graph


def test_constant_keeps_a_scalar_zero_dimensional():
    for value, dtype in ((np.array(3, np.int64), "int64"), (np.float32(2.5), None),
                         (7, None), (np.array(True), None)):
        c = graph.const(value, "c", dtype)
        assert c.shape == () and c.value.shape == () and c.ty.ndim == 0
    assert graph.const(np.array([4], np.int64)).shape == (1,)
    # a transposed (non-contiguous) array is still stored compact
    t = graph.const(np.arange(6, dtype=np.float32).reshape(2, 3).T)
    assert t.shape == (3, 2) and t.value.flags.c_contiguous


def _scalar_net():
    x = graph.var("x", (), "float32")
    y = graph.var("y", (4,), "float32")
    s = graph.const(np.float32(2.5))
    n = graph.const(np.array(3, np.int64), "n", "int64")
    return graph.function([Call("add", [x, s]), Call("multiply", [y, s]), n])


def test_scalar_constants_print_run_build_and_export(tmp_path):
    net = _scalar_net()
    text = print_graph(net)
    assert "Tensor[(), int64]" in text and "Tensor[(), float32]" in text
    feeds = {"x": np.array(1.5, np.float32), "y": np.arange(4, dtype=np.float32)}
    want = [np.array(4.0, np.float32), np.arange(4, dtype=np.float32) * 2.5,
            np.array(3, np.int64)]
    ref = graph.run_graph(net, feeds, {})
    lib = graph.build(net, "sim")
    for source in (lib, graph.load(lib.export_library(str(tmp_path / "scalars.ptxf")))):
        m = graph.GraphModule(source, ptxforge.sim())
        m.set_input(**feeds)
        m.run()
        got = [m.get_output(k).numpy() for k in range(3)]
        for r, g, w in zip(ref, got, want):
            assert r.shape == g.shape == w.shape and r.dtype == g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(r, w)


def test_nd_array_of_a_scalar_is_zero_dimensional():
    a = ptxforge.nd.array(np.float32(3.0))
    assert a.shape == () and a.numpy().shape == () and float(a.numpy()) == 3.0


@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), ()])
def test_onnx_size_is_a_scalar_int64(shape):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Size", ["x"], ["n"])], "size",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    net, params = graph.from_onnx(model, {"x": shape})
    x = np.ones(shape, np.float32)
    (ref,) = graph.run_graph(net, {"x": x}, params)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: x for k in lib.plan.inputs})  # x is unused: the size is static
    m.run()
    got = m.get_output(0).numpy()
    for v in (ref, got):
        assert v.shape == () and v.dtype == np.int64 and int(v) == x.size
