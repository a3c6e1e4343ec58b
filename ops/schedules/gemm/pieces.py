"""The pieces :func:`~.schedule.schedule_gemm` is built from.

A schedule of a product on the tensor cores caches its accumulators (a warp's fragments
for mma.sync, a warpgroup's registers for wgmma), stages its operands through shared
memory (:func:`schedule_tile_copy`, wgmma's MN-major B in panels:
:func:`schedule_b_kn_copy`) and, for mma.sync, into fragments before each mma
(:func:`stage_fragments`), tiles the product (:func:`tile_warp_product`,
:func:`split_warpgroup_k`), stores the accumulator tiles (:func:`store_warp_tiles`,
:func:`store_warpgroup_tiles`: to global memory, or to the block's C tile in shared
memory), runs the epilogue over the C tile (:func:`schedule_tile_epilogue`, the
convolution's :func:`bind_conv_output`) and splits K (:func:`split_k_partials`,
:func:`schedule_split_sum`). The
intrinsics come from the instruction kind (:class:`~ptxforge.ir.intrin.kinds.TensorCoreKind`)
by structured key, never from names spelled here.
"""

from __future__ import annotations

from ....ir.intrin.kinds import WGMMA, FragmentPlan, TensorCoreKind, mma_kind
from .knobs import B_KN_PANEL, BLOCK_K


def fragment_plans(kind: TensorCoreKind, ab: str, b_kn: bool, path: str,
                   warp_cols: int) -> tuple[FragmentPlan, FragmentPlan]:
    """The staging of A and of B (kept as ``[K, N]`` where ``b_kn``) into ``kind``'s
    fragments: ``path`` ``"ldmatrix"`` or ``"load"`` (lane by lane); ``warp_cols``: the warp
    tile's columns (B's ldmatrix takes two 16-column fragments at once where they divide
    it)."""
    return (kind.fragment_load("A", ab, False, path, warp_cols),
            kind.fragment_load("B", ab, b_kn, path, warp_cols))


def stage_fragments(s, f, ki, staged, unroll: bool = True) -> None:
    """The fragment stages of ``staged`` (pairs of a fragment tensor and its
    :class:`~ptxforge.ir.intrin.kinds.FragmentPlan`) computed at the accumulator stage
    ``f``'s mma step ``ki``: each split into the plan's tiles and tensorized (B kept as
    ``[K, N]``, plan axis 1: the tiles run along N and the nest is ``(k, n.inner)``), the
    tile loop unrolled where ``unroll``."""
    for fr, plan in staged:
        s[fr].compute_at(f, ki)
        st = s[fr]
        rax = list(st.op.axis)
        r0, r1 = rax[-2], rax[-1]
        if plan.axis == 0:
            ro, ri = st.split(r0, factor=plan.rows)
            st.tensorize(ri, plan.intrin)
        else:
            ro, ri = st.split(r1, factor=plan.rows)
            st.reorder(*rax[:-2], ro, r0, ri)
            st.tensorize(r0, plan.intrin)
        if unroll:
            st.unroll(ro)


def store_warp_tiles(st, rows, cols, warp_m: int, warp_n: int, intrin: str,
                     unroll: bool = True, lead: tuple = (), tile: tuple = (16, 8)):
    """The warps' stores of their accumulator tiles by stage ``st`` over its block-tile
    loops ``rows`` and ``cols`` (``lead``: the loops kept outside, in order): warp tiles of
    ``warp_m x warp_n`` on threadIdx.z / threadIdx.y, each stored ``tile`` (the kind's
    store tile) at a time by the store intrinsic ``intrin``. Returns ``(wi, wj)``, the warp
    loops (the accumulator stage attaches at ``wj``)."""
    wi, rows = st.split(rows, factor=warp_m)
    wj, cols = st.split(cols, factor=warp_n)
    ti, ii = st.split(rows, factor=tile[0])
    tj, jj = st.split(cols, factor=tile[1])
    st.reorder(*lead, wi, wj, ti, tj, ii, jj)
    st.bind(wi, "threadIdx.z")
    st.bind(wj, "threadIdx.y")
    st.tensorize(ii, intrin)
    if unroll:
        st.unroll(ti)
        st.unroll(tj)
    return wi, wj


def store_warpgroup_tiles(st, rows, cols, lead: tuple = (), out: str = "",
                          scaled: bool = False) -> object:
    """The warpgroups' stores of their accumulators by stage ``st`` over its block-tile
    loops ``rows`` and ``cols`` (``lead``: the loops kept outside, in order): warpgroup
    ``w`` (threadIdx.y) stores rows ``64 w ..``, 64 x 8 at a time, cast to ``out`` (times
    the epilogue's scalar first where ``scaled``). Returns the warpgroup loop (the
    accumulator stage attaches there)."""
    wg, rows = st.split(rows, factor=64)
    tj, jj = st.split(cols, factor=8)
    st.reorder(*lead, wg, tj, rows, jj)
    st.bind(wg, "threadIdx.y")
    st.tensorize(rows, WGMMA.store("float32", out, scaled))
    st.unroll(tj)
    return wg


SPLIT_SUM_THREADS = 256
"""Threads per block of split-K's second kernel (one output element per thread)."""


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
    o.bind(bx, "blockIdx.x")
    o.bind(tx, "threadIdx.x")
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


def split_warpgroup_k(f, step: int = BLOCK_K, k: int = 16) -> tuple:
    """Split the reduction of the warpgroup accumulator stage ``f`` (its last two axes the
    warpgroup's 64 rows and ``block_n`` columns) into steps of 64 (``ko``: the shared
    tiles attach there, the pipeline runs over it) of four k16 (``ki``), the tile's axes
    inside: returns ``(ko, ki, rows)``."""
    *lead, ci, cj = f.op.axis
    (kr,) = f.op.reduce_axis
    ko, ki = f.split(kr, factor=step)
    ki, kk = f.split(ki, factor=k)
    f.reorder(*lead, ko, ki, ci, cj, kk)
    return ko, ki, ci


def finish_warpgroup_product(f, ko, ki, rows, cfg, ab: str,
                             b_kn: bool = False) -> None:
    """The wgmma of each k16 step of :func:`split_warpgroup_k`'s nest (``b_kn``: B read
    MN-major as ``[K, N]``, the ``_kn`` intrinsic), its steps unrolled, the 64-column steps
    software-pipelined over ``cfg.stages`` buffers with ``cfg.in_flight`` groups left
    running."""
    f.tensorize(rows, mma_kind(ab, wgmma=True).mma(ab, "float32", b_kn, cfg.block_n))
    f.unroll(ki)
    if cfg.stages > 1:
        f.pipeline(ko, cfg.stages)
    if cfg.in_flight:
        f.pragma(ko, "wgmma_in_flight", cfg.in_flight)


# -- wgmma in the default schedules of dense, matmul and batch_matmul -------------------------


def copy_vec(form, row: int | None = None) -> int:
    """Elements per copy of an operand tile: 8 (16-byte cp.async) where the input's rows
    allow (a copy must not straddle two rows: ``K`` long, or ``row``), else 4 or 2, else 1."""
    row = form.K if row is None else row
    return next(v for v in (16, 8, 4, 2, 1) if v * form.elem_bytes <= 16 and row % v == 0)


def schedule_tile_copy(s, sh, f, ko, vec: int, threads: tuple, async_copy: bool,
                       align: int | None = None, swizzle: int = 0,
                       unit_vectorize: bool = True, bind_after_split: bool = False,
                       panels: int = 0) -> None:
    """The copy of shared operand tile ``sh`` at every step ``ko`` of accumulator stage
    ``f``: all threads of the block (``threads``, innermost first), ``vec`` elements at a
    time, rows ``align`` elements apart (padding against ldmatrix bank conflicts) or
    XOR-swizzled with ``swizzle`` bits (wgmma's 128B layout), with ``cp.async`` if
    ``async_copy``. ``unit_vectorize``: vectorize the copy loop of one element too (the
    convolution's copies leave it a serial loop). ``bind_after_split``: bind the thread loops
    after all the splits (the same loops, printed in another order). ``panels``: the tile
    (wgmma's MN-major B, ``[64, block_n]``) is stored in panels of that many columns
    (``layout_panels``), its copy loops in the panels' order (panel, K-row, column) so
    that each thread's ``vec`` elements stay in one row of one panel."""
    s[sh].compute_at(f, ko)
    st = s[sh]
    rax = list(st.op.axis)
    if align:
        st.storage_align(rax[-2], align, 0)
    if panels:
        k, n = rax[-2:]
        st.layout_panels(panels)
        p, c = st.split(n, factor=panels)
        st.reorder(p, k, c)
        rax = [p, k, c]
    fused = st.fuse(*rax)
    fused, v = st.split(fused, factor=vec)
    bound = []
    for n, tag in threads:
        fused, t = st.split(fused, factor=n)
        bound.append((t, tag))
        if not bind_after_split:
            st.bind(t, tag)
    for t, tag in bound if bind_after_split else ():
        st.bind(t, tag)
    if vec > 1 or unit_vectorize:
        st.vectorize(v)
    if swizzle:
        st.swizzle(swizzle)
    if async_copy:
        st.async_copy()


def schedule_b_kn_copy(s, sh, f, ko, vec: int, threads: tuple, async_copy: bool,
                       block_n: int) -> None:
    """The 128B-swizzled copy of the MN-major shared B tile ``sh`` (``[64, block_n]``, B
    read as ``[K, N]``): :func:`schedule_tile_copy` in 64-column panels where wider."""
    schedule_tile_copy(s, sh, f, ko, vec, threads, async_copy, swizzle=3,
                       panels=B_KN_PANEL if block_n > B_KN_PANEL else 0)


EPILOGUE_UNROLL = 16
"""A block-tile epilogue with at most this many iterations per thread is unrolled."""


def schedule_tile_epilogue(s, st, form, block_m: int, block_n: int,
                           threads: tuple, row_reductions: tuple = ()) -> None:
    """Every thread of the block runs the output stage ``st.o`` (the epilogue, a padded
    tile's copy of its real rows and columns, or the partial sums) over the C tile in
    shared memory, 4 elements at a time where the tile, the output's rows and the layout
    allow; ``threads``: ``(extent, thread tag)`` innermost first. Puts the C tile at the
    block (rows 4 banks apart); its own loops are the caller's. ``row_reductions``:
    reductions along the tile's rows that the output stage reads, computed at the block
    over the C tile first (:func:`~.gemm_rows.schedule_row_reductions`)."""
    o = st.o
    o.reorder(*st.batch, st.bi, st.bj, st.i, st.j)
    nthreads = 1
    for n, _ in threads:
        nthreads *= n
    vec_out = 4 if (block_m * block_n % (4 * nthreads) == 0
                    and (form.N % 4 == 0 or st.split > 1)
                    and (st.remap is None or st.remap.contiguous_columns)) else 1
    fused = o.fuse(st.i, st.j)
    if vec_out > 1:
        fused, v = o.split(fused, factor=vec_out)
    for n, tag in threads:
        fused, t = o.split(fused, factor=n)
        o.bind(t, tag)
    if vec_out > 1:
        o.vectorize(v)
    per_thread = block_m * block_n // (vec_out * nthreads)
    if block_m * block_n % (vec_out * nthreads) == 0 and per_thread <= EPILOGUE_UNROLL:
        # unrolled, the loads of every iteration (bias, residual: global memory) can be
        # issued together instead of one global latency per iteration
        o.unroll(fused)
    if row_reductions:
        from ..gemm_rows import schedule_row_reductions

        schedule_row_reductions(s, o, st.bj, list(row_reductions), block_m, threads,
                                block_n)
    s[st.cs].compute_at(o, st.bj)
    r = list(s[st.cs].op.axis)[-2]
    s[st.cs].storage_align(r, block_n + 4, 0)  # rows 4 banks apart: fewer conflicts


def bind_conv_output(s, o, c_sh, split: int, block_m: int, block_n: int,
                     threads, align: int | None = None) -> None:
    """The output stage ``o`` of :func:`conv_stages` (the epilogue, or the partial sums of
    split-K): pixel blocks on blockIdx.x, channel blocks on blockIdx.y (the split-K part on
    blockIdx.z), every thread of the block (``threads``: ``(extent, tag)``, innermost
    first) over its ``block_m x block_n`` tile, row-major; the C tile ``c_sh`` at the
    block (rows ``align`` elements apart, where given)."""
    if split == 1:
        n_, y_, x_, c_ = o.op.axis
        pix = o.fuse(n_, y_, x_)
    else:
        part, pix, c_ = o.op.axis
    bi, i = o.split(pix, factor=block_m)
    bj, j = o.split(c_, factor=block_n)
    if split == 1:
        o.reorder(bi, bj, i, j)
    else:
        o.reorder(part, bi, bj, i, j)
        o.bind(part, "blockIdx.z")
    o.bind(bi, "blockIdx.x")
    o.bind(bj, "blockIdx.y")
    fused = o.fuse(i, j)
    for n, tag in threads:
        fused, t = o.split(fused, factor=n)
        o.bind(t, tag)
    s[c_sh].compute_at(o, bj)
    if align:
        s[c_sh].storage_align(s[c_sh].op.axis[-2], align, 0)
