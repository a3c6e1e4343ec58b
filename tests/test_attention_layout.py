"""The fused attention kernel reading q, k, v and writing the output as ``[B, L, H, E]``
(``layout="bshd"``: a projection's layout, the head split and merge transposes folded into
the addressing): both forms on the simulator against numpy (grouped-query, causal, a
padding mask, rows and keys past a tile), the te op's declaration and its workload, PTX."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import backend_sim, te
from ptxforge.driver import build_attention
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.ir.verify import verify
from ptxforge.ops.attention import attention, attention_workload
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionError,
    AttentionMask,
    AttentionWorkload,
    attention_module,
    check_attention_config,
)
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

RNG = np.random.default_rng(26)


def _run(w: AttentionWorkload, cfg: AttentionConfig, mask=None):
    sh = w.shapes()
    q, k, v = (cast_array(RNG.standard_normal(sh[n]), w.dtype) for n in ("q", "k", "v"))
    out = cast_array(np.full(sh["out"], np.nan), w.dtype)
    mod = attention_module(w, cfg)
    verify(mod, target=as_target("cuda -arch=sm_90a"))
    args = [q, k, v] + ([mask] if mask is not None else []) + [out]
    backend_sim.run(mod, args)
    want = attention_python(q, k, v, mask, w.scale, w.causal, dtype=w.dtype, layout="bshd")
    got = widen(args[-1], w.dtype)
    assert np.isfinite(got).all()
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= attention_tolerance(w.dtype), (w, cfg, err)
    # the same numbers as the [B, H, L, E] layout of the transposed tensors
    assert want.shape == (w.batch, w.q_len, w.heads, w.v_dim)


@pytest.mark.parametrize("cfg", [AttentionConfig(2, 32, 2), AttentionConfig(1, 16, 1),
                                 AttentionConfig(4, 64, 2, "wgmma"),
                                 AttentionConfig(4, 64, 3, "wgmma")],
                         ids=lambda c: str(c.to_dict()))
def test_bshd_layout_matches_numpy(cfg):
    w = AttentionWorkload(2, 4, 2, 40, 70, 64, 64, "float16", True, layout="bshd")
    _run(w, cfg)


def test_bshd_with_a_padding_mask_bf16():
    m = np.ones((2, 1, 1, 33), bool)
    m[1, ..., 20:] = False
    w = AttentionWorkload(2, 2, 2, 17, 33, 80, 80, "bfloat16",
                          mask=AttentionMask(m.shape, "bool"), layout="bshd")
    _run(w, AttentionConfig(2, 16, 2), m)


def test_the_layout_changes_the_addresses_only():
    w = AttentionWorkload(1, 2, 2, 8, 8, 16, 16, layout="bshd")
    assert w.shapes()["q"] == (1, 8, 2, 16) and w.shapes()["out"] == (1, 8, 2, 16)
    assert w.row_start(0, 1, 3, 2, 8, 16) == (3 * 2 + 1) * 16
    assert AttentionWorkload(1, 2, 2, 8, 8, 16, 16).row_start(0, 1, 3, 2, 8, 16) == (
        1 * 8 + 3) * 16
    with pytest.raises(AttentionError, match="layout must be one of"):
        check_attention_config(AttentionWorkload(1, 2, 2, 8, 8, 16, 16, layout="sbhd"),
                               AttentionConfig(1, 16, 1), as_target("cuda -arch=sm_80"))


def test_te_op_in_bshd_fused_and_unscheduled_agree_with_numpy():
    q = te.placeholder((1, 5, 2, 16), "float16", name="q")
    k = te.placeholder((1, 7, 1, 16), "float16", name="k")
    v = te.placeholder((1, 7, 1, 16), "float16", name="v")
    out = attention(q, k, v, causal=True, scale=0.5, layout="bshd")
    assert [int(x) for x in out.shape] == [1, 5, 2, 16]
    w = attention_workload(out)
    assert (w.heads, w.kv_heads, w.q_len, w.kv_len, w.layout) == (2, 1, 5, 7, "bshd")
    sh = w.shapes()
    args = [cast_array(RNG.standard_normal(sh[n]), "float16") for n in ("q", "k", "v")]
    args.append(np.full(sh["out"], np.nan, np.float16))
    want = attention_python(*args[:3], None, 0.5, True, layout="bshd")
    build_attention(out, "sim")(*args)
    assert np.abs(args[-1].astype(np.float64) - want).max() < 4e-3
    unfused = ptxforge.build([q, k, v, out], target="sim")
    o2 = np.full(args[-1].shape, np.nan, np.float16)
    unfused(*args[:3], o2)
    assert np.abs(o2.astype(np.float64) - want).max() < 4e-3
    with pytest.raises(AttentionError, match="layout must be"):
        attention(q, k, v, layout="bsdh")


def test_ptx_of_the_bshd_layout():
    from ptxforge.backend_ptx import compile_module

    w = AttentionWorkload(1, 16, 16, 1024, 1024, 128, 128, "float16", True, layout="bshd")
    src = compile_module(attention_module(w, AttentionConfig(8, 64, 1, "wgmma")),
                         as_target("cuda -arch=sm_90a")).get_source("ptx")
    assert "wgmma.mma_async" in src and "cp.async" in src and ".local" not in src


# -- in the graph --------------------------------------------------------------------------


def _calls(g) -> list:
    from ptxforge.graph.ir import Call

    out = []
    for f in [g, *[n.op for n in g.nodes() if isinstance(n, Call) and not isinstance(
            n.op, str)]]:
        out += [n for n in f.nodes() if isinstance(n, Call) and isinstance(n.op, str)]
    return out


def test_fusion_folds_the_head_transposes_into_the_attention():
    import sys
    from pathlib import Path

    from ptxforge import graph

    sys.path.insert(0, str(Path(__file__).parent))
    from test_attention_network import _block

    net, x = _block(causal=True)
    before = [c.op for c in _calls(graph.optimize(net, fused_attention=True, fuse=False))]
    assert before.count("transpose") == 4 and "nn.attention" in before
    calls = _calls(graph.optimize(net, fused_attention=True))
    (att,) = [c for c in calls if c.op == "nn.attention"]
    assert att.attrs["layout"] == "bshd" and "transpose" not in [c.op for c in calls]
    # decomposed (the option off), nothing changes
    off = [c.op for c in _calls(graph.optimize(net))]
    assert "nn.attention" not in off and "transpose" in off


def test_a_bshd_graph_attention_decomposed_and_fused_match_its_reference():
    from ptxforge import graph
    from ptxforge.graph.ir import Var, graph_from_outputs
    from ptxforge.graph.opdefs.attention import attention as g_attention

    q = Var("q", (1, 24, 2, 16), "float16")
    k = Var("k", (1, 24, 1, 16), "float16")
    v = Var("v", (1, 24, 1, 16), "float16")
    net = graph_from_outputs(g_attention(q, k, v, is_causal=True, layout="bshd"))
    assert tuple(net.outputs[0].shape) == (1, 24, 2, 16)
    feeds = {n: cast_array(RNG.standard_normal(t.shape), "float16")
             for n, t in (("q", q), ("k", k), ("v", v))}
    want = attention_python(feeds["q"], feeds["k"], feeds["v"], causal=True, layout="bshd")
    ref = widen(graph.evaluate(net, feeds), "float16")
    assert np.abs(ref - want).max() < 4e-3
    for fused in (False, True):
        lib = graph.build(net, "sim -arch=sm_80", fused_attention=fused)
        m = graph.GraphModule(lib, ptxforge.sim())
        m.set_input(**feeds)
        m.run()
        got = widen(m.get_output(0).numpy(), "float16")
        assert np.abs(got - want).max() < 2e-2, fused


# -- on a GPU ----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.sanitize
@pytest.mark.parametrize("causal", [False, True])
def test_bshd_layout_on_the_gpu(causal):
    from ptxforge.backend_ptx import array, compile_module, cuda, empty

    dev = cuda(0)
    w = AttentionWorkload(2, 4, 2, 130, 200, 128, 128, "float16", causal, layout="bshd")
    cfgs = [AttentionConfig(2, 32, 2)]
    if dev.target.has_wgmma:
        cfgs += [AttentionConfig(8, 64, 1, "wgmma"), AttentionConfig(4, 128, 1, "wgmma")]
    sh = w.shapes()
    q, k, v = (cast_array(RNG.standard_normal(sh[n]), w.dtype) for n in ("q", "k", "v"))
    want = attention_python(q, k, v, None, w.scale, w.causal, layout="bshd")
    for cfg in cfgs:
        check_attention_config(w, cfg, dev.target)
        loaded = compile_module(attention_module(w, cfg), dev.target).load(dev)
        out = empty(sh["out"], w.dtype, dev)
        loaded(*[array(a, dev, w.dtype) for a in (q, k, v)], out)
        got = widen(out.numpy(), w.dtype)
        assert np.abs(got - want).max() <= attention_tolerance(w.dtype) * max(
            1.0, np.abs(want).max()), cfg
