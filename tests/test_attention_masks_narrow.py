"""Masks read at the fewest elements that hold them (``attention_masks.narrowed``): the
padding mask transformers 5 exports for BERT's SDPA attention is
``where(and(C, pad), 0, finfo.min)`` with an all-True constant ``C`` of ``[1, 1, L, 1]``
spreading ``pad`` (``[B, 1, 1, S]``) over every query row. Written as it is, a kernel stores
a ``[B, 1, L, S]`` mask and the attention reads it for every head; narrowed, the attention
reads ``[B, 1, 1, S]`` and gives the same numbers (onnxruntime, reference executor,
decomposed and fused simulator builds)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ptxforge import graph
from ptxforge.graph.passes.attention_masks import narrowed
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


def bert_sdpa(spread: np.ndarray | None = None, guard: bool = True):
    """BERT's SDPA export by dynamo: the padding mask ``and``-ed with ``spread`` (default
    all-True ``[1, 1, L, 1]``), ``Where(.., 0, finfo.min)`` added to the scores."""
    n = Net(12)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [B, L])
    q, k, v = _heads(n, "x", H), _heads(n, "x", H, perm=(0, 2, 3, 1)), _heads(n, "x", H)
    s = n.op("Mul", [n.op("MatMul", [q, k]), n.const(np.float32(1 / np.sqrt(E)))])
    pad = n.op("Cast", [n.op("Unsqueeze", ["attention_mask", n.const(np.array(
        [1, 2], np.int64))])], to=TensorProto.BOOL)
    spread = np.ones((1, 1, L, 1), bool) if spread is None else spread
    keep = n.op("And", [n.const(spread, "bitwise_and"), pad])
    s = n.op("Add", [s, n.op("Where", [keep, n.const(np.float32(0)),
                                       n.const(np.float32(FMIN))])])
    p = n.op("Softmax", [s], axis=-1)
    if guard:
        p = n.op("Where", [n.op("IsNaN", [p]), n.const(np.float32(0)), p])
    return n.model([x, mask], _merge(n, n.op("MatMul", [p, v])), [B, L, D], 18)


def _feeds():
    rng = np.random.default_rng(5)
    m = np.ones((B, L), np.int64)
    m[0, -3:] = 0  # right padding: every row keeps a key
    return {"x": rng.standard_normal((B, L, D)).astype(np.float32), "attention_mask": m}


def _check(model):
    f = _feeds()
    expected = onnxruntime_out(model, f)
    net, params = graph.from_onnx(model)
    g = recomposed(net, params)
    atts = attentions(g)
    assert len(atts) == 1, refusals(g)
    close(graph.run_graph(g, f)[0], expected, 1e-5)
    got, _ = run_sim(net, params, f, fused_attention=False)
    close(got, expected, 1e-5)
    return atts[0], net, params, f, expected


def test_bert_sdpa_padding_mask_is_read_per_key():
    att, net, params, f, expected = _check(bert_sdpa())
    assert att.attrs["is_causal"] is False and att.args[3].shape == (B, 1, 1, L)
    got, names = run_sim(net, params, f, fused_attention=True, precision="float16")
    assert sum("nn_attention" in n for n in names) == 1
    assert not any("logical_and" in n for n in names)
    close(got, expected, 3e-2)


def test_a_spread_that_drops_scores_is_kept():
    spread = np.ones((1, 1, L, 1), bool)
    spread[0, 0, 2] = False  # query 2 sees no key: the constant is no repetition
    att, *_ = _check(bert_sdpa(spread))
    assert att.args[3].shape == (B, 1, L, L)


def test_narrowed_unit_rules():
    pad = graph.var("pad", (B, 1, 1, L), "bool")
    wide = graph.opdefs.logic.where(
        graph.opdefs.logic.logical_and(graph.const(np.ones((1, 1, L, 1), bool)), pad),
        graph.const(np.float32(0)), graph.const(np.float32(FMIN)))
    n = narrowed(wide)
    assert n.shape == (B, 1, 1, L) and n.args[0] is pad
    # logical_or with all-False, and a broadcast_to, go the same way
    spread = graph.opdefs.transform.broadcast_to(pad, (B, H, L, L))
    ored = graph.opdefs.logic.logical_or(graph.const(np.zeros((1, 1, 1, 1), bool)), spread)
    assert narrowed(ored) is pad
    # a constant uniform along rows and batches becomes one row; the rank stays
    c = np.broadcast_to(np.arange(L, dtype=np.float32), (B, 1, L, L)).copy()
    out = narrowed(graph.add(graph.const(c), graph.const(np.float32(1.0))))
    assert out.shape == (1, 1, 1, L)
    np.testing.assert_array_equal(np.broadcast_to(graph.evaluate(graph.function(out), {}),
                                                  c.shape), c + 1)
    # a mask of the scores' own values is left as it is
    full = graph.var("m", (B, 1, L, L))
    assert narrowed(full) is full
    # a lower rank after dropping a broadcast is reshaped back to the mask's rank
    low = graph.var("v", (L,))
    up = narrowed(graph.opdefs.transform.broadcast_to(low, (B, 1, L, L)))
    assert up.op == "reshape" and up.shape == (1, 1, 1, L)


@pytest.mark.corpus
def test_tiny_bert_sdpa_export_reads_a_padding_row(tmp_path):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, vocab_size=96, max_position_embeddings=64,
                        attn_implementation="sdpa")
    inner = tf.BertModel(cfg, add_pooling_layer=False)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask
                          ).last_hidden_state

    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 96, (2, 16)).astype(np.int64),
             "attention_mask": np.ones((2, 16), np.int64)}
    feeds["attention_mask"][1, -5:] = 0
    path = str(tmp_path / "bert.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Wrapped().eval(), tuple(torch.from_numpy(v) for v in feeds.values()),
                          path, input_names=list(feeds), output_names=["out"],
                          opset_version=18, dynamo=True)
    model = onnx.load(path)
    expected = onnxruntime_out(model, feeds)
    net, params = graph.from_onnx(model)
    g = recomposed(net, params)
    atts = attentions(g)
    assert len(atts) == 2, refusals(g)
    assert all(a.args[3].shape == (2, 1, 1, 16) for a in atts)
    close(graph.run_graph(g, feeds)[0], expected, 1e-4)
    got, names = run_sim(net, params, feeds, fused_attention=True, precision="float16")
    assert sum("nn_attention" in n for n in names) == 2
    close(got, expected, 3e-2)


def test_a_front_ends_attention_mask_is_narrowed_too():
    """``graph.from_torch`` keeps SDPA whole: its mask, spread the same way, is narrowed by
    the same pass, and the attention computes the same."""
    from ptxforge.graph.opdefs.attention import attention
    from ptxforge.graph.opdefs.logic import logical_and, where
    from ptxforge.graph.passes import RecomposeAttention

    q, k, v = (graph.var(n, (B, H, L, E)) for n in "qkv")
    pad = graph.var("pad", (B, 1, 1, L), "bool")
    keep = logical_and(graph.const(np.ones((1, 1, L, 1), bool)), pad)
    mask = where(keep, graph.const(np.float32(0)), graph.const(np.float32(FMIN)))
    net = graph.function(attention(q, k, v, mask, scale=E ** -0.5), [q, k, v, pad])
    out = RecomposeAttention()(net)
    (att,) = attentions(out)
    assert att.args[3].shape == (B, 1, 1, L)
    rng = np.random.default_rng(2)
    f = {n: rng.standard_normal((B, H, L, E)).astype(np.float32) for n in "qkv"}
    f["pad"] = np.ones((B, 1, 1, L), bool)
    f["pad"][1, ..., -4:] = False
    np.testing.assert_allclose(graph.run_graph(out, f)[0], graph.run_graph(net, f)[0],
                               rtol=1e-6, atol=1e-6)
