"""``recompose_attention`` on fresh exports of Hugging Face models with SDPA attention (what
``bench/bench_hf_onnx.py`` and most users export), by both of PyTorch's exporters.

Tiny configurations (hidden 32, 2 layers, sequence 8) built from their config classes with
seeded weights; exporting takes seconds per model, so these run under the ``corpus`` mark
(``pytest -m corpus tests/test_recompose_attention_export.py``). Each export must give one
``nn.attention`` per layer, and the recomposed graph must match onnxruntime on the reference
executor and on a decomposed float32 simulator build (1e-4 of the largest output), and where
the fused kernel can run it (head dim 16) on a fused float16 build (3e-2).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ptxforge import graph

from .test_recompose_attention import attentions, close, onnxruntime_out, recomposed, run_sim

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.corpus

SEQ = 8
LAYERS = 2


def _model(name: str):
    """``(module, feeds, causal, head dim)`` with SDPA attention, eval mode, seeded."""
    tf = transformers
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 96, (1, SEQ)).astype(np.int64)
    if name == "bert":
        cfg = tf.BertConfig(hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=2,
                            intermediate_size=64, vocab_size=96, max_position_embeddings=64,
                            attn_implementation="sdpa")
        inner = tf.BertModel(cfg, add_pooling_layer=False)
        mask = np.ones((1, SEQ), np.int64)
        mask[0, -3:] = 0

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

        return inner, forward, {"input_ids": ids, "attention_mask": mask}, False, 16
    if name == "gpt2":
        cfg = tf.GPT2Config(n_embd=32, n_layer=LAYERS, n_head=2, n_positions=64, vocab_size=96,
                            attn_implementation="sdpa")
        inner = tf.GPT2Model(cfg)

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).last_hidden_state

        return inner, forward, {"input_ids": ids}, True, 16
    if name == "llama":
        cfg = tf.LlamaConfig(hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=4,
                             num_key_value_heads=2, intermediate_size=64, vocab_size=96,
                             max_position_embeddings=64, use_cache=False,
                             attn_implementation="sdpa")
        inner = tf.LlamaModel(cfg)

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).last_hidden_state

        return inner, forward, {"input_ids": ids}, True, 8
    cfg = tf.ViTConfig(hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=2,
                       intermediate_size=64, image_size=16, patch_size=8,
                       attn_implementation="sdpa")
    inner = tf.ViTModel(cfg, add_pooling_layer=False)

    def forward(self, pixel_values):
        return self.m(pixel_values=pixel_values).last_hidden_state

    px = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    return inner, forward, {"pixel_values": px}, False, 16


def export(name: str, exporter: str, path):
    inner, forward, feeds, causal, head_dim = _model(name)
    wrapper = type("Wrapped", (torch.nn.Module,), {"forward": forward})()
    wrapper.m = inner
    wrapper.eval()
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    dynamo = exporter == "dynamo"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(wrapper, args, str(path), input_names=list(feeds),
                              output_names=["out"], opset_version=18 if dynamo else 17,
                              dynamo=dynamo)
        except Exception as e:  # the exporter's own refusal (aten::diff at opset 17)
            if "UnsupportedOperatorError" in type(e).__name__:
                pytest.skip(f"{exporter} cannot export {name}: {str(e)[:120]}")
            raise
    return onnx.load(str(path)), feeds, causal, head_dim


CASES = [("bert", "dynamo"), ("bert", "torchscript"), ("gpt2", "dynamo"),
         ("gpt2", "torchscript"), ("llama", "dynamo"), ("vit", "dynamo"),
         ("vit", "torchscript")]


@pytest.mark.parametrize("name,exporter", CASES)
def test_sdpa_export_recomposes_and_matches(name, exporter, tmp_path):
    model, feeds, causal, head_dim = export(name, exporter, tmp_path / f"{name}.onnx")
    expected = onnxruntime_out(model, feeds)
    net, params = graph.from_onnx(model)
    g = recomposed(net, params)
    atts = attentions(g)
    assert len(atts) == LAYERS
    assert all(a.attrs["is_causal"] is causal for a in atts)
    assert not any(c.op == "nn.softmax" for c in g.calls())
    inputs = {k: v for k, v in feeds.items() if k in [p.name for p in g.params]}
    close(graph.run_graph(g, inputs)[0], expected, 1e-4)
    got, names = run_sim(net, params, feeds, fused_attention=False)
    close(got, expected, 1e-4)
    if head_dim % 16 == 0:
        got, names = run_sim(net, params, feeds, fused_attention=True, precision="float16")
        assert sum("nn_attention" in n for n in names) == LAYERS
        close(got, expected, 3e-2)
