"""Hugging Face GPT-2 (with its tied LM head) and BERT exported to ONNX and built in float16
for the simulator: the embedding lookup gathers from the table's 16-bit copy, so the
residual stream is float16 from its start, the table is stored once in 16 bits, the output
stays as close to PyTorch float32 as PyTorch's own float16 model is, and
``keep_gathers_float32`` gives the former kernels."""

from __future__ import annotations

import warnings

import numpy as np
import ptxforge
import pytest
from ptxforge import graph

from .test_mixed_norms_export import small_bert

pytestmark = pytest.mark.torch_frontend

VOCAB, WIDTH, BATCH, TOKENS = 1000, 128, 8, 32


def small_gpt2(tmp_path):
    """GPT-2 with its LM head (logits by the embedding table), 128 wide, 3 layers, 4 heads,
    a vocabulary of 1,000; returns the ONNX path, the feeds and PyTorch's float32 and float16
    logits."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_embd=WIDTH, n_layer=3, n_head=4, n_positions=64, vocab_size=VOCAB,
                        attn_implementation="sdpa")

    class Gpt2(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    model = Gpt2(tf.GPT2LMHeadModel(cfg)).eval()
    ids = np.random.default_rng(0).integers(0, VOCAB, (BATCH, TOKENS)).astype(np.int64)
    path = str(tmp_path / "gpt2.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(ids),), path, input_names=["input_ids"],
                          output_names=["logits"], opset_version=18, dynamo=True)
        with torch.no_grad():
            ref = model(torch.from_numpy(ids)).numpy()
            low = model.half()(torch.from_numpy(ids)).float().numpy()
    return path, {"input_ids": ids}, ref, low


def build(net, params, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        return graph.build(net, "sim", params, precision="float16", **kw)


def kernels(lib) -> list[tuple[str, str]]:
    """(name, output dtype) of each launch, in order."""
    out = []
    for k in lib.call_keys:
        if k is not None:
            f = lib.functions[k].func
            out.append((f.name[len("vm_mod_fused_"):], f.func.outputs[0].dtype))
    return out


def run(lib, feeds) -> np.ndarray:
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    return m.get_output(0).numpy()


def test_an_exported_gpt2_in_float16_gathers_its_table_in_16_bits_and_stores_it_once(tmp_path):
    path, feeds, ref, torch_low = small_gpt2(tmp_path)
    net, params = graph.from_onnx(path)
    new, old = build(net, params), build(net, params, keep_gathers_float32=True)
    ours, before = kernels(new), kernels(old)
    assert len(ours) == len(before)  # the same kernels, other dtypes
    # the lookup and the position add: one float16 kernel (float32 before)
    assert ours[0] == ("take_add", "float16") and before[0] == ("take_add", "float32")
    # the residual adds in the products' epilogues: float16 (float32 after a widening cast
    # before); their count: two per layer
    adds = [k for k in ours if k[0].startswith("nn_dense_add")]
    assert adds == [("nn_dense_add", "float16"), ("nn_dense_add_1", "float16")] * 3
    assert [k for k in before if k[0].startswith("nn_dense_cast_add")] == [
        ("nn_dense_cast_add", "float32"), ("nn_dense_cast_add_1", "float32")] * 3
    assert not any(d == "float32" for n, d in ours if n.startswith("nn_layer_norm"))
    # the table is stored once, in 16 bits (before: float32 for the lookup and its float16
    # copy for the LM head)
    libs = {"new": new, "old": old}
    tables = {k: sorted(str(v.dtype) for v in lib.params.values() if v.shape == (VOCAB, WIDTH))
              for k, lib in libs.items()}
    assert tables == {"new": ["float16"], "old": ["float16", "float32"]}
    size = {k: sum(v.nbytes for v in lib.params.values()) for k, lib in libs.items()}
    # the float32 table and half of the float32 positions (wpe's 32 rows, now float16)
    assert size["old"] - size["new"] == VOCAB * WIDTH * 4 + TOKENS * WIDTH * 2
    scale = float(np.abs(ref).max())
    err = {k: float(np.abs(run(lib, feeds) - ref).max()) / scale for k, lib in libs.items()}
    torch_err = float(np.abs(torch_low - ref).max()) / scale
    print(f"\nGPT-2 largest difference from PyTorch float32: float16 lookup {err['new']:.3e}, "
          f"float32 lookup {err['old']:.3e}, PyTorch float16 {torch_err:.3e}")
    # measured: 5.82e-4 float16 lookup, 4.24e-4 float32 lookup, PyTorch float16 5.75e-4
    # as close as PyTorch's float16 model, within the order of a row's sums: the layer norms'
    # default row kernel (scalar, 32 threads a row of 128) gives 5.82e-4 against PyTorch's
    # 5.75e-4, a warp per row of 4-wide vectors 5.62e-4
    assert err["old"] <= err["new"] <= 1.05 * torch_err, (err, torch_err)


def test_an_exported_bert_gathers_its_words_in_16_bits_where_its_norms_read_16_bits(tmp_path):
    path, feeds, torch_low = small_bert(tmp_path)
    net, params = graph.from_onnx(path)
    new, old = build(net, params), build(net, params, keep_gathers_float32=True)
    norms32 = build(net, params, keep_norms_float32=True)
    ours, before = kernels(new), kernels(old)
    assert len(ours) == len(before)
    takes = [k for k in ours if k[0].startswith("take")]
    assert takes and all(d == "float16" for _, d in takes)
    assert all(d == "float32" for n, d in before if n.startswith("take"))
    # with float32 norms nothing reads the lookup in 16 bits: the former kernels
    assert [d for n, d in kernels(norms32) if n.startswith("take")] == [
        d for n, d in before if n.startswith("take")]
    ort = pytest.importorskip("onnxruntime")
    ref = ort.InferenceSession(path).run(None, feeds)[0]
    scale = float(np.abs(ref).max())
    err = {k: float(np.abs(run(lib, feeds) - ref).max()) / scale
           for k, lib in {"new": new, "old": old}.items()}
    torch_err = float(np.abs(torch_low - ref).max()) / scale
    print(f"\nBERT largest difference from onnxruntime float32: float16 lookup "
          f"{err['new']:.3e}, float32 lookup {err['old']:.3e}, PyTorch float16 {torch_err:.3e}")
    # measured: 1.39e-3 float16 lookup, 1.29e-3 float32 lookup, PyTorch float16 1.51e-3
    assert max(err.values()) <= torch_err, (err, torch_err)
