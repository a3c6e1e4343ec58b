"""The stages every tensor-core schedule of a product shares (:func:`gemm_stages`): the
accumulators, the shared C tile, the epilogue inlined into the output, the operand tiles,
zero padding and split-K through ``implicit_gemm``, and the output's block loops."""

from __future__ import annotations

from dataclasses import dataclass

from ....ir.te import ComputeOp
from .forms import GemmForm, _inputs
from .pieces import schedule_split_sum, split_k_partials
from .rules import _round_up


@dataclass
class GemmStages:
    """What :func:`gemm_stages` made: ``o`` the stage writing the output (epilogue,
    product or partial sums) with its block loops (``batch`` on blockIdx.z, ``bi`` on y,
    ``bj`` on x) and tile loops (``i``, ``j``); ``cf`` the accumulators; ``cs`` the C tile
    (None: direct stores); ``a_sh``, ``b_sh`` the shared copies of inputs ``a``, ``b``."""

    o: object
    cf: object
    cs: object
    batch: list
    bi: object
    bj: object
    i: object
    j: object
    a_sh: object
    b_sh: object
    a: object
    b: object
    remap: object
    padded: bool
    split: int

    @property
    def block_loops(self) -> tuple:
        """The output's block loops, outermost first (``bi`` is None where a raster fused
        the row and column blocks into ``bj``)."""
        return (*self.batch, *(x for x in (self.bi, self.bj) if x is not None))


def gemm_stages(s, op: ComputeOp, epilogue: ComputeOp | None, form: GemmForm, tile: tuple,
                split: int, direct: bool, acc_scope: str, remap=None,
                b_kn: bool | None = None, raster: int = 1) -> GemmStages:
    """The stages every tensor-core schedule of product stage ``op`` shares (accumulators
    in ``acc_scope``, ``"warp"`` or ``"warpgroup"``): the product padded to ``tile``
    through ``implicit_gemm`` where needed (and ``split`` parts of partial sums:
    :func:`~.pieces.split_k_partials`), the accumulator stage, the C tile (unless
    ``direct``), the epilogue inlined into the output, the shared operand tiles, the block
    loops bound (batch and split-K part fused on z). ``remap``: the epilogue's
    :class:`~..remap.OutputRemap`. A convolution is always an implicit GEMM through the C
    tile (B ``[K, N]`` unless ``b_kn``), its output loops left to
    :func:`~.pieces.bind_conv_output`. ``raster`` > 1: the row blocks in groups of that many
    (dividing them) under each column block, all fused on blockIdx.x."""
    bm, bn, bk = tile
    padded = form.conv or form.paddable and (split > 1 or (form.M, form.N, form.K) != (
        _round_up(form.M, bm), _round_up(form.N, bn), _round_up(form.K, bk * split)))
    kn = form.b_kn if b_kn is None else b_kn
    a, b = _inputs(op) if not form.conv else op.input_tensors
    a_src, b_src = a, b
    c = op.output(0)
    g = final = None
    if padded:
        # the product of zero-padded operand views (the conv's implicit GEMM): loads past
        # the real extents read zeros, and the copy to the output covers the real ones
        a_src, b_src, g = s.implicit_gemm(c, bm, bn, bk * split, "kn" if kn else "nk")
        if split > 1:
            # split-K: partial sums g[part, (b,) m, n] from the blockIdx.z layers, added up
            # by a second kernel (final) that also runs the epilogue
            g, final = split_k_partials(s, g, split)
        cs = s.cache_write(g, "shared")
        cf = s.cache_write(cs, acc_scope)
        if split == 1:
            s[g].compute_inline()
    else:
        cf = s.cache_write(c, acc_scope)
        cs = None if direct else s.cache_read(cf, "shared", [c])
    if epilogue is not None:
        s[c].compute_inline()
        o = s[epilogue]
    else:
        o = s[c]
    if split > 1:
        schedule_split_sum(s, o, final)
        o = s[g]  # the tensor-core kernel stores the partial sums
    a_sh = s.cache_read(a_src, "shared", [cf])
    b_sh = s.cache_read(b_src, "shared", [cf])
    if padded:
        s[a_src].compute_inline()
        s[b_src].compute_inline()
    if form.conv:
        return GemmStages(o, cf, cs, [], None, None, None, None, a_sh, b_sh, a, b, None,
                          True, split)
    # a remapped epilogue's axes split and reordered into the product's (b, i, j)
    axes = list(o.op.axis) if remap is None else remap.product_loops(o)
    # the batch and the split-K part (both, fused) on blockIdx.z
    batch = [o.fuse(*axes[:-2])] if len(axes) > 3 else axes[:-2]
    bi, i = o.split(axes[-2], factor=bm)
    bj, j = o.split(axes[-1], factor=bn)
    for x in batch:
        o.bind(x, "blockIdx.z")
    if raster > 1:
        # grouped block order: raster row blocks of one column block run one after another
        gi, ri = o.split(bi, factor=raster)
        o.reorder(*batch, gi, bj, ri, i, j)
        bi, bj = None, o.fuse(gi, bj, ri)
        o.bind(bj, "blockIdx.x")
    else:
        o.bind(bi, "blockIdx.y")
        o.bind(bj, "blockIdx.x")
    return GemmStages(o, cf, cs, batch, bi, bj, i, j, a_sh, b_sh, a, b, remap, padded, split)

