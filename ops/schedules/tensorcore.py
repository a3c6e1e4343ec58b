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
from ...ir.intrin.kinds import mma_kind
from ...passes.schedule.common import ScheduleError
from .gemm.pieces import fragment_plans, stage_fragments, store_warp_tiles


@dataclass(frozen=True)
class TensorCoreConfig:
    """Tile sizes and instruction choices of :func:`schedule_dense_tensorcore`.

    ``block_m x block_n`` outputs per thread block, ``block_k`` reduction columns per
    shared-memory stage, ``warps_m x warps_n`` warps per block (each owning a
    ``block_m / warps_m x block_n / warps_n`` warp tile), ``vec`` elements per copy of the
    cooperative global -> shared loads, ``pad`` elements added to each shared row (against
    ldmatrix bank conflicts; a multiple of 16 bytes, which keeps rows 16-byte aligned: the
    defaults take 8 16-bit elements or 4 fp32, as 8 fp32 would leave TF32's ldmatrix 2-way
    conflicts), ``unroll`` the warp-tile loops. ``frag_load``: ``"ldmatrix"`` or
    ``"load"`` (lane by lane); TF32 takes both (its ldmatrix reads 8 rows of 4 fp32 values
    per matrix, B as ``[N, K]`` only). ``tf32``: allow float32 inputs to be multiplied in TF32 (10
    mantissa bits), which is never chosen silently. ``async_copy``: fill the shared tiles
    with cp.async; ``stages`` (2 to 5): software-pipeline the ``block_k`` loop with that
    many shared buffers per tile (1: none). ``split_k``: the reduction split into that many
    parts computed by different blocks (``blockIdx.z``) into float32 partial sums, which a
    second kernel adds up with the epilogue (the conv and GEMM schedules of
    :mod:`.tensorcore_conv` and :mod:`.tensorcore_gemm` have it, through
    :func:`split_k_partials` and :func:`schedule_split_sum`; 1: none).
    """

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    warps_m: int = 2
    warps_n: int = 2
    vec: int = 8
    pad: int = 8
    unroll: bool = True
    frag_load: str = "ldmatrix"
    tf32: bool = False
    stages: int = 1
    async_copy: bool = False
    split_k: int = 1

    def check(self, M: int, N: int, K: int, mma_k: int = 16, elem_bytes: int = 2,
              split_k_ok: bool = False) -> None:
        wm, wn = self.block_m // self.warps_m, self.block_n // self.warps_n
        rules = [
            (self.split_k == 1 or split_k_ok,
             f"split_k 1 (split_k {self.split_k}: this schedule has no split-K)"),
            (M % self.block_m == 0, f"block_m {self.block_m} divides M {M}"),
            (N % self.block_n == 0, f"block_n {self.block_n} divides N {N}"),
            (K % self.block_k == 0, f"block_k {self.block_k} divides K {K}"),
            (self.block_k % mma_k == 0, f"block_k {self.block_k} is a multiple of {mma_k}"),
            (self.block_m % self.warps_m == 0 and wm % 16 == 0,
             f"the warp tile's rows (block_m / warps_m = {self.block_m}/{self.warps_m}) "
             "are a multiple of 16"),
            (self.block_n % self.warps_n == 0 and wn % 8 == 0,
             f"the warp tile's columns (block_n / warps_n = {self.block_n}/{self.warps_n}) "
             "are a multiple of 8"),
            (self.warps_m * self.warps_n * 32 <= 1024, "at most 32 warps per block"),
            (isinstance(self.pad, int) and self.pad >= 0
             and (self.pad * elem_bytes) % 16 == 0,
             f"pad {self.pad} is a multiple of {16 // elem_bytes} elements of {elem_bytes} "
             "bytes (16-byte rows)"),
            (self.stages == 1 or 2 <= self.stages <= 5, f"stages {self.stages} is 1 to 5"),
            (not self.async_copy or self.vec * elem_bytes in (4, 8, 16),
             f"vec {self.vec} elements of {elem_bytes} bytes make a cp.async of 4, 8 or 16 "
             "bytes"),
            (self.frag_load in ("ldmatrix", "load"),
             f"frag_load is 'ldmatrix' or 'load', not {self.frag_load!r}"),
        ]
        for n_el in (self.block_m * self.block_k, self.block_n * self.block_k):
            rules.append((n_el % (32 * self.warps_m * self.warps_n * self.vec) == 0,
                          f"the threads x vec ({32 * self.warps_m * self.warps_n} x "
                          f"{self.vec}) divide a shared tile of {n_el} elements"))
        for ok, rule in rules:
            if not ok:
                raise ScheduleError(f"tensor-core dense {M}x{N}x{K} with {self}: need {rule}")


def tile_limit(extent: int) -> int:
    """The largest block tile worth trying along an extent: the extent rounded up to a
    power of two, at least 16 (the smallest tile); a larger tile would only multiply the
    zeros it is padded with."""
    return max(16, 1 << max(int(extent) - 1, 0).bit_length())


def dense_tensorcore_compute(M: int, N: int, K: int, in_dtype: str = "float16",
                             out_dtype: str = "float32", acc_dtype: str = "float32",
                             b_layout: str = "nk"):
    """``[A, B, out]`` for ``out = A x B^T`` (``b_layout="nk"``: B is ``[N, K]``) or
    ``A x B`` (``"kn"``: B is ``[K, N]``), accumulated in ``acc_dtype`` and cast to
    ``out_dtype`` when they differ."""
    if b_layout not in ("nk", "kn"):
        raise ScheduleError(f"b_layout is 'nk' or 'kn', got {b_layout!r}")
    a = te.placeholder((M, K), in_dtype, name="A")
    b = te.placeholder((N, K) if b_layout == "nk" else (K, N), in_dtype, name="B")
    k = te.reduce_axis((0, K), name="k")

    def body(i, j):
        x, y = a[i, k], (b[j, k] if b_layout == "nk" else b[k, j])
        if in_dtype != acc_dtype:
            x, y = x.astype(acc_dtype), y.astype(acc_dtype)
        return te.sum(x * y, axis=k)

    c = te.compute((M, N), body, name="C")
    if out_dtype == acc_dtype:
        return [a, b, c]
    d = te.compute((M, N), lambda i, j: c[i, j].astype(out_dtype), name="D")
    return [a, b, d]


SPLIT_SUM_THREADS = 256
"""Threads per block of split-K's second kernel (one output element per thread)."""


def split_k_rule(cfg: TensorCoreConfig, K: int) -> str | None:
    """The split-K rule ``cfg`` breaks for a reduction of ``K`` (K padded to whole
    ``block_k * split_k`` parts), as the end of a "need ..." sentence, or None: ``split_k``
    a positive int, and at least ``stages`` ``block_k`` steps in each part when pipelined."""
    split = cfg.split_k
    if not isinstance(split, int) or isinstance(split, bool) or split < 1:
        return f"split_k to be a positive int, got {split!r}"
    part = cfg.block_k * split
    steps = -(-K // part)  # block_k steps per part
    if cfg.stages > 1 and steps < cfg.stages:
        return (f"at least {cfg.stages} block_k steps for {cfg.stages} pipeline stages (K = "
                f"{K} padded to {steps * part} gives {steps}"
                f"{' per split_k part' if split > 1 else ''})")
    return None


def split_k_partials(s, g, split: int):
    """Split-K on the product stage ``g`` of ``s`` (its one reduce axis a whole number of
    ``split`` parts): ``rfactor`` over the outer part of the reduction. Returns
    ``(partial, final)``: ``partial[part, ...]`` the float32 partial sums that the
    tensor-core kernel computes (one ``blockIdx.z`` layer per part), ``final`` the stage
    adding them up, to compute inside the epilogue's kernel (:func:`schedule_split_sum`)."""
    gst = s[g]
    part, _ = gst.split(gst.op.reduce_axis[0], nparts=split)
    return s.rfactor(g, part), g


def schedule_split_sum(s, o, final) -> None:
    """The second kernel of split-K: the output stage ``o`` (the epilogue, or the copy of
    the product) flat over its elements in blocks of :data:`SPLIT_SUM_THREADS` threads,
    each thread adding up the partial sums of its element (``final``) before the epilogue
    (bias, activation, residual add, cast), which thus runs once per element."""
    fused = o.fuse(*o.op.axis)
    bx, tx = o.split(fused, factor=SPLIT_SUM_THREADS)
    o.bind(bx, te.thread_axis("blockIdx.x"))
    o.bind(tx, te.thread_axis("threadIdx.x"))
    s[final].compute_at(o, tx)


def tile_warp_product(f, block_k: int, mma_k: int, intrin: str, unroll: bool = True):
    """Tile the accumulator stage ``f`` of one warp (its last two axes the warp tile's rows
    and columns, any axes before them leading): the reduction in ``block_k`` stages of
    ``mma_k``, m16n8 fragments, the innermost nest run as the mma ``intrin``. Returns
    ``(ko, ki)``: the stage loop (shared tiles attach there, the pipeline runs over it)
    and the step loop (fragments attach there). The one tiling every tensor-core
    schedule here uses (dense, batch_matmul, implicit-GEMM conv, the auto-scheduler's)."""
    *lead, ci, cj = f.op.axis
    (kr,) = f.op.reduce_axis
    ko, ki = f.split(kr, factor=block_k)
    ki, kk = f.split(ki, factor=mma_k)
    fti, fii = f.split(ci, factor=16)
    ftj, fjj = f.split(cj, factor=8)
    f.reorder(*lead, ko, ki, fti, ftj, fii, fjj, kk)
    f.tensorize(fii, intrin)
    if unroll:
        for x in (ki, fti, ftj):
            f.unroll(x)
    return ko, ki


def schedule_dense_tensorcore(tensors, cfg: TensorCoreConfig | None = None):
    """The schedule of ``tensors`` (from :func:`dense_tensorcore_compute`)."""
    cfg = cfg or TensorCoreConfig()
    a, b, out = tensors
    M, K = a.shape
    N = out.shape[1]
    s = te.create_schedule(out.op)
    c = out if not _is_cast(out) else out.op.input_tensors[0]
    kn = _b_is_kn(c, b)
    acc = c.dtype
    ab = a.dtype
    if ab not in ("float16", "bfloat16", "float32"):
        raise ScheduleError(f"tensor-core dense: inputs must be float16, bfloat16 or float32 "
                            f"(TF32), got {ab}")
    if ab == "float32":
        if not cfg.tf32:
            raise ScheduleError("tensor-core dense of float32 inputs multiplies them in TF32 "
                                "(10 mantissa bits): ask for it with TensorCoreConfig(tf32="
                                "True)")
        if kn:
            raise ScheduleError("tensor-core dense in TF32 takes B as [N, K]")
    kind = mma_kind(ab)
    mma = kind.mma(ab, acc, kn)
    cfg.check(M, N, K, kind.k, 4 if ab == "float32" else 2)
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
    o.bind(bi, "blockIdx.y")
    o.bind(bj, "blockIdx.x")
    _, wj = store_warp_tiles(o, i, j, wm, wn, kind.store(acc, out.dtype), cfg.unroll,
                             (bi, bj))

    # the accumulators: one warp tile, k in block_k stages of mma_k
    s[cf].compute_at(o, wj)
    f = s[cf]
    ko, ki = tile_warp_product(f, cfg.block_k, kind.k, mma, cfg.unroll)

    # fragments: loaded from shared memory for each k step
    plans = fragment_plans(kind, ab, kn, cfg.frag_load, wn)
    stage_fragments(s, f, ki, zip((a_fr, b_fr), plans), cfg.unroll)

    # shared tiles: every thread of the block copies vec elements at a time
    for sh in (a_sh, b_sh):
        s[sh].compute_at(f, ko)
        st = s[sh]
        r, col = st.op.axis
        if cfg.pad:
            # rows of row + pad elements (the smallest stride = 0 mod row + pad)
            row = cfg.block_k if (sh is a_sh or not kn) else cfg.block_n
            st.storage_align(r, row + cfg.pad, 0)
        fused = st.fuse(r, col)
        fused, v = st.split(fused, factor=cfg.vec)
        fused, tx = st.split(fused, factor=32)
        fused, ty = st.split(fused, factor=cfg.warps_n)
        fused, tz = st.split(fused, factor=cfg.warps_m)
        st.bind(tx, "threadIdx.x")
        st.bind(ty, "threadIdx.y")
        st.bind(tz, "threadIdx.z")
        st.vectorize(v)
        if cfg.async_copy:
            st.async_copy()
    if cfg.stages > 1:
        f.pipeline(ko, cfg.stages)
    return s


def _is_cast(t) -> bool:
    from ...ir.expr import Cast
    from ...ir.te import ComputeOp

    return (isinstance(t.op, ComputeOp) and isinstance(t.op.body, Cast)
            and len(t.op.input_tensors) == 1)


def _b_is_kn(c, b) -> bool:
    """Whether the product reads B as ``[k, n]`` (its first index is the reduce axis)."""
    from ...ir.expr import TensorRead, children

    red = {ax.var for ax in c.op.reduce_axis}
    stack = [c.op.body]
    while stack:
        x = stack.pop()
        if isinstance(x, TensorRead) and x.tensor is b:
            return x.indices[0] in red
        stack.extend(children(x))
    raise ScheduleError(f"tensor-core dense: {c.name} does not read {b.name}")
