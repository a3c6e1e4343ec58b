"""Embedding lookups and other flat (injective) kernels: consecutive threads read a gathered
row in 16-byte vectors, and a gathered table is not prefetched into L2 whole.

Checked on the simulator against numpy, and on the PTX built for sm_90a (no GPU needed)."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import graph
from ptxforge.graph import opdefs as G
from ptxforge.graph.ir import Constant, Graph, Var
from ptxforge.graph.opdefs import index as GI
from ptxforge.graph.weight_prefetch import gathered_params, prefetched_params
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.cases import workload
from ptxforge.ops.schedules.injective import vector_lanes

RNG = np.random.default_rng(26)
SM90A = "cuda -arch=sm_90a"


def _embedding(vocab: int, tokens: int, dim: int, dtype: str = "float32",
               positions: bool = True, batch: int = 2):
    """``take(table, ids) (+ positions)``: GPT-2's embedding at a smaller size; returns
    the network and its numpy reference of ``ids``."""
    ids = Var("ids", (batch, tokens), "int64")
    table = RNG.standard_normal((vocab, dim)).astype(dtype)
    pos = RNG.standard_normal((1, tokens, dim)).astype(dtype)
    out = GI.take(Constant(table, name="wte"), ids)
    if positions:
        out = G.add(out, Constant(pos, name="wpe"))
    net = Graph([ids], [out])

    def reference(x):
        got = np.take(table, np.where(x < 0, x + vocab, x), axis=0)
        return got + pos if positions else got

    return net, reference


def _ids(vocab: int, tokens: int, batch: int = 2) -> np.ndarray:
    # negative ids count from the end, as numpy's and ONNX's do
    return RNG.integers(-vocab, vocab, (batch, tokens)).astype(np.int64)


def _run_sim(lib, ids: np.ndarray) -> np.ndarray:
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(ids=ids)
    m.run()
    return m.get_output(0).numpy()


def _kernel(lib):
    (f,) = lib.functions.values()
    (k,) = f.device_module.kernels()
    return f, k


# -- which weights are prefetched ------------------------------------------------------------


def test_gathered_params_names_the_tables_that_gathers_read():
    table, ids, pos = Var("t", (50, 8)), Var("i", (2, 4), "int64"), Var("p", (1, 4, 8))
    plain = Graph([table, ids, pos], [G.add(GI.take(table, ids), pos)])
    assert gathered_params(plain) == {0}
    assert prefetched_params(plain, (0, 2)) == (2,)
    # through an element-wise operator on the table (its cast)
    half = Var("h", (50, 8), "float16")
    cast = Graph([half, ids], [GI.take(G.cast(half, "float32"), ids)])
    assert gathered_params(cast) == {0}
    # the index tensor and dense readers are no tables
    idx = Var("e", (50, 8), "int64")
    elements = Graph([table, idx], [GI.gather_elements(table, idx, axis=0)])
    assert gathered_params(elements) == {0}
    assert gathered_params(Graph([table], [G.add(table, table)])) == set()
    assert prefetched_params(Graph([table], [G.add(table, table)]), (0,)) == (0,)


def test_an_embedding_prefetches_its_positions_but_not_its_table():
    net, _ = _embedding(1000, 64, 768)
    lib = graph.build(net, SM90A, precision="float16")
    f, _ = _kernel(lib)
    ptx = f.ptx.get_source("ptx")
    # one prefetch (the position table, which the kernel reads whole); the word table
    # (3 MB here, 154 MB in GPT-2) was prefetched too and cost 20 us on an H200
    assert ptx.count("cp.async.bulk.prefetch.L2.global") == 1


# -- the flat schedule's vectors -------------------------------------------------------------


def test_vector_lanes_fill_16_bytes_where_the_last_extent_and_the_size_allow():
    from ptxforge import te

    def op(shape, dtype="float32"):
        x = te.placeholder(shape, dtype, name="x")
        return te.compute(shape, lambda *i: x(*i), name="y").op

    assert vector_lanes(op((1024, 768))) == 4
    assert vector_lanes(op((1024, 768), "float16")) == 8
    assert vector_lanes(op((4096, 6))) == 2  # 6 = 2 x 3: pairs stay in their row
    assert vector_lanes(op((4096, 7))) == 1
    assert vector_lanes(op((300,))) == 1  # too small to give up threads
    small_gpu = "cuda -arch=sm_80 -num_sms=2"
    assert vector_lanes(op((64, 16)), small_gpu) == 4


def test_an_embedding_reads_its_rows_with_16_byte_vectors():
    tokens, dim = 64, 768
    net, _ = _embedding(1000, tokens, dim)
    lib = graph.build(net, SM90A, precision="float16")
    f, k = _kernel(lib)
    # a thread per 4 elements: 2 x 64 x 768 / 4 threads
    assert int(np.prod(k.launch.block)) * int(np.prod(k.launch.grid)) == 2 * tokens * dim // 4
    assert " vectorize {" in str(f.device_module)
    ptx = f.ptx.get_source("ptx")
    loads = ptx.count("ld.global.nc.v4.b32")
    assert loads == 2, ptx  # a row of the table and of the positions
    assert ptx.count("st.global.v4.b32") == 1
    # one index load per vector, not one per element
    assert ptx.count("ld.global.nc.b64") == 1


def test_a_float16_embedding_reads_8_elements_per_load():
    net, _ = _embedding(500, 64, 768, dtype="float16")
    lib = graph.build(net, SM90A, precision="float16")
    f, _ = _kernel(lib)
    ptx = f.ptx.get_source("ptx")
    assert ptx.count("ld.global.nc.v4.b32") == 2 and ptx.count("st.global.v4.b32") == 1


@pytest.mark.parametrize("dtype,dim,positions", [("float32", 768, True),
                                                 ("float16", 768, True),
                                                 ("float32", 96, False),
                                                 ("float32", 130, True)])
def test_embeddings_match_numpy_on_the_simulator(dtype, dim, positions):
    vocab, tokens = 300, 48
    net, reference = _embedding(vocab, tokens, dim, dtype, positions)
    lib = graph.build(net, "sim", precision="float16")
    ids = _ids(vocab, tokens)
    np.testing.assert_allclose(_run_sim(lib, ids), reference(ids), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("case,shape", [
    ("transpose", dict(shape=(16, 48, 8), axes=(1, 0, 2))),
    ("bias_add", dict(shape=(16, 3, 96), axis=2)),
    ("cast", dict(shape=(8, 64, 8), to="float16")),
    ("pad", dict(shape=(6, 30, 12), before=(1, 1, 2), after=(1, 1, 2))),
    ("concatenate", dict(shapes=((64, 8), (64, 16)), axis=1)),
    ("strided_slice", dict(shape=(64, 40), begin=(1, 4), end=(64, 36), strides=(1, 1))),
    ("chain", dict(shape=(4, 8, 64))),
])
def test_vectorized_flat_kernels_match_numpy_on_the_simulator(case, shape):
    target = "cuda -arch=sm_80 -num_sms=2"  # few SMs: vectors even at these sizes
    w = workload(case, **shape)
    s = default_schedule(w.output, target=target)
    module = ptxforge.lower(s, w.tensors)
    assert any(" vectorize {" in str(k) for k in module.kernels())
    f = ptxforge.build(s, w.tensors, target="sim")
    rng = np.random.default_rng(5)
    inputs = w.random_inputs(rng)
    dev = ptxforge.sim()
    out = ptxforge.nd.empty(w.output.shape, w.output.dtype, dev)
    f(*[ptxforge.nd.array(x, dev) for x in inputs], out)
    np.testing.assert_allclose(out.numpy().astype(np.float32),
                               np.asarray(w.expected(inputs)).astype(np.float32),
                               rtol=1e-3, atol=1e-6)


# -- on a GPU --------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("batch,tokens,vocab", [(1, 1024, 50257), (8, 512, 30522)],
                         ids=["gpt2", "bert_b8"])
def test_full_size_embeddings_on_the_gpu_match_numpy_and_print_their_time(batch, tokens,
                                                                           vocab):
    """GPT-2's lookup (1,024 tokens) and BERT's at batch 8 (4,096 tokens), float32 tables
    of 768 columns as the float16 builds of the exports keep them; prints the median time
    of the one kernel (an H200 took 22.7 and 34.6 us with the whole-table prefetch and one
    element per thread)."""
    dev = ptxforge.cuda(0)
    net, reference = _embedding(vocab, tokens, 768, batch=batch)
    lib = graph.build(net, "cuda", precision="float16")
    m = graph.GraphModule(lib, dev)
    ids = _ids(vocab, tokens, batch)
    m.set_input(ids=ids)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), reference(ids), rtol=1e-6, atol=1e-6)
    t = m.benchmark(dev, number=100, repeat=5, min_repeat_ms=50).median
    print(f"\nembedding {batch} x {tokens} tokens from {vocab} x 768 float32: {t * 1e6:.2f} us")
