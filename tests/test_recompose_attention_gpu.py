"""The attentions ``recompose_attention`` now takes, run by the fused kernel on a GPU in
float16 (``gpu`` mark): transformers 4's padding mask, GPT-2's causal ``where`` with it,
the causal and padding split of an SDPA export, a bottom-right causal mask and keys of a
broadcast batch, against onnxruntime on the rows that see a key (fully masked rows: 0 from
the kernel, never NaN; see ``docs/onnx.md``)."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph

from .test_recompose_attention import close, onnxruntime_out
from .test_recompose_attention_masks import B, L, _sdpa_causal_and_padding, feeds, legacy

pytestmark = pytest.mark.gpu

CASES = {
    "bert": lambda: legacy("bert"),
    "gpt2": lambda: legacy("gpt2"),
    "gpt2_inf": lambda: legacy("gpt2", fill=-np.inf),
    "sdpa_causal_and_padding": lambda: _sdpa_causal_and_padding(-np.inf),
    "cache": lambda: legacy("cache", layers=2),
    "memory": lambda: legacy("memory", layers=2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_float16_on_the_gpu(case):
    model = CASES[case]()
    f = feeds(model)
    expected = onnxruntime_out(model, f)
    net, params = graph.from_onnx(model)
    lib = graph.build(net, "cuda", params, precision="float16", fused_attention=True)
    names = [lib.functions[k].func.name for k in lib.call_keys if k is not None]
    assert any("nn_attention" in n for n in names), names
    m = graph.GraphModule(lib, ptxforge.cuda(0))
    m.set_input(**{k: v for k, v in f.items() if k in lib.plan.inputs})
    m.run()
    got = m.get_output(0).numpy().astype(np.float32)
    assert np.isfinite(got).all()
    # the rows that see a key: not the padded sequence, not GPT-2's left-padded first rows
    # (with the SDPA export's guard those are 0 in onnxruntime as in the kernel)
    rows = np.ones((B, L), bool)
    if case in ("bert", "gpt2", "gpt2_inf", "cache"):
        rows[1] = False
    if case in ("gpt2", "gpt2_inf"):
        rows[0, :3] = False
    close(got[rows], expected[rows], 3e-2)
