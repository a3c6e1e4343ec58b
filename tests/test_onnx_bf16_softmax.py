"""bfloat16 softmax as ONNX defines it: ``Softmax`` on bfloat16 data, and ``Attention`` with
``softmax_precision`` left at its default (the input's precision), compute in bfloat16: the
shifted input and each exponential rounded to bfloat16 and the row sum rounded after every
term, in order along the axis (ONNX's reference: numpy on ml_dtypes arrays). The importer
asks ``nn.softmax`` for that with ``sum_dtype="bfloat16"``; the compiled kernels (simulator)
give ONNX's bits, and no schedule splits that sum over threads."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.ops import testing

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

BF16 = ml_dtypes.bfloat16


def _run(net, feeds):
    lib = graph.build(net, "sim")
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    return m.get_output(0).numpy(), lib


def _serial_softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of bfloat16 ``x``, every step rounded to bfloat16 and the
    row sum taken term by term from the first."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    s = e[..., :1].copy()
    for j in range(1, e.shape[-1]):
        s = s + e[..., j:j + 1]
    return e / s


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


def test_serial_bfloat16_sum_gives_numpys_bits():
    rng = np.random.default_rng(0)
    xv = (rng.standard_normal((16, 37)) * 3).astype(BF16)
    x = graph.var("x", xv.shape, "bfloat16")
    net = graph.function([graph.nn.softmax(x, sum_dtype="bfloat16")])
    want = _serial_softmax(xv)
    np.testing.assert_array_equal(_bits(graph.evaluate(net, {"x": xv}, {})), _bits(want))
    got, lib = _run(net, {"x": xv})
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # the rows are summed serially (no warp shuffles), and the data tells a float32 softmax
    # rounded once apart from the serial one
    assert "shfl" not in lib.get_source()
    once = testing.softmax_python(xv.astype(np.float32)).astype(BF16)
    assert not np.array_equal(_bits(once), _bits(want))


def test_default_bfloat16_softmax_sums_in_float32_on_both_paths():
    """Without ``sum_dtype`` a bfloat16 softmax computes in float32 and rounds once; the
    reference executor computes the same, and the kernel may reduce across threads."""
    rng = np.random.default_rng(1)
    xv = (rng.standard_normal((16, 300)) * 3).astype(BF16)
    x = graph.var("x", xv.shape, "bfloat16")
    net = graph.function([graph.nn.softmax(x)])
    want = testing.softmax_python(xv.astype(np.float32)).astype(BF16)
    ref = graph.evaluate(net, {"x": xv}, {})
    np.testing.assert_array_equal(_bits(ref), _bits(want))
    got, _ = _run(net, {"x": xv})
    np.testing.assert_allclose(_bits(got), _bits(want), rtol=2.0 ** -7, atol=0)


def test_sum_dtype_other_than_the_datas_is_refused():
    x = graph.var("x", (4, 8), "float32")
    with pytest.raises(graph.GraphError, match="sum_dtype 'bfloat16' is not supported"):
        graph.function([graph.nn.softmax(x, sum_dtype="bfloat16")])


def test_order_sensitive_sum_gets_no_cross_thread_sketch():
    from ptxforge.autosched.fused_rows import fused_rows_step
    from ptxforge.autosched.search_task import SearchTask
    from ptxforge.ir.compute_dag import ComputeDAG
    from ptxforge.ops.nn.softmax import softmax
    from ptxforge.te import placeholder

    def task(sum_dtype):
        x = placeholder((8, 512), "bfloat16", name="x")
        dag = ComputeDAG([x, softmax(x, sum_dtype=sum_dtype)])
        return SearchTask(compute_dag=dag, workload_key=f"softmax_{sum_dtype}", desc="s")

    def split_sums(t):
        return [str(sk) for sk in t.sketches
                if "cross_thread(T_softmax_expsum)" in str(sk)
                or "split_k(T_softmax_expsum)" in str(sk)]

    plain = task(None)
    assert fused_rows_step(plain) is not None
    assert split_sums(plain)
    serial = task("bfloat16")
    assert fused_rows_step(serial) is None
    sums = [st for st in serial.analysis.stages.values() if st.ordered]
    assert [st.name for st in sums] == ["T_softmax_expsum"]
    assert split_sums(serial) == []


def _softmax_model(shape, axis=-1):
    node = helper.make_node("Softmax", ["x"], ["y"], axis=axis)
    g = helper.make_graph([node], "sm",
                          [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def test_onnx_bfloat16_softmax_matches_onnx_reference_bits():
    rng = np.random.default_rng(2)
    xv = (rng.standard_normal((3, 5, 24)) * 4).astype(BF16)
    model = _softmax_model(list(xv.shape))
    (want,) = ReferenceEvaluator(model).run(None, {"x": xv})
    net, params = graph.from_onnx(model, {"x": xv.shape})
    (call,) = [n for n in graph.ir.post_order(net.outputs)
               if isinstance(n, graph.ir.Call) and n.op == "nn.softmax"]
    assert call.attrs["sum_dtype"] == "bfloat16"
    got, _ = _run(net, {"x": xv})
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _attention_model(b, h, sq, skv, d, causal, mask_shape=None, precision=None):
    inputs = [helper.make_tensor_value_info("Q", TensorProto.BFLOAT16, [b, h, sq, d]),
              helper.make_tensor_value_info("K", TensorProto.BFLOAT16, [b, h, skv, d]),
              helper.make_tensor_value_info("V", TensorProto.BFLOAT16, [b, h, skv, d])]
    names = ["Q", "K", "V"]
    if mask_shape is not None:
        inputs.append(helper.make_tensor_value_info("M", TensorProto.BFLOAT16, mask_shape))
        names.append("M")
    attrs = {"is_causal": int(causal)}
    if precision is not None:
        attrs["softmax_precision"] = precision
    node = helper.make_node("Attention", names, ["Y"], **attrs)
    g = helper.make_graph([node], "att", inputs, [
        helper.make_tensor_value_info("Y", TensorProto.BFLOAT16, [b, h, sq, d])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])


@pytest.mark.parametrize("causal,mask", [(True, False), (False, True)])
def test_onnx_bfloat16_attention_default_precision_matches_onnx_bits(causal, mask):
    rng = np.random.default_rng(3)
    b, h, sq, skv, d = 2, 2, 5, 9, 8
    feeds = {k: rng.standard_normal(s).astype(BF16) for k, s in
             (("Q", (b, h, sq, d)), ("K", (b, h, skv, d)), ("V", (b, h, skv, d)))}
    if mask:
        feeds["M"] = np.where(rng.random((sq, skv)) < 0.3, -np.inf, 0.0).astype(BF16)
        feeds["M"][:, 0] = 0  # every row keeps a key
    model = _attention_model(b, h, sq, skv, d, causal, [sq, skv] if mask else None)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    np.testing.assert_array_equal(_bits(graph.run_graph(net, feeds, params)[0]), _bits(want))
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    np.testing.assert_array_equal(_bits(m.get_output(0).numpy()), _bits(want))


def test_onnx_float32_softmax_precision_keeps_float32_sums():
    """``softmax_precision=FLOAT`` casts the scores to float32 first: no bfloat16 sum."""
    model = _attention_model(1, 2, 4, 6, 8, True, precision=TensorProto.FLOAT)
    shapes = {"Q": (1, 2, 4, 8), "K": (1, 2, 6, 8), "V": (1, 2, 6, 8)}
    net, _ = graph.from_onnx(model, shapes)
    calls = [n for n in graph.ir.post_order(net.outputs)
             if isinstance(n, graph.ir.Call) and n.op == "nn.softmax"]
    assert calls and all(not c.attrs["sum_dtype"] for c in calls)
