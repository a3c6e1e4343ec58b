"""Gathers in mixed precision (``to_mixed_precision``'s ``GATHER`` policy): an embedding
lookup of a float32 constant table whose rows are read in 16 bits gathers from the table's
16-bit copy, shared with the table's other 16-bit readers (a tied LM head), so the residual
stream starts 16-bit; ``keep_gathers_float32`` keeps the float32 lookup.

Checked on the graphs the pass writes and on the simulator against numpy."""

from __future__ import annotations

import warnings

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.graph import nn
from ptxforge.graph import opdefs as G
from ptxforge.graph.ir import Constant
from ptxforge.graph.opdefs import index as GI
from ptxforge.graph.passes import FoldConstant, GraphPipeline, MixedPolicy, ToMixedPrecision
from ptxforge.graph.passes.to_mixed_precision import CONFIG_KEEP_GATHERS_FLOAT32, policy_of

RNG = np.random.default_rng(26)
VOCAB, DIM, TOKENS = 50, 16, 6


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


TABLE, POS = rand(VOCAB, DIM), rand(1, TOKENS, DIM, scale=0.1)
GAMMA, BETA = rand(DIM) + 1.0, rand(DIM, scale=0.1)
W = rand(DIM, DIM, scale=0.3)


def tied_lm(transposed_twice: bool = False):
    """GPT-2 in miniature: ``take(wte, ids) + wpe``, a residual product, the final norm
    and logits by the same table (``dense(x, wte)``; as the ONNX import writes it, a
    transpose of a transpose of the table where ``transposed_twice``)."""
    ids = graph.var("ids", (2, TOKENS), "int64")
    wte = graph.const(TABLE, "wte")
    h = graph.add(GI.take(wte, ids), graph.const(POS, "wpe"))
    flat = graph.reshape(h, (2 * TOKENS, DIM))
    flat = graph.add(flat, nn.dense(nn.layer_norm(flat, graph.const(GAMMA), graph.const(BETA)),
                                    graph.const(W, "w")))
    head = G.transpose(G.transpose(wte, (1, 0)), (1, 0)) if transposed_twice else wte
    n = nn.layer_norm(flat, graph.const(GAMMA), graph.const(BETA))
    return graph.function(nn.dense(n, head))


def reference(ids, table=TABLE, pos=POS):
    """The network of :func:`tied_lm` in float64 numpy."""
    table, pos = table.astype(np.float64), pos.astype(np.float64)

    def norm(x):
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        return x * GAMMA + BETA

    h = (table[ids] + pos).reshape(2 * TOKENS, DIM)
    h = h + norm(h) @ W.T.astype(np.float64)
    return norm(h) @ table.T


def mixed(net, low="float16", **kw):
    return GraphPipeline([ToMixedPrecision(low, **kw), FoldConstant()])(net)


def big_constants(g) -> list[Constant]:
    seen = {id(n): n for n in g.nodes() if isinstance(n, Constant) and n.value.size >= VOCAB}
    return list(seen.values())


def test_the_policy_of_the_gathers():
    for op in ("take", "gather_nd", "gather_elements"):
        assert policy_of(op) is MixedPolicy.GATHER
        assert policy_of(op, keep_gathers_float32=True) is MixedPolicy.NEVER
    assert policy_of("take", keep_norms_float32=True) is MixedPolicy.GATHER
    assert policy_of("nn.layer_norm", keep_gathers_float32=True) is MixedPolicy.ROUND


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_a_table_read_in_16_bits_is_gathered_from_its_16_bit_copy_shared_with_the_head(low):
    g = mixed(tied_lm(), low)
    (take,) = [c for c in g.calls() if c.op == "take"]
    assert take.dtype == low and isinstance(take.args[0], Constant)
    (head,) = [c for c in g.calls() if c.op == "nn.dense" and c.args[1].shape == (VOCAB, DIM)]
    assert head.args[1] is take.args[0]  # one copy for both readers
    # the table once, in 16 bits: no float32 copy is left
    tables = [c for c in big_constants(g) if c.shape == (VOCAB, DIM)]
    assert [c.dtype for c in tables] == [low]
    if low == "float16":
        np.testing.assert_array_equal(tables[0].value, TABLE.astype(np.float16))
    # the position add and the residual add are 16-bit; the only casts: the output's
    adds = [c for c in g.calls() if c.op == "add"]
    assert [a.dtype for a in adds] == [low, low]
    assert [c.dtype for c in g.calls() if c.op == "cast"] == ["float32"]


def test_keep_gathers_float32_keeps_the_float32_lookup():
    g = mixed(tied_lm(), keep_gathers_float32=True)
    (take,) = [c for c in g.calls() if c.op == "take"]
    assert take.dtype == "float32" and take.args[0].dtype == "float32"
    assert sorted(c.dtype for c in big_constants(g) if c.shape == (VOCAB, DIM)) == [
        "float16", "float32"]  # the lookup's table and the head's 16-bit copy
    assert [a.dtype for a in g.calls() if a.op == "add"] == ["float32", "float32"]
    with graph.GraphPassContext(config={CONFIG_KEEP_GATHERS_FLOAT32: True}):
        by_config = mixed(tied_lm())
    assert [c.dtype for c in by_config.calls() if c.op == "take"] == ["float32"]
    with graph.GraphPassContext(config={CONFIG_KEEP_GATHERS_FLOAT32: 1}):
        with pytest.raises(Exception, match="keep_gathers_float32.*bool"):
            mixed(tied_lm())


def test_with_float32_norms_nothing_reads_the_lookup_in_16_bits():
    """Under ``keep_norms_float32`` GPT-2's stream only meets float32 norms and residual
    adds: its lookup stays float32 (the former kernels)."""
    g = mixed(tied_lm(), keep_norms_float32=True)
    assert [c.dtype for c in g.calls() if c.op == "take"] == ["float32"]


def test_a_lookup_that_only_reaches_the_output_stays_float32():
    ids = graph.var("ids", (2, TOKENS), "int64")
    net = graph.function(graph.add(GI.take(graph.const(TABLE), ids), graph.const(POS)))
    g = mixed(net)
    assert [c.dtype for c in g.calls()] == ["float32", "float32"]
    assert not any(c.op == "cast" for c in g.calls())


def test_a_lookup_read_by_a_product_or_a_cast_down_is_16_bit():
    ids = graph.var("ids", (2, TOKENS), "int64")
    emb = GI.take(graph.const(TABLE), ids)
    for reader in (nn.dense(graph.reshape(emb, (2 * TOKENS, DIM)), graph.const(W)),
                   G.cast(graph.exp(G.cast(emb, "float16")), "float32")):
        g = mixed(graph.function(reader))
        assert [c.dtype for c in g.calls() if c.op == "take"] == ["float16"]
    # a float32 reader in between (exp computes in float32): not read in 16 bits
    g = mixed(graph.function(nn.dense(graph.exp(graph.reshape(emb, (2 * TOKENS, DIM))),
                                      graph.const(W))))
    assert [c.dtype for c in g.calls() if c.op == "take"] == ["float32"]


def test_a_gather_of_16_bit_data_stays_16_bit_and_exact():
    x = graph.var("x", (VOCAB, DIM))
    ids = graph.var("ids", (2, TOKENS), "int64")
    rows = GI.take(nn.dense(x, graph.const(W)), ids)
    g = mixed(graph.function(nn.dense(graph.reshape(rows, (2 * TOKENS, DIM)),
                                      graph.const(W))))
    (take,) = [c for c in g.calls() if c.op == "take"]
    assert take.dtype == "float16" and take.args[0].op == "nn.dense"
    # the only casts: the input down, the output up (none around the gather)
    assert sorted(c.dtype for c in g.calls() if c.op == "cast") == ["float16", "float32"]


def test_a_transpose_of_a_transposed_constant_folds_to_the_constant():
    c = graph.const(rand(3, 4, 5), "c")
    same = graph.function(G.add(G.transpose(G.transpose(c, (1, 0, 2)), (1, 0, 2)), c))
    (add,) = GraphPipeline([FoldConstant()])(same).outputs
    assert isinstance(add, Constant)
    np.testing.assert_array_equal(add.value, 2 * c.value)
    x = graph.var("x", (5, 4, 3))
    net = graph.function(G.add(x, G.transpose(G.transpose(c, (1, 0, 2)), (2, 0, 1))))
    (out,) = GraphPipeline([FoldConstant()])(net).outputs
    (folded,) = [a for a in out.args if isinstance(a, Constant)]
    np.testing.assert_array_equal(folded.value, c.value.transpose(1, 0, 2).transpose(2, 0, 1))
    g = GraphPipeline([FoldConstant()])(tied_lm(transposed_twice=True))
    (take,) = [n for n in g.calls() if n.op == "take"]
    (head,) = [n for n in g.calls() if n.op == "nn.dense" and n.args[1].shape == (VOCAB, DIM)]
    assert head.args[1] is take.args[0]


@pytest.mark.parametrize("keep", [False, True])
def test_the_tied_network_matches_numpy_on_the_simulator(keep):
    ids = RNG.integers(0, VOCAB, (2, TOKENS)).astype(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        lib = graph.build(tied_lm(transposed_twice=True), "sim", precision="float16",
                          keep_gathers_float32=keep)
    kernels = [lib.functions[k].func for k in lib.call_keys if k is not None]
    first = kernels[0]
    assert first.name.startswith("vm_mod_fused_take_add")
    assert first.func.outputs[0].dtype == ("float32" if keep else "float16")
    tables = [v for v in lib.params.values() if v.shape == (VOCAB, DIM)]
    assert sorted(str(v.dtype) for v in tables) == (["float16", "float32"] if keep
                                                      else ["float16"])
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(ids=ids)
    m.run()
    got = m.get_output(0).numpy()
    assert got.dtype == np.float32
    # against the network on the 16-bit table, within the 16-bit residual's rounding
    want = reference(ids, TABLE.astype(np.float16).astype(np.float32),
                     POS.astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max())
    np.testing.assert_allclose(got, reference(ids), rtol=0, atol=1e-2 * np.abs(want).max())


def lookup_net(vocab: int, tokens: int, dim: int, batch: int = 1):
    """``cast(take(wte, ids) + wpe, "float16")``: an embedding whose result is read in 16
    bits (here by the cast to the float16 output); returns the network, the float32
    tables and the numpy float16 reference of ``ids``."""
    rng = np.random.default_rng(7)
    table = rng.standard_normal((vocab, dim)).astype("float32")
    pos = rng.standard_normal((1, tokens, dim)).astype("float32")
    ids = graph.var("ids", (batch, tokens), "int64")
    out = G.cast(graph.add(GI.take(graph.const(table, "wte"), ids), graph.const(pos, "wpe")),
                 "float16")

    def reference(x):
        return table.astype(np.float16)[x] + pos.astype(np.float16)  # float16 add

    return graph.function(out), reference


def test_a_16_bit_lookup_is_one_kernel_with_numpy_float16_bits_on_the_simulator():
    net, reference = lookup_net(300, 24, 40, batch=2)
    lib = graph.build(net, "sim", precision="float16")
    (f,) = lib.functions.values()
    assert f.func.name == "vm_mod_fused_take_add" and f.func.func.outputs[0].dtype == "float16"
    assert [str(v.dtype) for v in lib.params.values()] == ["float16", "float16"]
    ids = RNG.integers(0, 300, (2, 24)).astype(np.int64)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(ids=ids)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), reference(ids))


@pytest.mark.gpu
def test_gpt2s_16_bit_lookup_on_the_gpu_matches_numpy_and_prints_its_time():
    """GPT-2's lookup at full size (1,024 tokens of a 50,257 x 768 table) from the table's
    float16 copy: numpy's float16 bits, and the kernel's median time (the float32 lookup
    of ``test_gather_schedule`` took 4.0 us on an H200)."""
    dev = ptxforge.cuda(0)
    net, reference = lookup_net(50257, 1024, 768)
    lib = graph.build(net, "cuda", precision="float16")
    m = graph.GraphModule(lib, dev)
    ids = np.random.default_rng(1).integers(0, 50257, (1, 1024)).astype(np.int64)
    m.set_input(ids=ids)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), reference(ids))
    t = m.benchmark(dev, number=100, repeat=5, min_repeat_ms=50).median
    print(f"\nfloat16 lookup of 1 x 1024 tokens from 50257 x 768: {t * 1e6:.2f} us")
