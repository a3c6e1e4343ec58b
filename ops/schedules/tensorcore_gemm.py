"""Tensor cores in the default schedules of dense, matmul and batch_matmul.

:func:`gemm_form` recognizes a matrix-product stage the tensor cores can run: inputs
float16 or bfloat16 (float32 only at ``precision="tf32"``, which the user chooses), read
as ``A[(b,) i, k]`` and ``B[(b,) j, k]`` or ``B[(b,) k, j]``, a float32 accumulator, an
``sm_80`` or newer target, and the rule for shapes:

- any ``M`` (1, 7, 49, 100 ...), ``N >= 16`` (:data:`MIN_N`) and ``K`` at least the
  mma's k (16; 8 for TF32). Extents the block tile does not divide are padded with zeros:
  the schedule computes the product through ``implicit_gemm`` (the pass the tensor-core
  convolution uses for its 49 output pixels; a batch_matmul's batch is its leading batch
  axis), whose operand views read zeros past the real extents (``cp.async`` zero-fill)
  and whose copy to the output, fused with the epilogue, stores only the real rows and
  columns. A single row (``M = 1``) wastes 15 of the tile's 16 rows, but such a product
  is bound by reading B, which both kinds of core read once. A narrower ``N`` or shorter
  ``K`` (``N = 8``: one output column of fragments half empty) would leave most of every
  mma multiplying zeros, and stays on the CUDA cores;
- a batch_matmul over a broadcast batch (one operand of batch 1, the other of more):
  ``M`` and ``N`` multiples of 16 and ``K`` of the mma's k (it is not padded: the batch
  index is no batch axis of ``implicit_gemm`` there).

Anything else (an A read transposed, float32 without TF32) stays on the CUDA cores
(:func:`~ptxforge.ops.schedules.tiled.schedule_tiled`).

:func:`schedule_gemm_tensorcore` schedules such a stage as
:func:`~ptxforge.ops.schedules.tensorcore.schedule_dense_tensorcore` does (shared tiles
filled with ``cp.async`` and software-pipelined, ldmatrix, mma.sync into warp fragments).
Without an epilogue, or with only the cast to a 16-bit output, each warp stores its
accumulators to global memory; any other fused epilogue (bias, activation, residual add,
then the cast), and every padded product, runs on all threads of the block over a copy of
the block's accumulators in shared memory.

Split-K (``cfg.split_k > 1``): the product goes through ``implicit_gemm`` with ``K``
padded to whole parts of ``block_k`` steps, and ``rfactor`` over the outer part of the
reduction gives float32 partial sums ``[part, (b,) m, n]``: the tensor-core kernel
computes them with the part (fused with the batch) on ``blockIdx.z``, storing each block
tile through the shared C tile; a second kernel adds up the parts of each output element
and runs the fused epilogue once (the helpers of :mod:`.tensorcore` that the conv schedule
shares). A broadcast batch, which is not padded, has no split-K.

:func:`choose_gemm_config` ranks every candidate of :func:`gemm_candidates` (the block
tiles of a table up to each extent rounded up to a power of two, each ``block_k``, split-K
parts where the product can be padded, 4 stages where they fit) by the estimate
:func:`gemm_time`, whose figures were fitted to measured kernels; near ties go to the
larger tile. On 132 SMs: 4096^3 takes 128x128x32 (2x2 warps, 4 stages); M = 16 of
4096^2 16x32x128; BERT's 128 x 3072 x 768 64x64x32 and its 128 x 768 x 3072 the same in
4 split-K parts; ``M = 1, N = 1000, K = 512`` (padded) 16x16x128.
AutoTVM tunes the same schedule through the templates of
:mod:`ptxforge.autotvm.tensorcore_dense`, whose knobs :func:`check_gemm_config` checks.

On sm_90a, :func:`schedule_matmul` runs the product with wgmma instead
(:func:`~.tensorcore_wgmma.schedule_gemm_wgmma`, on the stages of :func:`gemm_stages`)
where :func:`wgmma_choice` takes it: wgmma runs it (fp16/bf16, B as ``[N, K]``,
``N >= 64``) and the mma.sync estimate is not the faster.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.expr import Cast, TensorRead
from ...ir.intrin.kinds import mma_kind
from ...ir.te import ComputeOp
from ...passes.schedule.common import ScheduleError
from ...target import Target, as_target
from .gemm.forms import (  # noqa: F401  (the recognizer's names, where callers import them)
    GEMM_TAGS,
    MIN_N,
    GemmForm,
    _inputs,
    copies_from_memory,
    gemm_form,
)
from .gemm.knobs import MMA_SYNC_SPACE, split_parts
from .gemm.pieces import fragment_plans, stage_fragments, store_warp_tiles
from .remap import epilogue_remap
from .tensorcore import (
    TensorCoreConfig,
    schedule_split_sum,
    split_k_partials,
    split_k_rule,
    tile_limit,
    tile_warp_product,
)
from .tiled import schedule_tiled


def padded_extents(cfg: TensorCoreConfig, form: GemmForm) -> tuple[int, int, int]:
    """``(Mp, Np, Kp)``: the product's extents rounded up to ``cfg``'s block tile (``K`` to
    ``split_k`` parts of whole ``block_k`` steps)."""
    return (_round_up(form.M, cfg.block_m), _round_up(form.N, cfg.block_n),
            _round_up(form.K, cfg.block_k * max(cfg.split_k, 1)))


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def gemm_shared_bytes(cfg: TensorCoreConfig, form: GemmForm, c_tile: bool = True) -> int:
    """Shared memory of one block: ``stages`` buffers of the A and B tiles (rows padded by
    ``cfg.pad``) and, when the epilogue reads it (``c_tile``), the float32 C tile (rows
    padded by 4)."""
    a = cfg.block_m * (cfg.block_k + cfg.pad)
    b = (cfg.block_k * (cfg.block_n + cfg.pad) if form.b_kn
         else cfg.block_n * (cfg.block_k + cfg.pad))
    c = cfg.block_m * (cfg.block_n + 4) * 4 if c_tile else 0
    return max(cfg.stages, 1) * (a + b) * form.elem_bytes + c


def check_gemm_config(cfg: TensorCoreConfig, form: GemmForm, where: str = "",
                      target: Target | str | None = None, c_tile: bool = True) -> None:
    """Raise :class:`ScheduleError` naming the rule ``cfg`` breaks for ``form``: the rules
    of :meth:`TensorCoreConfig.check` on the product padded to the block tile (a product
    over a broadcast batch is not padded: there the tiles divide ``M``, ``N`` and ``K``),
    copies of ``vec`` elements that do not straddle two rows of an input, at least
    ``stages`` ``block_k`` steps (in each split-K part), and the block's shared memory
    (:func:`gemm_shared_bytes`) within the target's opt-in limit.

    Split-K (``split_k > 1``): a positive int of parts, ``K`` padded to whole parts of
    ``block_k`` steps, at least ``stages`` steps per part, and no broadcast batch (the
    parts are computed through ``implicit_gemm``, which cannot pad such a product)."""
    where = where or "tensor-core GEMM"
    target = as_target(target)
    if form.tf32 and not cfg.tf32:
        raise ScheduleError(f"{where}: float32 inputs are multiplied in TF32 only with "
                            "TensorCoreConfig(tf32=True)")
    for v, what in ((cfg.block_m, "block_m"), (cfg.block_n, "block_n"),
                    (cfg.block_k, "block_k"), (cfg.vec, "vec")):
        if not isinstance(v, int) or v < 1:
            raise ScheduleError(f"{where}: {what} must be a positive int, got {v!r}")
    if not isinstance(cfg.split_k, int) or cfg.split_k < 1:
        raise ScheduleError(f"{where}: need {split_k_rule(cfg, form.K)}")
    if cfg.split_k > 1 and not form.paddable:
        raise ScheduleError(
            f"{where}: need split_k 1 on a broadcast batch (split_k {cfg.split_k}: the "
            "split-K parts are computed through implicit_gemm, whose batch axis both "
            "operands must read; one operand here has batch 1)")
    if not form.paddable:
        Mp, Np, Kp = form.M, form.N, form.K  # a broadcast batch is not padded
    else:
        Mp, Np, Kp = padded_extents(cfg, form)
    try:
        cfg.check(Mp, Np, Kp, form.mma_k, form.elem_bytes, split_k_ok=True)
    except ScheduleError as e:
        rule = str(e).split(": need ", 1)[-1]
        raise ScheduleError(f"{where}: need {rule}") from None
    rows = (("K", form.K, "A"), ("N" if form.b_kn else "K", form.N if form.b_kn else form.K,
                                 "B"))
    for name, n, t in rows:
        if n % cfg.vec:
            raise ScheduleError(f"{where}: need vec {cfg.vec} to divide {name} = {n} (a copy "
                                f"of vec elements must not straddle two rows of {t})")
    rule = split_k_rule(cfg, form.K)  # enough block_k steps (per part) for the stages
    if rule is not None:
        raise ScheduleError(f"{where}: need {rule}")
    smem = gemm_shared_bytes(cfg, form, c_tile)
    limit = target.max_shared_memory_per_block_optin
    if smem > limit:
        raise ScheduleError(f"{where}: need the block's shared tiles ({smem} bytes) to fit "
                            f"the {limit} bytes a block of {target.arch} may use")


def needs_padding(cfg: TensorCoreConfig, form: GemmForm) -> bool:
    """Whether ``cfg``'s block tile leaves part of a tile outside ``form``'s product (the
    schedule then pads the operands with zeros through ``implicit_gemm``)."""
    return padded_extents(cfg, form) != (form.M, form.N, form.K)


def _is_cast_of(epilogue: ComputeOp, op: ComputeOp) -> bool:
    """Whether ``epilogue`` only casts ``op``'s output (``T_cast`` of a 16-bit output)."""
    body = epilogue.body
    if not isinstance(body, Cast) or not isinstance(body.value, TensorRead):
        return False
    r = body.value
    return r.tensor.op is op and all(x is a.var for x, a in zip(r.indices, epilogue.axis))


@dataclass
class GemmStages:
    """The stages of a tensor-core product that :func:`gemm_stages` made: ``o`` the stage
    that writes the output (the epilogue, the product, or split-K's partial sums) with its
    block loops (``batch`` on blockIdx.z, ``bi`` on blockIdx.y, ``bj`` on blockIdx.x) and
    the loops of the block tile (``i``, ``j``); ``cf`` the accumulator stage; ``cs`` the
    float32 C tile in shared memory (None where the accumulators go straight to the
    output); ``a_sh``, ``b_sh`` the shared operand tiles, copies of the product's inputs
    ``a``, ``b`` (through the zero-padded views of ``implicit_gemm``, inlined into the
    copies, where ``padded``)."""

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


def gemm_stages(s, op: ComputeOp, epilogue: ComputeOp | None, form: GemmForm, tile: tuple,
                split: int, direct: bool, acc_scope: str, remap=None) -> GemmStages:
    """The stages every tensor-core schedule of a product stage ``op`` shares (mma.sync's
    warp fragments, ``acc_scope="warp"``, and wgmma's warpgroup accumulators,
    ``"warpgroup"``): a product padded to ``tile`` (``(block_m, block_n, block_k)``)
    through ``implicit_gemm`` where the tile does not divide it or the reduction is split
    (``split`` parts of float32 partial sums on blockIdx.z, summed by a second kernel that
    runs the epilogue: :func:`~.tensorcore.split_k_partials`), the accumulator stage, the
    shared C tile (unless ``direct``), the epilogue inlined into the output, the shared
    operand tiles, and the output's block loops bound to blockIdx (the batch and split-K
    part fused on z). ``remap``: the epilogue's :class:`~.remap.OutputRemap`, whose loops
    then run in the product's order."""
    bm, bn, bk = tile
    padded = form.paddable and (split > 1 or (form.M, form.N, form.K) != (
        _round_up(form.M, bm), _round_up(form.N, bn), _round_up(form.K, bk * split)))
    a, b = _inputs(op)
    a_src, b_src = a, b
    c = op.output(0)
    g = final = None
    if padded:
        # the product of zero-padded operand views (the conv's implicit GEMM): loads past
        # the real extents read zeros, and the copy to the output covers the real ones
        a_src, b_src, g = s.implicit_gemm(c, bm, bn, bk * split, "kn" if form.b_kn else "nk")
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
    # a remapped epilogue's axes split and reordered into the product's (b, i, j)
    axes = list(o.op.axis) if remap is None else remap.product_loops(o)
    # the batch and the split-K part (both, fused) on blockIdx.z
    batch = [o.fuse(*axes[:-2])] if len(axes) > 3 else axes[:-2]
    bi, i = o.split(axes[-2], factor=bm)
    bj, j = o.split(axes[-1], factor=bn)
    for x in batch:
        o.bind(x, "blockIdx.z")
    o.bind(bi, "blockIdx.y")
    o.bind(bj, "blockIdx.x")
    return GemmStages(o, cf, cs, batch, bi, bj, i, j, a_sh, b_sh, a, b, remap, padded, split)


EPILOGUE_UNROLL = 16
"""A block-tile epilogue with at most this many iterations per thread is unrolled."""


def schedule_tile_epilogue(s, st: GemmStages, form: GemmForm, block_m: int, block_n: int,
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
        from .gemm_rows import schedule_row_reductions

        schedule_row_reductions(s, o, st.bj, list(row_reductions), block_m, threads,
                                block_n)
    s[st.cs].compute_at(o, st.bj)
    r = list(s[st.cs].op.axis)[-2]
    s[st.cs].storage_align(r, block_n + 4, 0)  # rows 4 banks apart: fewer conflicts


def schedule_tile_copy(s, sh, f, ko, vec: int, threads: tuple, async_copy: bool,
                       align: int | None = None, swizzle: int = 0) -> None:
    """The copy of shared operand tile ``sh`` at every step ``ko`` of accumulator stage
    ``f``: all threads of the block (``threads``, innermost first), ``vec`` elements at a
    time, rows ``align`` elements apart (padding against ldmatrix bank conflicts) or
    XOR-swizzled with ``swizzle`` bits (wgmma's 128B layout), with ``cp.async`` if
    ``async_copy``."""
    s[sh].compute_at(f, ko)
    st = s[sh]
    rax = list(st.op.axis)
    if align:
        st.storage_align(rax[-2], align, 0)
    fused = st.fuse(*rax)
    fused, v = st.split(fused, factor=vec)
    for n, tag in threads:
        fused, t = st.split(fused, factor=n)
        st.bind(t, tag)
    st.vectorize(v)
    if swizzle:
        st.swizzle(swizzle)
    if async_copy:
        st.async_copy()



def schedule_gemm_tensorcore(s, op: ComputeOp, epilogue: ComputeOp | None = None,
                             cfg: TensorCoreConfig | None = None,
                             target: Target | str | None = None,
                             form: GemmForm | None = None,
                             row_reductions: tuple = ()) -> TensorCoreConfig:
    """Schedule product stage ``op`` (and its fused element-wise ``epilogue``) on the
    tensor cores; returns the config used (``cfg`` overrides the chooser). Raises
    :class:`ScheduleError` when ``op`` is not a product the tensor cores run or ``cfg``
    does not fit it.

    When ``cfg``'s block tile does not divide the product (and no batch is broadcast), the
    stage is first rewritten by ``implicit_gemm`` into a product of operand views padded
    with zeros to whole tiles; the views are inlined into their shared-memory copies.

    Without an epilogue, or with only the cast to a 16-bit output, each warp writes its
    accumulators straight to global memory (``store_c_*``); any other epilogue, and any
    padded product, reads them from a shared-memory copy of the block tile, all threads of
    the block, which store only the output's real rows and columns.

    Fragments come from shared memory through ``ldmatrix`` (``cfg.frag_load="ldmatrix"``,
    TF32's too: ``ldmatrix_{a_x4,b_x2,b_x4}_tf32``, 16-byte rows of 4 fp32) or lane by
    lane (``"load"``)."""
    target = as_target(target)
    form = form or gemm_form(op, target)
    if form is None:
        raise ScheduleError(f"stage {op.name} is not a product the tensor cores of "
                            f"{target.arch} run (see gemm_form)")
    remap = epilogue_remap(op, epilogue)
    if remap is not None and cfg is None:
        cfg = remap_config(form, target)
        if cfg is None:
            raise ScheduleError(f"stage {op.name}: no tiles of the default table divide "
                                f"{form.M} x {form.N} x {form.K}, which an epilogue that "
                                f"stores the product in another layout ({epilogue.name}) "
                                "needs")
    cfg = cfg or choose_gemm_config(form, target)
    split = cfg.split_k if isinstance(cfg.split_k, int) and cfg.split_k > 1 else 1
    if remap is not None and (split > 1 or (form.paddable and needs_padding(cfg, form))):
        raise ScheduleError(f"stage {op.name}: an epilogue that stores the product in another "
                            f"layout ({epilogue.name}) needs split_k 1 and tiles that divide "
                            f"the product ({form.M} x {form.N} x {form.K}), got "
                            f"{cfg.block_m} x {cfg.block_n} x {cfg.block_k}, split_k {split}")
    padded = form.paddable and (needs_padding(cfg, form) or split > 1)
    direct = not padded and (epilogue is None or _is_cast_of(epilogue, op))
    check_gemm_config(cfg, form, f"stage {op.name}", target, c_tile=not direct)
    ab, acc = form.in_dtype, form.acc_dtype
    kn = form.b_kn
    kind = mma_kind(ab)
    mma = kind.mma(ab, acc, kn)
    st = gemm_stages(s, op, epilogue, form, (cfg.block_m, cfg.block_n, cfg.block_k), split,
                     direct, "warp", remap)
    o, cs, cf, batch, bi, bj, i, j = st.o, st.cs, st.cf, st.batch, st.bi, st.bj, st.i, st.j
    a_sh, b_sh = st.a_sh, st.b_sh
    a_fr = s.cache_read(a_sh, "warp", [cf])
    b_fr = s.cache_read(b_sh, "warp", [cf])
    wm, wn = cfg.block_m // cfg.warps_m, cfg.block_n // cfg.warps_n
    threads = ((32, "threadIdx.x"), (cfg.warps_n, "threadIdx.y"), (cfg.warps_m, "threadIdx.z"))
    if direct:
        # each warp stores its m16n8 accumulator tiles (with the cast) to global memory
        _, wj = store_warp_tiles(o, i, j, wm, wn, kind.store(acc, o.op.output(0).dtype),
                                 cfg.unroll, (*batch, bi, bj))
        s[cf].compute_at(o, wj)
    else:
        # every thread of the block runs the epilogue over the tile in shared memory (a
        # padded tile: over its rows and columns inside the output)
        schedule_tile_epilogue(s, st, form, cfg.block_m, cfg.block_n, threads,
                               row_reductions)
        sc = s[cs]
        sax = list(sc.op.axis)
        _, wj = store_warp_tiles(sc, sax[-2], sax[-1], wm, wn, kind.store(acc), cfg.unroll,
                                 tuple(sax[:-2]))
        s[cf].compute_at(sc, wj)

    # the product of one warp tile, k in block_k stages of mma_k
    f = s[cf]
    ko, ki = tile_warp_product(f, cfg.block_k, kind.k, mma, cfg.unroll)

    # fragments from shared memory at every k step
    plans = fragment_plans(kind, ab, kn, cfg.frag_load, wn)
    stage_fragments(s, f, ki, zip((a_fr, b_fr), plans), cfg.unroll)

    # shared tiles: every thread of the block copies vec elements at a time
    for sh, x in ((a_sh, st.a), (b_sh, st.b)):
        row = cfg.block_k if (sh is a_sh or not kn) else cfg.block_n
        schedule_tile_copy(s, sh, f, ko, cfg.vec, threads,
                           cfg.async_copy and copies_from_memory(x),
                           align=row + cfg.pad if cfg.pad else None)
    if cfg.stages > 1:
        f.pipeline(ko, cfg.stages)
    return cfg


_BLOCKS = (  # (block_m, block_n, warps_m, warps_n): warp tiles of 16..64 x 8..64
    (128, 128, 2, 2), (128, 64, 2, 2), (64, 128, 2, 2), (64, 64, 2, 2), (128, 32, 4, 1),
    (64, 32, 2, 1), (32, 64, 1, 2), (128, 16, 4, 1), (32, 32, 1, 2), (64, 16, 4, 1),
    (16, 64, 1, 4), (32, 16, 2, 1), (16, 32, 1, 2), (16, 16, 1, 2),
)


DEFAULT_STAGES = 4
"""The pipeline depth the default chooser gives every tile where its shared memory and the
reduction allow: on 2,300 measured configurations of eight products (an H200, M from 16 to
512) 4 stages beat 2 in four cases of five, by up to 2.5x on the small-M products whose
``K`` loop waits on global loads."""


def gemm_candidates(form: GemmForm, target: Target | str | None = None,
                    split_k: bool = True) -> list:
    """Every configuration the default chooser ranks for ``form``: the block tiles of the
    table up to each extent's :func:`~.tensorcore.tile_limit` (dividing ``M`` and ``N``
    where the product cannot be padded), each ``block_k`` of 128 down to the mma's k that
    keeps a stage's tiles within 16 KiB (32 at most for tiles of 64 x 64 and more, whose
    copies 32 columns already hide) and pads ``K`` by at most an eighth (or no more than
    16 would), with split-K parts of :data:`SPLIT_K_CHOICES` where the product can be
    padded (``block_k`` of 32 or more and at least 4 steps per part), each at
    :data:`DEFAULT_STAGES` stages where it has the steps and the shared memory (fewer
    where not) and with the widest legal copies."""
    target = as_target(target)
    eb, M, N, K = form.elem_bytes, form.M, form.N, form.K
    k_slack = max(_round_up(K, 16) - K, K // 8)
    splits = (1,) + SPLIT_K_CHOICES if (split_k and form.paddable) else (1,)
    out = []
    for bm, bn, wm, wn in _BLOCKS:
        if bm > tile_limit(M) or bn > tile_limit(N):
            continue
        if not form.paddable and (M % bm or N % bn):
            continue
        big = bm * bn >= 64 * 64
        for bk in (128, 64, 32, 16, 8):
            if bk < form.mma_k or (bm + bn) * bk * eb > 16384 or (big and bk > 32):
                continue
            if not form.paddable and K % bk:
                continue
            for split in splits:
                part = bk * split
                steps = -(-K // part)
                if split > 1 and (bk < 32 or steps < 4):
                    continue
                if _round_up(K, part) - K > k_slack:
                    continue
                for stages in range(min(DEFAULT_STAGES, steps), 1, -1):
                    cfg = _first_legal(form, target, bm, bn, bk, wm, wn, stages, split)
                    if cfg is not None:
                        out.append(cfg)
                        break
                else:
                    cfg = _first_legal(form, target, bm, bn, bk, wm, wn, 1, split)
                    if cfg is not None:
                        out.append(cfg)
    return out


def _replace(cfg: TensorCoreConfig, **kw) -> TensorCoreConfig:
    from dataclasses import replace

    return replace(cfg, **kw)


NEAR_TIE = 1.02
"""Estimates within this factor of the best are a tie for the default chooser."""


def _best(cands: list, form: GemmForm, target: Target) -> TensorCoreConfig | None:
    """The candidate :func:`gemm_time` expects fastest. Estimates within
    :data:`NEAR_TIE` of the best (a large product whose tiles all keep the tensor cores
    busy; a product bound by reading its inputs from DRAM once, where the estimate is that
    floor) go to the larger block tile (fewer copies of each input), the longer
    ``block_k`` step, then the least work of its own and the fewest split-K parts."""
    if not cands:
        return None
    timed = [(gemm_time(c, form, target), c) for c in cands]
    fastest = min(t for t, _ in timed)
    near = [c for t, c in timed if t <= fastest * NEAR_TIE]
    return min(near, key=lambda c: (-c.block_m * c.block_n, -c.block_k,
                                    gemm_time(c, form, target, dram_floor=False), c.split_k))


def choose_gemm_config(form: GemmForm, target: Target | str | None = None) -> TensorCoreConfig:
    """The default tiles of ``form`` on ``target``: of :func:`gemm_candidates`, the one
    :func:`gemm_time` expects fastest (split-K included)."""
    target = as_target(target)
    best = _best(gemm_candidates(form, target), form, target)
    if best is None:
        raise ScheduleError(f"no tensor-core tiles of the default table fit {form}")
    return best


def unsplit_gemm_config(form: GemmForm, target: Target | str | None = None
                        ) -> TensorCoreConfig:
    """The default tiles of ``form`` without split-K (see :func:`choose_gemm_config`)."""
    target = as_target(target)
    best = _best(gemm_candidates(form, target, split_k=False), form, target)
    if best is None:
        raise ScheduleError(f"no tensor-core tiles of the default table fit {form}")
    return best


def remap_config(form: GemmForm, target: Target | str | None = None
                 ) -> TensorCoreConfig | None:
    """The default tiles of ``form`` for an epilogue that stores the product in another
    layout (:mod:`.remap`): the best of :func:`gemm_candidates` without split-K whose
    tiles divide the product, or None. Such an epilogue runs over the product's own loops,
    which neither split-K's sum kernel nor a zero-padded tile's partial copy keeps."""
    target = as_target(target)
    return _best([c for c in gemm_candidates(form, target, split_k=False)
                  if not (form.paddable and needs_padding(c, form))], form, target)


SPLIT_K_CHOICES = split_parts(MMA_SYNC_SPACE)
"""The split-K parts the default chooser tries."""


def split_k_gemm_config(form: GemmForm, target: Target | str | None = None
                        ) -> TensorCoreConfig | None:
    """The split-K configuration :func:`gemm_time` expects fastest for ``form``, or None
    (a broadcast batch, or a reduction too short to split)."""
    target = as_target(target)
    return _best([c for c in gemm_candidates(form, target) if c.split_k > 1], form, target)


def gemm_time(cfg: TensorCoreConfig, form: GemmForm, target: Target | str | None = None,
              dram_floor: bool = True) -> float:
    """A rough estimate in seconds of ``cfg`` on ``form``, to rank the default chooser's
    candidates (its figures fitted to 2,300 measured configurations of eight fp16
    products, M 16 to 512, on an H200: the chooser's pick then came within 1.10x of the
    fastest measured, geometric mean, where the fixed tile table was 1.26x):

    - the blocks (the batch x the block tiles of the padded product x the split-K parts)
      run in waves of ``num_sms`` x the blocks resident on an SM (threads, registers,
      shared memory), the ``r`` blocks sharing an SM dividing its throughput;
    - each ``block_k`` step of a block costs the largest of its mma work (the SM's
      ``mma.sync`` rate, the target's ``mma_sync_peak_fraction`` of its tensor-core peak,
      of which a warp issues to one of 4 sub-cores, so a block of fewer warps than 4 uses
      that fraction), its tile copies (``(block_m + block_n) x block_k`` elements at the
      target's ``tile_copy_bytes_per_clock``) and the latency of a global load that the
      ``stages - 1`` copies in flight hide, plus a barrier; a wave costs the steps of one
      part of the reduction;
    - at least the inputs are read from DRAM once (``form.input_bytes``; unless
      ``dram_floor`` is False), and one launch;
    - split-K adds a second kernel right behind the first (the target's
      ``dependent_launch_seconds``) and the partial sums' float32 traffic: written once by
      the product, read once by the summing kernel (``2 x split_k x Mp x Np x 4`` bytes,
      at L2 bandwidth while they fit half the L2, else at DRAM bandwidth).
    """
    target = as_target(target)
    split = max(cfg.split_k, 1)
    if form.paddable:
        Mp, Np, Kp = padded_extents(cfg, form)
    else:
        Mp, Np, Kp = form.M, form.N, form.K
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    warps = cfg.warps_m * cfg.warps_n
    eb = form.elem_bytes
    blocks = form.batch * (Mp // bm) * (Np // bn) * split
    accum = bm * bn // (32 * warps)  # float32 accumulators per thread
    regs = min(255, 40 + accum + 8 * (bm // cfg.warps_m // 16) + 4 * (bn // cfg.warps_n // 8))
    per_sm = max(1, target.blocks_per_sm(32 * warps, regs,
                                         gemm_shared_bytes(cfg, form) + 1024))
    waves = -(-blocks // (target.num_sms * per_sm))
    r = min(per_sm, -(-blocks // target.num_sms))
    tc_sm = (target.peak_flops("tf32" if form.tf32 else form.in_dtype, tensor_core=True)
             * target.mma_sync_peak_fraction / (target.num_sms * target.clock_hz))
    mma = r * 2.0 * bm * bn * bk / (tc_sm * min(1.0, r * warps / 4.0))
    load = r * (bm + bn) * bk * eb / target.tile_copy_bytes_per_clock
    latency = target.global_latency_cycles / max(cfg.stages - 1, 1) + target.barrier_cycles
    steps = Kp // (bk * split)
    t = waves * steps * (max(mma, load, latency) + target.barrier_cycles) / target.clock_hz
    if dram_floor:
        t = max(t, form.input_bytes / target.dram_bytes_per_s)
    t += target.launch_seconds
    if split > 1:
        partial = split * form.batch * Mp * Np * 4
        rate = target.l2_bytes_per_s if 2 * partial <= target.l2_bytes else target.dram_bytes_per_s
        t += target.dependent_launch_seconds + 2.0 * partial / rate
    return t


def _first_legal(form, target, bm, bn, bk, wm, wn, stages, split_k=1):
    """The legal config of these tiles with the widest copies, or None."""
    vec = 16 // form.elem_bytes
    for v in (vec, vec // 2, vec // 4, vec // 8):
        if v < 1:
            continue
        cfg = TensorCoreConfig(
            bm, bn, bk, wm, wn, vec=v, pad=16 // form.elem_bytes, frag_load="ldmatrix",
            tf32=form.tf32, stages=stages,
            async_copy=target.has_cp_async and v * form.elem_bytes in (4, 8, 16),
            split_k=split_k)
        try:
            check_gemm_config(cfg, form, target=target)
        except ScheduleError:
            continue
        return cfg
    return None


def wgmma_choice(op: ComputeOp, epilogue: ComputeOp | None, form: GemmForm,
                 target: Target | str | None = None):
    """The :class:`~.tensorcore_wgmma.WgmmaScheduleConfig` the default schedule runs
    product stage ``op`` (with ``epilogue``) with, or None where it stays on mma.sync: a
    target without wgmma (sm_90a only), a product wgmma does not run
    (:func:`~.tensorcore_wgmma.wgmma_refusal`: TF32, B read as ``[K, N]``, ``N < 64``,
    ...), no wgmma tiles fitting (an epilogue storing another layout needs tiles that
    divide the product), or an mma.sync configuration that
    :func:`gemm_time` expects faster than :func:`~.tensorcore_wgmma.wgmma_time` expects
    the wgmma one (small products bound by reading their inputs, where wgmma's 64-row
    tiles only pad more)."""
    from .gemm.choice import prefer_wgmma, wgmma_refusal
    from .tensorcore_wgmma import choose_wgmma_config, needs_c_tile

    target = as_target(target)
    if wgmma_refusal(form, target) is not None:
        return None
    remap = epilogue_remap(op, epilogue) is not None
    epi_tile = epilogue is not None and not _is_cast_of(epilogue, op)
    w = choose_wgmma_config(form, target, epi_tile, remap)
    if w is None:
        return None
    mma = remap_config(form, target) if remap else choose_gemm_config(form, target)
    return w if prefer_wgmma(form, w, mma, needs_c_tile(w, form, epi_tile), target) else None


def schedule_matmul(s, op: ComputeOp, epilogue: ComputeOp | None = None,
                    target: Target | str | None = None):
    """The default stage schedule of dense, matmul and batch_matmul: on the tensor cores
    when :func:`gemm_form` accepts the stage (with wgmma where :func:`wgmma_choice` picks
    it, on sm_90a; else mma.sync), else :func:`schedule_tiled` (CUDA cores)."""
    form = gemm_form(op, target)
    if form is None:
        return schedule_tiled(s, op, epilogue, target=target)
    w = wgmma_choice(op, epilogue, form, target)
    if w is not None:
        from .tensorcore_wgmma import schedule_gemm_wgmma

        return schedule_gemm_wgmma(s, op, epilogue, w, target=target, form=form)
    return schedule_gemm_tensorcore(s, op, epilogue, target=target, form=form)
