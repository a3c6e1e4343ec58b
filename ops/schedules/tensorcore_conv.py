"""conv2d NHWC on tensor cores, as an implicit GEMM.

The convolution ``out[n, oh, ow, co] = sum(pad[n, oh*s + ry, ow*s + rx, rc] * W[ry, rx, rc,
co])`` is the matrix product ``C[M, N] = A[M, K] x B[K, N]`` with ``M = N*OH*OW`` output
pixels, ``N`` output channels and ``K = KH*KW*C_in`` (the ``implicit_gemm`` schedule pass):
row ``m`` of ``A`` is the window of pixel ``m``, which the block's shared-memory copy gathers
straight from the (padded) input (no im2col matrix in global memory); the copies run along
the channels, vectorized (and with cp.async) as wide as ``C_in`` allows. ``M``, ``N`` and
``K`` are padded to multiples of the block tile with zeros, so 49 output pixels (7x7),
3 input channels (the stem) or 1x1 windows need no special case.

The rest is the tensor-core GEMM of :mod:`.tensorcore` (its :class:`TensorCoreConfig`):
each warp's m16n8 accumulators (``mma.sync``, fragments from ``ldmatrix``) are stored into
the block's C tile in shared memory, and the output stage, which is the epilogue a network
fuses (bias, ReLU, residual add, cast to float16) with the convolution's copy inlined,
reads that tile with all threads, row-major, so its global stores are coalesced.

float16 and bfloat16 inputs accumulate in float32; float32 inputs use the TF32 mma
(m16n8k8) only when the convolution was declared with ``precision="tf32"``.

On sm_90a the same implicit GEMM runs on wgmma (:func:`schedule_conv2d_nhwc_wgmma`, fp16 /
bf16), split-K included; both schedules share their stages (:func:`conv_stages`,
:func:`bind_conv_output`). The default schedule (:func:`schedule_conv2d_nhwc`) takes it
where :func:`wgmma_conv_choice` does: the wgmma GEMM's estimate on the implicit GEMM
(:func:`conv_gemm_form`) below mma.sync's.
"""

from __future__ import annotations

from math import gcd

from ...ir import te
from ...ir.dtype import nbytes
from ...ir.intrin.kinds import WGMMA, mma_kind
from ...ir.te import ComputeOp
from ...passes.schedule.common import ScheduleError
from ...passes.schedule.schedule import Schedule
from ...target import Target, as_target
from .. import tag as _tag
from .gemm.pieces import fragment_plans, stage_fragments, store_warp_tiles
from .tensorcore import (
    TensorCoreConfig,
    schedule_split_sum,
    split_k_partials,
    split_k_rule,
    tile_warp_product,
)
from .tiled import schedule_tiled

BLOCK_CHOICES = (128, 64, 32, 16)
C_TILE_BYTES = 4
"""Bytes per element of the block's accumulator tile in shared memory (float32)."""


def conv_gemm_shape(op: ComputeOp) -> tuple[int, int, int, int]:
    """``(M, N, K, C_in)`` of a conv2d NHWC stage as a matrix product."""
    n, oh, ow, co = (int(x) for x in op.shape)
    kh, kw, ci = (int(a.extent) for a in op.reduce_axis)
    return n * oh * ow, co, kh * kw * ci, ci


def _in_dtype(op: ComputeOp) -> str:
    return op.input_tensors[0].dtype


def _is_tf32(op: ComputeOp) -> bool:
    return (op.attrs or {}).get("precision") == "tf32"


def tensorcore_conv_unsupported(op: ComputeOp, target: Target | str | None = None
                                ) -> str | None:
    """Why conv stage ``op`` cannot run on tensor cores on ``target``, or None when it can:
    a plain (not grouped or depthwise) conv2d NHWC of float16 / bfloat16 inputs accumulated
    in float32, or of float32 inputs declared with ``precision="tf32"``, on a GPU with
    mma.sync (sm_80 and later)."""
    target = as_target(target)
    if op.tag != _tag.CONV2D_NHWC or len(op.reduce_axis) != 3 or len(op.shape) != 4:
        return f"stage {op.name} (tag {op.tag!r}) is not a conv2d NHWC"
    ins = op.input_tensors
    if len(ins) != 2 or ins[0].dtype != ins[1].dtype:
        return f"conv {op.name} does not read two inputs of one dtype"
    dt = ins[0].dtype
    if op.dtype != "float32":
        return f"conv {op.name} accumulates in {op.dtype}; the tensor-core path needs float32"
    if dt in ("float16", "bfloat16"):
        if not target.has_mma("m16n8k16", dt):
            return f"target {target.arch} has no mma.sync m16n8k16 for {dt} (needs sm_80+)"
        return None
    if dt == "float32":
        if not _is_tf32(op):
            return (f"conv {op.name} is float32; tensor cores multiply float32 only in TF32, "
                    "which must be asked for (precision='tf32')")
        if not target.has_mma("m16n8k8", "tf32"):
            return f"target {target.arch} has no TF32 mma.sync (needs sm_80+)"
        return None
    return f"conv {op.name} has {dt} inputs; tensor cores take float16, bfloat16 or TF32"


def shared_bytes(cfg: TensorCoreConfig, elem_bytes: int) -> int:
    """Shared memory one block uses: ``stages`` buffers of the A and B tiles (rows padded
    by ``cfg.pad``) and the float32 C tile."""
    a = cfg.block_m * (cfg.block_k + cfg.pad)
    b = cfg.block_k * (cfg.block_n + cfg.pad)
    return (max(cfg.stages, 1) * (a + b) * elem_bytes
            + cfg.block_m * cfg.block_n * C_TILE_BYTES)


def copy_vectors(cfg: TensorCoreConfig, C_in: int, N: int, tf32: bool) -> tuple[int, int]:
    """Elements per copy of the A tile (along channels: as many of ``cfg.vec`` as divide
    ``C_in``) and of the B tile (along output channels; TF32 keeps B as ``[n, k]``, whose
    rows are not contiguous in the kernel: one element)."""
    a_vec = gcd(cfg.vec, C_in)
    b_vec = 1 if tf32 else gcd(cfg.vec, N)
    return a_vec, b_vec


def check_conv_config(cfg: TensorCoreConfig, op: ComputeOp,
                      target: Target | str | None = None) -> None:
    """Raise ScheduleError naming the rule ``cfg`` breaks for conv stage ``op`` (the rules
    of :meth:`TensorCoreConfig.check` on the padded product, the shared memory of the
    target, the pipeline depth)."""
    target = as_target(target)
    M, N, K, _ = conv_gemm_shape(op)
    tf32 = _in_dtype(op) == "float32"
    mma_k, eb = (8, 4) if tf32 else (16, 2)
    where = f"tensor-core conv2d {op.name} (GEMM {M}x{N}x{K}) with {cfg}"
    for v, what in ((cfg.block_m, "block_m"), (cfg.block_n, "block_n"),
                    (cfg.block_k, "block_k")):
        if not isinstance(v, int) or v < 1:
            raise ScheduleError(f"{where}: need {what} to be a positive int")
    split = cfg.split_k
    if not isinstance(split, int) or isinstance(split, bool) or split < 1:
        raise ScheduleError(f"{where}: need {split_k_rule(cfg, K)}")
    Mp, Np, Kp = (-(-x // b) * b for x, b in ((M, cfg.block_m), (N, cfg.block_n),
                                               (K, cfg.block_k * split)))
    try:
        cfg.check(Mp, Np, Kp, mma_k, eb, split_k_ok=True)
    except ScheduleError as e:
        raise ScheduleError(f"{where}: {str(e).split(': need ', 1)[-1]}") from None
    smem = shared_bytes(cfg, eb)
    if smem > target.max_shared_memory_per_block:
        raise ScheduleError(f"{where}: need the A, B and C tiles ({smem} bytes of shared "
                            f"memory) to fit the block's {target.max_shared_memory_per_block}")
    rule = split_k_rule(cfg, K)
    if rule is not None:
        raise ScheduleError(f"{where}: need {rule}")


def choose_conv_config(op: ComputeOp, target: Target | str | None = None) -> TensorCoreConfig:
    """A default configuration for conv stage ``op`` on ``target``: the block tile that
    minimizes an estimate of waves x (tile work + tile loads) over the padded product, so
    that small layers (7x7 pixels) still spread over the SMs; warps of 16 to 64 rows and 8
    to 64 columns; a 2- or 3-stage cp.async pipeline over the reduction; the widest copies
    that the tiles allow. Every candidate passes :func:`check_conv_config`."""
    target = as_target(target)
    M, N, K, _ = conv_gemm_shape(op)
    tf32 = _in_dtype(op) == "float32"
    eb = 4 if tf32 else 2
    best = None
    for bm in BLOCK_CHOICES:
        for bn in BLOCK_CHOICES:
            if bn > max(16, 2 * N) or bm > max(16, 2 * M):
                continue
            cfg = _valid_config(op, target, bm, bn, K, tf32)
            if cfg is None:
                continue
            smem = shared_bytes(cfg, eb)
            per_sm = max(1, min(4, target.max_shared_memory_per_block * 2 // smem))
            blocks = -(-M // bm) * -(-N // bn)
            waves = -(-blocks // (target.num_sms * per_sm))
            cost = waves * (bm * bn + 32 * (bm + bn)) * per_sm
            key = (cost, -bm * bn)
            if best is None or key < best[0]:
                best = (key, cfg)
    if best is None:
        raise ScheduleError(f"tensor-core conv2d {op.name}: no configuration fits target "
                            f"{target.arch}")
    return best[1]


def _valid_config(op, target, bm: int, bn: int, K: int, tf32: bool):
    """The first legal configuration of a ``bm x bn`` block tile, widest copies first."""
    bk = 16 if K <= 16 else 32
    wm = 2 if bm >= 32 else 1
    wn = 4 if bn >= 128 else (2 if bn >= 16 else 1)
    steps = -(-K // bk)
    stages = 3 if steps >= 8 else (2 if steps >= 2 else 1)
    for vec in ((4, 2, 1) if tf32 else (8, 4, 2, 1)):
        cfg = TensorCoreConfig(bm, bn, bk, wm, wn, vec=vec, pad=4 if tf32 else 8,
                               stages=stages,
                               async_copy=vec * (4 if tf32 else 2) in (4, 8, 16),
                               frag_load="ldmatrix", tf32=tf32)
        try:
            check_conv_config(cfg, op, target)
        except ScheduleError:
            continue
        return cfg
    return None


def conv_stages(s: Schedule, op: ComputeOp, epilogue: ComputeOp | None, block_m: int,
                block_n: int, part_k: int, split: int, b_layout: str, acc_scope: str):
    """The stages both tensor-core conv schedules (mma.sync's warp fragments,
    ``acc_scope="warp"``, and wgmma's ``"warpgroup"`` accumulators) share: the implicit
    GEMM padded to ``block_m x block_n`` tiles and ``split`` parts of ``part_k`` (B as
    ``b_layout``), with split-K its float32 partial sums (:func:`~.tensorcore.
    split_k_partials`) summed by a second kernel that runs the epilogue
    (:func:`~.tensorcore.schedule_split_sum`); the block's C tile in shared memory and the
    accumulators; the epilogue inlined into the output; the shared operand tiles, their
    padded views inlined. Returns ``(o, c_sh, cf, a_sh, b_sh)``: ``o`` the stage of the
    tensor-core kernel that writes the output (the epilogue, the conv's copy, or the
    partial sums)."""
    a, b, g = s.implicit_gemm(op.output(0), block_m, block_n, part_k, b_layout)
    final = None
    if split > 1:
        # split-K: partial products g[part, m, n] from blockIdx.z, summed by the epilogue
        g, final = split_k_partials(s, g, split)
    c_sh = s.cache_write(g, "shared")
    cf = s.cache_write(c_sh, acc_scope)
    if final is None:
        s[g].compute_inline()
    if epilogue is not None:
        s[op].compute_inline()
        o = s[epilogue]
    else:
        o = s[op]
    if final is not None:
        schedule_split_sum(s, o, final)
        o = s[g]
    a_sh = s.cache_read(a, "shared", [cf])
    b_sh = s.cache_read(b, "shared", [cf])
    s[a].compute_inline()
    s[b].compute_inline()
    return o, c_sh, cf, a_sh, b_sh


def bind_conv_output(s: Schedule, o, c_sh, split: int, block_m: int, block_n: int,
                     threads) -> None:
    """The output stage ``o`` of :func:`conv_stages` (the epilogue, or the partial sums of
    split-K): pixel blocks on blockIdx.x, channel blocks on blockIdx.y (the split-K part on
    blockIdx.z), every thread of the block (``threads``: ``(extent, tag)``, innermost
    first) over its ``block_m x block_n`` tile, row-major; the C tile ``c_sh`` at the
    block."""
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
        o.bind(part, te.thread_axis("blockIdx.z"))
    o.bind(bi, te.thread_axis("blockIdx.x"))
    o.bind(bj, te.thread_axis("blockIdx.y"))
    fused = o.fuse(i, j)
    for n, tag in threads:
        fused, t = o.split(fused, factor=n)
        o.bind(t, te.thread_axis(tag))
    s[c_sh].compute_at(o, bj)


def schedule_conv2d_nhwc_tensorcore(s: Schedule, op: ComputeOp,
                                    epilogue: ComputeOp | None = None,
                                    target: Target | str | None = None,
                                    cfg: TensorCoreConfig | None = None) -> TensorCoreConfig:
    """Schedule conv2d NHWC stage ``op`` of ``s`` (and its fused element-wise
    ``epilogue``) on tensor cores; returns the configuration used (``cfg``, else
    :func:`choose_conv_config`). The padding stage it reads is left to the caller to
    inline (``default_schedule`` does). Raises ScheduleError when the stage or ``cfg`` does
    not qualify, naming the rule. TF32 keeps B as ``[n, k]`` and, with
    ``cfg.frag_load="ldmatrix"`` (the default), loads its fragments with
    ``ldmatrix_a_x4_tf32`` and ``ldmatrix_b_x{2,4}_tf32``."""
    target = as_target(target)
    why = tensorcore_conv_unsupported(op, target)
    if why is not None:
        raise ScheduleError(f"tensor-core conv2d: {why}")
    tf32 = _in_dtype(op) == "float32"
    cfg = cfg or choose_conv_config(op, target)
    check_conv_config(cfg, op, target)
    M, N, K, C_in = conv_gemm_shape(op)
    ab = _in_dtype(op)
    eb = nbytes(ab)
    a_vec, b_vec = copy_vectors(cfg, C_in, N, tf32)

    split = cfg.split_k
    o, c_sh, cf, a_sh, b_sh = conv_stages(s, op, epilogue, cfg.block_m, cfg.block_n,
                                          cfg.block_k * split, split,
                                          "nk" if tf32 else "kn", "warp")
    a_fr = s.cache_read(a_sh, "warp", [cf])
    b_fr = s.cache_read(b_sh, "warp", [cf])
    wm, wn = cfg.block_m // cfg.warps_m, cfg.block_n // cfg.warps_n
    threads = (("threadIdx.x", 32), ("threadIdx.y", cfg.warps_n),
               ("threadIdx.z", cfg.warps_m))

    def spread(st, fused) -> None:
        for tag, n in threads:
            fused, t = st.split(fused, factor=n)
            st.bind(t, te.thread_axis(tag))

    bind_conv_output(s, o, c_sh, split, cfg.block_m, cfg.block_n,
                     [(n, tag) for tag, n in threads])

    # the block's C tile in shared memory, each warp storing its m16n8 fragments
    kind = mma_kind(ab)
    st = s[c_sh]
    *_, ci, cj = st.op.axis
    _, wj = store_warp_tiles(st, ci, cj, wm, wn, kind.store("float32"), cfg.unroll)

    # the accumulators of one warp tile, the reduction in block_k steps of mma_k
    s[cf].compute_at(st, wj)
    f = s[cf]
    ko, ki = tile_warp_product(f, cfg.block_k, kind.k, kind.mma(ab, "float32", not tf32),
                               cfg.unroll)

    # fragments from shared memory at every mma_k step (TF32 keeps B [n, k]: no .trans
    # of 32 bits)
    plans = fragment_plans(kind, ab, not tf32, cfg.frag_load, wn)
    stage_fragments(s, f, ki, zip((a_fr, b_fr), plans), cfg.unroll)

    # shared tiles: the A tile gathered from the input window by window, the B tile from
    # the kernel; every thread copies vec elements at a time
    for sh, vec, row in ((a_sh, a_vec, cfg.block_k),
                         (b_sh, b_vec, cfg.block_k if tf32 else cfg.block_n)):
        s[sh].compute_at(f, ko)
        st = s[sh]
        r, col = st.op.axis
        if cfg.pad:
            st.storage_align(r, row + cfg.pad, 0)
        fused, v = st.split(st.fuse(r, col), factor=vec)
        spread(st, fused)
        if vec > 1:
            st.vectorize(v)
        if cfg.async_copy and vec * eb in (4, 8, 16):
            st.async_copy()
    if cfg.stages > 1:
        f.pipeline(ko, cfg.stages)
    return cfg


def schedule_conv2d_nhwc(s: Schedule, op: ComputeOp, epilogue: ComputeOp | None = None,
                         target: Target | str | None = None):
    """The default schedule of conv2d NHWC stages: tensor cores where the dtypes and the
    target allow (:func:`tensorcore_conv_unsupported`), with wgmma where
    :func:`wgmma_conv_choice` takes it (sm_90a) and mma.sync otherwise; else the tiled
    CUDA-core schedule."""
    if tensorcore_conv_unsupported(op, target) is None:
        w = wgmma_conv_choice(op, epilogue, target)
        if w is not None:
            return schedule_conv2d_nhwc_wgmma(s, op, epilogue, target, w)
        return schedule_conv2d_nhwc_tensorcore(s, op, epilogue, target)
    return schedule_tiled(s, op, epilogue, target=target)


# -- the implicit GEMM on wgmma (sm_90a) -------------------------------------------------------


def conv_gemm_form(op: ComputeOp):
    """The :class:`~.tensorcore_gemm.GemmForm` of conv stage ``op``'s implicit GEMM
    (``M`` pixels x ``N`` output channels x ``K = KH*KW*C_in``, B the HWIO kernel as
    ``[K, N]``), whose DRAM floor is the convolution's input and kernel read once (not
    the window matrix ``A``, which holds each input pixel up to ``KH*KW`` times): the
    extents the wgmma estimates and rules take."""
    from .tensorcore_gemm import GemmForm

    M, N, K, _ = conv_gemm_shape(op)
    data, kernel = op.input_tensors
    dt = _in_dtype(op)
    unique = sum(_numel(t.op.input_tensors[0] if _is_pad(t) else t) for t in (data, kernel))
    return GemmForm(1, M, N, K, dt, op.dtype, b_kn=True, tf32=dt == "float32",
                    unique_bytes=unique * nbytes(dt))


def _is_pad(t) -> bool:
    return isinstance(t.op, ComputeOp) and not t.op.reduce_axis and len(t.op.input_tensors) == 1


def _numel(t) -> int:
    n = 1
    for x in t.shape:
        n *= int(x)
    return n


def wgmma_conv_refusal(op: ComputeOp, target: Target | str | None = None) -> str | None:
    """Why :func:`schedule_conv2d_nhwc_wgmma` cannot run conv stage ``op`` on ``target``,
    or None: it must qualify for the tensor cores (:func:`tensorcore_conv_unsupported`),
    the target have wgmma (sm_90a) and the inputs be float16 or bfloat16 (TF32 stays on
    mma.sync)."""
    from .gemm.choice import wgmma_dtype_refusal

    target = as_target(target)
    why = tensorcore_conv_unsupported(op, target)
    if why is None:
        why = wgmma_dtype_refusal(_in_dtype(op), "float32", target)
    return why


def check_wgmma_conv(cfg, op: ComputeOp, target: Target | str | None = None) -> None:
    """Raise ScheduleError naming the rule ``cfg`` (a
    :class:`~.tensorcore_wgmma.WgmmaScheduleConfig`) breaks for conv stage ``op`` on the
    wgmma schedule: :func:`wgmma_conv_refusal`, then the wgmma GEMM's rules on the
    implicit GEMM (:func:`~.tensorcore_wgmma.check_wgmma_knobs`: ``block_n`` 64, 128 or
    256, the kernel read as ``[K, N]`` in 64-column panels, 1 or 2 warpgroups, 1 to 5
    stages, ``in_flight`` 0 or 1 (1 from 3 stages), ``split_k`` a positive int with at
    least ``stages`` steps of 64 in each part, the tiles and the C tile within the shared
    memory)."""
    from .tensorcore_wgmma import check_wgmma_knobs

    target = as_target(target)
    why = wgmma_conv_refusal(op, target)
    if why is not None:
        raise ScheduleError(f"wgmma conv2d: {why}")
    form = conv_gemm_form(op)
    check_wgmma_knobs(cfg, form, f"wgmma conv2d {op.name} (GEMM {form.M}x{form.N}x{form.K})",
                      target, c_tile=True)


def choose_wgmma_conv_config(op: ComputeOp, target: Target | str | None = None):
    """The default wgmma configuration of conv stage ``op``: the wgmma GEMM chooser's
    (:func:`~.tensorcore_wgmma.choose_wgmma_config`, split-K included where its estimate
    gains :data:`~.tensorcore_wgmma.SPLIT_K_GAIN`) on the implicit GEMM, whose channels
    count as at least one 64-wide tile (the schedule pads them to it)."""
    from dataclasses import replace

    from .tensorcore_wgmma import B_KN_PANEL, choose_wgmma_config

    target = as_target(target)
    form = conv_gemm_form(op)
    cfg = choose_wgmma_config(replace(form, N=max(form.N, B_KN_PANEL)), target)
    if cfg is None:
        raise ScheduleError(f"wgmma conv2d {op.name}: no wgmma configuration fits the "
                            f"implicit GEMM {form.M}x{form.N}x{form.K} on {target.arch}")
    return cfg


def wgmma_conv_choice(op: ComputeOp, epilogue: ComputeOp | None = None,
                      target: Target | str | None = None):
    """The wgmma configuration the default conv schedule runs conv stage ``op`` with, or
    None where it stays on mma.sync, as :func:`~.tensorcore_gemm.wgmma_choice` decides
    for products: wgmma must run it (:func:`wgmma_conv_refusal`; at least 64 output
    channels, :func:`~.tensorcore_wgmma.wgmma_refusal`), and the estimate of
    :func:`choose_wgmma_conv_config`'s configuration
    (:func:`~.tensorcore_wgmma.wgmma_time`, with the C tile the epilogue reads) must beat
    :func:`~.tensorcore_gemm.gemm_time`'s of :func:`choose_conv_config`'s, both on the
    implicit GEMM with the convolution's own DRAM floor (:func:`conv_gemm_form`). On an
    H100 at batch 16, ResNet-18's 3x3 layers measured 15-20 us on wgmma against 36-50 us
    on mma.sync. ``epilogue`` does not change the choice (both schedules run it over a C
    tile)."""
    from .gemm.choice import prefer_wgmma, wgmma_refusal

    target = as_target(target)
    if wgmma_conv_refusal(op, target) is not None:
        return None
    form = conv_gemm_form(op)
    if wgmma_refusal(form, target) is not None:
        return None
    try:
        w = choose_wgmma_conv_config(op, target)
        mma = choose_conv_config(op, target)
    except ScheduleError:
        return None
    return w if prefer_wgmma(form, w, mma, True, target) else None


def schedule_conv2d_nhwc_wgmma(s: Schedule, op: ComputeOp, epilogue: ComputeOp | None = None,
                               target: Target | str | None = None, cfg=None):
    """Schedule conv2d NHWC stage ``op`` of ``s`` (fp16/bf16, and its fused element-wise
    ``epilogue``) with wgmma on an sm_90a ``target``: the implicit GEMM
    ``[pixels, KH*KW*C_in] x [KH*KW*C_in, C_out]`` whose B (the HWIO kernel) is ``[K, N]``,
    read MN-major by the ``_kn`` wgmma in block tiles of 64, 128 or 256 channels (the
    shared kernel tile stored in 64-column panels, :func:`~.tensorcore_wgmma.
    schedule_b_kn_copy`). Each block computes ``64 * warpgroups`` pixels x ``block_n``
    output channels as the wgmma GEMM does (warpgroup
    accumulators, 64-column K steps copied into 128B-swizzled tiles, ``stages`` deep,
    ``in_flight`` groups running), stores them to a float32 C tile, and all threads run
    the epilogue over it into the NHWC output. With ``split_k`` P > 1 the reduction runs
    in P parts (``K`` padded to P whole runs of 64-column steps) on blockIdx.z into
    float32 partial sums, stored through the C tile, and a second kernel adds them up and
    runs the epilogue once (the split-K of the mma.sync conv). ``cfg``: a
    :class:`~.tensorcore_wgmma.WgmmaScheduleConfig` (rules:
    :func:`check_wgmma_conv`; default: :func:`choose_wgmma_conv_config`). Returns the
    config."""
    from ...ir.intrin.wgmma import WARPGROUP
    from .tensorcore_gemm import schedule_tile_copy
    from .tensorcore_wgmma import (
        BLOCK_K,
        finish_warpgroup_product,
        schedule_b_kn_copy,
        split_warpgroup_k,
    )

    target = as_target(target)
    why = wgmma_conv_refusal(op, target)
    if why is not None:
        raise ScheduleError(f"wgmma conv2d: {why}")
    if cfg is None:
        cfg = choose_wgmma_conv_config(op, target)
    check_wgmma_conv(cfg, op, target)
    _, N, _, C_in = conv_gemm_shape(op)
    bm, bn, split = cfg.block_m, cfg.block_n, cfg.split_k
    o, c_sh, cf, a_sh, b_sh = conv_stages(s, op, epilogue, bm, bn, BLOCK_K * split, split,
                                          "kn", "warpgroup")
    threads = ((WARPGROUP, "threadIdx.x"), (cfg.warpgroups, "threadIdx.y"))
    bind_conv_output(s, o, c_sh, split, bm, bn, threads)

    # the C tile: each warpgroup stores its 64 x 8 accumulator tiles
    st = s[c_sh]
    *_, ci, cj = st.op.axis
    st.storage_align(ci, bn + 4, 0)
    wg, ci = st.split(ci, factor=64)
    tj, jj = st.split(cj, factor=8)
    st.reorder(wg, tj, ci, jj)
    st.bind(wg, te.thread_axis("threadIdx.y"))
    st.tensorize(ci, WGMMA.store("float32"))
    st.unroll(tj)

    s[cf].compute_at(st, wg)
    f = s[cf]
    ko, ki, rows = split_warpgroup_k(f)
    for sh, vec in ((a_sh, gcd(8, C_in)), (b_sh, gcd(8, N))):
        # along the channels, as wide as C_in (A) and C_out (B) allow; 128B-swizzled, the
        # kernel tile in 64-column panels
        async_copy = vec * nbytes(_in_dtype(op)) in (4, 8, 16) and target.has_cp_async
        if sh is b_sh:
            schedule_b_kn_copy(s, sh, f, ko, vec, threads, async_copy, bn)
        else:
            schedule_tile_copy(s, sh, f, ko, vec, threads, async_copy, swizzle=3)
    finish_warpgroup_product(f, ko, ki, rows, cfg, _in_dtype(op), b_kn=True)
    return cfg
