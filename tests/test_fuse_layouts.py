"""Layout chains fused into tensor-core products: the strided views of layout chains, the
prologue and epilogue rules of ``fuse_ops``, the remapped epilogue of the GEMM schedule,
and a float16 attention block that builds with fewer kernels and keeps its values."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph, ops, te
from ptxforge.graph import nn, passes
from ptxforge.graph.ir import Call
from ptxforge.graph.passes.layout_view import chain_view, copyable_rows, layout_chain, stored_view
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.remap import epilogue_remap

from .lowp import run_sim

RNG = np.random.default_rng(7)


def _view_and_value(build, shape):
    """The strided view of the chain ``build(x)`` over ``x`` of ``shape``, and the chain's
    value on ``arange`` (each element's flat index in ``x``)."""
    x = graph.var("x", shape)
    y = build(x)
    src, chain = layout_chain(y)
    assert src is x
    flat = np.arange(int(np.prod(shape)), dtype="float32").reshape(shape)
    return chain_view(src, chain), graph.evaluate(graph.function(y), {"x": flat}), chain


def _heads(x, seq=128, heads=12, dim=64, start=0):
    y = graph.strided_slice(x, [start], [start + heads * dim], axes=[1])
    y = graph.transpose(graph.reshape(y, (1, seq, heads, dim)), (0, 2, 1, 3))
    return graph.reshape(y, (heads, seq, dim))


@pytest.mark.parametrize("build,shape", [
    (lambda x: _heads(x, start=768), (128, 2304)),
    (lambda x: graph.transpose(graph.reshape(x, (4, 6, 5)), (2, 0, 1)), (24, 5)),
    (lambda x: graph.squeeze(graph.expand_dims(graph.strided_slice(
        x, [1, 0], [7, 10], strides=[2, 3]), 1), [1]), (8, 10)),
    (lambda x: graph.reshape(graph.strided_slice(x, [0, 2], [3, 4]), (3, 1, 2)), (3, 4)),
])
def test_a_layout_chain_is_the_strided_view_numpy_computes(build, shape):
    view, value, _ = _view_and_value(build, shape)
    assert view is not None and view.shape == value.shape
    np.testing.assert_array_equal(view.flat_indices(), value.astype(np.int64))


def test_the_query_of_a_combined_projection_is_copyable_and_other_views_are_not():
    q, _, _ = _view_and_value(lambda x: _heads(x, start=768), (128, 2304))
    assert (q.strides, q.offset) == ((64, 2304, 1), 768)
    assert copyable_rows(q, "float16") and copyable_rows(q, "float32")
    # K^T read as [b, k, n] along n = the sequence: rows 2304 apart, not contiguous
    kt, _, _ = _view_and_value(lambda x: graph.transpose(_heads(x), (0, 2, 1)), (128, 2304))
    assert not copyable_rows(kt, "float16")
    # rows starting 4 elements (8 bytes) off a 16-byte boundary
    odd, _, _ = _view_and_value(lambda x: _heads(x, heads=2, start=4), (128, 2304))
    assert odd.offset == 4 and not copyable_rows(odd, "float16")
    # heads of 4 float16 values: 8 bytes, less than one 16-byte copy
    short, _, _ = _view_and_value(lambda x: _heads(x, heads=2, dim=4), (128, 2304))
    assert not copyable_rows(short, "float16") and copyable_rows(short, "float32")


def test_merging_dimensions_that_are_not_adjacent_is_no_view_but_a_digit_store():
    def back(x):  # the head transpose back of an attention block
        y = graph.transpose(graph.reshape(x, (1, 12, 128, 64)), (0, 2, 1, 3))
        return graph.reshape(y, (128, 768))

    view, _, chain = _view_and_value(back, (12, 128, 64))
    assert view is None
    stored = stored_view(chain)
    assert stored.shape == (12, 128, 64) and stored.strides == (64, 768, 1)
    # a reshape whose source axis straddles two axes of the result: no digit store
    _, _, straddle = _view_and_value(lambda x: graph.reshape(graph.transpose(x, (1, 0)),
                                                             (2, 12)), (6, 4))
    assert stored_view(straddle) is None
    _, _, sliced = _view_and_value(lambda x: graph.strided_slice(x, [0], [2]), (4, 4))
    assert stored_view(sliced) is None


def attention(seq=32, heads=2, dim=16, dtype="float16", k_transposed=False, start=0,
              scale=False):
    """One attention block over a combined q/k/v projection ``qkv`` [seq, 3 * hidden]:
    heads, scores, softmax, context, heads back, output projection."""
    hidden = heads * dim
    qkv = graph.var("qkv", (seq, 3 * hidden + start), dtype)
    q = _heads(qkv, seq, heads, dim, start)
    k = _heads(qkv, seq, heads, dim, start + hidden)
    v = _heads(qkv, seq, heads, dim, start + 2 * hidden)
    if scale:
        q = graph.multiply(q, graph.const(np.array(0.25, dtype)))
    if k_transposed:
        scores = nn.batch_matmul(q, graph.transpose(k, (0, 2, 1)), transpose_b=False,
                                 out_dtype="float32")
    else:
        scores = nn.batch_matmul(q, k, out_dtype="float32")
    probs = graph.cast(nn.softmax(scores), dtype)
    ctx = nn.batch_matmul(probs, v, transpose_b=False)
    ctx = graph.transpose(graph.reshape(ctx, (1, heads, seq, dim)), (0, 2, 1, 3))
    ctx = graph.reshape(ctx, (seq, hidden))
    w = graph.const(RNG.uniform(-0.3, 0.3, (hidden, hidden)).astype(dtype), "w_out")
    return graph.function(nn.dense(ctx, w))


def _kernels(fused) -> list:
    return [c.op for c in fused.calls() if not c.op.attrs.get("view")]


def _layout_kernels(fused) -> list:
    return [f for f in _kernels(fused)
            if all(c.op in ("strided_slice", "reshape", "transpose") for c in f.calls())]


def test_fuse_ops_moves_the_head_transposes_into_the_attention_products():
    net = attention()
    # the softmax's row-epilogue fusion (tests/test_row_epilogue.py) aside
    fused = passes.FuseOps(rows=False)(net)
    before = passes.FuseOps(layouts=False, rows=False)(net)
    assert len(_layout_kernels(before)) == 4 and not _layout_kernels(fused)
    assert len(_kernels(fused)) == len(_kernels(before)) - 4
    names = [f.name for f in _kernels(fused)]
    assert names[0].startswith("fused_nn_batch_matmul_strided_slice")  # q and k inside
    scores = _kernels(fused)[0]
    assert [c.op for c in scores.calls()].count("strided_slice") == 2
    assert len(scores.params) == 1  # both operands read the one projection
    context = next(f for f in _kernels(fused)
                   if f.outputs[0].op == "reshape" and f.outputs[0].shape == (32, 32))
    assert "nn.batch_matmul" in [c.op for c in context.calls()]  # v and the heads back


@pytest.mark.parametrize("case", ["k_transposed", "misaligned", "arithmetic", "float32",
                                  "two_readers"])
def test_what_stays_a_kernel_of_its_own(case):
    if case == "k_transposed":  # K^T's rows run along the sequence: not contiguous
        net, left = attention(k_transposed=True), 1
    elif case == "misaligned":  # every head's rows start 8 bytes off
        net, left = attention(start=4), 3
    elif case == "arithmetic":  # the query is scaled on its way: not only a layout
        net, left = attention(scale=True), 1
    elif case == "float32":  # no tensor cores for float32 without TF32: nothing moves
        net, left = attention(dtype="float32"), 4
    else:
        x = graph.var("x", (32, 64), "float16")
        h = _heads(x, 32, 2, 32)
        net, left = graph.function([nn.batch_matmul(h, h), graph.cast(h, "float32")]), 1
    fused = passes.FuseOps()(net)
    kernels = _kernels(fused)
    laid = [f for f in kernels if f.calls()[0].op in ("strided_slice", "reshape")
            and not any(c.op.startswith("nn.") for c in f.calls())]
    assert len(laid) == left, [f.name for f in kernels]


def test_fuse_ops_layouts_must_be_a_bool_and_reads_back_from_text():
    with pytest.raises(graph.GraphError, match="layouts must be a bool"):
        passes.FuseOps(layouts="no")
    pipeline = passes.GraphPipeline.parse("fold_constant, fuse_ops(layouts=False)")
    assert pipeline.text.endswith("fuse_ops(layouts=False)")


@pytest.mark.parametrize("dtype,seq,saved", [
    ("float16", 32, 4), ("bfloat16", 32, 4),
    # 40 rows are padded to whole tiles: the head transpose back stays a kernel
    ("float16", 40, 3),
])
def test_the_attention_block_builds_fewer_kernels_with_the_same_values(dtype, seq, saved):
    net = attention(seq=seq, dtype=dtype)
    x = RNG.uniform(-1, 1, (seq, 96)).astype("float32")
    host = x.astype(dtype) if dtype == "float16" else _bf16(x)
    lib = graph.build(net, "sim")
    kernels = sum(k is not None for k in lib.call_keys)
    opt = graph.optimize(net, fuse=False)
    assert kernels == len(_kernels(passes.FuseOps()(opt)))
    assert kernels == len(_kernels(passes.FuseOps(layouts=False)(opt))) - saved
    m = graph.GraphModule(lib)
    m.run(qkv=host)
    got = _f64(m.get_output(0).numpy(), dtype)
    # float64 reference on the 16-bit inputs
    xv = _f64(host, dtype)
    q, k, v = (xv[:, 32 * j:32 * (j + 1)].reshape(seq, 2, 16).transpose(1, 0, 2)
               for j in range(3))
    s = q @ k.transpose(0, 2, 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ctx = (p @ v).transpose(1, 0, 2).reshape(seq, 32)
    w = next(c for c in net.nodes() if getattr(c, "name", "") == "w_out").value
    want = ctx @ _f64(w, dtype).T
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())


def _bf16(x):
    from ptxforge.ir import dtype as dt

    return dt.to_bfloat16(x)


def _f64(x, dtype):
    from ptxforge.ir import dtype as dt

    return (dt.from_bfloat16(x) if dtype == "bfloat16" else x).astype(np.float64)


def test_a_float16_bert_layer_loses_its_four_head_transpose_kernels():
    from ptxforge.graph.zoo.bert import bert_layer

    out, params, shape = bert_layer(1, "float32", seq_len=32, hidden=32, heads=2,
                                    intermediate=64)
    net = graph.function(out)
    opt = graph.optimize(net, params, precision="float16", fuse=False)
    assert len(_kernels(passes.FuseOps()(opt))) == len(
        _kernels(passes.FuseOps(layouts=False)(opt))) - 4
    x = RNG.standard_normal(shape).astype("float32")
    lib = graph.build(net, "sim", params, precision="float16")
    # the softmax is a kernel of its own (fuse_ops' row-epilogue rule is off by default)
    assert ["nn.softmax"] in [[c.op for c in f.func.func.calls()]
                              for f in lib.functions.values()]
    m = graph.GraphModule(lib)
    m.run(data=x)
    want = graph.evaluate(net, {"data": x}, params)
    got = m.get_output(0).numpy().astype("float64")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max())


# ---------------------------------------------------------------------------------------
# te: the remapped epilogue of the tensor-core GEMM


def _bmm_then(layout):
    a = te.placeholder((2, 32, 32), "float16", name="a")
    b = te.placeholder((2, 32, 16), "float16", name="b")
    c = ops.nn.batch_matmul(a, b, transpose_b=False, out_dtype="float16")
    product = c.op.input_tensors[0].op  # c casts the float32 product
    assert product.reduce_axis
    return a, b, product, layout(c)


def _back(c):  # [2, 32, 16] -> [32, 2 * 16]
    return ops.reshape(ops.transpose(ops.reshape(c, (1, 2, 32, 16)), [0, 2, 1, 3]), (32, 32))


def test_a_tensor_core_product_stores_through_the_head_transpose_in_one_kernel():
    a, b, product, y = _bmm_then(_back)
    remap = epilogue_remap(product, y.op)
    assert remap is not None and remap.contiguous_columns
    assert remap.digits == (((1, 32),), ((0, 2), (2, 16)))
    s = default_schedule(y, "sim")
    assert "mma_m16n8k16" in s.pipeline.text
    mod, (av, bv), got = run_sim(s, [a, b], y, RNG)
    text = str(mod.device_module)
    assert text.count('"kind": "kernel"') == 1
    want = np.matmul(av, bv).transpose(1, 0, 2).reshape(32, 32)
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-3 * np.abs(want).max())
    ptx = ptxforge.build(s, [a, b, y], target="cuda -arch=sm_80").get_source("ptx")
    assert "mma.sync" in ptx and "cp.async" in ptx


@pytest.mark.parametrize("layout,numpy_layout,contiguous", [
    (lambda c: ops.transpose(ops.reshape(c, (1, 2, 32, 16)), [0, 2, 1, 3]),
     lambda r: r.reshape(1, 2, 32, 16).transpose(0, 2, 1, 3), True),
    (lambda c: ops.reshape(ops.transpose(ops.reshape(ops.nn.relu(c), (1, 2, 32, 16)),
                                         [0, 2, 1, 3]), (32, 32)),
     lambda r: np.maximum(r, 0).transpose(1, 0, 2).reshape(32, 32), True),
    (lambda c: ops.transpose(c, [0, 2, 1]), lambda r: r.transpose(0, 2, 1), False),
], ids=["transpose_4d", "relu_then_back", "columns_as_rows"])
def test_remapped_epilogues_keep_the_values(layout, numpy_layout, contiguous):
    a, b, product, y = _bmm_then(layout)
    remap = epilogue_remap(product, y.op)
    assert remap is not None and remap.contiguous_columns == contiguous
    s = default_schedule(y, "sim")
    mod, (av, bv), got = run_sim(s, [a, b], y, RNG)
    assert str(mod.device_module).count('"kind": "kernel"') == 1
    want = numpy_layout(np.matmul(av, bv))
    np.testing.assert_allclose(got, want, rtol=0, atol=4e-3 * np.abs(want).max())


@pytest.mark.parametrize("layout", [
    lambda c: te.compute(c.shape, lambda b, i, j: c[b, i, 15 - j]),  # reversed columns
    lambda c: ops.strided_slice(c, [0, 0, 1], [2, 32, 16]),  # a slice: not every element
    lambda c: ops.reshape(ops.transpose(c, [1, 0, 2]), (8, 128)),  # i straddles two axes
])
def test_what_is_no_remapped_epilogue(layout):
    _, _, product, y = _bmm_then(layout)
    assert epilogue_remap(product, y.op) is None


def test_the_auto_schedulers_gemm_sketch_takes_the_remapped_epilogue_without_split_k():
    from ptxforge import autosched
    from ptxforge.autosched.tensorcore import tensorcore_gemm_step
    from ptxforge.ir.compute_dag import ComputeDAG

    a, b, _, y = _bmm_then(_back)
    task = autosched.SearchTask(compute_dag=ComputeDAG([a, b, y]), target="cuda")
    step = tensorcore_gemm_step(task)
    assert step is not None and step.remapped
    slots = {sl.name: tuple(sl.choices) for sl in step.slots()}
    assert slots[step.slot("split_k")] == (1,)
    # tiles that divide the product (32 x 16 x 32): no zero padding under the remap
    assert all(32 % c == 0 for c in slots[step.slot("block_m")])
    assert all(16 % c == 0 for c in slots[step.slot("block_n")])


def test_layout_chain_stops_at_the_first_operator_that_computes():
    x = graph.var("x", (4, 8))
    y = graph.reshape(graph.exp(graph.transpose(x, (1, 0))), (32,))
    src, chain = layout_chain(y)
    assert isinstance(src, Call) and src.op == "exp" and [c.op for c in chain] == ["reshape"]


def test_the_epilogue_rule_takes_only_products_the_tensor_core_gemm_schedules():
    from ptxforge.graph.passes.fuse_ops import tensor_core_product

    def bmm(dtype, a, b, **kw):
        return nn.batch_matmul(graph.var("a", a, dtype), graph.var("b", b, dtype), **kw)

    assert tensor_core_product(bmm("float16", (2, 32, 16), (2, 16, 16), transpose_b=False),
                               shapes=True)
    assert tensor_core_product(bmm("float32", (2, 32, 16), (2, 16, 16), transpose_b=False,
                                   precision="tf32"))
    for call in (
        bmm("float32", (2, 32, 16), (2, 16, 16), transpose_b=False, precision="tf32"),  # kn
        bmm("float16", (2, 16, 32), (2, 16, 16), transpose_a=True),  # A read as [k, m]
        bmm("float16", (2, 32, 16), (2, 8, 16)),  # 8 columns
        bmm("float16", (2, 32, 8), (2, 16, 8)),  # shorter than one mma
        bmm("float16", (2, 32, 16), (1, 24, 16)),  # a broadcast batch of 24 columns
    ):
        assert tensor_core_product(call)  # the prologue rule's test: dtype and precision
        assert not tensor_core_product(call, shapes=True), call.attrs
    assert not tensor_core_product(bmm("float32", (2, 32, 16), (2, 16, 16)))
