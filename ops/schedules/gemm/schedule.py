"""The one tensor-core GEMM schedule, :func:`schedule_gemm` (products and conv2d NHWC as an
implicit GEMM; mma.sync or wgmma), and the entry points that check a stage and its knobs
before calling it: :func:`schedule_gemm_tensorcore`, :func:`schedule_gemm_wgmma`,
:func:`schedule_conv2d_nhwc_tensorcore`, :func:`schedule_conv2d_nhwc_wgmma`, and the default
stage schedules :func:`schedule_matmul` and :func:`schedule_conv2d_nhwc`."""

from __future__ import annotations

from math import gcd

from .... import te
from ....ir.intrin.kinds import mma_kind
from ....ir.intrin.wgmma import WARPGROUP
from ....ir.te import ComputeOp
from ....passes.schedule.common import ScheduleError
from ....target import Target, as_target
from ..remap import epilogue_remap
from ..tiled import schedule_tiled
from .choice import mma_sync_refusal, wgmma_conv_refusal, wgmma_refusal
from .chooser import (
    choose_conv_config,
    choose_gemm_config,
    choose_wgmma_config,
    choose_wgmma_conv_config,
    remap_config,
    wgmma_choice,
    wgmma_conv_choice,
)
from .forms import (
    GemmForm,
    accumulator_scale,
    conv_gemm_form,
    conv_gemm_shape,
    copies_from_memory,
    direct_store,
    epilogue_refusal,
    gemm_form,
    tensorcore_conv_unsupported,
)
from .knobs import TensorCoreConfig, WgmmaScheduleConfig
from .pieces import (
    bind_conv_output,
    copy_vec,
    finish_warpgroup_product,
    fragment_plans,
    make_persistent,
    schedule_b_kn_copy,
    schedule_tile_copy,
    schedule_tile_epilogue,
    split_warpgroup_k,
    stage_fragments,
    store_warp_tiles,
    store_warpgroup_tiles,
    tile_warp_product,
)
from .rules import (
    block_k,
    check_conv_config,
    check_gemm_config,
    check_wgmma_conv,
    check_wgmma_gemm,
    copy_vectors,
    pads,
)
from .stages import gemm_stages


def schedule_gemm(s, op: ComputeOp, epilogue: ComputeOp | None, form: GemmForm, knobs,
                  target: Target | str | None = None, remap=None,
                  row_reductions: tuple = (), bind_after_split: bool = False) -> None:
    """Schedule product stage ``op`` of ``s`` (``form``: its :class:`~.forms.GemmForm`,
    a conv's implicit GEMM where ``form.conv``) and its fused element-wise ``epilogue``
    with checked ``knobs`` (:class:`~.knobs.TensorCoreConfig`: mma.sync;
    :class:`~.knobs.WgmmaScheduleConfig`: wgmma). ``remap``: the epilogue's
    :class:`~..remap.OutputRemap`; ``row_reductions``: row reductions over the C tile the
    epilogue reads (:mod:`..gemm_rows`); ``bind_after_split``: the wgmma copies bind their
    thread loops after all splits (the same kernel, printed in another order).

    The warps store straight to the output where there is no padding and no epilogue but
    a cast (:func:`_direct`); otherwise through a float32 C tile that all threads run the
    epilogue over. Padding and split-K go through ``implicit_gemm`` (:mod:`.stages`)."""
    target = as_target(target)
    wg = isinstance(knobs, WgmmaScheduleConfig)
    split = knobs.split_k if isinstance(knobs.split_k, int) and knobs.split_k > 1 else 1
    bm, bn = knobs.block_m, knobs.block_n
    bk = block_k(form) if wg else knobs.block_k
    direct = not form.conv and _direct(op, epilogue, form, knobs)
    # the mma.sync convolution in TF32 keeps B as [N, K] (no .trans of 32 bits)
    kn = not form.tf32 if form.conv and not wg else form.b_kn
    st = gemm_stages(s, op, epilogue, form, (bm, bn, bk), split, direct,
                     "warpgroup" if wg else "warp", remap, kn,
                     getattr(knobs, "raster", 1) if wg else 1)
    o, cf = st.o, st.cf
    if wg:
        threads = ((WARPGROUP, "threadIdx.x"), (knobs.warpgroups, "threadIdx.y"))
    else:
        kind = mma_kind(form.in_dtype)
        a_fr = s.cache_read(st.a_sh, "warp", [cf])
        b_fr = s.cache_read(st.b_sh, "warp", [cf])
        wm, wn = bm // knobs.warps_m, bn // knobs.warps_n
        threads = ((32, "threadIdx.x"), (knobs.warps_n, "threadIdx.y"),
                   (knobs.warps_m, "threadIdx.z"))

    # the output over the block tile, and the accumulators' stores
    if direct:
        lead, rows, cols, at, out = st.block_loops, st.i, st.j, o, o.op.output(0).dtype
    else:
        if form.conv:
            bind_conv_output(s, o, st.cs, split, bm, bn, threads, bn + 4 if wg else None)
        else:
            schedule_tile_epilogue(s, st, form, bm, bn, threads, row_reductions)
        at, out = s[st.cs], ""
        *lead, rows, cols = at.op.axis
        lead = () if form.conv else tuple(lead)
    if wg:
        scaled = direct and accumulator_scale(op, epilogue) is not None
        s[cf].compute_at(at, store_warpgroup_tiles(at, rows, cols, lead, out, scaled))
    else:
        _, wj = store_warp_tiles(at, rows, cols, wm, wn, kind.store(form.acc_dtype, out),
                                 knobs.unroll, lead)
        s[cf].compute_at(at, wj)

    # the product, its fragments (mma.sync) and the operand copies
    f = s[cf]
    eb = form.elem_bytes
    if wg:
        ko, ki, ci = split_warpgroup_k(f, bk, form.mma_k)
    else:
        ko, ki = tile_warp_product(f, bk, kind.k, kind.mma(form.in_dtype, form.acc_dtype, kn),
                                   knobs.unroll)
        plans = fragment_plans(kind, form.in_dtype, kn, knobs.frag_load, wn)
        stage_fragments(s, f, ki, zip((a_fr, b_fr), plans), knobs.unroll)
    for sh, x in ((st.a_sh, st.a), (st.b_sh, st.b)):
        is_b = sh is st.b_sh
        if wg:
            if form.conv:
                vec = gcd(8, form.N if is_b else _c_in(op))
                async_copy = vec * eb in (4, 8, 16) and target.has_cp_async
            else:
                vec = copy_vec(form, form.N if is_b and form.b_kn else None)
                async_copy = (vec * eb >= 4 and target.has_cp_async
                              and copies_from_memory(x))
            if is_b and form.b_kn:
                # B read as [K, N]: its [bk, block_n] tile's rows run along N (MN-major),
                # in 64-column panels
                schedule_b_kn_copy(s, sh, f, ko, vec, threads, async_copy, bn)
            else:
                schedule_tile_copy(s, sh, f, ko, vec, threads, async_copy, swizzle=3,
                                   bind_after_split=bind_after_split)
            continue
        row = bn if is_b and kn else bk
        align = row + knobs.pad if knobs.pad else None
        if form.conv:
            # along the channels, as wide as C_in (A) and C_out (B) allow
            vec = copy_vectors(knobs, _c_in(op), form.N, form.tf32)[is_b]
            schedule_tile_copy(s, sh, f, ko, vec, threads,
                               knobs.async_copy and vec * eb in (4, 8, 16), align,
                               unit_vectorize=False)
        else:
            schedule_tile_copy(s, sh, f, ko, knobs.vec, threads,
                               knobs.async_copy and copies_from_memory(x), align)
    if wg:
        finish_warpgroup_product(f, ko, ki, ci, knobs, form.in_dtype, kn)
        if getattr(knobs, "persistent", 0) and not form.conv:
            make_persistent(s, st, knobs.persistent)
    elif knobs.stages > 1:
        f.pipeline(ko, knobs.stages)


def _direct(op: ComputeOp, epilogue: ComputeOp | None, form: GemmForm, knobs) -> bool:
    """Whether the warps store their accumulators straight to the output: no padding, no
    split-K, no epilogue but a cast (:func:`~.forms.direct_store`), no staged epilogue
    asked for (``staged_epilogue`` of :class:`~.knobs.WgmmaScheduleConfig`)."""
    return (not pads(knobs, form) and not getattr(knobs, "staged_epilogue", False)
            and direct_store(op, epilogue, form))


def _c_in(op: ComputeOp) -> int:
    return conv_gemm_shape(op)[3]


def _check_epilogue(op: ComputeOp, epilogue: ComputeOp | None, remap: bool = True) -> None:
    """Raise :class:`ScheduleError` where the template cannot fuse ``epilogue`` into ``op``
    (:func:`~.forms.epilogue_refusal`)."""
    why = epilogue_refusal(op, epilogue, remap)
    if why is not None:
        raise ScheduleError(f"stage {op.name}: {why}")


# -- products ----------------------------------------------------------------------------


def schedule_gemm_tensorcore(s, op: ComputeOp, epilogue: ComputeOp | None = None,
                             cfg: TensorCoreConfig | None = None,
                             target: Target | str | None = None,
                             form: GemmForm | None = None,
                             row_reductions: tuple = ()) -> TensorCoreConfig:
    """Schedule product stage ``op`` (and its fused element-wise ``epilogue``) with
    mma.sync (:func:`schedule_gemm`); returns the config used (``cfg``, else the
    chooser's). Raises :class:`ScheduleError` when the tensor cores do not run ``op`` or
    ``cfg`` breaks a rule (:func:`~.rules.check_gemm_config`)."""
    return _schedule_product(s, op, epilogue, cfg, target, form, row_reductions, False)


def schedule_gemm_wgmma(s, op, epilogue=None, cfg: WgmmaScheduleConfig | None = None,
                        target=None, form=None, row_reductions: tuple = ()
                        ) -> WgmmaScheduleConfig:
    """Schedule product stage ``op`` (and its fused element-wise ``epilogue``) with wgmma
    on an sm_90a ``target`` (:func:`schedule_gemm`; B as ``[K, N]`` read MN-major in
    64-column panels, fp8 as ``[N, K]`` only); returns the config used (``cfg``, else
    :func:`~.chooser.choose_wgmma_config`'s). Raises :class:`ScheduleError` for a product
    wgmma does not run (:func:`~.choice.wgmma_refusal`) or a ``cfg`` that breaks a rule."""
    return _schedule_product(s, op, epilogue, cfg, target, form, row_reductions, True)


def _schedule_product(s, op, epilogue, cfg, target, form, row_reductions, wg: bool):
    """The checks of both product entry points (the kind runs the product, the epilogue
    fuses, the knobs' rules; a remapping epilogue needs tiles dividing the product and no
    split-K), the default tiles where ``cfg`` is None, then :func:`schedule_gemm`."""
    target = as_target(target)
    form = wgmma_form(op, target, f"stage {op.name}", form) if wg else (
        form or _product_form(op, target))
    why = None if wg else mma_sync_refusal(form)
    if why is not None:
        raise ScheduleError(f"stage {op.name}: {why}")
    _check_epilogue(op, epilogue)
    remap = epilogue_remap(op, epilogue)
    if cfg is None:
        if wg:
            cfg = choose_wgmma_config(form, target, remap=remap is not None)
        else:
            cfg = remap_config(form, target) if remap else choose_gemm_config(form, target)
        if cfg is None:
            raise ScheduleError(f"stage {op.name}: no {'wgmma' if wg else 'mma.sync'} tiles "
                                f"fit {form.M} x {form.N} x {form.K}" + (
                                    " with tiles dividing the product (its epilogue stores "
                                    "another layout)" if remap is not None else ""))
    split = cfg.split_k if isinstance(cfg.split_k, int) else 1
    if remap is not None and (split > 1 or pads(cfg, form)):
        raise ScheduleError(f"stage {op.name}: an epilogue that stores the product in another "
                            f"layout ({epilogue.name}) needs split_k 1 and tiles that divide "
                            f"the product ({form.M} x {form.N} x {form.K}), got {cfg}")
    check = check_wgmma_gemm if wg else check_gemm_config
    check(cfg, form, f"stage {op.name}", target, c_tile=not _direct(op, epilogue, form, cfg))
    schedule_gemm(s, op, epilogue, form, cfg, target, remap, row_reductions)
    return cfg


def _product_form(op, target) -> GemmForm:
    form = gemm_form(op, target)
    if form is None:
        raise ScheduleError(f"stage {op.name} is not a product the tensor cores of "
                            f"{target.arch} run (see gemm_form)")
    return form


def wgmma_form(op, target, where: str, form=None):
    """The :class:`~.forms.GemmForm` of ``op`` (or ``form``) where wgmma runs it on
    ``target``, else a :class:`ScheduleError` beginning with ``where`` that says why."""
    form = form or _product_form(op, target)
    why = wgmma_refusal(form, target)
    if why is not None:
        raise ScheduleError(f"{where}: {why}")
    return form


def schedule_matmul(s, op: ComputeOp, epilogue: ComputeOp | None = None,
                    target: Target | str | None = None):
    """The default stage schedule of dense, matmul and batch_matmul: the tensor cores
    where :func:`~.forms.gemm_form` takes the stage (wgmma where
    :func:`~.chooser.wgmma_choice` picks it), else :func:`~..tiled.schedule_tiled`."""
    form = gemm_form(op, target)
    if form is None:
        return schedule_tiled(s, op, epilogue, target=target)
    w = wgmma_choice(op, epilogue, form, target)
    if w is None and mma_sync_refusal(form) is not None:
        # fp8 that wgmma does not take: converted to float32 on the CUDA cores
        return schedule_tiled(s, op, epilogue, target=target)
    if w is not None:
        return schedule_gemm_wgmma(s, op, epilogue, w, target=target, form=form)
    return schedule_gemm_tensorcore(s, op, epilogue, target=target, form=form)


# -- convolutions --------------------------------------------------------------------------


def schedule_conv2d_nhwc_tensorcore(s, op: ComputeOp, epilogue: ComputeOp | None = None,
                                    target: Target | str | None = None,
                                    cfg: TensorCoreConfig | None = None) -> TensorCoreConfig:
    """Schedule conv2d NHWC stage ``op`` (and its fused element-wise ``epilogue``) with
    mma.sync as the implicit GEMM ``[pixels, KH*KW*C_in] x [KH*KW*C_in, C_out]``, the A
    tile's copy gathering the input's windows (:func:`schedule_gemm`); returns the config
    used (``cfg``, else :func:`~.chooser.choose_conv_config`'s). The caller inlines the
    padding stage. Raises ScheduleError naming the rule broken
    (:func:`~.rules.check_conv_config`)."""
    return _schedule_conv(s, op, epilogue, target, cfg, False)


def schedule_conv2d_nhwc_wgmma(s, op: ComputeOp, epilogue: ComputeOp | None = None,
                               target: Target | str | None = None, cfg=None):
    """Schedule conv2d NHWC stage ``op`` (fp16/bf16, and its ``epilogue``) with wgmma on
    sm_90a: the implicit GEMM, B (the HWIO kernel) read MN-major as ``[K, N]``. ``cfg``:
    a :class:`~.knobs.WgmmaScheduleConfig` (rules: :func:`~.rules.check_wgmma_conv`;
    default: :func:`~.chooser.choose_wgmma_conv_config`). Returns the config."""
    return _schedule_conv(s, op, epilogue, target, cfg, True)


def _schedule_conv(s, op, epilogue, target, cfg, wg: bool):
    """The checks of both conv entry points, the default tiles where ``cfg`` is None, then
    :func:`schedule_gemm` on the implicit GEMM."""
    target = as_target(target)
    why = (wgmma_conv_refusal if wg else tensorcore_conv_unsupported)(op, target)
    if why is not None:
        raise ScheduleError(f"{'wgmma' if wg else 'tensor-core'} conv2d: {why}")
    _check_epilogue(op, epilogue, remap=False)
    cfg = cfg or (choose_wgmma_conv_config if wg else choose_conv_config)(op, target, epilogue)
    (check_wgmma_conv if wg else check_conv_config)(cfg, op, target)
    schedule_gemm(s, op, epilogue, conv_gemm_form(op), cfg, target)
    return cfg


def schedule_conv2d_nhwc(s, op: ComputeOp, epilogue: ComputeOp | None = None,
                         target: Target | str | None = None):
    """The default schedule of conv2d NHWC stages: the tensor cores where
    :func:`~.forms.tensorcore_conv_unsupported` allows (wgmma where
    :func:`~.chooser.wgmma_conv_choice` takes it), else the tiled CUDA-core schedule."""
    if tensorcore_conv_unsupported(op, target) is None:
        w = wgmma_conv_choice(op, epilogue, target)
        if w is not None:
            return schedule_conv2d_nhwc_wgmma(s, op, epilogue, target, w)
        return schedule_conv2d_nhwc_tensorcore(s, op, epilogue, target)
    return schedule_tiled(s, op, epilogue, target=target)


# -- a dense product on its own ------------------------------------------------------------


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
