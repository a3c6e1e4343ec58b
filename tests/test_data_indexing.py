"""Data-dependent indexing: a compute whose index reads another tensor (an embedding
lookup ``out[i, j] = table[ids[i], j]``, GatherElements, a scatter written as a reduction).

Every form runs on the simulator (unscheduled, default schedule, hand schedules with
cache_read / compute_at), as the NVPTX code generator's LLVM IR on the host, and as PTX.
Out-of-range indices read the nearest edge element in compiled code (never memory outside
the buffer); the numpy references raise on them.
"""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import te
from ptxforge.ir import dtype as dt
from ptxforge.ir.te import TEError
from ptxforge.ops.schedules import default_schedule

from .test_int_dtypes import ptx_of, run_llvm_on_host, run_sim

VOCAB, DIM = 10, 8


def embedding(ids_dtype: str, n: int = 6):
    table = te.placeholder((VOCAB, DIM), "float32", name="table")
    ids = te.placeholder((n,), ids_dtype, name="ids")
    out = te.compute((n, DIM), lambda i, j: table[te.normalize_index(ids[i], VOCAB), j],
                     name="out")
    return table, ids, out


def table_values() -> np.ndarray:
    return np.arange(VOCAB * DIM, dtype="float32").reshape(VOCAB, DIM) * 0.5 - 3


def all_paths(tensors, arrays) -> list[tuple[str, np.ndarray]]:
    return [
        ("simulator, unscheduled", run_sim(tensors, arrays)),
        ("simulator, default schedule", run_sim(tensors, arrays,
                                                default_schedule([tensors[-1]]))),
        ("NVPTX LLVM IR on the host", run_llvm_on_host(tensors, arrays)),
    ]


@pytest.mark.parametrize("ids_dtype", ("int64", "int32", "int8", "uint8"))
def test_embedding_lookup_matches_numpy(ids_dtype):
    table, ids, out = embedding(ids_dtype)
    tab = table_values()
    signed = not dt.is_uint(ids_dtype)
    idv = np.array([1, 9, 0, -1 if signed else 3, -10 if signed else 5, 4], ids_dtype)
    want = tab[idv.astype(np.int64)]  # numpy counts negative indices from the end too
    for label, got in all_paths([table, ids, out], [tab, idv]):
        np.testing.assert_array_equal(got, want, err_msg=label)
    ptx = ptx_of([table, ids, out])
    if ids_dtype == "int64":
        assert "ld.global.nc.u64" in ptx or "ld.global.nc.b64" in ptx or \
            "ld.global.u64" in ptx or "ld.global.b64" in ptx


def test_out_of_range_indices_read_the_nearest_edge_in_compiled_code():
    table, ids, out = embedding("int64")
    tab = table_values()
    idv = np.array([10, 2**40, -11, -(2**62), 3, 9], "int64")
    with pytest.raises(IndexError):
        np.take(tab, idv, axis=0)  # the numpy reference refuses them
    # 10 and 2**40 clamp to the last row; -11 (= -1 after counting from the end) and
    # -2**62 to the first
    want = tab[[9, 9, 0, 0, 3, 9]]
    for label, got in all_paths([table, ids, out], [tab, idv]):
        np.testing.assert_array_equal(got, want, err_msg=label)
    text = str(ptxforge.lower([table, ids, out]))
    assert "min(max(" in text  # the clamp is in the IR every backend compiles


def test_gather_elements_with_int32_indices():
    data = te.placeholder((5, 4), "float32", name="data")
    idx = te.placeholder((3, 4), "int32", name="idx")
    out = te.compute((3, 4), lambda i, j: data[te.normalize_index(idx[i, j], 5), j],
                     name="out")
    d = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    iv = np.array([[0, 4, -1, 2], [1, 1, 3, -5], [4, 0, 0, 2]], "int32")
    want = np.take_along_axis(d, np.where(iv < 0, iv + 5, iv), axis=0)
    for label, got in all_paths([data, idx, out], [d, iv]):
        np.testing.assert_array_equal(got, want, err_msg=label)
    ptx_of([data, idx, out])


def test_scatter_add_as_a_reduction_over_updates():
    """``out[r, j] = data[r, j] + sum_k (idx[k] == r) * upd[k, j]`` (ScatterElements with
    reduction add, written as a gather-free reduction whose predicate reads indices)."""
    n, m, k = 6, 3, 4
    data = te.placeholder((n, m), "int32", name="data")
    idx = te.placeholder((k,), "int64", name="idx")
    upd = te.placeholder((k, m), "int32", name="upd")
    rk = te.reduce_axis((0, k), name="rk")
    acc = te.compute((n, m), lambda r, j: te.sum(
        te.if_then_else(idx[rk] == te.cast("int64", r), upd[rk, j], 0), axis=rk),
        name="acc")
    out = te.compute((n, m), lambda r, j: data[r, j] + acc[r, j], name="out")
    rng = np.random.default_rng(1)
    dv = rng.integers(-50, 50, (n, m)).astype("int32")
    iv = np.array([2, 5, 2, 0], "int64")
    uv = rng.integers(-50, 50, (k, m)).astype("int32")
    want = dv.copy()
    np.add.at(want, iv, uv)
    got = run_sim([data, idx, upd, out], [dv, iv, uv])
    np.testing.assert_array_equal(got, want)
    got = run_sim([data, idx, upd, out], [dv, iv, uv], default_schedule([out]))
    np.testing.assert_array_equal(got, want)


def test_scatter_nd_last_write_wins_as_a_max_then_a_guarded_gather():
    """ScatterND on rows: ``out = data; out[idx[k]] = upd[k]`` in order, so the last ``k``
    naming a row wins. A max reduction finds that ``k`` (-1 for none); the gather of its
    update row sits in the arm a select takes only where it exists (the clamp keeps the
    other arm's address in bounds)."""
    n, m, k = 7, 5, 6
    data = te.placeholder((n, m), "float32", name="data")
    idx = te.placeholder((k,), "int64", name="idx")
    upd = te.placeholder((k, m), "float32", name="upd")
    rk = te.reduce_axis((0, k), name="rk")
    last = te.compute((n,), lambda r: te.max(te.if_then_else(
        te.normalize_index(idx[rk], n) == te.cast("int64", r), rk, -1), axis=rk), name="last")
    out = te.compute((n, m), lambda r, j: te.if_then_else(
        last[r] >= 0, upd[last[r], j], data[r, j]), name="out")
    rng = np.random.default_rng(4)
    dv = rng.standard_normal((n, m)).astype("float32")
    iv = np.array([3, 0, -1, 3, 5, 0], "int64")  # rows 3 and 0 written twice
    uv = rng.standard_normal((k, m)).astype("float32")
    want = dv.copy()
    for kk in range(k):
        want[iv[kk]] = uv[kk]
    for schedule in (None, default_schedule([out])):
        np.testing.assert_array_equal(run_sim([data, idx, upd, out], [dv, iv, uv], schedule),
                                      want)
    ptx_of([data, idx, upd, out])


def test_cache_read_and_compute_at_with_data_dependent_reads():
    n = 64
    table, ids, out = embedding("int64", n)
    tab = table_values()
    idv = np.random.default_rng(2).integers(-VOCAB, VOCAB, n).astype("int64")
    want = tab[idv]
    s = te.create_schedule([out])
    ids_local = s.cache_read(ids, "local", [out])
    table_shared = s.cache_read(table, "shared", [out])
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=16)
    s[out].bind(io, te.thread_axis("blockIdx.x"))
    s[out].bind(ii, te.thread_axis("threadIdx.x"))
    s[ids_local].compute_at(s[out], ii)
    s[table_shared].compute_at(s[out], io)
    got = run_sim([table, ids, out], [tab, idv], s)
    np.testing.assert_array_equal(got, want)
    module = ptxforge.lower(s, [table, ids, out])
    text = str(module)
    assert "shared" in text and "local" in text
    # the table is read at data-dependent rows: its shared copy holds the whole table
    from ptxforge.backend_ptx import compile_kernel

    for k in module.kernels():
        compile_kernel(k, "sm_80", cache=False)


def test_an_index_computed_in_its_own_stage_is_clamped_where_it_is_read():
    table = te.placeholder((VOCAB, DIM), "float32", name="table")
    ids = te.placeholder((4,), "int64", name="ids")
    shifted = te.compute((4,), lambda i: ids[i] + 3, name="shifted")
    out = te.compute((4, DIM), lambda i, j: table[shifted[i], j], name="out")
    tab = table_values()
    idv = np.array([0, 6, 7, -5], "int64")
    want = tab[np.clip(idv + 3, 0, VOCAB - 1)]
    for schedule in (None, default_schedule([out])):
        got = run_sim([table, ids, out], [tab, idv], schedule)
        np.testing.assert_array_equal(got, want)


def test_normalize_index_checks_its_arguments():
    ids = te.placeholder((4,), "float32", name="f")
    with pytest.raises(TEError, match="integer value"):
        te.normalize_index(ids[0], 4)
    i8 = te.placeholder((4,), "int8", name="i8")
    with pytest.raises(TEError, match="positive int extent"):
        te.normalize_index(i8[0], 0)
    e = te.normalize_index(i8[0], 1000)  # the extent does not fit int8: computed in int32
    assert e.dtype == "int32"
