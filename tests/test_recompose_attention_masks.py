"""``recompose_attention`` on the masks transformers 4 exported and on the shapes the first
forms missed, written with ``onnx.helper`` in the exporters' node sequences: BERT's
``(1 - attention_mask) * finfo.min`` from an int64 mask without a NaN guard, GPT-2's causal
``Where`` followed by that padding mask, causal masks bottom-right aligned (keys of a cache
before the queries), and products whose keys and values have one batch for all the queries'
(``[B, H, L, E] @ [1, H, E, S]``). Each recomposed graph must give onnxruntime's numbers on
the reference executor and the decomposed simulator build, fully masked rows included (the
uniform average a finite fill gives, no NaN), and each form that would compute something
else must be left as it is with the reason in the pass's debug output."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ptxforge import graph
from ptxforge.graph.passes import GraphPassContext, RecomposeAttention
from ptxforge.graph.passes.recompose_attention import refusals

from .test_recompose_attention import (
    FMIN,
    B,
    D,
    E,
    H,
    L,
    Net,
    _heads,
    _merge,
    attentions,
    close,
    onnxruntime_out,
    recomposed,
    run_sim,
)

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

P = 4  # keys of a cache before the queries


def _padding(n: Net, mask: str, keys: int, dtype=TensorProto.FLOAT) -> str:
    """transformers 4's ``(1.0 - mask[:, None, None, :].to(dtype)) * finfo.min``."""
    m = n.op("Unsqueeze", [mask, n.const(np.array([1, 2], np.int64))])
    m = n.op("Cast", [m], to=dtype)
    one = n.const(np.float32(1.0))
    return n.op("Mul", [n.op("Sub", [one, m]), n.const(np.float32(FMIN))])


def _tril(n: Net, rows: int, cols: int, offset: int) -> str:
    """GPT-2's ``bias[:, :, S - L:S, :S]``: a bool constant keeping ``j <= i + offset``."""
    keep = np.tril(np.ones((rows, cols), bool), offset).reshape(1, 1, rows, cols)
    return n.const(keep, "bias")


def legacy(kind: str, fill: float = FMIN, mask_dtype=TensorProto.INT64, layers: int = 1):
    """``layers`` attention layers (residual). ``kind``: ``bert`` (scores / sqrt(E) +
    padding mask), ``gpt2`` (causal Where with ``fill``, then the padding mask), ``cache``
    (GPT-2 with ``P`` cached keys: bottom-right causal), ``cache_only`` (the bottom-right
    causal ``Where`` alone), ``memory`` (keys and values of one batch, ``[1, H, E, S]``)."""
    n = Net(5)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    keys = L + P if kind.startswith("cache") else L
    mask = helper.make_tensor_value_info("attention_mask", mask_dtype, [B, keys])
    inputs = [x, mask]
    if kind == "memory":
        inputs = [x, helper.make_tensor_value_info("memory", TensorProto.FLOAT,
                                                   [1, L + P, D])]
    if kind.startswith("cache"):
        inputs.append(helper.make_tensor_value_info("past", TensorProto.FLOAT,
                                                    [2, B, H, P, E]))
    h = "x"
    for _ in range(layers):
        q = _heads(n, h, H)
        if kind == "memory":
            k = _heads_of(n, "memory", 1, L + P, perm=(0, 2, 3, 1))
            v = _heads_of(n, "memory", 1, L + P)
        else:
            k, v = _heads(n, h, H, perm=(0, 2, 3, 1)), _heads(n, h, H)
        if kind.startswith("cache"):
            pk = n.op("Gather", ["past", n.const(np.array(0, np.int64))], axis=0)
            pv = n.op("Gather", ["past", n.const(np.array(1, np.int64))], axis=0)
            k = n.op("Concat", [n.op("Transpose", [pk], perm=[0, 1, 3, 2]), k], axis=3)
            v = n.op("Concat", [pv, v], axis=2)
        s = n.op("Div", [n.op("MatMul", [q, k]), n.const(np.float32(np.sqrt(E)))])
        if kind in ("gpt2", "cache", "cache_only"):
            s = n.op("Where", [_tril(n, L, keys, keys - L), s, n.const(np.float32(fill))])
        if kind in ("bert", "gpt2", "cache"):
            s = n.op("Add", [s, _padding(n, "attention_mask", keys)])
        p = n.op("Softmax", [s], axis=-1)
        out = _merge(n, n.op("MatMul", [p, v]))
        h = out if layers == 1 else n.op("Add", [out, h])
    if kind in ("cache_only", "memory"):
        inputs = [i for i in inputs if i.name != "attention_mask"]
    return n.model(inputs, h, [B, L, D], 17)


def _heads_of(n: Net, x: str, batch: int, seq: int, perm=(0, 2, 1, 3)) -> str:
    y = n.op("MatMul", [x, n.weight(D, D)])
    y = n.op("Reshape", [y, n.const(np.array([batch, seq, -1, E], np.int64))])
    return n.op("Transpose", [y], perm=list(perm))


def feeds(model, fully_masked: bool = True) -> dict:
    rng = np.random.default_rng(9)
    out = {"x": rng.standard_normal((B, L, D)).astype(np.float32)}
    names = {i.name: i for i in model.graph.input}
    if "attention_mask" in names:
        keys = names["attention_mask"].type.tensor_type.shape.dim[1].dim_value
        m = np.ones((B, keys), np.int64)
        m[0, :3] = 0  # left padding: GPT-2's first rows see no key of their own
        if fully_masked:
            m[1] = 0  # a sequence of padding alone: every row fully masked
        bool_mask = names["attention_mask"].type.tensor_type.elem_type == TensorProto.BOOL
        out["attention_mask"] = m.astype(bool) if bool_mask else m
    if "past" in names:
        out["past"] = rng.standard_normal((2, B, H, P, E)).astype(np.float32)
    if "memory" in names:
        out["memory"] = rng.standard_normal((1, L + P, D)).astype(np.float32)
    return out


def _check(model, layers: int = 1) -> tuple:
    """The recomposed graph against onnxruntime (reference executor, decomposed float32
    simulator build) and against the build of the graph without the pass."""
    f = feeds(model)
    expected = onnxruntime_out(model, f)
    assert np.isfinite(expected).all()  # finite fills: fully masked rows average
    net, params = graph.from_onnx(model)
    g = recomposed(net, params)
    atts = attentions(g)
    assert len(atts) == layers, refusals(g)
    inputs = {k: v for k, v in f.items() if k in [p.name for p in g.params]}
    close(graph.run_graph(g, inputs)[0], expected, 1e-5)
    got, names = run_sim(net, params, f, fused_attention=False)
    assert np.isfinite(got).all()
    close(got, expected, 1e-5)
    return atts, net, params, f


def test_bert_padding_mask_of_an_int64_attention_mask():
    (att,), net, params, f = _check(legacy("bert"))
    assert att.attrs["is_causal"] is False and att.args[3].shape == (B, 1, 1, L)


def test_bool_attention_mask_through_the_same_padding_form():
    (att,), *_ = _check(legacy("bert", mask_dtype=TensorProto.BOOL))
    assert len(att.args) == 4


def test_gpt2_causal_where_with_a_padding_mask():
    # left padding makes rows whose keys up to their own are all masked: there the
    # imported graph averages every key of finfo.min, the future ones included, which
    # only the summed mask reproduces (is_causal would drop the future keys)
    (att,), *_ = _check(legacy("gpt2"))
    assert att.attrs["is_causal"] is False
    assert att.args[3].shape == (B, 1, L, L)


def test_minus_infinity_causal_where_with_a_padding_mask_is_causal():
    # minus infinity at the future keys: every row keeps its own keys at finfo.min or
    # more, so is_causal with the padding mask computes the same (and skips tiles)
    (att,), *_ = _check(legacy("gpt2", fill=-np.inf))
    assert att.attrs["is_causal"] is True and att.args[3].shape == (B, 1, 1, L)


def test_bottom_right_causal_with_cached_keys():
    (att,), *_ = _check(legacy("cache"))
    assert att.args[1].shape == (B, H, L + P, E)
    assert att.attrs["is_causal"] is False and att.args[3].shape == (B, 1, L, L + P)


def test_layers_share_one_mask():
    # each layer has its own copy of the causal bias (96 elements: no small constant that
    # eliminate_common_subexpr compares by value); the layers read one summed mask
    atts, *_ = _check(legacy("cache", layers=2), layers=2)
    assert atts[0].args[3] is atts[1].args[3]


@pytest.mark.parametrize("fill", [FMIN, -np.inf])
def test_bottom_right_causal_alone_is_a_constant_mask(fill):
    # no row is empty (each query sees the cache): minus infinity needs no NaN guard
    (att,), *_ = _check(legacy("cache_only", fill=fill))
    assert att.attrs["is_causal"] is False
    mask = att.args[3]
    assert mask.shape[-2:] == (L, L + P)


def test_products_with_a_broadcast_batch():
    (att,), *_ = _check(legacy("memory"))
    q, k, v = att.args[:3]
    assert q.shape == (B, H, L, E) and k.shape == (B, H, L + P, E) == v.shape
    assert k.op == "broadcast_to" and k.args[0].shape == (1, H, L + P, E)


def test_fused_float16_build_averages_fully_masked_rows_as_the_imported_graph(monkeypatch):
    # the build without the pass keeps the mask and the softmax in float32: its rows that
    # see only masked keys (the first three of the left-padded sequence, all of the padded
    # one) average every key, as float32's softmax of s + finfo.min does. The fused kernel
    # reads the float mask in float32 too (to_mixed_precision keeps it) and floors the
    # scaled mask at a finite value (finfo.min * log2(e) would be minus infinity): those
    # rows average as well, never NaN, never the empty row's 0
    model = legacy("gpt2")
    f = feeds(model)
    net, params = graph.from_onnx(model)
    got, names = run_sim(net, params, f, fused_attention=True, precision="float16")
    assert sum("nn_attention" in n for n in names) == 1
    monkeypatch.setattr(RecomposeAttention, "apply", lambda self, g, ctx: g)
    before, _ = run_sim(net, params, f, precision="float16")
    assert np.isfinite(got).all() and np.isfinite(before).all()
    empty = np.zeros((B, L), bool)
    empty[0, :3] = empty[1] = True
    assert np.abs(got[empty]).max() > 0.1
    close(got, before.astype(np.float32), 3e-2)
    close(got[~empty], onnxruntime_out(model, f)[~empty], 3e-2)
    close(before, onnxruntime_out(model, f), 3e-2)


def _sdpa_causal_and_padding(fill: float):
    """GPT-2's SDPA export: ``Where(And(tril, padding), 0, fill)`` added, the NaN guard."""
    n = Net(10)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [B, L])
    q, k, v = _heads(n, "x", H), _heads(n, "x", H, perm=(0, 2, 3, 1)), _heads(n, "x", H)
    s = n.op("Mul", [n.op("MatMul", [q, k]), n.const(np.float32(1 / np.sqrt(E)))])
    pad = n.op("Cast", [n.op("Unsqueeze", ["attention_mask", n.const(np.array(
        [1, 2], np.int64))])], to=TensorProto.BOOL)
    keep = n.op("And", [_tril(n, L, L, 0), pad])
    s = n.op("Add", [s, n.op("Where", [keep, n.const(np.float32(0)),
                                       n.const(np.float32(fill))])])
    p = n.op("Softmax", [s], axis=-1)
    p = n.op("Where", [n.op("IsNaN", [p]), n.const(np.float32(0)), p])
    return n.model([x, mask], _merge(n, n.op("MatMul", [p, v])), [B, L, D], 17)


def test_and_of_causal_and_padding_with_minus_infinity_is_causal():
    model = _sdpa_causal_and_padding(-np.inf)
    f = feeds(model)
    expected = onnxruntime_out(model, f)  # the guard: fully masked rows are 0
    assert np.all(expected[1] == 0) and np.all(expected[0, :3] == 0)
    net, params = graph.from_onnx(model)
    (att,) = attentions(recomposed(net, params))
    assert att.attrs["is_causal"] is True and att.args[3].shape == (B, 1, 1, L)
    assert att.args[3].dtype == "bool"
    inputs = {k: v for k, v in f.items() if k != "x"} | {"x": f["x"]}
    close(graph.run_graph(recomposed(net, params), inputs)[0], expected, 1e-5)
    got, _ = run_sim(net, params, f, fused_attention=False)
    close(got, expected, 1e-5)
    got, names = run_sim(net, params, f, fused_attention=True, precision="float16")
    assert sum("nn_attention" in n for n in names) == 1
    close(got, expected, 3e-2)


def test_and_of_causal_and_padding_with_a_finite_fill_stays_one_mask():
    # finfo.min: a fully masked row averages every key (the later ones too), which
    # is_causal would not
    (att,), *_ = _check(_sdpa_causal_and_padding(FMIN))
    assert att.attrs["is_causal"] is False and att.args[3].shape == (B, 1, L, L)


# -- what must be left as it is, with the reason ----------------------------------------------


def _float_padding():
    """The padding form of a float mask input: its values are unbounded."""
    n = Net(6)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [B, L])
    q, k, v = _heads(n, "x", H), _heads(n, "x", H, perm=(0, 2, 3, 1)), _heads(n, "x", H)
    s = n.op("Div", [n.op("MatMul", [q, k]), n.const(np.float32(np.sqrt(E)))])
    m = n.op("Unsqueeze", ["attention_mask", n.const(np.array([1, 2], np.int64))])
    pad = n.op("Mul", [n.op("Sub", [n.const(np.float32(1.0)), m]), n.const(np.float32(FMIN))])
    p = n.op("Softmax", [n.op("Add", [s, pad])], axis=-1)
    return n.model([x, mask], _merge(n, n.op("MatMul", [p, v])), [B, L, D], 17)


def _where_inf_padding():
    """A bool padding mask kept by ``Where(mask, scores, -inf)``, no NaN guard: a fully
    padded sequence is NaN in the imported graph."""
    n = Net(8)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [B, L])
    q, k, v = _heads(n, "x", H), _heads(n, "x", H, perm=(0, 2, 3, 1)), _heads(n, "x", H)
    s = n.op("Div", [n.op("MatMul", [q, k]), n.const(np.float32(np.sqrt(E)))])
    m = n.op("Unsqueeze", ["attention_mask", n.const(np.array([1, 2], np.int64))])
    s = n.op("Where", [n.op("Cast", [m], to=TensorProto.BOOL), s,
                       n.const(np.float32(-np.inf))])
    p = n.op("Softmax", [s], axis=-1)
    return n.model([x, mask], _merge(n, n.op("MatMul", [p, v])), [B, L, D], 17)


def _two_general_masks():
    n = Net(7)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    bias = helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, H, L, L])
    q, k, v = _heads(n, "x", H), _heads(n, "x", H, perm=(0, 2, 3, 1)), _heads(n, "x", H)
    s = n.op("MatMul", [q, k])
    s = n.op("Add", [n.op("Add", [s, "bias"]), n.const(np.full((1, 1, 1, L), 0.5, np.float32))])
    p = n.op("Softmax", [s], axis=-1)
    return n.model([x, bias], _merge(n, n.op("MatMul", [p, v])), [B, L, D], 17)


REFUSED = {
    "float padding mask": (_float_padding, "no bounds of its values"),
    "two general masks": (_two_general_masks, "two masks add values"),
    "minus infinity padding without a NaN guard": (_where_inf_padding,
                                                     "row all minus infinity"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_forms_say_why(case, caplog):
    make, reason = REFUSED[case]
    model = make()
    net, params = graph.from_onnx(model)
    with caplog.at_level(logging.DEBUG, logger="ptxforge.graph.passes.recompose_attention"):
        g = recomposed(net, params)
    assert attentions(g) == []
    lines = refusals(g)
    assert len(lines) == 1 and reason in lines[0], lines
    assert any(reason in r.getMessage() for r in caplog.records)


def test_minus_infinity_padding_without_guard_would_differ():
    # why that refusal is right: a fully padded sequence is NaN in the imported graph,
    # where nn.attention would give 0
    model = _where_inf_padding()
    f = feeds(model)
    expected = onnxruntime_out(model, f)
    assert np.isnan(expected[1]).all() and np.isfinite(expected[0]).all()
    net, params = graph.from_onnx(model)
    with GraphPassContext(config={"fused_attention": False}):
        got, _ = run_sim(net, params, f)
    assert np.isnan(got[1]).all()
    close(got[0:1], expected[0:1], 1e-5)


def test_the_pass_changes_nothing_it_refuses():
    net, params = graph.from_onnx(_float_padding())
    g = recomposed(net, params)
    assert RecomposeAttention()(g) is g


# -- the mask analysis ----------------------------------------------------------------------


def test_causal_constants_top_left_and_bottom_right():
    from ptxforge.graph.ir import Constant
    from ptxforge.graph.passes.attention_masks import causal
    from ptxforge.graph.passes.attention_pattern import MaskTerm

    lq, s = 3, 5
    top = Constant(np.tril(np.ones((lq, s), bool)))
    bottom = Constant(np.tril(np.ones((lq, s), bool), s - lq))
    assert causal(MaskTerm("keep", top, FMIN), lq, s) == ("large", 0)
    assert causal(MaskTerm("keep", bottom, -np.inf), lq, s) == ("inf", s - lq)
    assert causal(MaskTerm("drop", Constant(~np.tril(np.ones((lq, s), bool))), -np.inf),
                  lq, s) == ("inf", 0)
    assert causal(MaskTerm("keep", bottom, -1.0), lq, s) is None  # no fill of a mask
    additive = Constant(np.where(np.tril(np.ones((lq, s), bool), 1), 0.0, FMIN).astype(
        np.float32))
    assert causal(MaskTerm("add", additive), lq, s) is None  # offset 1: neither alignment


def test_padding_mask_bounds_assume_zero_and_one():
    from ptxforge.graph import opdefs as G
    from ptxforge.graph.ir import Constant, Var
    from ptxforge.graph.passes.attention_masks import bounds, selects
    from ptxforge.graph.passes.attention_pattern import MaskTerm

    one, fmin = Constant(np.float32(1.0)), Constant(np.float32(FMIN))
    for dtype in ("int64", "int32", "bool"):
        m = G.cast(Var("m", (B, L), dtype), "float32")
        pad = G.multiply(G.subtract(one, m), fmin)
        assert bounds(pad) == (FMIN, 0.0)
        assert selects(MaskTerm("add", pad))
    floats = G.multiply(G.subtract(one, Var("m", (B, L), "float32")), fmin)
    assert bounds(floats) is None and not selects(MaskTerm("add", floats))
    # an integer mask anywhere else is no 0/1 indicator
    scaled = G.multiply(G.cast(Var("m", (B, L), "int64"), "float32"), fmin)
    assert bounds(scaled) is None


OLD_FORMS = {
    "softmax over the queries": "the softmax is on axis",
    "mask added after the softmax": "changed after the softmax",
    "scale after the mask": "the scores come from",
    "scale per head (no scalar)": "the scores come from",
    "probabilities transposed": "moves elements",
    "minus infinity data mask without NaN guard": "row all minus infinity",
}


@pytest.mark.parametrize("case", sorted(OLD_FORMS))
def test_the_first_refused_forms_say_why(case):
    from .test_recompose_attention import REFUSED, sdpa_dynamo

    net, params = graph.from_onnx(sdpa_dynamo(**REFUSED[case]))
    g = recomposed(net, params)
    assert attentions(g) == []
    (line,) = refusals(g)
    assert OLD_FORMS[case] in line, line
