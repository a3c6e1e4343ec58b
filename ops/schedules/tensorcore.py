"""A tensor-core schedule for dense / GEMM (``C[M, N] = A[M, K] x B[N, K]^T``).

Block tiles of ``block_m x block_n`` outputs are staged through shared memory ``block_k``
columns at a time; each of the ``warps_m x warps_n`` warps owns a warp tile of m16n8
accumulator fragments, loads its A and B fragments from shared memory with ``ldmatrix``
and multiplies them with ``mma.sync m16n8k16``; the accumulators are written back to global
memory lane by lane (with the cast of an fp16 output). Everything is expressed with the
schedule primitives: cache_read/cache_write (shared, warp), split, reorder, bind,
compute_at, storage_align and tensorize.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import te
from ...passes.schedule.common import ScheduleError

MMA_K = 16
SUFFIX = {"float16": "f16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class TensorCoreConfig:
    """Tile sizes of :func:`schedule_dense_tensorcore`.

    ``block_m x block_n`` outputs per thread block, ``block_k`` reduction columns per
    shared-memory stage, ``warps_m x warps_n`` warps per block (each owning a
    ``block_m / warps_m x block_n / warps_n`` warp tile), ``vec`` elements per copy of the
    cooperative global -> shared loads, ``pad`` elements added to each shared row (bank
    conflicts of ldmatrix; keeps rows 16-byte aligned when a multiple of 8), ``unroll``
    the warp-tile loops.
    """

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    warps_m: int = 2
    warps_n: int = 2
    vec: int = 8
    pad: int = 8
    unroll: bool = True

    def check(self, M: int, N: int, K: int) -> None:
        wm, wn = self.block_m // self.warps_m, self.block_n // self.warps_n
        rules = [
            (M % self.block_m == 0, f"block_m {self.block_m} divides M {M}"),
            (N % self.block_n == 0, f"block_n {self.block_n} divides N {N}"),
            (K % self.block_k == 0, f"block_k {self.block_k} divides K {K}"),
            (self.block_k % MMA_K == 0, f"block_k {self.block_k} is a multiple of 16"),
            (self.block_m % self.warps_m == 0 and wm % 16 == 0,
             f"the warp tile's rows (block_m / warps_m = {self.block_m}/{self.warps_m}) "
             "are a multiple of 16"),
            (self.block_n % self.warps_n == 0 and wn % 8 == 0,
             f"the warp tile's columns (block_n / warps_n = {self.block_n}/{self.warps_n}) "
             "are a multiple of 8"),
            (self.warps_m * self.warps_n * 32 <= 1024, "at most 32 warps per block"),
            (self.pad % 8 == 0, f"pad {self.pad} is a multiple of 8 (16-byte rows)"),
        ]
        for n_el in (self.block_m * self.block_k, self.block_n * self.block_k):
            rules.append((n_el % (32 * self.warps_m * self.warps_n * self.vec) == 0,
                          f"the threads x vec ({32 * self.warps_m * self.warps_n} x "
                          f"{self.vec}) divide a shared tile of {n_el} elements"))
        for ok, rule in rules:
            if not ok:
                raise ScheduleError(f"tensor-core dense {M}x{N}x{K} with {self}: need {rule}")


def dense_tensorcore_compute(M: int, N: int, K: int, in_dtype: str = "float16",
                             out_dtype: str = "float32"):
    """``[A, B, out]`` for ``out = A x B^T`` accumulated in float32 (cast to
    ``out_dtype`` when that is 16-bit)."""
    a = te.placeholder((M, K), in_dtype, name="A")
    b = te.placeholder((N, K), in_dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k].astype("float32")
                                                * b[j, k].astype("float32"), axis=k),
                   name="C")
    if out_dtype == "float32":
        return [a, b, c]
    d = te.compute((M, N), lambda i, j: c[i, j].astype(out_dtype), name="D")
    return [a, b, d]


def schedule_dense_tensorcore(tensors, cfg: TensorCoreConfig | None = None):
    """The schedule of ``tensors`` (from :func:`dense_tensorcore_compute`)."""
    cfg = cfg or TensorCoreConfig()
    a, b, out = tensors
    M, K = a.shape
    N = b.shape[0]
    cfg.check(M, N, K)
    s = te.create_schedule(out.op)
    suffix = SUFFIX.get(a.dtype)
    if suffix is None:
        raise ScheduleError(f"tensor-core dense: inputs must be float16 or bfloat16, got "
                            f"{a.dtype}")
    c = out.op.input_tensors[0] if out.dtype != "float32" else out
    cf = s.cache_write(c, "warp")
    if out is not c:
        s[c].compute_inline()
    a_sh = s.cache_read(a, "shared", [cf])
    b_sh = s.cache_read(b, "shared", [cf])
    a_fr = s.cache_read(a_sh, "warp", [cf])
    b_fr = s.cache_read(b_sh, "warp", [cf])
    wm, wn = cfg.block_m // cfg.warps_m, cfg.block_n // cfg.warps_n

    # the output: blocks, warps, m16n8 tiles written back lane by lane
    o = s[out]
    i, j = o.op.axis
    bi, i = o.split(i, factor=cfg.block_m)
    bj, j = o.split(j, factor=cfg.block_n)
    wi, i = o.split(i, factor=wm)
    wj, j = o.split(j, factor=wn)
    ti, ii = o.split(i, factor=16)
    tj, jj = o.split(j, factor=8)
    o.reorder(bi, bj, wi, wj, ti, tj, ii, jj)
    o.bind(bi, "blockIdx.y")
    o.bind(bj, "blockIdx.x")
    o.bind(wi, "threadIdx.z")
    o.bind(wj, "threadIdx.y")
    store = "store_c_f32" if out.dtype == "float32" else f"store_c_f32_{SUFFIX[out.dtype]}"
    o.tensorize(ii, store)
    if cfg.unroll:
        o.unroll(ti)
        o.unroll(tj)

    # the accumulators: one warp tile, k in block_k stages of 16
    s[cf].compute_at(o, wj)
    f = s[cf]
    ci, cj = f.op.axis
    (kr,) = f.op.reduce_axis
    ko, ki = f.split(kr, factor=cfg.block_k)
    ki, kk = f.split(ki, factor=MMA_K)
    fti, fii = f.split(ci, factor=16)
    ftj, fjj = f.split(cj, factor=8)
    f.reorder(ko, ki, fti, ftj, fii, fjj, kk)
    f.tensorize(fii, f"mma_m16n8k16_{suffix}_f32")
    if cfg.unroll:
        f.unroll(ki)
        f.unroll(fti)
        f.unroll(ftj)

    # fragments: loaded from shared memory for each k step of 16
    for fr, rows, intrin in ((a_fr, 16, f"ldmatrix_a_x4_{suffix}"),
                             (b_fr, 16 if wn % 16 == 0 else 8,
                              f"ldmatrix_b_x{4 if wn % 16 == 0 else 2}_{suffix}")):
        s[fr].compute_at(f, ki)
        st = s[fr]
        r, _ = st.op.axis
        ro, ri = st.split(r, factor=rows)
        st.tensorize(ri, intrin)
        if cfg.unroll:
            st.unroll(ro)

    # shared tiles: every thread of the block copies vec elements at a time
    for sh in (a_sh, b_sh):
        s[sh].compute_at(f, ko)
        st = s[sh]
        r, col = st.op.axis
        if cfg.pad:
            st.storage_align(r, cfg.block_k, cfg.pad)
        fused = st.fuse(r, col)
        fused, v = st.split(fused, factor=cfg.vec)
        fused, tx = st.split(fused, factor=32)
        fused, ty = st.split(fused, factor=cfg.warps_n)
        fused, tz = st.split(fused, factor=cfg.warps_m)
        st.bind(tx, "threadIdx.x")
        st.bind(ty, "threadIdx.y")
        st.bind(tz, "threadIdx.z")
        st.vectorize(v)
    return s
