"""The real-model corpus: exports of small Hugging Face and torchvision models by both of
PyTorch's exporters (``tests/data/corpus/``, written by ``bench/export_corpus.py``) import
and match onnxruntime's outputs: the reference executor and a simulator build in float32
within 1e-4 of the largest output, a mixed-float16 build within 3e-2; on a GPU the same.

A model that uses an operator the importer does not translate yet must end in a clear
``OnnxImportError`` naming it: an expected failure (xfail) with that reason. Wrong numbers
or any other exception fail. Run with ``pytest -m corpus tests/test_corpus.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

pytest.importorskip("onnx")

pytestmark = pytest.mark.corpus

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
EXPORTED = sorted(k for k, v in MANIFEST.items()
                  if k != "versions" and v.get("status") == "exported")
# mixed float16 on the simulator is the slow part: one export per model (dynamo's where
# there is one) is enough to check the precision pass on it
HALF = sorted({k.rsplit("-", 1)[0]: k for k in sorted(EXPORTED, reverse=True)}.values())
TOLERANCE = {"float32": 1e-4, None: 1e-4, "float16": 3e-2}


def load(key: str):
    """``(net, params, feeds, expected)`` of a stored export; xfail on a clear refusal."""
    data = np.load(CORPUS / f"{key}.npz")
    feeds = {n.removeprefix("input:"): data[n] for n in data.files if n.startswith("input:")}
    expected = [data[f"output:{k}"] for k in range(sum(n.startswith("output:")
                                                       for n in data.files))]
    try:
        net, params = graph.from_onnx(str(CORPUS / f"{key}.onnx"))
    except graph.OnnxImportError as e:
        pytest.xfail(f"import: {' '.join(str(e).split('; supported:')[0].split())}")
    return net, params, feeds, expected


def assert_close(got, expected, precision, what: str):
    for k, (g, e) in enumerate(zip(got, expected)):
        g = np.asarray(g)
        assert g.shape == e.shape, f"{what}: output {k} shape {g.shape}, expected {e.shape}"
        scale = float(np.abs(e).max()) or 1.0
        err = float(np.abs(g.astype(np.float64) - e.astype(np.float64)).max()) / scale
        assert err <= TOLERANCE[precision], (
            f"{what}: output {k} differs from onnxruntime by {err:.2e} of its largest value "
            f"(tolerance {TOLERANCE[precision]})")


def run_compiled(net, params, feeds, n_out, target="sim", device=None, precision=None):
    try:
        lib = graph.build(net, target, params, precision=precision)
    except graph.GraphError as e:
        pytest.xfail(f"build: {' '.join(str(e).split())[:300]}")
    m = graph.GraphModule(lib, device or ptxforge.sim())
    m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
    m.run()
    return [m.get_output(k).numpy() for k in range(n_out)]


@pytest.mark.parametrize("key", EXPORTED)
def test_float32_matches_onnxruntime(key):
    net, params, feeds, expected = load(key)
    assert_close(graph.run_graph(net, feeds, params), expected, "float32", "reference")
    got = run_compiled(net, params, feeds, len(expected))
    assert_close(got, expected, "float32", "simulator")


@pytest.mark.parametrize("key", HALF)
def test_mixed_float16_matches_onnxruntime(key):
    net, params, feeds, expected = load(key)
    got = run_compiled(net, params, feeds, len(expected), precision="float16")
    assert_close(got, expected, "float16", "simulator, float16")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["float32", "float16"])
@pytest.mark.parametrize("key", EXPORTED)
def test_gpu_matches_onnxruntime(key, precision):
    net, params, feeds, expected = load(key)
    got = run_compiled(net, params, feeds, len(expected), target="cuda",
                       device=ptxforge.cuda(0), precision=precision)
    assert_close(got, expected, precision, f"GPU, {precision}")


def test_the_manifest_covers_every_model_and_exporter():
    """Every corpus model has an entry per exporter: exported (model and data present) or
    failed with the exporter's reason."""
    from .real_models import MODELS

    for name in MODELS:
        for exporter in ("torchscript", "dynamo"):
            entry = MANIFEST[f"{name}-{exporter}"]
            if entry["status"] == "exported":
                assert (CORPUS / f"{name}-{exporter}.onnx").is_file()
                assert (CORPUS / f"{name}-{exporter}.npz").is_file()
            else:
                assert entry["status"] == "failed" and entry["reason"]
