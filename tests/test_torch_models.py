"""Real models of the corpus (tests/real_models.py: Hugging Face transformers at small
configurations, torchvision layouts) through graph.from_torch, against PyTorch eager, on the
numpy reference executor; a few compiled whole on the simulator."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from ptxforge import graph  # noqa: E402
from ptxforge.graph.frontend_torch import from_torch  # noqa: E402

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
