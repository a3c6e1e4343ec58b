"""The one legality check of each tensor-core form: functions of the knob values and the
:class:`~.forms.GemmForm`, never "run the schedule and catch the error".

The schedules, the default choosers, the AutoTVM templates and the auto-scheduler's sketch
states all ask these (a configuration the schedule would refuse is one they name the rule
of). mma.sync knobs (:class:`~.knobs.TensorCoreConfig`): :func:`check_gemm_config` on a
product, :func:`check_conv_config` on an implicit-GEMM convolution; wgmma knobs
(:class:`~.knobs.WgmmaScheduleConfig`): :func:`check_wgmma_knobs` on either.
"""

from __future__ import annotations

from ....passes.schedule.common import ScheduleError
from ....target import Target, as_target
from .forms import GemmForm
from .knobs import BLOCK_N, ROW_BYTES, TensorCoreConfig

C_TILE_BYTES = 4
"""Bytes per element of the block's accumulator tile in shared memory (float32)."""


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


# -- mma.sync ---------------------------------------------------------------------------


def padded_extents(cfg: TensorCoreConfig, form: GemmForm) -> tuple[int, int, int]:
    """``(Mp, Np, Kp)``: the product's extents rounded up to ``cfg``'s block tile (``K`` to
    ``split_k`` parts of whole ``block_k`` steps)."""
    return (_round_up(form.M, cfg.block_m), _round_up(form.N, cfg.block_n),
            _round_up(form.K, cfg.block_k * max(cfg.split_k, 1)))


def needs_padding(cfg: TensorCoreConfig, form: GemmForm) -> bool:
    """Whether ``cfg``'s block tile leaves part of a tile outside ``form``'s product (the
    schedule then pads the operands with zeros through ``implicit_gemm``)."""
    return padded_extents(cfg, form) != (form.M, form.N, form.K)


def gemm_shared_bytes(cfg: TensorCoreConfig, form: GemmForm, c_tile: bool = True) -> int:
    """Shared memory of one block: ``stages`` buffers of the A and B tiles (rows padded by
    ``cfg.pad``) and, when the epilogue reads it (``c_tile``), the float32 C tile (rows
    padded by 4)."""
    a = cfg.block_m * (cfg.block_k + cfg.pad)
    b = (cfg.block_k * (cfg.block_n + cfg.pad) if form.b_kn
         else cfg.block_n * (cfg.block_k + cfg.pad))
    c = cfg.block_m * (cfg.block_n + 4) * 4 if c_tile else 0
    return max(cfg.stages, 1) * (a + b) * form.elem_bytes + c


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


def conv_shared_bytes(cfg: TensorCoreConfig, elem_bytes: int) -> int:
    """Shared memory one block of the mma.sync convolution uses: ``stages`` buffers of the
    A and B tiles (rows padded by ``cfg.pad``) and the float32 C tile."""
    a = cfg.block_m * (cfg.block_k + cfg.pad)
    b = cfg.block_k * (cfg.block_n + cfg.pad)
    return (max(cfg.stages, 1) * (a + b) * elem_bytes
            + cfg.block_m * cfg.block_n * C_TILE_BYTES)


def copy_vectors(cfg: TensorCoreConfig, C_in: int, N: int, tf32: bool) -> tuple[int, int]:
    """Elements per copy of the mma.sync convolution's A tile (along channels: as many of
    ``cfg.vec`` as divide ``C_in``) and of its B tile (along output channels; TF32 keeps B
    as ``[n, k]``, whose rows are not contiguous in the kernel: one element)."""
    from math import gcd

    return gcd(cfg.vec, C_in), 1 if tf32 else gcd(cfg.vec, N)


def check_conv_config(cfg: TensorCoreConfig, op, target: Target | str | None = None) -> None:
    """Raise ScheduleError naming the rule ``cfg`` breaks for conv stage ``op`` (the rules
    of :meth:`TensorCoreConfig.check` on the padded implicit GEMM, the shared memory of
    the target, the pipeline depth)."""
    from .forms import conv_gemm_shape

    target = as_target(target)
    M, N, K, _ = conv_gemm_shape(op)
    tf32 = op.input_tensors[0].dtype == "float32"
    mma_k, eb = (8, 4) if tf32 else (16, 2)
    where = f"tensor-core conv2d {op.name} (GEMM {M}x{N}x{K}) with {cfg}"
    for v, what in ((cfg.block_m, "block_m"), (cfg.block_n, "block_n"),
                    (cfg.block_k, "block_k")):
        if not isinstance(v, int) or v < 1:
            raise ScheduleError(f"{where}: need {what} to be a positive int")
    split = cfg.split_k
    if not isinstance(split, int) or isinstance(split, bool) or split < 1:
        raise ScheduleError(f"{where}: need {split_k_rule(cfg, K)}")
    Mp, Np, Kp = (_round_up(x, b) for x, b in ((M, cfg.block_m), (N, cfg.block_n),
                                                (K, cfg.block_k * split)))
    try:
        cfg.check(Mp, Np, Kp, mma_k, eb, split_k_ok=True)
    except ScheduleError as e:
        raise ScheduleError(f"{where}: {str(e).split(': need ', 1)[-1]}") from None
    smem = conv_shared_bytes(cfg, eb)
    if smem > target.max_shared_memory_per_block:
        raise ScheduleError(f"{where}: need the A, B and C tiles ({smem} bytes of shared "
                            f"memory) to fit the block's {target.max_shared_memory_per_block}")
    rule = split_k_rule(cfg, K)
    if rule is not None:
        raise ScheduleError(f"{where}: need {rule}")


# -- wgmma ------------------------------------------------------------------------------


def block_k(form) -> int:
    """The K step of ``form``'s wgmma shared tiles: one 128-byte row of its elements (64
    of fp16/bf16, 128 of fp8)."""
    return ROW_BYTES // form.elem_bytes


def wgmma_shared_bytes(cfg, c_tile: bool = False) -> int:
    """Shared memory of the wgmma schedule: ``stages`` A and B tiles of 128-byte rows, and
    with ``c_tile`` the float32 C tile the epilogue reads (rows padded by 4)."""
    c = cfg.block_m * (cfg.block_n + 4) * 4 if c_tile else 0
    return cfg.stages * (cfg.block_m + cfg.block_n) * ROW_BYTES + c


def wgmma_padded_extents(cfg, form) -> tuple:
    """``(Mp, Np, Kp)``: the product's extents rounded up to ``cfg``'s wgmma tiles (``K``
    to ``split_k`` parts of whole 128-byte steps)."""
    return (_round_up(form.M, cfg.block_m), _round_up(form.N, cfg.block_n),
            _round_up(form.K, block_k(form) * max(cfg.split_k, 1)))


def knob_rules(cfg) -> list:
    """``(ok, rule)`` of the wgmma knobs' own ranges."""
    split = cfg.split_k
    return [
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


def check_wgmma_gemm(cfg, form, where: str = "", target=None, c_tile: bool = True) -> None:
    """Raise :class:`ScheduleError` naming the rule ``cfg`` breaks for product ``form`` on
    ``target``: those of :func:`~.choice.wgmma_refusal`, then :func:`check_wgmma_knobs`."""
    from .choice import wgmma_refusal

    where = where or "wgmma GEMM"
    t = as_target(target)
    why = wgmma_refusal(form, t)
    if why is not None:
        raise ScheduleError(f"{where}: {why}")
    check_wgmma_knobs(cfg, form, where, t, c_tile)


def check_wgmma_knobs(cfg, form, where: str, target=None, c_tile: bool = True) -> None:
    """The rules of wgmma knobs ``cfg`` for product ``form`` (one wgmma runs: the caller
    checked that): the knobs' ranges (:func:`knob_rules`; B read as ``[K, N]`` too: whole
    64-column panels of it), split-K only where the product is padded, at least ``stages``
    steps per split-K part, and the block's shared memory. The wgmma convolution checks
    its implicit GEMM with these too."""
    t = as_target(target)
    split = cfg.split_k
    for ok, rule in knob_rules(cfg):
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
    bk = block_k(form)
    steps = Kp // (bk * split)
    if cfg.stages > 1 and steps < cfg.stages:
        raise ScheduleError(
            f"{where} with {cfg}: need at least {cfg.stages} steps of {bk} for "
            f"{cfg.stages} pipeline stages (K = {form.K} padded to {Kp} gives {steps}"
            f"{' per split_k part' if split > 1 else ''})")
    smem = wgmma_shared_bytes(cfg, c_tile)
    optin = t.max_shared_memory_per_block_optin
    if smem > optin:
        raise ScheduleError(
            f"{where} with {cfg}: need at most {optin} bytes of shared memory per block "
            f"({cfg.stages} stages of {cfg.block_m}x{bk} and {cfg.block_n}x{bk} "
            f"tiles{' and the f32 C tile' if c_tile else ''} take {smem})")


def needs_c_tile(cfg, form, epilogue_tile: bool) -> bool:
    """Whether the wgmma schedule with ``cfg`` stores the accumulators through the shared
    C tile: the epilogue reads one (``epilogue_tile``: more than a cast), or the tiles pad
    the product, or the reduction is split."""
    return epilogue_tile or pads(cfg, form)


def pads(knobs, form) -> bool:
    """Whether the tiles of ``knobs`` (mma.sync or wgmma) leave part of a tile outside
    ``form``'s product, or split its reduction: the schedule then computes it through
    ``implicit_gemm``'s zero-padded operand views and the C tile (a product over a
    broadcast batch is never padded)."""
    split = knobs.split_k if isinstance(knobs.split_k, int) else 1
    wg = hasattr(knobs, "warpgroups")
    ext = (wgmma_padded_extents if wg else padded_extents)(knobs, form)
    return form.paddable and (split > 1 or ext != (form.M, form.N, form.K))


def check_wgmma_conv(cfg, op, target: Target | str | None = None) -> None:
    """Raise ScheduleError naming the rule wgmma knobs ``cfg`` break for conv stage
    ``op``: :func:`~.choice.wgmma_conv_refusal`, then :func:`check_wgmma_knobs` on the
    implicit GEMM (with the C tile)."""
    from .choice import wgmma_conv_refusal
    from .forms import conv_gemm_form

    target = as_target(target)
    why = wgmma_conv_refusal(op, target)
    if why is not None:
        raise ScheduleError(f"wgmma conv2d: {why}")
    form = conv_gemm_form(op)
    check_wgmma_knobs(cfg, form, f"wgmma conv2d {op.name} (GEMM {form.M}x{form.N}x{form.K})",
                      target, c_tile=True)
