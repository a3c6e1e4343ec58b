"""A layer norm read through a reshape: BERT's embedding norm, reshaped to two dimensions
and read by the first layer's products (cast down to float16) and by its residual add
(float32). ``fold_output_cast`` follows the reshape, so the norm stores float16, the cast
kernel goes and the first layer's residual kernel is the other layers' one.

The graph-level tests build the pattern by hand (fast); the export test
(``pytest -m corpus tests/test_graph_first_layer.py``) checks a fresh dynamo export of a
small Hugging Face BERT against onnxruntime on the simulator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph import nn
from ptxforge.graph.fused import distinct_functions
from ptxforge.graph.passes import FoldOutputCast

RNG = np.random.default_rng(19)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def embedding_then_layer(batch=2, seq=8, dim=16, reshape_output=False):
    """``x (batch, seq, dim) -> layer norm -> reshape (batch*seq, dim)``, read by a float16
    dense (through a cast) and a float32 residual add, as an ONNX export of BERT writes its
    embeddings and first layer."""
    x = graph.var("x", (batch, seq, dim))
    ln = nn.layer_norm(x, graph.const(rand(dim), "g"), graph.const(rand(dim), "b"))
    flat = graph.reshape(ln, (batch * seq, dim))
    w = graph.const(rand(dim, dim, scale=0.3).astype("float16"), "w")
    y = nn.dense(graph.cast(flat, "float16"), w)
    out = graph.add(graph.cast(y, "float32"), flat)
    return graph.function([out, flat] if reshape_output else out)


def _calls(net, op):
    return [c for c in net.calls() if c.op == op]


def test_a_norm_read_through_a_reshape_stores_the_rounded_result():
    net = embedding_then_layer()
    out = FoldOutputCast(round_shared=True)(net)
    (ln,) = _calls(out, "nn.layer_norm")
    assert ln.dtype == "float16" and ln.attrs["out_dtype"] == "float16"
    (flat,) = _calls(out, "reshape")
    assert flat.args[0] is ln and flat.dtype == "float16"
    (dense,) = _calls(out, "nn.dense")
    assert dense.args[0] is flat  # the cast down is gone: the product reads the view
    (add,) = _calls(out, "add")
    (up,) = [a for a in add.args if a.op == "cast" and a.args[0] is flat]
    assert up.dtype == "float32"  # the residual widens the rounded norm
    # the same bits as rounding the float32 norm once, under the reshape
    xv = rand(2, 8, 16, scale=3.0)
    got = graph.evaluate(out, {"x": xv})
    (ln32,) = _calls(net, "nn.layer_norm")
    rounded = graph.cast(graph.cast(graph.reshape(ln32, (16, 16)), "float16"), "float32")
    want = graph.evaluate(graph.function(graph.add(
        graph.cast(nn.dense(graph.cast(rounded, "float16"), dense.args[1]), "float32"),
        rounded)), {"x": xv})
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


def test_without_round_shared_or_with_the_reshape_an_output_the_norm_stays_float32():
    assert [c.dtype for c in _calls(FoldOutputCast()(embedding_then_layer()),
                                    "nn.layer_norm")] == ["float32"]
    kept = FoldOutputCast(round_shared=True)(embedding_then_layer(reshape_output=True))
    assert [c.dtype for c in _calls(kept, "nn.layer_norm")] == ["float32"]


def test_the_first_layer_needs_no_cast_kernel_and_matches_on_the_simulator():
    net = embedding_then_layer()
    lib = graph.build(net, "sim", precision="float16")
    funcs, _ = distinct_functions(lib.graph)
    names = sorted(f.func.name for f in funcs)
    # the norm and the product with its residual epilogue: no cast kernel between them
    assert len(funcs) == 2 and not any(n.endswith("fused_cast") for n in names), names
    (res,) = [f for f in funcs if "nn_dense" in f.func.name]
    assert "cast_cast_add" in res.func.name  # widens the float16 norm, as later layers do
    xv = rand(2, 8, 16, scale=3.0)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(x=xv)
    m.run()
    want = graph.evaluate(FoldOutputCast(round_shared=True)(net), {"x": xv})
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=2e-3, atol=2e-3)


# -- a real export ---------------------------------------------------------------------------


@pytest.mark.corpus
def test_an_exported_bert_runs_the_same_residual_kernel_in_every_layer(tmp_path):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    ort = pytest.importorskip("onnxruntime")
    layers, seq = 3, 16
    torch.manual_seed(0)
    cfg = tf.BertConfig(hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=64, vocab_size=96, max_position_embeddings=64,
                        attn_implementation="sdpa")
    inner = tf.BertModel(cfg, add_pooling_layer=False).eval()

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 96, (2, seq)).astype(np.int64),
             "attention_mask": np.ones((2, seq), np.int64)}
    path = str(tmp_path / "bert.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Bert().eval(), tuple(torch.from_numpy(v) for v in feeds.values()),
                          path, input_names=list(feeds), output_names=["out"],
                          opset_version=18, dynamo=True)
    net, params = graph.from_onnx(path)
    # with the norms kept float32 (the residual stream float32): two residual adds per
    # layer (after the attention and after the MLP), each the same kernel in every layer,
    # the first layer reading the float16 embedding norm too
    old = graph.build(net, "sim", params, precision="float16", keep_norms_float32=True)
    funcs, _ = distinct_functions(old.graph)
    names = [f.func.name for f in funcs]
    assert not any(n.endswith("fused_cast") for n in names), names
    residual = [f for f in funcs if f.func.name.startswith("fused_nn_dense_nn_bias_add_cast")
                and f.func.name.endswith("_add")]
    assert sorted(f.count for f in residual) == [layers, layers], names
    assert all("cast_cast_add" in f.func.name for f in residual), names
    # by default the norms round to float16: the residual adds run in float16, no kernel
    # widens them, and still no cast kernel
    lib = graph.build(net, "sim", params, precision="float16")
    funcs, _ = distinct_functions(lib.graph)
    names = [f.func.name for f in funcs]
    assert not any(n.endswith("fused_cast") or "cast_cast_add" in n for n in names), names
    residual = [f for f in funcs if f.func.name.startswith("fused_nn_dense_nn_bias_add_add")]
    assert sum(f.count for f in residual) == 2 * layers, names
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    got = m.get_output(0).numpy().astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    err = float(np.abs(got - want).max()) / float(np.abs(want).max())
    assert err < 2e-2, err
