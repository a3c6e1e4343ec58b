"""A 16-bit build keeps ``nn.attention``'s float mask in float32 (``to_mixed_precision``):
the fused kernel converts each mask element to float32 as it adds it, so the float32 mask
costs it nothing but the wider read, and mask values float16 cannot hold (-1e5 here;
float32's ``finfo.min`` in the exporters' masks) keep their value instead of becoming
minus infinity, which would empty rows the imported graph's softmax averages."""

from __future__ import annotations

import numpy as np

import ptxforge
from ptxforge import graph
from ptxforge.graph.opdefs.attention import attention, attention_reference
from ptxforge.graph.passes import ToMixedPrecision

B, H, L, E = 2, 2, 32, 16


def net():
    q, k, v = (graph.var(n, (B, H, L, E)) for n in "qkv")
    mask = graph.var("mask", (B, 1, 1, L))
    return graph.function(attention(q, k, v, mask, scale=E ** -0.5), [q, k, v, mask])


def feeds():
    rng = np.random.default_rng(8)
    f = {n: rng.standard_normal((B, H, L, E)).astype(np.float32) for n in "qkv"}
    mask = np.zeros((B, 1, 1, L), np.float32)
    mask[0, ..., -5:] = -1e5  # padding keys of the first sequence
    mask[1] = -1e5  # every key of the second: a uniform shift, the softmax is unchanged
    f["mask"] = mask
    return f


def test_to_mixed_precision_casts_q_k_v_and_keeps_the_mask():
    out = ToMixedPrecision("float16")(net())
    (att,) = [c for c in out.calls() if c.op == "nn.attention"]
    assert [a.dtype for a in att.args] == ["float16"] * 3 + ["float32"]


def test_fused_float16_build_reads_the_float32_mask_and_matches_numpy():
    lib = graph.build(net(), "sim", precision="float16", fused_attention=True)
    names = [lib.functions[k].func.name for k in lib.call_keys if k is not None]
    (att,) = [lib.functions[k] for k in lib.call_keys if k is not None
              and "nn_attention" in lib.functions[k].func.name]
    assert [p.dtype for p in att.func.func.params][-1] == "float32", names
    f = feeds()
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**f)
    m.run()
    got = m.get_output(0).numpy().astype(np.float32)
    low = {n: f[n].astype(np.float16).astype(np.float32) for n in "qkv"}
    want = attention_reference(low["q"], low["k"], low["v"], f["mask"], E ** -0.5)
    # the second sequence is not empty: its uniform -1e5 leaves the plain softmax (in
    # float16 it would be minus infinity everywhere and the rows 0)
    plain = attention_reference(low["q"], low["k"], low["v"], None, E ** -0.5)
    np.testing.assert_allclose(want[1], plain[1], atol=2e-2)
    assert np.abs(got[1]).max() > 0.1
    np.testing.assert_allclose(got, want, atol=2e-2)
