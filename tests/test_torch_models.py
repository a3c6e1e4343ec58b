"""Real models of the corpus (tests/real_models.py: Hugging Face transformers at small
configurations, torchvision layouts) through graph.from_torch, against PyTorch eager, on the
numpy reference executor; a few compiled whole on the simulator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from ptxforge import graph  # noqa: E402
from ptxforge.graph.frontend_torch import from_torch  # noqa: E402
from ptxforge.torch_backend import UnsupportedOperatorsWarning  # noqa: E402

from .real_models import MODELS  # noqa: E402

pytestmark = pytest.mark.torch_frontend

TRANSFORMERS = [m for m in MODELS.values() if m.family == "transformers"]
VISION = [m for m in MODELS.values() if m.family == "vision"]


def _import_and_compare(spec, sim: bool = False):
    if spec.family == "transformers":
        pytest.importorskip("transformers")
    model = spec.build()
    feeds = spec.inputs()
    args = spec.torch_inputs(feeds)
    with torch.no_grad():
        want = model(*args).numpy()
    net, params = from_torch(model, args)
    inputs = {p.name: a.numpy() for p, a in zip(net.params, args)}
    got = graph.run_graph(net, inputs, params)[0]
    scale = max(float(np.abs(want).max()), 1e-6)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4 * scale)
    if sim:
        lib = graph.build(net, target="sim", params=params)
        module = graph.GraphModule(lib)
        module.run(**inputs)
        np.testing.assert_allclose(module.get_output(0).numpy(), want, rtol=0,
                                   atol=2e-4 * scale)
    return net, model


@pytest.mark.parametrize("name", [m.name for m in TRANSFORMERS])
def test_transformer_imports_and_matches_eager(name):
    net, model = _import_and_compare(MODELS[name])
    config = getattr(getattr(model, "inner", None), "config", None)
    if getattr(config, "_attn_implementation", "") == "sdpa":
        assert any(c.op == "nn.attention" for c in net.calls()), \
            "scaled_dot_product_attention must be kept whole"


@pytest.mark.parametrize("name", [m.name for m in VISION])
def test_vision_model_imports_and_matches_eager(name):
    _import_and_compare(MODELS[name])


@pytest.mark.parametrize("name", ["bert", "mobilenet_v3"])
def test_compiled_on_the_simulator(name):
    _import_and_compare(MODELS[name], sim=True)


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_sdpa_attention_is_kept_whole(name):
    """With PyTorch's SDPA attention (Llama's with grouped-query heads), every attention
    layer imports as one nn.attention and the model still matches eager."""
    pytest.importorskip("transformers")
    spec = MODELS[name]
    model = spec.build()
    model.inner.set_attn_implementation("sdpa")
    args = spec.torch_inputs(spec.inputs())
    with torch.no_grad():
        want = model(*args).numpy()
    net, params = from_torch(model, args)
    got = graph.run_graph(net, {p.name: a.numpy() for p, a in zip(net.params, args)}, params)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4 * float(np.abs(want).max()))
    layers = model.inner.config.num_hidden_layers
    assert sum(c.op == "nn.attention" for c in net.calls()) == layers


def test_whole_hf_bert_with_attention_mask():
    """Hugging Face's BertModel itself (PyTorch's SDPA attention, the padding mask as a
    keyword, both outputs: the hidden states and the pooled output) through
    graph.from_torch, compiled on the simulator, and through
    torch.compile(backend="ptxforge"), each against eager."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=96,
                                     max_position_embeddings=64)
    model = transformers.BertModel(config).eval()
    ids = torch.from_numpy(np.random.default_rng(3).integers(0, 96, (2, 8)))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0  # the second sequence is padded
    with torch.no_grad():
        want = [t.numpy() for t in model(ids, attention_mask=mask, return_dict=False)]
    net, params = from_torch(model, (ids,), {"attention_mask": mask})
    assert [p.name for p in net.params[:2]] == ["input_ids", "attention_mask"]
    assert sum(c.op == "nn.attention" for c in net.calls()) == 2
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    lib = graph.build(net, target="sim", params=params)
    module = graph.GraphModule(lib)
    module.run(**feeds)
    reference = graph.run_graph(net, feeds, params)
    for k, w in enumerate(want):
        np.testing.assert_allclose(reference[k], w, rtol=0, atol=1e-5)
        np.testing.assert_allclose(module.get_output(k).numpy(), w, rtol=0, atol=1e-5)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="ptxforge", options={"target": "sim"})
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        got = compiled(ids, attention_mask=mask, return_dict=False)
    assert not [w for w in seen if w.category is UnsupportedOperatorsWarning], \
        "every operator of BERT runs in ptxforge"
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=0, atol=1e-5)
