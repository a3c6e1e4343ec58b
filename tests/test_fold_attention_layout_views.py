"""The slices of a combined Q/K/V projection folded into the fused attention's addressing:
the kernel reading q, k, v through a row stride and an offset (``OperandView``) on the
simulator in both forms, the workload's rules, ``nn.attention``'s ``views`` (type, numpy
reference), the graph rewrite in ``fold_attention_layout`` and a small BERT-like layer
built for the simulator with fewer kernels and the same numbers as without the fold."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import backend_sim, graph
from ptxforge.graph import opdefs as G
from ptxforge.graph.ir import Call, Constant, GraphError, Var, graph_from_outputs
from ptxforge.graph.opdefs.attention import attention
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.graph.passes.base import GraphPassContext
from ptxforge.graph.passes.fold_attention_layout import VIEWS_OPTION, fold_attention_layout
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionError,
    AttentionMask,
    AttentionWorkload,
    attention_module,
    check_workload,
)
from ptxforge.ops.schedules.attention.workload import OperandView
from ptxforge.ops.testing import widen

RNG = np.random.default_rng(7)


# -- the kernel ---------------------------------------------------------------------------


def _combined(b, lq, hq, hk, e, dtype, pad=0):
    """A ``[B * L, pad + (Hq + 2 Hkv) E]`` tensor (a combined projection's output, ``pad``
    extra columns in front) and the q, k, v views of it."""
    cols = pad + (hq + 2 * hk) * e
    base = cast_array(RNG.standard_normal((b * lq, cols)), dtype)
    offs = (pad, pad + hq * e, pad + (hq + hk) * e)
    views = tuple(OperandView(cols, o, (b * lq, cols)) for o in offs)
    bits = base.view(np.uint16) if base.dtype != np.float16 else base  # bf16 bit patterns
    parts = [bits[:, o:o + h * e].reshape(b, lq, h, e)
             for o, h in zip(offs, (hq, hk, hk))]
    return base, views, [np.ascontiguousarray(p) for p in parts]


@pytest.mark.parametrize("target,cfg", [("sim -arch=sm_80", AttentionConfig(2, 32, 2)),
                                        ("sim -arch=sm_90a", AttentionConfig(4, 64, 2,
                                                                             "wgmma"))],
                         ids=["mma_sync", "wgmma"])
@pytest.mark.parametrize("dtype,causal,hk", [("float16", True, 2), ("bfloat16", False, 1)])
def test_the_kernel_reads_views_of_one_combined_tensor(target, cfg, dtype, causal, hk):
    b, lq, hq, e = 2, 70, 2, 64
    base, views, (q, k, v) = _combined(b, lq, hq, hk, e, dtype, pad=8)
    w = AttentionWorkload(b, hq, hk, lq, lq, e, e, dtype, causal, layout="bshd",
                          views=views)
    check_workload(w)
    assert w.shapes()["q"] == base.shape and w.shapes()["out"] == (b, lq, hq, e)
    out = cast_array(np.full((b, lq, hq, e), np.nan), dtype)
    mod = attention_module(w, cfg)
    backend_sim.run(mod, [base, base, base, out])  # one tensor for q, k and v
    want = attention_python(q, k, v, None, None, causal, dtype=dtype, layout="bshd")
    got = widen(out, dtype)
    assert np.isfinite(got).all()
    assert np.abs(got - want).max() <= attention_tolerance(dtype) * max(1, np.abs(want).max())


def test_a_view_beside_a_plain_operand_with_a_mask():
    # q from its own tensor, k and v from a combined key/value projection
    b, lq, s, h, e = 1, 33, 50, 2, 64
    kv = cast_array(RNG.standard_normal((b, s, 2 * h * e)), "float16")
    q = cast_array(RNG.standard_normal((b, lq, h, e)), "float16")
    mask = RNG.random((b, 1, lq, s)) < 0.8
    views = (None, OperandView(2 * h * e, 0, kv.shape), OperandView(2 * h * e, h * e, kv.shape))
    w = AttentionWorkload(b, h, h, lq, s, e, e, "float16", False,
                          mask=AttentionMask(mask.shape, "bool"), layout="bshd", views=views)
    out = np.full((b, lq, h, e), np.nan, np.float16)
    backend_sim.run(attention_module(w, AttentionConfig(2, 32, 1)), [q, kv, kv, mask, out])
    k = kv[..., :h * e].reshape(b, s, h, e)
    v = kv[..., h * e:].reshape(b, s, h, e)
    want = attention_python(q, k, v, mask, None, False, layout="bshd")
    assert np.abs(out - want).max() <= 4e-3 * max(1, np.abs(want).max())


@pytest.mark.parametrize("view,layout,match", [
    (OperandView(96, 4, (48, 96)), "bshd", "multiples of 8"),
    (OperandView(96, 72, (48, 96)), "bshd", "do not fit in rows of 96"),
    (OperandView(96, 0, (47, 96)), "bshd", "multiply to batch x positions = 48"),
    (OperandView(96, 0, (48, 96)), "bhsd", "layout 'bshd'"),
])
def test_views_the_kernel_cannot_read_are_refused(view, layout, match):
    w = AttentionWorkload(1, 2, 2, 48, 48, 16, 16, "float16", layout=layout,
                          views=(view, None, None))
    with pytest.raises(AttentionError, match=match):
        check_workload(w)


def test_ptx_of_a_viewed_kernel():
    from ptxforge.backend_ptx import compile_module
    from ptxforge.target import as_target

    _, views, _ = _combined(1, 256, 16, 16, 128, "float16")
    w = AttentionWorkload(1, 16, 16, 256, 256, 128, 128, "float16", True, layout="bshd",
                          views=views)
    ptx = compile_module(attention_module(w, AttentionConfig(8, 64, 1, "wgmma")),
                         as_target("cuda -arch=sm_90a")).get_source("ptx")
    assert "wgmma.mma_async" in ptx and "cp.async.cg.shared.global" in ptx
    assert ".local" not in ptx


# -- the graph ----------------------------------------------------------------------------

B, L, HEADS, E = 2, 40, 2, 16
HIDDEN = HEADS * E


def _const(shape, name, scale=1.0):
    return Constant(cast_array(RNG.standard_normal(shape) * scale, "float16"), name,
                    dtype="float16")


def _layer(mask: bool = True):
    """A BERT-like encoder layer: q/k/v projections with biases (combined by the graph
    passes into one product and three slices), head split transposes, attention with a
    padding mask, head merge, output projection, residual and layer norm."""
    x = Var("x", (B, L, HIDDEN), "float16")
    flat = G.reshape(x, (B * L, HIDDEN))
    keep = Var("keep", (B, 1, 1, L), "bool") if mask else None

    def heads(name):
        y = G.bias_add(G.dense(flat, _const((HIDDEN, HIDDEN), name, HIDDEN ** -0.5)),
                       _const((HIDDEN,), name + "_b", 0.1))
        return G.transpose(G.reshape(y, (B, L, HEADS, E)), (0, 2, 1, 3))

    att = attention(heads("wq"), heads("wk"), heads("wv"), keep)
    merged = G.reshape(G.transpose(att, (0, 2, 1, 3)), (B * L, HIDDEN))
    out = G.add(G.dense(merged, _const((HIDDEN, HIDDEN), "wo", HIDDEN ** -0.5)), flat)
    norm = G.layer_norm(out, _const((HIDDEN,), "gamma"), _const((HIDDEN,), "beta"))
    return graph_from_outputs(norm), x, keep


def _launches(lib) -> int:
    """Kernel launches of one run of a built network."""
    return sum(len(list(lib.functions[k].device_module.kernels()))
               for k in lib.call_keys if k is not None)


def _run(lib, feeds) -> np.ndarray:
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    return m.get_output(0).numpy()


def test_a_bert_layer_runs_without_the_slice_kernels():
    net, x, keep = _layer()
    keep_arr = np.ones(keep.shape, bool)
    keep_arr[1, ..., 30:] = False  # the second sequence is padded
    feeds = {"x": cast_array(RNG.standard_normal(x.shape), "float16"), "keep": keep_arr}
    want = widen(graph.evaluate(net, feeds), "float16")
    folded = graph.build(net, "sim -arch=sm_80", fused_attention=True)
    with GraphPassContext(config={VIEWS_OPTION: False}):
        sliced = graph.build(net, "sim -arch=sm_80", fused_attention=True)
    names = [f.func.name for f in folded.functions.values()]
    assert not any("strided_slice" in n for n in names), names
    assert sum("strided_slice" in f.func.name for f in sliced.functions.values()) == 3
    assert _launches(folded) == _launches(sliced) - 3, (folded.summary(), sliced.summary())
    got, ref = widen(_run(folded, feeds), "float16"), widen(_run(sliced, feeds), "float16")
    # the same kernels read the same numbers: the slices copied them exactly
    np.testing.assert_array_equal(got, ref)
    assert np.abs(got - want).max() <= 3e-2 * max(1.0, np.abs(want).max())


def _attention_call(g) -> Call:
    (call,) = [n for n in g.nodes() if isinstance(n, Call) and n.op == "nn.attention"]
    return call


def test_the_rewrite_reads_the_product_through_views():
    net, _, _ = _layer(mask=False)
    with GraphPassContext(config={"fused_attention": True}):
        opt = graph.optimize(net, fuse=False)
        folded = fold_attention_layout(opt)
    call = _attention_call(folded)
    assert call.attrs["layout"] == "bshd"
    assert call.attrs["views"] == ((B, L, HEADS, E, 0), (B, L, HEADS, E, HIDDEN),
                                   (B, L, HEADS, E, 2 * HIDDEN))
    product = call.args[0]
    assert call.args[1] is product and call.args[2] is product
    assert product.shape == (B * L, 3 * HIDDEN)
    assert call.shape == (B, L, HEADS, E)


def _sliced_attention(begin: int, width: int, step: int = 1, axis: int = 1):
    y = Var("y", (B * L, 4 * HIDDEN), "float16")
    sl = G.strided_slice(y, [begin], [begin + width * step], [step], axes=[axis])
    if axis == 1:
        op = G.reshape(sl, (B, L, HEADS, E))
    else:  # rows sliced instead: not a view of whole rows
        op = G.reshape(G.strided_slice(y, [0], [B * L // 2], axes=[0]), (B, L // 2, 8, E))
    other = Var("o", op.shape, "float16")
    return graph_from_outputs(attention(op, other, other, layout="bshd"))


@pytest.mark.parametrize("begin,step,axis,folds", [
    (16, 1, 1, True), (4, 1, 1, False), (0, 2, 1, False), (0, 1, 0, False)],
    ids=["aligned", "misaligned", "strided", "rows"])
def test_only_views_the_kernel_reads_are_folded(begin, step, axis, folds):
    net = _sliced_attention(begin, HIDDEN, step, axis)
    call = _attention_call(fold_attention_layout(net))
    assert bool(call.attrs.get("views")) == folds
    if folds:
        assert call.attrs["views"] == ((B, L, HEADS, E, begin), (), ())


def test_views_are_typed_and_evaluated_as_their_slices():
    y = Var("y", (B, L, 3 * HIDDEN), "float16")
    views = tuple((B, L, HEADS, E, o) for o in (0, HIDDEN, 2 * HIDDEN))
    net = graph_from_outputs(attention(y, y, y, layout="bshd", is_causal=True, views=views))
    arr = cast_array(RNG.standard_normal(y.shape), "float16")
    got = widen(graph.evaluate(net, {"y": arr}), "float16")
    q, k, v = (arr[..., o:o + HIDDEN].reshape(B, L, HEADS, E) for o in (0, HIDDEN,
                                                                           2 * HIDDEN))
    want = attention_python(q, k, v, None, None, True, layout="bshd")
    assert np.abs(got - want).max() <= 4e-3
    with pytest.raises(GraphError, match="does not fit its argument"):
        graph_from_outputs(attention(y, y, y, layout="bshd",
                                     views=((B, L, HEADS, E, 80), (), ())))
    with pytest.raises(GraphError, match="layout 'bshd' only"):
        attention(y, y, y, views=views)


def test_the_step_records_the_views_and_reads_back():
    from ptxforge.ops.schedules.attention.schedule_pass import FusedAttention, views_param
    from ptxforge.passes.pipeline import parse_pass

    _, views, _ = _combined(1, 64, 2, 2, 64, "float16")
    w = AttentionWorkload(1, 2, 2, 64, 64, 64, 64, "float16", layout="bshd", views=views)
    step = FusedAttention(4, 64, 2, False, None, "mma_sync", "bshd", views_param(w))
    assert parse_pass(step.text) == step
    assert views_param(w) == (1, 64, 2, 64, 0, 1, 64, 2, 64, 128, 1, 64, 2, 64, 256)


@pytest.mark.torch_frontend
def test_hugging_face_bert_reads_its_combined_projection_in_place():
    """Hugging Face's BertModel through graph.from_torch (SDPA attention, 256 tokens: the
    fused kernel by default): its attention reads the combined Q/K/V product through
    views, three slice kernels fewer than without the fold, and matches eager on the
    simulator."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from ptxforge.graph import from_torch
    from ptxforge.graph.fused import distinct_functions

    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64,
                                     vocab_size=96, max_position_embeddings=300)
    model = transformers.BertModel(config).eval()
    model.set_attn_implementation("sdpa")
    ids = torch.from_numpy(RNG.integers(0, 96, (1, 256)))
    mask = torch.ones(1, 256, dtype=torch.int64)
    mask[0, 200:] = 0
    with torch.no_grad():
        want = model(ids, attention_mask=mask, return_dict=False)[0].numpy()
    net, params = from_torch(model, (ids,), {"attention_mask": mask})
    opt = graph.optimize(net, params, precision="float16")
    with GraphPassContext(config={VIEWS_OPTION: False}):
        sliced = graph.optimize(net, params, precision="float16")
    n_opt, n_sliced = (len(distinct_functions(g)[0]) for g in (opt, sliced))
    assert n_opt == n_sliced - 3
    lib = graph.build(net, "sim -arch=sm_80", params=params, precision="float16")
    assert any(f.pipeline_text.startswith("fused_attention") for f in lib.functions.values())
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**{p.name: a.numpy() for p, a in zip(net.params, (ids, mask))})
    m.run()
    got = m.get_output(0).numpy().astype(np.float64)
    assert np.abs(got - want).max() <= 3e-2 * max(1.0, np.abs(want).max())
