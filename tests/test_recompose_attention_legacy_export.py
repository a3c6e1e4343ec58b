"""``recompose_attention`` on real exports, by both of PyTorch's exporters, of the attention
transformers 4 wrote (``tests/recompose_legacy_models.py``: BERT's ``(1 - attention_mask) *
finfo.min``, DistilBERT's ``masked_fill``, GPT-2's causal ``where`` and padding mask, with
and without a cache of earlier keys, and a cross attention to a memory of one batch).

Hidden 64, 2 layers, batch 2 with a left-padded sequence and a fully padded one: every
layer must become one ``nn.attention``, and the recomposed graph must give onnxruntime's
numbers (1e-5 of the largest output, no NaN) on the reference executor and on a decomposed
float32 simulator build. Exporting takes seconds per model: ``corpus`` mark
(``pytest -m corpus tests/test_recompose_attention_legacy_export.py``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ptxforge import graph
from ptxforge.graph.passes.recompose_attention import refusals

from .test_recompose_attention import attentions, close, onnxruntime_out, recomposed, run_sim

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from . import recompose_legacy_models as M  # noqa: E402

pytestmark = pytest.mark.corpus

B, L, P = 2, 8, 4


def _model(name: str):
    """``(module, feeds, causal)``."""
    rng = np.random.default_rng(0)
    if name == "memory":
        return M.SharedMemory(), {
            "x": rng.standard_normal((B, L, M.HIDDEN)).astype(np.float32),
            "memory": rng.standard_normal((1, 12, M.HIDDEN)).astype(np.float32)}, False
    prefix = P if name == "gpt2_cache" else 0
    mask = np.ones((B, L + prefix), np.int64)
    mask[0, :3] = 0  # left padding
    mask[1] = 0  # a sequence of padding alone
    feeds = {"input_ids": rng.integers(0, M.VOCAB, (B, L)).astype(np.int64),
             "attention_mask": mask}
    if prefix:
        mask[1, prefix + 2:] = 1  # the cache padded, the new positions not all
        feeds["past"] = rng.standard_normal((2 * M.LAYERS, B, M.HEADS, prefix,
                                             M.HEAD_DIM)).astype(np.float32)
    make = {"bert": M.LegacyBert, "distilbert": M.LegacyDistilBert, "gpt2": M.LegacyGpt2,
            "gpt2_cache": lambda: M.LegacyGpt2(prefix)}[name]
    return make(), feeds, False


def export(name: str, exporter: str, path):
    module, feeds, causal = _model(name)
    module.eval()
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    dynamo = exporter == "dynamo"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), input_names=list(feeds),
                          output_names=["out"], opset_version=18 if dynamo else 17,
                          dynamo=dynamo)
    with torch.no_grad():
        eager = module(*args).numpy()
    return onnx.load(str(path)), feeds, eager


NAMES = ["bert", "distilbert", "gpt2", "gpt2_cache", "memory"]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", NAMES)
def test_legacy_export_recomposes_and_matches(name, exporter, tmp_path):
    model, feeds, eager = export(name, exporter, tmp_path / f"{name}.onnx")
    expected = onnxruntime_out(model, feeds)
    assert np.isfinite(expected).all()
    close(eager, expected, 1e-5)
    net, params = graph.from_onnx(model)
    g = recomposed(net, params)
    assert len(attentions(g)) == M.LAYERS, refusals(g)
    assert refusals(g) == []
    assert not any(c.op == "nn.softmax" for c in g.calls())
    inputs = {k: v for k, v in feeds.items() if k in [p.name for p in g.params]}
    close(graph.run_graph(g, inputs)[0], expected, 1e-5)
    got, names = run_sim(net, params, feeds, fused_attention=False)
    assert np.isfinite(got).all()
    close(got, expected, 1e-5)
