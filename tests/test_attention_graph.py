"""``nn.attention`` and the fused kernel: the decision whether the kernel runs a call, the
opt-in that keeps eligible calls whole through ``decompose_attention``, and a fused
function of the graph compiled as the kernel and run on the simulator against the graph's
reference."""

from __future__ import annotations

import numpy as np

from ptxforge import backend_sim, graph
from ptxforge.graph import optimize
from ptxforge.graph.fused import distinct_functions
from ptxforge.graph.ir import Var, graph_from_outputs
from ptxforge.graph.opdefs.attention import (
    attention,
    fused_attention_module,
    fused_attention_refusal,
)
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.graph.passes import DecomposeAttention
from ptxforge.graph.passes.base import GraphPassContext
from ptxforge.ir.verify import verify
from ptxforge.ops.testing import widen

RNG = np.random.default_rng(262)


def _net(dtype="float16", e=64, mask=False, causal=True):
    q, k, v = (Var("q", (1, 4, 17, e), dtype), Var("k", (1, 2, 33, e), dtype),
               Var("v", (1, 2, 33, e), dtype))
    m = Var("m", (1, 1, 1, 33), "bool") if mask else None
    return graph_from_outputs(attention(q, k, v, m, is_causal=causal)), (q, k, v, m)


def _ops(g) -> list[str]:
    return [n.op for n in g.nodes() if hasattr(n, "op")]


def test_refusal_names_the_reason():
    net, _ = _net()
    call = net.outputs[0]
    assert fused_attention_refusal(call, "cuda -arch=sm_80") is None
    assert "sm_80 or newer" in fused_attention_refusal(call, "cuda -arch=sm_75")
    wide, _ = _net(e=72)
    assert "multiple of 16" in fused_attention_refusal(wide.outputs[0])
    f32, _ = _net(dtype="float32")
    assert "float16 and bfloat16" in fused_attention_refusal(f32.outputs[0])


def test_decomposed_unless_the_fused_kernel_is_asked_for_and_can_run_it():
    net, _ = _net()
    assert "nn.attention" not in _ops(DecomposeAttention()(net))
    with GraphPassContext(config={"fused_attention": True}):
        assert "nn.attention" in _ops(DecomposeAttention()(net))
        f32, _ = _net(dtype="float32")  # not eligible: still decomposed
        assert "nn.attention" not in _ops(DecomposeAttention()(f32))


def test_fused_function_compiles_as_the_kernel():
    net, (q, k, v, m) = _net(dtype="bfloat16", mask=True)
    with GraphPassContext(config={"fused_attention": True}):
        fused = optimize(net)
    funcs, _ = distinct_functions(fused)
    mods = [fused_attention_module(f, "sim") for f in funcs]
    assert sum(x is not None for x in mods) == 1
    func, mod = next((f, x) for f, x in zip(funcs, mods) if x is not None)
    verify(mod)
    assert [p.name for p in mod.host.params] == [t.name for t in func.build_tensors()]
    feeds = {"q": cast_array(RNG.standard_normal(q.shape), "bfloat16"),
             "k": cast_array(RNG.standard_normal(k.shape), "bfloat16"),
             "v": cast_array(RNG.standard_normal(v.shape), "bfloat16"),
             "m": RNG.random(m.shape) > 0.4}
    want = widen(graph.evaluate(net, feeds), "bfloat16")
    out = cast_array(np.full(want.shape, np.nan), "bfloat16")
    backend_sim.run(mod, [feeds["q"], feeds["k"], feeds["v"], feeds["m"], out])
    assert np.abs(widen(out, "bfloat16") - want).max() <= 3e-2 * max(1, np.abs(want).max())
