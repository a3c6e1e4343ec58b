"""``fold_output_cast`` and the ``out_dtype`` of softmax and layer norm: which casts fold,
the bad dtypes, and a mixed-precision attention block and BERT layer that lose their cast
kernel after softmax while keeping every bit."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph, ops, te
from ptxforge.graph import nn
from ptxforge.graph.fused import distinct_functions
from ptxforge.graph.ir import GraphError
from ptxforge.graph.passes import FoldOutputCast, FuseOps
from ptxforge.ir import dtype as dt
from ptxforge.ir.te import TEError

RNG = np.random.default_rng(7)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def as_float32(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return dt.from_bfloat16(a) if a.dtype == dt.BFLOAT16_HOST else a.astype("float32")


def run(lib, x):
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(x=x)
    m.run()
    return m.get_output(0).numpy()


def kernels(lib) -> int:
    return sum(1 for k in lib.call_keys if k is not None)


def build_with_and_without_the_pass(net, monkeypatch, **kwargs):
    """``graph.build(net, "sim", **kwargs)``, then the same build with a pipeline that
    lacks ``fold_output_cast``."""
    from ptxforge.graph import build_module
    from ptxforge.graph.passes import optimization_pipeline

    folded = graph.build(net, "sim", **kwargs)

    def without_fold(*args, **kw):
        full = optimization_pipeline(*args, **kw)
        return graph.GraphPipeline([p for p in full if not isinstance(p, FoldOutputCast)])

    with monkeypatch.context() as m:
        m.setattr(build_module, "optimization_pipeline", without_fold)
        unfolded = graph.build(net, "sim", **kwargs)
    return folded, unfolded


def softmax_of(x):
    return nn.softmax(x, axis=-1)


def layer_norm_of(x):
    n = x.shape[-1]
    return nn.layer_norm(x, graph.const(rand(n), "g"), graph.const(rand(n), "b"))


@pytest.mark.parametrize("make", [softmax_of, layer_norm_of], ids=["softmax", "layer_norm"])
@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_a_lone_cast_down_folds_into_its_producer_bit_for_bit(make, low, monkeypatch):
    x = graph.var("x", (3, 4, 12))
    net = graph.function(graph.cast(make(x), low))
    out = FoldOutputCast()(net)
    ops_after = [c.op for c in out.calls()]
    assert "cast" not in ops_after
    (prod,) = [c for c in out.calls() if c.op == make(x).op]
    assert prod.attrs["out_dtype"] == low and prod.dtype == low
    assert prod.args[0] is x  # computes from the same float32 data
    xv = rand(3, 4, 12, scale=3.0)
    before, after = graph.evaluate(net, {"x": xv}), graph.evaluate(out, {"x": xv})
    assert before.dtype == after.dtype == dt.to_numpy(low)
    assert before.tobytes() == after.tobytes()
    # compiled with the default schedules: one kernel fewer, the same bits
    folded, unfolded = build_with_and_without_the_pass(net, monkeypatch)
    assert kernels(unfolded) == kernels(folded) + 1
    got = run(folded, xv)
    assert got.tobytes() == run(unfolded, xv).tobytes()
    np.testing.assert_allclose(as_float32(got), as_float32(before), rtol=0,
                               atol=2 * np.abs(as_float32(before)).max()
                               * (2e-3 if low == "float16" else 1.6e-2))


def _leaves_alone(net):
    return FoldOutputCast()(net) is net


def test_other_casts_are_left_alone():
    x = graph.var("x", (4, 12))
    # the producer has another reader: BERT's layer norm feeds a float32 residual add and
    # the cast to the next dense layer
    ln = layer_norm_of(x)
    assert _leaves_alone(graph.function(graph.add(graph.cast(
        graph.cast(ln, "float16"), "float32"), ln)))
    # the producer's float32 result is a graph output too
    sm = softmax_of(x)
    assert _leaves_alone(graph.Graph([x], [sm, graph.cast(sm, "float16")], "two_outputs"))
    # a cast up, to an integer, or after another operator
    x16 = graph.var("x16", (4, 12), "float16")
    assert _leaves_alone(graph.function(graph.cast(softmax_of(x16), "float32")))
    assert _leaves_alone(graph.function(graph.cast(softmax_of(x), "int32")))
    assert _leaves_alone(graph.function(graph.cast(nn.relu(x), "float16")))
    # a producer that already rounds (float16 to bfloat16 is no narrower)
    assert _leaves_alone(graph.function(graph.cast(
        nn.softmax(x, out_dtype="float16"), "bfloat16")))


def test_bad_out_dtypes_are_errors():
    x = graph.var("x", (4, 12))
    with pytest.raises(GraphError, match="nn.softmax: out_dtype must be a float dtype"):
        nn.softmax(x, out_dtype="int8")
    with pytest.raises(GraphError, match="nn.layer_norm: out_dtype float64 is wider"):
        nn.layer_norm(x, graph.const(rand(12)), graph.const(rand(12)), out_dtype="float64")
    with pytest.raises(GraphError, match="out_dtype"):
        nn.softmax(x, out_dtype="float17")
    x16 = graph.var("x16", (4, 12), "float16")
    with pytest.raises(GraphError, match="wider than the data's float16"):
        nn.softmax(x16, out_dtype="float32")
    t = te.placeholder((4, 12), "float32", name="t")
    with pytest.raises(TEError, match="softmax: out_dtype must be a float dtype"):
        ops.nn.softmax(t, out_dtype="int32")
    with pytest.raises(TEError, match="is wider"):
        ops.nn.softmax(te.placeholder((4, 12), "bfloat16", name="b"), out_dtype="float32")
    assert ops.nn.softmax(t, out_dtype="bfloat16").dtype == "bfloat16"


def test_task_keys_differ_in_the_output_dtype():
    x = graph.var("x", (2, 16, 16))
    keys = set()
    for out in ("", "float16", "bfloat16"):
        fused = FuseOps()(graph.function(nn.softmax(x, out_dtype=out)))
        (func,), _ = distinct_functions(fused)
        keys.add(func.workload_key)
    assert len(keys) == 3


def attention(seq=8, hidden=16):
    """dense (q, k, v) -> batch_matmul -> scale -> softmax -> batch_matmul."""
    x = graph.var("x", (seq, hidden))

    def proj(name):
        return graph.reshape(nn.dense(x, graph.const(rand(hidden, hidden, scale=0.3), name)),
                             (1, seq, hidden))

    q, k, v = proj("wq"), proj("wk"), proj("wv")
    probs = nn.softmax(graph.multiply(nn.batch_matmul(q, k), 0.25))
    return graph.function(nn.batch_matmul(probs, v, transpose_b=False))


def test_attention_in_float16_has_one_kernel_fewer_and_the_same_bits(monkeypatch):
    net = attention()
    x = rand(8, 16)
    ref = graph.evaluate(net, {"x": x})
    lib, unfolded = build_with_and_without_the_pass(net, monkeypatch, precision="float16")
    softmax = [f for f in lib.functions.values() if f.func.name.endswith("nn_softmax")]
    assert [f.func.output.dtype for f in softmax] == ["float16"]
    got = run(lib, x)
    np.testing.assert_allclose(got, ref, atol=1e-2 * np.abs(ref).max(), rtol=0)
    # without the pass: a float32 softmax and a cast kernel after it, the same result
    assert kernels(unfolded) == kernels(lib) + 1
    assert any(f.func.name == "vm_mod_fused_cast" for f in unfolded.functions.values())
    assert run(unfolded, x).tobytes() == got.tobytes()


def test_a_float16_bert_layer_has_no_cast_after_softmax():
    from ptxforge.graph.zoo.bert import bert_layer

    out, params, _ = bert_layer(1, "float32", seq_len=8, hidden=32, heads=4, intermediate=64)
    fused = graph.optimize(graph.function(out), params, precision="float16")
    calls = fused.calls()
    ops_of = {id(c): [n.op for n in c.op.calls()] for c in calls}
    (sm,) = [c for c in calls if "nn.softmax" in ops_of[id(c)]]
    assert sm.dtype == "float16"
    readers = [c for c in calls if any(a is sm for a in c.args)]
    assert readers and all(ops_of[id(r)] != ["cast"] for r in readers)
    # the attention's layer norm stores float16 (to_mixed_precision rounds it); the
    # feed-forward residual add reads it and widens its sum in the same kernel for the
    # output norm, which is float32 (the graph's output)
    lns = [c for c in calls if "nn.layer_norm" in ops_of[id(c)]]
    assert [c.dtype for c in lns] == ["float16", "float32"]
    assert sum(ops_of[id(c)] == ["cast"] for c in calls) == 1  # the input's
    (res,) = [c for c in calls if any(a is lns[0] for a in c.args) and c.dtype == "float32"]
    assert "nn.dense" in ops_of[id(res)] and "cast" in ops_of[id(res)]
    # norms kept float32, the residual add is float32: the same with round_shared, which
    # stores the norm rounded and widens it in the add's kernel (as checked above); without
    # round_shared it keeps its float32 result and a cast kernel
    with graph.GraphPassContext(config={"fold_output_cast.round_shared": False,
                                        "to_mixed_precision.keep_norms_float32": True}):
        fused = graph.optimize(graph.function(out), params, precision="float16")
    calls = fused.calls()
    ops_of = {id(c): [n.op for n in c.op.calls()] for c in calls}
    lns = [c for c in calls if "nn.layer_norm" in ops_of[id(c)]]
    assert [c.dtype for c in lns] == ["float32", "float32"]
    assert sum(ops_of[id(c)] == ["cast"] for c in calls) == 2  # the input and that one


def residual_norm(low="float16", reader="add"):
    """x -> layer norm, read by a dense in ``low`` (through a cast) and by a float32
    ``reader`` (``add``: a residual add; ``mean``: a reduction)."""
    x = graph.var("x", (8, 16))
    ln = layer_norm_of(x)
    y = nn.dense(graph.cast(ln, low), graph.const(rand(16, 16, scale=0.3).astype(
        "float16" if low == "float16" else "float32"), "w"))
    if reader == "add":
        out = graph.add(graph.cast(y, "float32"), ln)
    else:
        out = graph.add(graph.cast(y, "float32"), graph.mean(ln, axis=-1, keepdims=True))
    return graph.function(out)


def test_round_shared_stores_the_rounded_norm_and_widens_it_for_float32_readers():
    net = residual_norm()
    out = FoldOutputCast(round_shared=True)(net)
    (ln,) = [c for c in out.calls() if c.op == "nn.layer_norm"]
    assert ln.dtype == "float16" and ln.attrs["out_dtype"] == "float16"
    (dense,) = [c for c in out.calls() if c.op == "nn.dense"]
    assert dense.args[0] is ln  # the cast down is gone
    (up,) = [c for c in out.calls() if c.op == "cast" and c.args[0] is ln]
    assert up.dtype == "float32"
    # the value is the float32 norm rounded once: the bits of cast(cast(ln, f16), f32)
    xv = rand(8, 16, scale=3.0)
    got = graph.evaluate(out, {"x": xv})
    rounded = FoldOutputCast()(net)  # off: float32 norm kept beside its cast
    assert [c.dtype for c in rounded.calls() if c.op == "nn.layer_norm"] == ["float32"]
    want = graph.evaluate(graph.function(graph.add(
        graph.cast(nn.dense(graph.cast(layer_norm_like(rounded), "float16"),
                            dense.args[1]), "float32"),
        graph.cast(graph.cast(layer_norm_like(rounded), "float16"), "float32"))), {"x": xv})
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


def layer_norm_like(net):
    (ln,) = [c for c in net.calls() if c.op == "nn.layer_norm"]
    return ln


def test_round_shared_leaves_a_norm_that_a_reduction_reads_in_float32():
    out = FoldOutputCast(round_shared=True)(residual_norm(reader="mean"))
    assert [c.dtype for c in out.calls() if c.op == "nn.layer_norm"] == ["float32"]


def test_round_shared_from_the_pass_context_config():
    net = residual_norm()
    with graph.GraphPassContext(config={"fold_output_cast.round_shared": True}):
        on = graph.GraphPipeline([FoldOutputCast()])(net)
    assert [c.dtype for c in on.calls() if c.op == "nn.layer_norm"] == ["float16"]
    with graph.GraphPassContext(config={"fold_output_cast.round_shared": "yes"}):
        with pytest.raises(Exception, match="round_shared.*bool"):
            graph.GraphPipeline([FoldOutputCast()])(net)


def test_a_widened_residual_operand_fuses_into_the_products_epilogue():
    """The cast up of the rounded norm is no kernel: the add's group reads the float16
    norm and widens it; the build matches the graph on the simulator."""
    net = residual_norm()
    lib = graph.build(net, "sim", precision="float16")
    names = [lib.functions[k].func.name for k in lib.call_keys if k is not None]
    assert names == ["vm_mod_fused_nn_layer_norm", "vm_mod_fused_nn_dense_cast_cast_add"]
    xv = rand(8, 16, scale=3.0)
    ref = graph.evaluate(net, {"x": xv})
    np.testing.assert_allclose(run(lib, xv), ref, atol=5e-3 * np.abs(ref).max(), rtol=0)


@pytest.mark.gpu
def test_attention_in_float16_on_the_gpu_keeps_every_bit(monkeypatch):
    """On the GPU too the folded softmax (float32 arithmetic, one ``cvt.rn.f16.f32`` at its
    store) gives the bits of the float32 softmax kernel followed by the cast kernel."""
    from ptxforge.graph import build_module
    from ptxforge.graph.passes import optimization_pipeline

    net = attention(seq=128, hidden=64)
    x = rand(128, 64)
    dev = ptxforge.cuda(0)

    def run_gpu(lib):
        m = graph.GraphModule(lib, dev)
        m.set_input(x=x)
        m.run()
        return m.get_output(0).numpy()

    lib = graph.build(net, "cuda", precision="float16")
    got = run_gpu(lib)

    def without_fold(*args, **kw):
        full = optimization_pipeline(*args, **kw)
        return graph.GraphPipeline([p for p in full if not isinstance(p, FoldOutputCast)])

    monkeypatch.setattr(build_module, "optimization_pipeline", without_fold)
    unfolded = graph.build(net, "cuda", precision="float16")
    assert kernels(unfolded) == kernels(lib) + 1
    assert run_gpu(unfolded).tobytes() == got.tobytes()
    ref = graph.evaluate(net, {"x": x})
    np.testing.assert_allclose(got, ref, atol=1e-2 * np.abs(ref).max(), rtol=0)
