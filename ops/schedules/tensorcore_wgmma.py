"""A wgmma (sm_90a) schedule for dense / GEMM: ``C[M, N] = A[M, K] x B[N, K]^T``, fp16 or
bf16 inputs, float32 accumulation, an optional cast of the output to fp16 / bf16.

Every block computes a ``64 * warpgroups x block_n`` tile; warpgroup ``w`` (threadIdx.y,
128 threads on threadIdx.x) owns rows ``64 w .. 64 w + 63`` in one ``warpgroup``
accumulator of ``64 x block_n`` f32 (``block_n / 2`` registers per thread). K runs in
steps of 64 (rows of 128 bytes): the A and B tiles of a step are copied by every thread
with 16-byte cp.async into shared buffers swizzled with 3 bits (the wgmma 128B layout),
software-pipelined over ``stages`` buffers; each step is four ``wgmma m64n{block_n}k16``
reading both tiles straight from shared memory through descriptors. The protocol
(``fence.proxy.async``, ``wgmma.fence``, commit, wait) is placed by the lowering pass
``inject_wgmma_sync``; ``in_flight=1`` keeps one group running across K steps (the
``wgmma_in_flight`` pragma), with the copies then fetched ``stages - 2`` tiles ahead.
The accumulators are stored to global memory thread by thread (``store_wg_*``, casting
on the way). Only the schedule primitives are used: cache_read/cache_write, split,
reorder, bind, compute_at, fuse, vectorize, swizzle, async_copy, pipeline, pragma and
tensorize.

:func:`schedule_gemm_wgmma` is the same tiling for any product stage of dense, matmul or
batch_matmul that :func:`~.tensorcore_gemm.gemm_form` accepts (fp16/bf16; B as ``[N, K]``,
or as ``[K, N]`` with ``block_n`` 64: its shared tile of 64 K-rows x 64 N is then read
MN-major by the ``_kn`` wgmma, ``imm-trans-b`` 1): the fused epilogue over a shared C
tile, extents padded through ``implicit_gemm``, split-K, the batch on blockIdx.z, on the
stages it shares with the mma.sync GEMM (:func:`~.tensorcore_gemm.gemm_stages`).
:func:`choose_wgmma_config` picks its tiles by :func:`wgmma_time`; the default schedule
takes it on sm_90a through :func:`~.tensorcore_gemm.wgmma_choice`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import te
from ...ir.intrin.kinds import WGMMA
from ...ir.intrin.wgmma import WARPGROUP, require_wgmma
from ...passes.schedule.common import ScheduleError
from .gemm.choice import wgmma_refusal
from .gemm.knobs import WGMMA_SPACE, split_parts
from .tensorcore import _b_is_kn, _is_cast

BLOCK_K = 64
"""K step of a shared tile: 64 fp16/bf16 elements, one 128-byte row of the 128B swizzle."""
BLOCK_N = WGMMA_SPACE.block_n
"""The block tile widths offered (one ``m64n{block_n}k16`` per k16 step)."""


@dataclass(frozen=True)
class WgmmaScheduleConfig:
    """Knobs of :func:`schedule_dense_wgmma`.

    ``block_n``: 64, 128 or 256 output columns per block (the wgmma's N);
    ``warpgroups``: 1 or 2 (the block tile has ``64 * warpgroups`` rows);
    ``stages``: 1 to 5 shared buffers per operand (1: no software pipeline);
    ``in_flight``: 0 or 1 wgmma groups left running across K steps (1 needs 3 stages or
    more: the copies then run ``stages - 2`` tiles ahead, so none overwrites a tile the
    running group reads);
    ``split_k``: the reduction in that many parts of float32 partial sums on blockIdx.z,
    added up by a second kernel that runs the epilogue (:func:`schedule_gemm_wgmma` only;
    1: none).
    """

    block_n: int = 128
    warpgroups: int = 2
    stages: int = 4
    in_flight: int = 0
    split_k: int = 1

    @property
    def block_m(self) -> int:
        return 64 * self.warpgroups

    def check(self, M: int, N: int, K: int, target=None) -> None:
        from ...target import as_target

        optin = as_target(target).max_shared_memory_per_block_optin
        smem = wgmma_shared_bytes(self)
        rules = [
            (self.block_n in BLOCK_N, f"block_n in {BLOCK_N} (got {self.block_n})"),
            (self.warpgroups in (1, 2), f"warpgroups 1 or 2 (got {self.warpgroups})"),
            (isinstance(self.stages, int) and 1 <= self.stages <= 5,
             f"stages 1 to 5 (got {self.stages})"),
            (self.in_flight in (0, 1), f"in_flight 0 or 1 (got {self.in_flight})"),
            (self.split_k == 1, f"split_k 1 (split_k {self.split_k}: schedule_dense_wgmma "
                                "has no split-K; schedule_gemm_wgmma has)"),
            (self.in_flight == 0 or self.stages >= 3,
             f"3 stages or more for in_flight=1 (got {self.stages}: the copies run "
             "stages - 2 tiles ahead)"),
            (M % self.block_m == 0, f"64 * warpgroups = {self.block_m} to divide M {M}"),
            (N % self.block_n == 0, f"block_n {self.block_n} to divide N {N}"),
            (K % BLOCK_K == 0, f"K {K} to be a multiple of {BLOCK_K} (128-byte rows)"),
            (smem <= optin, f"at most {optin} bytes of shared memory per block ({self.stages} "
                            f"stages of {self.block_m}x{BLOCK_K} and {self.block_n}x{BLOCK_K} "
                            f"tiles take {smem})"),
        ]
        for ok, rule in rules:
            if not ok:
                raise ScheduleError(f"wgmma dense {M}x{N}x{K} with {self}: need {rule}")


def wgmma_shared_bytes(cfg: WgmmaScheduleConfig, c_tile: bool = False) -> int:
    """Shared memory of the schedule: ``stages`` A and B tiles of 64 16-bit columns, and
    with ``c_tile`` the float32 C tile the epilogue reads (rows padded by 4)."""
    c = cfg.block_m * (cfg.block_n + 4) * 4 if c_tile else 0
    return cfg.stages * (cfg.block_m + cfg.block_n) * BLOCK_K * 2 + c


def schedule_dense_wgmma(tensors, cfg: WgmmaScheduleConfig | None = None,
                         target="cuda -arch=sm_90a"):
    """The wgmma schedule of ``tensors`` (``[A, B, out]`` from
    :func:`~.tensorcore.dense_tensorcore_compute` with ``b_layout="nk"``) for ``target``,
    which must have wgmma (sm_90a; the simulator as ``"sim -arch=sm_90a"``)."""
    cfg = cfg or WgmmaScheduleConfig()
    require_wgmma(target)
    a, b, out = tensors
    M, K = a.shape
    N = out.shape[1]
    c = out if not _is_cast(out) else out.op.input_tensors[0]
    ab = a.dtype
    if ab not in ("float16", "bfloat16") or b.dtype != ab:
        raise ScheduleError(f"wgmma dense takes float16 or bfloat16 inputs, not {ab} x "
                            f"{b.dtype} (TF32 runs on the mma.sync schedule)")
    if c.dtype != "float32":
        raise ScheduleError(f"wgmma dense accumulates in float32, not {c.dtype}")
    if out.dtype not in ("float32", "float16", "bfloat16"):
        raise ScheduleError(f"wgmma dense writes float32, float16 or bfloat16, not {out.dtype}")
    if _b_is_kn(c, b):
        raise ScheduleError("wgmma dense takes B as [N, K] (K-major operands)")
    cfg.check(M, N, K, target)
    s = te.create_schedule(out.op)
    cf = s.cache_write(c, "warpgroup")
    if out is not c:
        s[c].compute_inline()
    a_sh = s.cache_read(a, "shared", [cf])
    b_sh = s.cache_read(b, "shared", [cf])

    # the output: blocks, warpgroups, 64x8 accumulator tiles stored thread by thread
    o = s[out]
    i, j = o.op.axis
    bi, i = o.split(i, factor=cfg.block_m)
    bj, j = o.split(j, factor=cfg.block_n)
    wg, i = o.split(i, factor=64)
    tj, jj = o.split(j, factor=8)
    o.reorder(bi, bj, wg, tj, i, jj)
    o.bind(bi, "blockIdx.y")
    o.bind(bj, "blockIdx.x")
    o.bind(wg, "threadIdx.y")
    o.tensorize(i, WGMMA.store("float32", out.dtype))
    o.unroll(tj)

    # the accumulators of one warpgroup; K in steps of 64, each four k16 wgmmas
    s[cf].compute_at(o, wg)
    f = s[cf]
    ko, ki, ci = split_warpgroup_k(f)

    # shared tiles: 16-byte cp.async by every thread, into the 128B-swizzled layout
    for sh in (a_sh, b_sh):
        s[sh].compute_at(f, ko)
        st = s[sh]
        r, col = st.op.axis
        fused = st.fuse(r, col)
        fused, v = st.split(fused, factor=8)
        fused, tx = st.split(fused, factor=WARPGROUP)
        fused, ty = st.split(fused, factor=cfg.warpgroups)
        st.bind(tx, "threadIdx.x")
        st.bind(ty, "threadIdx.y")
        st.vectorize(v)
        st.swizzle(3)
        st.async_copy()
    finish_warpgroup_product(f, ko, ki, ci, cfg, ab)
    return s


def split_warpgroup_k(f) -> tuple:
    """Split the reduction of the warpgroup accumulator stage ``f`` (its last two axes the
    warpgroup's 64 rows and ``block_n`` columns) into steps of 64 (``ko``: the shared
    tiles attach there, the pipeline runs over it) of four k16 (``ki``), the tile's axes
    inside: returns ``(ko, ki, rows)``."""
    *lead, ci, cj = f.op.axis
    (kr,) = f.op.reduce_axis
    ko, ki = f.split(kr, factor=BLOCK_K)
    ki, kk = f.split(ki, factor=16)
    f.reorder(*lead, ko, ki, ci, cj, kk)
    return ko, ki, ci


def finish_warpgroup_product(f, ko, ki, rows, cfg: WgmmaScheduleConfig, ab: str,
                             b_kn: bool = False) -> None:
    """The wgmma of each k16 step of :func:`split_warpgroup_k`'s nest (``b_kn``: B read
    MN-major as ``[K, N]``, the ``_kn`` intrinsic), its steps unrolled, the 64-column steps
    software-pipelined over ``cfg.stages`` buffers with ``cfg.in_flight`` groups left
    running."""
    f.tensorize(rows, WGMMA.mma(ab, "float32", b_kn, cfg.block_n))
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
    return next(v for v in (8, 4, 2, 1) if row % v == 0)


B_KN_PANEL = 64
"""The panel width of products reading B as ``[K, N]``: their shared B tile is MN-major
(``imm-trans-b`` 1), ``block_n / 64`` panels of 64 K-rows of one 128-byte swizzle atom of N
(64 elements), one panel after the other (``layout_panels``; the descriptor's leading byte
offset, :data:`~ptxforge.ir.intrin.wgmma.B_KN_LBO`, is the panel stride)."""


def schedule_b_kn_copy(s, sh, f, ko, vec: int, threads: tuple, async_copy: bool,
                       block_n: int) -> None:
    """The copy of the MN-major shared B tile ``sh`` (``[64, block_n]``, B read as ``[K,
    N]``) at every step ``ko`` of accumulator stage ``f``, 128B-swizzled: a 64-wide tile
    as :func:`~.tensorcore_gemm.schedule_tile_copy` copies any tile; a wider one stored in
    64-column panels (``layout_panels``), its copy loops in the panels' order (panel, K-row,
    column) so that each thread's ``vec`` elements stay in one row of one panel."""
    from .tensorcore_gemm import schedule_tile_copy

    if block_n == B_KN_PANEL:
        schedule_tile_copy(s, sh, f, ko, vec, threads, async_copy, swizzle=3)
        return
    s[sh].compute_at(f, ko)
    st = s[sh]
    k, n = st.op.axis[-2:]
    st.layout_panels(B_KN_PANEL)
    p, c = st.split(n, factor=B_KN_PANEL)
    st.reorder(p, k, c)
    fused = st.fuse(p, k, c)
    fused, v = st.split(fused, factor=vec)
    for ext, tag in threads:
        fused, t = st.split(fused, factor=ext)
        st.bind(t, tag)
    st.vectorize(v)
    st.swizzle(3)
    if async_copy:
        st.async_copy()


def wgmma_padded_extents(cfg: WgmmaScheduleConfig, form) -> tuple:
    """``(Mp, Np, Kp)``: the product's extents rounded up to ``cfg``'s tiles (``K`` to
    ``split_k`` parts of whole 64-column steps)."""
    def up(x, m):
        return -(-x // m) * m
    return (up(form.M, cfg.block_m), up(form.N, cfg.block_n),
            up(form.K, BLOCK_K * max(cfg.split_k, 1)))


def check_wgmma_gemm(cfg: WgmmaScheduleConfig, form, where: str = "", target=None,
                     c_tile: bool = True) -> None:
    """Raise :class:`ScheduleError` naming the rule ``cfg`` breaks for product ``form`` on
    ``target``: those of :func:`wgmma_refusal`, the knobs' ranges, at least ``stages``
    64-column steps per split-K part, and the block's shared memory (with the C tile when
    the epilogue reads it) within the target's opt-in limit."""
    from ...target import as_target

    where = where or "wgmma GEMM"
    t = as_target(target)
    why = wgmma_refusal(form, t)
    if why is not None:
        raise ScheduleError(f"{where}: {why}")
    check_wgmma_knobs(cfg, form, where, t, c_tile)


def check_wgmma_knobs(cfg: WgmmaScheduleConfig, form, where: str, target=None,
                      c_tile: bool = True) -> None:
    """The rules of :func:`check_wgmma_gemm` on ``cfg`` itself for product ``form`` (a
    product wgmma runs: the caller checked that): the knobs' ranges (``block_n`` 64, 128
    or 256, B read as ``[K, N]`` too: whole 64-column panels of it), split-K only where
    the product is padded, at least ``stages`` 64-column steps per split-K part, and the
    block's shared memory. The wgmma convolution checks its implicit GEMM with these
    too."""
    from ...target import as_target

    t = as_target(target)
    split = cfg.split_k
    rules = [
        (cfg.block_n in BLOCK_N, f"block_n in {BLOCK_N} (got {cfg.block_n})"),
        (cfg.warpgroups in (1, 2), f"warpgroups 1 or 2 (got {cfg.warpgroups})"),
        (isinstance(cfg.stages, int) and 1 <= cfg.stages <= 5,
         f"stages 1 to 5 (got {cfg.stages})"),
        (cfg.in_flight in (0, 1), f"in_flight 0 or 1 (got {cfg.in_flight})"),
        (cfg.in_flight == 0 or cfg.stages >= 3,
         f"3 stages or more for in_flight=1 (got {cfg.stages}: the copies run stages - 2 "
         "tiles ahead)"),
        (isinstance(split, int) and not isinstance(split, bool) and split >= 1,
         f"split_k a positive int (got {split!r})"),
    ]
    for ok, rule in rules:
        if not ok:
            raise ScheduleError(f"{where} with {cfg}: need {rule}")
    if split > 1 and not form.paddable:
        raise ScheduleError(f"{where}: need split_k 1 on a broadcast batch (the split-K "
                            "parts are computed through implicit_gemm, whose batch axis both "
                            "operands must read)")
    if not form.paddable:
        for ext, tile, name in ((form.M, cfg.block_m, "64 * warpgroups"),
                                (form.N, cfg.block_n, "block_n")):
            if ext % tile:
                raise ScheduleError(f"{where} with {cfg}: need {name} = {tile} to divide "
                                    f"{ext} (a broadcast batch is not padded)")
    Kp = wgmma_padded_extents(cfg, form)[2]
    steps = Kp // (BLOCK_K * split)
    if cfg.stages > 1 and steps < cfg.stages:
        raise ScheduleError(
            f"{where} with {cfg}: need at least {cfg.stages} steps of {BLOCK_K} for "
            f"{cfg.stages} pipeline stages (K = {form.K} padded to {Kp} gives {steps}"
            f"{' per split_k part' if split > 1 else ''})")
    smem = wgmma_shared_bytes(cfg, c_tile)
    optin = t.max_shared_memory_per_block_optin
    if smem > optin:
        raise ScheduleError(
            f"{where} with {cfg}: need at most {optin} bytes of shared memory per block "
            f"({cfg.stages} stages of {cfg.block_m}x{BLOCK_K} and {cfg.block_n}x{BLOCK_K} "
            f"tiles{' and the f32 C tile' if c_tile else ''} take {smem})")


def wgmma_form(op, target, where: str, form=None):
    """The :class:`~.tensorcore_gemm.GemmForm` of product stage ``op`` (or ``form``, given)
    when wgmma runs it on ``target``; else a :class:`ScheduleError` beginning with
    ``where`` that says why (not a tensor-core product, or :func:`wgmma_refusal`)."""
    from .tensorcore_gemm import gemm_form

    form = form or gemm_form(op, target)
    if form is None:
        raise ScheduleError(f"{where}: {op.name} is not a product the tensor cores of "
                            f"{target.arch} run (see gemm_form)")
    why = wgmma_refusal(form, target)
    if why is not None:
        raise ScheduleError(f"{where}: {why}")
    return form


def schedule_gemm_wgmma(s, op, epilogue=None, cfg: WgmmaScheduleConfig | None = None,
                        target=None, form=None, row_reductions: tuple = ()
                        ) -> WgmmaScheduleConfig:
    """Schedule product stage ``op`` of ``s`` (dense, matmul or batch_matmul, as
    :func:`~.tensorcore_gemm.gemm_form` accepts it, fp16/bf16 with B as ``[N, K]``, or as
    ``[K, N]``, read MN-major in 64-column panels) and
    its fused element-wise ``epilogue`` with wgmma on an sm_90a ``target``; returns the
    config used (``cfg`` overrides :func:`choose_wgmma_config`).

    The stages are those of the mma.sync GEMM (:func:`~.tensorcore_gemm.gemm_stages`):
    extents the tiles do not divide (and split-K) go through ``implicit_gemm``'s
    zero-padded operand views; a batch (and the split-K part) runs on blockIdx.z. Each
    block computes ``64 * warpgroups x block_n`` outputs as :func:`schedule_dense_wgmma`
    does (warpgroup ``w`` on threadIdx.y owns 64 rows; 64-column K steps copied with
    cp.async into 128B-swizzled tiles, ``stages`` deep, four ``m64n{block_n}k16`` per
    step). Without an epilogue or with only the cast, and no padding, each warpgroup
    stores its accumulators to the output; otherwise it stores them to a float32 C tile
    in shared memory, and all threads of the block run the epilogue over the tile's real
    rows and columns (with split-K: a second kernel adds up the parts, then runs it).
    Raises :class:`ScheduleError` for a product wgmma does not run (see
    :func:`wgmma_refusal`) or a ``cfg`` that does not fit it. An epilogue that stores the
    product in another layout (:mod:`.remap`) needs tiles that divide the product and no
    split-K. ``row_reductions``: reductions along the tile's rows that ``epilogue`` reads
    (:mod:`.gemm_rows`), computed over the C tile before the epilogue runs."""
    from ...target import as_target
    from .remap import epilogue_remap
    from .tensorcore_gemm import (
        _is_cast_of,
        copies_from_memory,
        gemm_stages,
        schedule_tile_copy,
        schedule_tile_epilogue,
    )

    target = as_target(target)
    form = wgmma_form(op, target, f"stage {op.name}", form)
    remap = epilogue_remap(op, epilogue)
    if cfg is None:
        cfg = choose_wgmma_config(form, target, remap=remap is not None)
        if cfg is None:
            raise ScheduleError(f"stage {op.name}: no wgmma tiles fit {form.M} x {form.N} x "
                                f"{form.K}" + (" with tiles dividing the product (its "
                                               "epilogue stores another layout)"
                                               if remap is not None else ""))
    split = cfg.split_k
    padded = form.paddable and (split > 1 or wgmma_padded_extents(cfg, form)
                                != (form.M, form.N, form.K))
    if remap is not None and padded:
        raise ScheduleError(f"stage {op.name}: an epilogue that stores the product in another "
                            f"layout ({epilogue.name}) needs split_k 1 and wgmma tiles that "
                            f"divide the product ({form.M} x {form.N} x {form.K}), got "
                            f"{cfg.block_m} x {cfg.block_n} x {BLOCK_K}, split_k {split}")
    direct = not padded and (epilogue is None or _is_cast_of(epilogue, op))
    check_wgmma_gemm(cfg, form, f"stage {op.name}", target, c_tile=not direct)
    st = gemm_stages(s, op, epilogue, form, (cfg.block_m, cfg.block_n, BLOCK_K), split,
                     direct, "warpgroup", remap)
    o, cf, cs = st.o, st.cf, st.cs
    threads = ((WARPGROUP, "threadIdx.x"), (cfg.warpgroups, "threadIdx.y"))
    if direct:
        # each warpgroup stores its 64 x 8 accumulator tiles (with the cast)
        wg, i = o.split(st.i, factor=64)
        tj, jj = o.split(st.j, factor=8)
        o.reorder(*st.batch, st.bi, st.bj, wg, tj, i, jj)
        o.bind(wg, "threadIdx.y")
        out_dt = o.op.output(0).dtype
        o.tensorize(i, WGMMA.store("float32", out_dt))
        o.unroll(tj)
        s[cf].compute_at(o, wg)
    else:
        # the accumulators to the C tile, then every thread runs the epilogue over it
        schedule_tile_epilogue(s, st, form, cfg.block_m, cfg.block_n, threads,
                               row_reductions)
        sc = s[cs]
        *lead, r, col = sc.op.axis
        wg, r = sc.split(r, factor=64)
        tj, jj = sc.split(col, factor=8)
        sc.reorder(*lead, wg, tj, r, jj)
        sc.bind(wg, "threadIdx.y")
        sc.tensorize(r, WGMMA.store("float32"))
        sc.unroll(tj)
        s[cf].compute_at(sc, wg)

    # the accumulators of one warpgroup; K in steps of 64, each four k16 wgmmas
    f = s[cf]
    ko, ki, ci = split_warpgroup_k(f)
    for sh, x, vec in ((st.a_sh, st.a, copy_vec(form)),
                       (st.b_sh, st.b, copy_vec(form, form.N if form.b_kn else None))):
        async_copy = vec >= 2 and target.has_cp_async and copies_from_memory(x)
        if sh is st.b_sh and form.b_kn:
            # B read as [K, N]: its [64, block_n] tile's rows run along N (MN-major), in
            # 64-column panels
            schedule_b_kn_copy(s, sh, f, ko, vec, threads, async_copy, cfg.block_n)
            continue
        schedule_tile_copy(s, sh, f, ko, vec, threads, async_copy, swizzle=3)
    finish_warpgroup_product(f, ko, ki, ci, cfg, form.in_dtype, form.b_kn)
    return cfg


WGMMA_PEAK_FRACTION = 0.65
"""The share of the tensor-core peak a block's wgmmas reach while two warpgroups (of one
block or two) keep each SM busy; one warpgroup alone reaches 0.8 of that. Fitted to the
te schedule on an H200: 4096^3 fp16 at 128 x 256, 4 stages, one group in flight (580
TFLOP/s)."""

WGMMA_COPY_BYTES_PER_CLOCK = 80
"""What the 16-byte cp.async copies of one SM's wgmma tiles receive from L2 in a clock
(the mma.sync schedule's ``tile_copy_bytes_per_clock`` is a third of it: its warps also
issue the ldmatrix and mma instructions). Fitted to BERT-base's M = 128 products on an
H200 (64 x 64 tiles, 4 stages: 12 steps of 64 in 1.4 us, 48 in 7.3 us)."""

L2_TILE_RATE = 1.8
"""The L2 serves the tile copies of all blocks together at this multiple of the target's
``l2_bytes_per_s`` (most copies hit lines another block just fetched); a floor of
:func:`wgmma_time` that keeps narrow tiles of long products (many blocks reading the
same rows of B) from looking free."""

NO_FLIGHT_RATE = 0.86
"""The rate of a wgmma GEMM that waits for each step's wgmmas (``in_flight=0``) as a share
of one that leaves a group running: 0.2863 against 0.2473 ms at 4096^3 fp16 (128 x 256,
4 stages, an H100)."""

SPLIT_K_CHOICES = split_parts(WGMMA_SPACE)
"""The split-K parts :func:`wgmma_candidates` tries."""


def wgmma_time(cfg: WgmmaScheduleConfig, form, target=None, c_tile: bool = False,
               dram_floor: bool = True) -> float:
    """A rough estimate in seconds of the wgmma GEMM with ``cfg`` on ``form``, to rank
    :func:`choose_wgmma_config`'s candidates (:func:`wgmma_estimate` of one config)."""
    return float(wgmma_estimate(cfg.block_n, cfg.warpgroups, cfg.stages, cfg.split_k, form,
                                target, c_tile, dram_floor, cfg.in_flight))


def wgmma_estimate(block_n, warpgroups, stages, split_k, form, target=None, c_tile=False,
                   dram_floor: bool = True, in_flight=1):
    """:func:`wgmma_time` over arrays of knobs (the auto-scheduler's population); the
    shape of :func:`~.tensorcore_gemm.gemm_time`: blocks in waves of the SMs times the
    blocks resident on one (shared memory, 128 x warpgroups threads), the ``r`` blocks
    sharing an SM dividing its rate; each 64-column step the largest of the wgmma work
    (at :data:`WGMMA_PEAK_FRACTION` of the SM's tensor-core peak, :data:`NO_FLIGHT_RATE`
    of that where each step waits for its wgmmas), the tile copies (at
    :data:`WGMMA_COPY_BYTES_PER_CLOCK`) and the global latency the ``stages - 1`` copies
    in flight hide, plus a barrier; at least the tiles' copies from L2
    (:data:`L2_TILE_RATE`) and the inputs read from DRAM once (``form.input_bytes``); one
    launch; split-K's
    second kernel and the float32 partial sums' traffic."""
    import numpy as np

    from ...target import as_target

    t = as_target(target)
    bn = np.asarray(block_n, dtype=np.int64)
    wgs = np.asarray(warpgroups, dtype=np.int64)
    split = np.maximum(np.asarray(split_k, dtype=np.int64), 1)
    stages = np.asarray(stages, dtype=np.int64)
    bm = 64 * wgs
    if form.paddable:
        Mp, Np = -(-form.M // bm) * bm, -(-form.N // bn) * bn
        Kp = -(-form.K // (BLOCK_K * split)) * (BLOCK_K * split)
    else:
        Mp, Np, Kp = form.M, form.N, form.K
    blocks = form.batch * (Mp // bm) * (Np // bn) * split
    regs = np.minimum(255, 48 + bn // 2)
    smem = stages * (bm + bn) * BLOCK_K * 2 + np.where(c_tile, bm * (bn + 4) * 4, 0)
    per_sm = np.maximum(1, t.blocks_per_sm(WARPGROUP * wgs, regs, smem + 1024))
    waves = -(-blocks // (t.num_sms * per_sm))
    r = np.minimum(per_sm, -(-blocks // t.num_sms))
    tc_sm = t.peak_flops(form.in_dtype, tensor_core=True) / (t.num_sms * t.clock_hz)
    frac = (WGMMA_PEAK_FRACTION * np.where(r * wgs >= 2, 1.0, 0.8)
            * np.where(np.asarray(in_flight) > 0, 1.0, NO_FLIGHT_RATE))
    mma = r * 2.0 * bm * bn * BLOCK_K / (tc_sm * frac)
    load = r * (bm + bn) * BLOCK_K * 2 / WGMMA_COPY_BYTES_PER_CLOCK
    latency = t.global_latency_cycles / np.maximum(stages - 1, 1)
    steps = Kp // (BLOCK_K * split)
    sec = waves * steps * (np.maximum(np.maximum(mma, load), latency)
                           + t.barrier_cycles) / t.clock_hz
    tiles = blocks * steps * (bm + bn) * BLOCK_K * 2
    sec = np.maximum(sec, tiles / (L2_TILE_RATE * t.l2_bytes_per_s))
    if dram_floor:
        sec = np.maximum(sec, form.input_bytes / t.dram_bytes_per_s)
    sec = sec + t.launch_seconds
    partial = split * form.batch * Mp * Np * 4.0
    rate = np.where(2 * partial <= t.l2_bytes, t.l2_bytes_per_s, t.dram_bytes_per_s)
    return sec + np.where(split > 1, t.dependent_launch_seconds + 2.0 * partial / rate, 0.0)


def needs_c_tile(cfg: WgmmaScheduleConfig, form, epilogue_tile: bool) -> bool:
    """Whether :func:`schedule_gemm_wgmma` with ``cfg`` stores the accumulators through
    the shared C tile: the epilogue reads one (``epilogue_tile``: more than a cast), or
    the tiles pad the product, or the reduction is split."""
    padded = form.paddable and (cfg.split_k > 1 or wgmma_padded_extents(cfg, form)
                                != (form.M, form.N, form.K))
    return epilogue_tile or padded


def wgmma_candidates(form, target=None, epilogue_tile: bool = True, split_k: bool = True,
                     divide: bool = False) -> list:
    """Every configuration :func:`choose_wgmma_config` ranks for ``form``: ``block_n`` of
    64, 128, 256 up to ``N`` rounded up to a power of two, 1 or 2 warpgroups (2 where
    ``M > 64``), split-K parts of :data:`SPLIT_K_CHOICES` where the product can be padded
    (at least 4 steps of 64 per part, padding ``K`` by at most an eighth or 64), each with
    the most stages (4 down to 1; each count for the large tiles, whose C tile leaves
    room for fewer) its steps and shared memory allow (with the C tile
    where the epilogue reads one: ``epilogue_tile``, or the tile pads the product), one
    wgmma group in flight from 3 stages. ``divide``: only tiles that divide the product,
    without split-K (an epilogue storing another layout)."""
    from ...target import as_target
    from .tensorcore import tile_limit

    t = as_target(target)
    if wgmma_refusal(form, t) is not None:
        return []
    K = form.K
    slack = max(-(-K // BLOCK_K) * BLOCK_K - K, K // 8)
    splits = (1,) + SPLIT_K_CHOICES if (split_k and form.paddable and not divide) else (1,)
    out = []
    for bn in BLOCK_N:
        if bn > max(tile_limit(form.N), BLOCK_N[0]):
            continue
        for wgs in (1, 2):
            if wgs == 2 and form.M <= 64:
                continue
            for split in splits:
                part = BLOCK_K * split
                steps = -(-K // part)
                if split > 1 and steps < 4:
                    continue
                if -(-K // part) * part - K > slack:
                    continue
                for stages in (4, 3, 2, 1):
                    if stages > 1 and steps < stages:
                        continue
                    cfg = WgmmaScheduleConfig(bn, wgs, stages, 1 if stages >= 3 else 0, split)
                    if divide and wgmma_padded_extents(cfg, form) != (form.M, form.N, form.K):
                        break
                    try:
                        check_wgmma_gemm(cfg, form, target=t,
                                         c_tile=needs_c_tile(cfg, form, epilogue_tile))
                    except ScheduleError:
                        continue
                    out.append(cfg)
                    break
    return out


NEAR_TIE = 1.02
"""Estimates within this factor of the best are a tie, which goes to the larger tile."""

SPLIT_K_GAIN = 0.85
"""Split-K is chosen only where its estimate is below this share of the best unsplit
one: its second kernel, and the epilogue moved into it, cost more than the estimate's
launch (a 128 x 768 x 768 product, which the estimate finds a little faster in two
parts, measured 3.9 us unsplit)."""


def choose_wgmma_config(form, target=None, epilogue_tile: bool = True, remap: bool = False
                        ) -> WgmmaScheduleConfig | None:
    """The default wgmma tiles of ``form`` on ``target``: of :func:`wgmma_candidates`, the
    one :func:`wgmma_time` expects fastest (near ties to the larger block tile, then the
    fewest split-K parts; split-K only where it gains :data:`SPLIT_K_GAIN`), or None
    where none fits. ``remap``: only tiles that divide
    the product, no split-K. On an H100/H200: 4096^3 takes 128 x 256, 4 stages, one group
    in flight; BERT-base's 128 x 3072 x 768 64 x 64, 1 warpgroup, 4 stages; its
    128 x 768 x 3072 the same in split-K parts."""
    from ...target import as_target

    t = as_target(target)
    cands = wgmma_candidates(form, t, epilogue_tile, divide=remap)
    if not cands:
        return None
    timed = [(wgmma_time(c, form, t, needs_c_tile(c, form, epilogue_tile)), c)
             for c in cands]
    unsplit = [x for x, c in timed if c.split_k == 1]
    if unsplit:
        best_unsplit = min(unsplit)
        timed = [(x, c) for x, c in timed
                 if c.split_k == 1 or x < SPLIT_K_GAIN * best_unsplit]
    fastest = min(x for x, _ in timed)
    near = [c for x, c in timed if x <= fastest * NEAR_TIE]
    return min(near, key=lambda c: (
        -c.block_m * c.block_n, -c.stages,
        wgmma_time(c, form, t, needs_c_tile(c, form, epilogue_tile), dram_floor=False),
        c.split_k))
