"""``cast_before_view`` and output views in the memory plan: a 16-bit product whose result
leaves the network reshaped and cast back to float32 (a language model's logits) stores the
float32 result itself, and the reshape costs no kernel."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph import nn
from ptxforge.graph.passes import CastBeforeView, FuseOps
from ptxforge.graph.passes.cast_before_view import hoist

RNG = np.random.default_rng(3)
M, K, N = 32, 16, 40  # N not a multiple of 16: the product pads its last tile


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


W = rand(N, K)


def logits_net(second_output: bool = False):
    """``reshape(dense(x, w), [2, 16, N])`` returned in float32 (GPT-2's LM head, small);
    ``second_output``: the product's result is also the network's second output."""
    x = graph.var("x", (M, K))
    y = nn.dense(x, graph.const(W, "w"))
    out = graph.reshape(y, (2, M // 2, N))
    return graph.function([out, y] if second_output else out)


def kernels(lib) -> list[str]:
    return [lib.functions[k].func.name for k in lib.call_keys if k is not None]


def run(lib, x):
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(x=x)
    m.run()
    return [m.get_output(i).numpy() for i in range(len(lib.plan.outputs))]


def reference(x):
    """The product of the 16-bit inputs, accumulated in float32 (what the build computes)."""
    x16 = x.astype(np.float16).astype(np.float32)
    w16 = W.astype(np.float16).astype(np.float32)
    return x16 @ w16.T


@pytest.mark.parametrize("precision,target", [("float16", "sim"), ("bfloat16", "sim"),
                                              ("float16", "sim -arch=sm_90a")])
def test_logits_cast_joins_the_product_and_the_reshape_is_free(precision, target):
    # sm_90a: the wgmma form of the product, storing float32 from its warpgroup tiles
    net = logits_net()
    lib = graph.build(net, target, precision=precision)
    # the input's cast down, then the product storing float32 straight into the output;
    # no kernel reshapes or casts the product's result
    assert kernels(lib) == ["vm_mod_fused_cast", "vm_mod_fused_nn_dense_cast"]
    assert len(lib.plan.steps) == 3 and lib.plan.steps[2].view
    assert lib.plan.slots[lib.plan.steps[1].out].storage == \
        lib.plan.slots[lib.plan.outputs[0]].storage
    x = rand(M, K)
    (got,) = run(lib, x)
    assert got.dtype == np.float32 and got.shape == (2, M // 2, N)
    want = reference(x).reshape(2, M // 2, N)
    tol = 2e-2 if precision == "bfloat16" else 2e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_float16_logits_match_the_float32_build():
    net = logits_net()
    x = rand(M, K)
    (lo,) = run(graph.build(net, "sim", precision="float16"), x)
    (hi,) = run(graph.build(net, "sim"), x)
    np.testing.assert_allclose(lo, hi, atol=5e-3 * np.abs(hi).max())
    np.testing.assert_allclose(hi, (x @ W.T).reshape(hi.shape), rtol=1e-5, atol=1e-5)


def test_a_product_that_is_an_output_too_keeps_the_copy():
    """The product's result is itself an output: the reshaped output cannot share its
    storage (each output storage belongs to one output), so a kernel writes it."""
    net = logits_net(second_output=True)
    lib = graph.build(net, "sim", precision="float16")
    x = rand(M, K)
    got, flat = run(lib, x)
    want = reference(x)
    np.testing.assert_allclose(flat, want, atol=3e-3 * np.abs(want).max())
    np.testing.assert_allclose(got, want.reshape(got.shape), atol=3e-3 * np.abs(want).max())
    outs = {lib.plan.slots[s].storage for s in lib.plan.outputs}
    assert len(outs) == 2


def test_the_pass_moves_only_output_casts_of_views():
    x = graph.var("x", (4, 6), "float16")
    y = nn.relu(x)
    cast_view = graph.cast(graph.reshape(y, (2, 12)), "float32")
    moved = CastBeforeView()(graph.function(cast_view))
    (out,) = moved.outputs
    assert out.op == "reshape" and out.args[0].op == "cast" and out.args[0].args[0] is y
    assert out.shape == (2, 12) and out.dtype == "float32"
    # an output's cast up that another call reads stays where it is (moving it for the
    # output would compute it twice)
    other = graph.add(cast_view, graph.const(np.float32(1.0)))
    net = graph.function([cast_view, other])
    assert CastBeforeView()(net) is net
    # no view under the cast, or a constant under it: nothing to move
    assert hoist(graph.cast(y, "float32")) is None
    assert hoist(graph.cast(graph.reshape(graph.const(rand(4, 6)), (24,)), "float16")) is None
    assert hoist(graph.reshape(y, (24,))) is None


def test_fused_graph_has_the_cast_in_the_products_function():
    net = CastBeforeView()(graph.function(graph.cast(graph.reshape(
        nn.dense(graph.var("x", (M, K), "float16"), graph.const(W.astype(np.float16), "w")),
        (1, M, N)), "float32")))
    fused = FuseOps()(net)
    calls = [n for n in fused.nodes() if isinstance(n, graph.Call)]
    assert [bool(c.op.attrs.get("view")) for c in calls] == [False, True]
    assert [c.op for c in calls[0].op.calls()] == ["nn.dense", "cast"]


def test_a_cast_down_through_private_reshapes_moves_and_folds():
    """A float32 layer norm reshaped to two dimensions and cast down for a product (GPT-2's
    and BERT's first layer norm): the cast moves above the reshape, the norm stores float16
    itself and no kernel casts."""
    x = graph.var("x", (1, M, K))
    g, b = graph.const(rand(K), "g"), graph.const(rand(K), "b")
    norm = nn.layer_norm(x, g, b)
    flat = graph.reshape(norm, (M, K))
    net = graph.function(graph.add(nn.dense(flat, graph.const(W, "w")),
                                   graph.const(np.float32(1.0))))
    lib = graph.build(net, "sim", precision="float16")
    # the norm (storing float16), then the product with its bias and the output's cast
    assert kernels(lib) == ["vm_mod_fused_nn_layer_norm", "vm_mod_fused_nn_dense_add_cast"]
    first = lib.functions[next(k for k in lib.call_keys if k is not None)].func.func
    assert first.outputs[0].dtype == "float16"
    xin = rand(1, M, K)
    (got,) = run(lib, xin)
    mu, var = xin.mean(-1, keepdims=True), xin.var(-1, keepdims=True)
    want = ((xin - mu) / np.sqrt(var + 1e-5) * g.value + b.value).reshape(M, K) @ W.T + 1
    np.testing.assert_allclose(got, want, atol=1e-2 * np.abs(want).max())
    # a cast up stays below its reshape (moved, a product would store float32 for it)
    h = graph.var("h", (M, N), "float16")
    up = graph.cast(graph.reshape(h, (1, M, N)), "float32")
    inner = graph.function(graph.add(up, graph.const(np.float32(1.0))))
    assert CastBeforeView()(inner) is inner
