"""The pieces :func:`~.schedule.schedule_gemm` is built from: operand staging
(:func:`schedule_tile_copy`, :func:`schedule_b_kn_copy`), fragment staging
(:func:`stage_fragments`), the product's tiling (:func:`tile_warp_product`,
:func:`split_warpgroup_k`), accumulator stores (:func:`store_warp_tiles`,
:func:`store_warpgroup_tiles`), the epilogue over the C tile
(:func:`schedule_tile_epilogue`, :func:`bind_conv_output`) and split-K
(:func:`split_k_partials`, :func:`schedule_split_sum`). Intrinsics come from the
instruction kind (:class:`~ptxforge.ir.intrin.kinds.TensorCoreKind`) by structured key."""

from __future__ import annotations

from ....ir.intrin.kinds import WGMMA, FragmentPlan, TensorCoreKind, mma_kind
from .knobs import B_KN_PANEL, BLOCK_K


def fragment_plans(kind: TensorCoreKind, ab: str, b_kn: bool, path: str,
                   warp_cols: int) -> tuple[FragmentPlan, FragmentPlan]:
    """The staging of A and B (``[K, N]`` where ``b_kn``) into ``kind``'s fragments by
    ``path`` (``"ldmatrix"`` or ``"load"``) for a warp tile of ``warp_cols`` columns."""
    return (kind.fragment_load("A", ab, False, path, warp_cols),
            kind.fragment_load("B", ab, b_kn, path, warp_cols))


def stage_fragments(s, f, ki, staged, unroll: bool = True) -> None:
    """The fragment stages of ``staged`` (pairs of a fragment tensor and its
    :class:`~ptxforge.ir.intrin.kinds.FragmentPlan`) at ``f``'s mma step ``ki``, split
    into the plan's tiles (along N for plan axis 1) and tensorized."""
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
    """The warps' stores of their accumulators by stage ``st`` over its loops ``rows`` and
    ``cols`` (``lead`` kept outside): ``warp_m x warp_n`` warp tiles on threadIdx.z/y,
    ``tile`` at a time by ``intrin``. Returns the warp loops ``(wi, wj)``."""
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
    """The warpgroups' stores of their accumulators by stage ``st`` (warpgroup ``w`` on
    threadIdx.y: rows ``64 w ..``), 64 x 8 at a time, cast to ``out`` (times the
    epilogue's scalar where ``scaled``). Returns the warpgroup loop."""
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
    """Split-K on product stage ``g``: ``rfactor`` over the outer part of the reduction.
    Returns ``(partial, final)``: the float32 partial sums ``partial[part, ...]`` and the
    stage adding them up (computed in the epilogue's kernel: :func:`schedule_split_sum`)."""
    gst = s[g]
    part, _ = gst.split(gst.op.reduce_axis[0], nparts=split)
    return s.rfactor(g, part), g


def schedule_split_sum(s, o, final) -> None:
    """Split-K's second kernel: output stage ``o`` flat over its elements in blocks of
    :data:`SPLIT_SUM_THREADS`, each thread adding up its element's partial sums
    (``final``) before the epilogue."""
    fused = o.fuse(*o.op.axis)
    bx, tx = o.split(fused, factor=SPLIT_SUM_THREADS)
    o.bind(bx, "blockIdx.x")
    o.bind(tx, "threadIdx.x")
    s[final].compute_at(o, tx)


def tile_warp_product(f, block_k: int, mma_k: int, intrin: str, unroll: bool = True):
    """Tile a warp's accumulator stage ``f``: the reduction in ``block_k`` stages of
    ``mma_k``, m16n8 fragments, the innermost nest the mma ``intrin``. Returns ``(ko, ki)``:
    the stage loop (shared tiles, pipeline) and the step loop (fragments)."""
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
    """Split warpgroup accumulator stage ``f``'s reduction into ``step`` columns (``ko``:
    shared tiles, pipeline) of ``k`` (``ki``), the tile inside: ``(ko, ki, rows)``."""
    *lead, ci, cj = f.op.axis
    (kr,) = f.op.reduce_axis
    ko, ki = f.split(kr, factor=step)
    ki, kk = f.split(ki, factor=k)
    f.reorder(*lead, ko, ki, ci, cj, kk)
    return ko, ki, ci


def finish_warpgroup_product(f, ko, ki, rows, cfg, ab: str,
                             b_kn: bool = False) -> None:
    """The wgmma of each k step of :func:`split_warpgroup_k`'s nest (``b_kn``: the ``_kn``
    intrinsic), unrolled, pipelined over ``cfg.stages`` with ``cfg.in_flight`` groups."""
    f.tensorize(rows, mma_kind(ab, wgmma=True).mma(ab, "float32", b_kn, cfg.block_n))
    f.unroll(ki)
    if cfg.stages > 1:
        f.pipeline(ko, cfg.stages)
    if cfg.in_flight:
        f.pragma(ko, "wgmma_in_flight", cfg.in_flight)


def make_persistent(s, st, blocks_per_sm: int) -> None:
    """The product kernel of :class:`~.stages.GemmStages` ``st`` in a persistent grid of
    ``blocks_per_sm`` blocks an SM (the ``persistent`` schedule pass on its block loop)."""
    from ....passes.schedule.persistent import Persistent

    o = st.o
    o.schedule.apply(Persistent(o._ref(st.bj), int(blocks_per_sm)), touches=(o.block,))


# -- wgmma in the default schedules of dense, matmul and batch_matmul -------------------------


def copy_vec(form, row: int | None = None) -> int:
    """Elements per copy of an operand tile: up to 16 bytes, dividing the rows (``K``, or
    ``row``)."""
    row = form.K if row is None else row
    return next(v for v in (16, 8, 4, 2, 1) if v * form.elem_bytes <= 16 and row % v == 0)


def schedule_tile_copy(s, sh, f, ko, vec: int, threads: tuple, async_copy: bool,
                       align: int | None = None, swizzle: int = 0,
                       unit_vectorize: bool = True, bind_after_split: bool = False,
                       panels: int = 0) -> None:
    """The copy of shared tile ``sh`` at each step ``ko`` of ``f`` by all ``threads``
    (innermost first), ``vec`` elements at a time, rows ``align`` apart or XOR-swizzled by
    ``swizzle`` bits, with cp.async if ``async_copy``. ``unit_vectorize``: vectorize a
    one-element copy too; ``bind_after_split``: bind after all splits; ``panels``: the
    tile stored in panels of that many columns, copied panel by panel."""
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
    """The 128B-swizzled copy of the MN-major B tile, in 64-column panels where wider."""
    schedule_tile_copy(s, sh, f, ko, vec, threads, async_copy, swizzle=3,
                       panels=B_KN_PANEL if block_n > B_KN_PANEL else 0)


EPILOGUE_UNROLL = 16
"""A block-tile epilogue with at most this many iterations per thread is unrolled."""


def schedule_tile_epilogue(s, st, form, block_m: int, block_n: int,
                           threads: tuple, row_reductions: tuple = ()) -> None:
    """All ``threads`` run output stage ``st.o`` over the C tile (rows 4 banks apart), 4
    elements at a time where the tile and layout allow. ``row_reductions``: row
    reductions the output reads, computed over the C tile first
    (:func:`~..gemm_rows.schedule_row_reductions`)."""
    o = st.o
    o.reorder(*st.block_loops, st.i, st.j)
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
    """A conv's output stage ``o`` (epilogue or partial sums): pixel blocks on blockIdx.x,
    channel blocks on y (split-K part on z), all ``threads`` over the tile; the C tile
    ``c_sh`` at the block (rows ``align`` apart where given)."""
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
