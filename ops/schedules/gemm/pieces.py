"""Pieces every warp-level (mma.sync) tensor-core schedule of a product shares.

A schedule of a product on the tensor cores caches its accumulators in a warp's fragments,
stages its operands through shared memory into fragments before each mma, and stores the
accumulator tiles (to global memory, or to the block's C tile in shared memory). The
intrinsics come from the instruction kind (:class:`~ptxforge.ir.intrin.kinds.TensorCoreKind`)
by structured key, never from names spelled here.
"""

from __future__ import annotations

from ....ir.intrin.kinds import FragmentPlan, TensorCoreKind


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
