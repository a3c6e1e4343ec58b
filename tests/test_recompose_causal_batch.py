"""Causal masks the dynamo exporter folds into a constant of the batch's shape: GPT-2 with
SDPA or eager attention and no ``attention_mask`` gives ``scores + C`` with ``C`` a
``[B, 1, L, L]`` constant, 0 on and below the diagonal and finfo.min above it, the same
``[L, L]`` block for every sequence. ``recompose_attention`` writes it as ``is_causal`` with
no mask operand (the kernel skips the tiles above the diagonal and reads no mask), where a
constant that differs between the sequences stays the mask it is.

Hand-written graphs run in a few seconds; real exports of a tiny GPT-2 by the dynamo
exporter (the TorchScript exporter cannot export GPT-2 without a mask: ``aten::diff``) run
under the ``corpus`` mark."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ptxforge import graph
from ptxforge.graph.passes.attention_masks import causal
from ptxforge.graph.passes.attention_pattern import MaskTerm
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


def causal_block(fill: float = FMIN) -> np.ndarray:
    keep = np.tril(np.ones((L, L), bool))
    return np.where(keep, 0.0, fill).astype(np.float32)


def batch_causal(mask: np.ndarray, layers: int = 1):
    """``layers`` of eager attention (scores / sqrt(E) + ``mask``, a constant of
    ``[B, 1, L, L]``), as the dynamo exporter writes GPT-2 without an attention mask."""
    n = Net(11)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, L, D])
    h = "x"
    for _ in range(layers):
        q, k, v = _heads(n, h, H), _heads(n, h, H, perm=(0, 2, 3, 1)), _heads(n, h, H)
        s = n.op("Div", [n.op("MatMul", [q, k]), n.const(np.float32(np.sqrt(E)))])
        s = n.op("Add", [s, n.const(mask, "causal_mask")])
        p = n.op("Softmax", [s], axis=-1)
        out = _merge(n, n.op("MatMul", [p, v]))
        h = out if layers == 1 else n.op("Add", [out, h])
    return n.model([x], h, [B, L, D], 18)


def _feeds():
    return {"x": np.random.default_rng(4).standard_normal((B, L, D)).astype(np.float32)}


def _check(model, layers: int = 1):
    f = _feeds()
    expected = onnxruntime_out(model, f)
    net, params = graph.from_onnx(model)
    g = recomposed(net, params)
    atts = attentions(g)
    assert len(atts) == layers, refusals(g)
    close(graph.run_graph(g, f)[0], expected, 1e-5)
    got, _ = run_sim(net, params, f, fused_attention=False)
    close(got, expected, 1e-5)
    return atts, net, params, f, expected


@pytest.mark.parametrize("fill", [FMIN, -1e30, -np.inf])
def test_a_causal_constant_of_the_batchs_shape_is_is_causal(fill):
    mask = np.broadcast_to(causal_block(fill), (B, 1, L, L)).copy()
    (att,), *_ = _check(batch_causal(mask))
    assert att.attrs["is_causal"] is True and len(att.args) == 3


def test_the_fused_float16_build_reads_no_mask():
    mask = np.broadcast_to(causal_block(), (B, 1, L, L)).copy()
    atts, net, params, f, expected = _check(batch_causal(mask, layers=2), layers=2)
    assert all(a.attrs["is_causal"] and len(a.args) == 3 for a in atts)
    got, names = run_sim(net, params, f, fused_attention=True, precision="float16")
    assert sum("nn_attention" in n for n in names) == 2
    close(got, expected, 3e-2)


def test_a_constant_that_differs_between_sequences_stays_a_mask():
    mask = np.broadcast_to(causal_block(), (B, 1, L, L)).copy()
    mask[1, 0, 5, :2] = FMIN  # the second sequence also drops two keys of row 5
    (att,), *_ = _check(batch_causal(mask))
    assert att.attrs["is_causal"] is False and att.args[3].shape == (B, 1, L, L)


def test_a_fill_above_the_bound_stays_a_mask():
    # -1e4 is not absorbed by every score (a score of 2e4 would survive it): the exact
    # softmax of the imported graph needs the mask
    mask = np.broadcast_to(causal_block(-1e4), (B, 1, L, L)).copy()
    (att,), *_ = _check(batch_causal(mask))
    assert att.attrs["is_causal"] is False


def test_causal_reads_the_shared_block():
    block = causal_block()
    term = MaskTerm("add", graph.const(np.broadcast_to(block, (3, 2, L, L)).copy()), 0.0)
    assert causal(term, L, L) == ("large", 0)
    shifted = np.stack([block, np.roll(block, 1, axis=1)]).reshape(2, 1, L, L)
    assert causal(MaskTerm("add", graph.const(shifted), 0.0), L, L) is None


# -- real exports ------------------------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_tiny_gpt2_of_a_batch_is_causal_without_a_mask(impl, tmp_path):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=96,
                        attn_implementation=impl)
    inner = tf.GPT2Model(cfg)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).last_hidden_state

    ids = np.random.default_rng(0).integers(0, 96, (2, 16)).astype(np.int64)
    path = str(tmp_path / "gpt2.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Wrapped().eval(), (torch.from_numpy(ids),), path,
                          input_names=["input_ids"], output_names=["out"], opset_version=18,
                          dynamo=True)
    model = onnx.load(path)
    feeds = {"input_ids": ids}
    expected = onnxruntime_out(model, feeds)
    net, params = graph.from_onnx(model)
    g = recomposed(net, params)
    atts = attentions(g)
    assert len(atts) == 2, refusals(g)
    assert all(a.attrs["is_causal"] is True and len(a.args) == 3 for a in atts)
    close(graph.run_graph(g, feeds)[0], expected, 1e-4)
    got, _ = run_sim(net, params, feeds, fused_attention=False)
    close(got, expected, 1e-4)
    got, names = run_sim(net, params, feeds, fused_attention=True, precision="float16")
    assert sum("nn_attention" in n for n in names) == 2
    close(got, expected, 3e-2)
