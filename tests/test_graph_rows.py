"""The default schedule of row-wise normalizations in a network (layer norm, RMS norm,
softmax): a block per row, each thread reading and writing 16-byte vectors of its row
(``ptxforge.ops.schedules.rows``). Checked on the PTX for sm_90a (no GPU needed) and
against the reference executor on the simulator."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph, te
from ptxforge.graph import nn
from ptxforge.graph.build_module import fused_rows_choice as DEFAULT_ROWS_CHOICE
from ptxforge.graph.opdefs.rms_norm import rms_norm
from ptxforge.ir import dtype as dt
from ptxforge.ops.schedules.rows import row_lanes, schedule_rows

RNG = np.random.default_rng(31)
SM90A = "cuda -arch=sm_90a"


def rand(*shape, dtype="float32", scale=1.0):
    a = (RNG.standard_normal(shape) * scale).astype("float32")
    return dt.to_bfloat16(a) if dtype == "bfloat16" else a.astype(dtype)


def as_float32(a) -> np.ndarray:
    a = np.asarray(a)
    return dt.from_bfloat16(a) if a.dtype == dt.BFLOAT16_HOST else a.astype("float32")


def norm_net(kind: str, rows: int, cols: int, dtype="float32", out_dtype=""):
    x = graph.var("x", (rows, cols), dtype)
    if kind == "layer_norm":
        y = nn.layer_norm(x, graph.const(rand(cols, dtype=dtype), "g"),
                          graph.const(rand(cols, dtype=dtype), "b"), out_dtype=out_dtype)
    elif kind == "rms_norm":
        y = rms_norm(x, graph.const(rand(cols, dtype=dtype), "w"), out_dtype=out_dtype)
    elif kind == "masked_softmax":
        # an attention's scores with a padding mask: rows of minus infinity give NaN, which
        # nan_to_zero makes 0 (the exporters' where(isnan) after the softmax)
        mask = np.zeros((rows, cols), dtype)
        mask[0, :] = -np.inf
        mask[1:, cols // 2:] = -np.inf
        y = nn.softmax(graph.add(x, graph.const(mask, "mask")), axis=-1, out_dtype=out_dtype,
                       nan_to_zero=True)
    else:
        y = nn.softmax(x, axis=-1, out_dtype=out_dtype)
    return graph.function(y)


def only_function(lib):
    """The row kernel's function (a masked softmax's mask add is a kernel before it)."""
    (f,) = [f for f in lib.functions.values()
            if any(k in f.func.name for k in ("norm", "softmax"))]
    return f


def test_row_lanes_fill_16_bytes_and_keep_a_warp_of_vectors_per_row():
    def out(cols, dtype):
        return te.placeholder((4, cols), dtype, name="y")

    assert row_lanes(out(768, "float16")) == 8
    assert row_lanes(out(768, "float32")) == 4
    assert row_lanes(out(1000, "float16")) == 8
    assert row_lanes(out(100, "float16")) == 2  # 50 pairs: 4 would leave 25 vectors a row
    assert row_lanes(out(77, "float16")) == 1
    assert row_lanes(out(48, "float32")) == 1  # 24 pairs: less than a warp


def test_schedule_rows_rejects_lanes_that_split_a_row_and_odd_thread_counts():
    x = te.placeholder((4, 12), "float32", name="x")
    y = te.compute((4, 12), lambda i, j: x[i, j] * 2.0, name="y")
    with pytest.raises(ValueError, match="do not divide"):
        schedule_rows(y, (), (), 32, 8)
    with pytest.raises(ValueError, match="power of two"):
        schedule_rows(y, (), (), 48, 4)


def vector_rows(monkeypatch, threads: int = 32):
    """Build row kernels with 16-byte vectors (``schedule_rows``) instead of the default's
    scalar schedule: ``threads`` a row, the lanes of ``row_lanes``."""
    from dataclasses import replace

    import ptxforge.graph.build_module as bm

    default = bm.fused_rows_choice

    def vectors(task, target=None):
        choice = default(task, target)
        if choice is None:
            return None
        lanes = row_lanes(choice.step.tensors[0])
        return replace(choice, lanes=lanes, threads=threads) if lanes > 1 else choice

    monkeypatch.setattr(bm, "fused_rows_choice", vectors)


@pytest.mark.parametrize("cols,threads", [(768, 128), (100, 32), (256, 32), (1000, 128),
                                          (4096, 512), (16384, 1024)])
def test_the_default_row_kernel_gives_each_thread_at_most_8_elements(cols, threads):
    """A layer norm of ``cols`` columns: a block per row of the fewest threads that leave
    each at most 8 elements (whole warps, at most 1,024), scalar accesses."""
    lib = graph.build(norm_net("layer_norm", 8, cols, "float16"), SM90A)
    (k,) = only_function(lib).device_module.kernels()
    assert k.launch.grid == (8, 1, 1) and k.launch.block == (threads, 1, 1)
    assert " vectorize {" not in str(only_function(lib).device_module)


def test_a_bert_layer_norm_of_vectors_moves_16_bytes_one_warp_per_row(monkeypatch):
    """BERT-base at batch 8, 512 tokens: 4,096 rows of 768 float32 in, float16 out, with
    the vector schedule a warp a row."""
    vector_rows(monkeypatch)
    lib = graph.build(norm_net("layer_norm", 4096, 768, out_dtype="float16"), SM90A)
    f = only_function(lib)
    (k,) = f.device_module.kernels()
    assert k.launch.grid == (4096, 1, 1) and k.launch.block == (32, 1, 1)
    ptx = f.ptx.get_source("ptx")
    # 768 halves a row = 96 vectors of 8: 3 per thread, 16 bytes each; no 2-byte stores
    assert ptx.count("st.global.v4.b32") == 3
    assert "st.global.b16" not in ptx
    # the first pass over the row (the mean's, before its shuffles), which brings the row
    # from memory: 3 vectors of 8 floats a thread, as 6 16-byte loads and nothing narrower
    # (the later passes find it in registers or L1)
    first = ptx[:ptx.index("shfl.sync")]
    assert first.count("ld.global.nc.v4.b32") == 6
    assert "ld.global.nc.b32" not in first and "ld.global.nc.v2" not in first


def test_a_float16_softmax_row_of_vectors_reads_16_bytes_at_a_time(monkeypatch):
    vector_rows(monkeypatch)
    lib = graph.build(norm_net("softmax", 1024, 1024, "float16"), SM90A)
    ptx = only_function(lib).ptx.get_source("ptx")
    assert "ld.global.nc.v4.b32" in ptx and "st.global.v4.b32" in ptx
    assert "ld.global.nc.b16" not in ptx and "st.global.b16" not in ptx


CASES = [
    ("layer_norm", 6, 768, "float32", "float16"),
    ("layer_norm", 5, 768, "float16", ""),
    ("layer_norm", 3, 512, "bfloat16", ""),
    ("layer_norm", 4, 100, "float32", ""),  # pairs
    ("layer_norm", 4, 77, "float32", ""),  # no vectors: the scalar schedule
    ("rms_norm", 5, 256, "float16", ""),
    ("softmax", 7, 1000, "float32", "float16"),
    ("softmax", 4, 4096, "float16", ""),
    ("masked_softmax", 4, 512, "float32", "float16"),
]


def run_sim(lib, x) -> np.ndarray:
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(x=x)
    m.run()
    return as_float32(m.get_output(0).numpy())


@pytest.mark.parametrize("vectors", [False, True], ids=["default", "vectors"])
@pytest.mark.parametrize("kind,rows,cols,dtype,out_dtype", CASES)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # masked rows
def test_row_kernels_match_the_reference_on_the_simulator(kind, rows, cols, dtype, out_dtype,
                                                         vectors, monkeypatch):
    net = norm_net(kind, rows, cols, dtype, out_dtype)
    if vectors:
        vector_rows(monkeypatch)
    lib = graph.build(net, "sim")
    text = str(only_function(lib).device_module)
    lanes = 1 if cols == 77 else (2 if cols == 100 else 8 if (out_dtype or dtype) != "float32"
                                  else 4)
    assert (" vectorize {" in text) == (vectors and lanes > 1)
    x = rand(rows, cols, dtype=dtype, scale=3.0)
    got = run_sim(lib, x)
    if dtype != "bfloat16":
        want = as_float32(graph.evaluate(net, {"x": x}))
        # a float16 reference computes its statistics in float16 steps
        tol = 1e-2 if dtype == "float16" else 2e-3
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        return
    # the bfloat16 reference computes in bfloat16 steps, the kernel in float32 with one
    # rounding: the scalar schedule (one element per thread and step) and the vector one
    # are checked against each other, which compute the same with the sums in another order
    import ptxforge.graph.build_module as bm

    if vectors:
        monkeypatch.setattr(bm, "fused_rows_choice", DEFAULT_ROWS_CHOICE)
    else:
        vector_rows(monkeypatch)
    other = run_sim(graph.build(net, "sim"), x)
    assert (" vectorize {" in str(only_function(graph.build(net, "sim")).device_module)
            ) != vectors
    np.testing.assert_allclose(got, other, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("rows,dtype,out_dtype", [(4096, "float32", "float16"),
                                                  (1024, "float32", "float16"),
                                                  (4096, "float16", "")],
                         ids=["bert_b8", "gpt2", "float16"])
def test_full_size_layer_norms_on_the_gpu_match_and_print_their_time(rows, dtype, out_dtype):
    """BERT-base's layer norm at batch 8 x 512 tokens and GPT-2's at 1,024 tokens (768
    columns, float32 in, float16 out, as the float16 builds run them), and a float16 one;
    prints the median time (an H200 took 6.0 and 2.7 us with the scalar schedule)."""
    dev = ptxforge.cuda(0)
    net = norm_net("layer_norm", rows, 768, dtype, out_dtype)
    lib = graph.build(net, "cuda")
    m = graph.GraphModule(lib, dev)
    x = rand(rows, 768, dtype=dtype, scale=3.0)
    m.set_input(x=x)
    m.run()
    want = as_float32(graph.evaluate(net, {"x": x}))
    # a float16 input's reference computes in float16 steps, the kernel in float32 with
    # one rounding (2 ulp of float16 apart at 0.4), as the simulator test above allows
    tol = 1e-2 if dtype == "float16" else 2e-3
    np.testing.assert_allclose(as_float32(m.get_output(0).numpy()), want, rtol=tol, atol=tol)
    t = m.benchmark(dev, number=100, repeat=5, min_repeat_ms=50).median
    print(f"\nlayer norm {rows} x 768 {dtype} -> {out_dtype or dtype}: {t * 1e6:.2f} us")
