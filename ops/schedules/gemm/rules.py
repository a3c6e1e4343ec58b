"""The one legality check of each tensor-core form, a function of the knob values and the
:class:`~.forms.GemmForm` that the schedules, the choosers, the templates and the sketches
all ask: ``(ok, rule)`` pairs over ints or arrays of knobs (:func:`gemm_rules`,
:func:`conv_rules`, :func:`wgmma_rules`); the ``check_*`` functions name the first broken."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ....passes.schedule.common import ScheduleError
from ....target import Target, as_target
from .forms import GemmForm
from .knobs import BLOCK_N, BLOCK_N_K_MAJOR, ROW_BYTES, TensorCoreConfig

C_TILE_BYTES = 4
"""Bytes per element of the block's accumulator tile in shared memory (float32)."""


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


# -- mma.sync ---------------------------------------------------------------------------


def padded_extents(cfg, form: GemmForm) -> tuple[int, int, int]:
    """``(Mp, Np, Kp)``: the extents rounded up to the tiles of ``cfg`` (either kind; ``K``
    to split-K parts of whole steps)."""
    bk = block_k(form) if hasattr(cfg, "warpgroups") else cfg.block_k
    return (_round_up(form.M, cfg.block_m), _round_up(form.N, cfg.block_n),
            _round_up(form.K, bk * max(cfg.split_k, 1)))


def needs_padding(cfg: TensorCoreConfig, form: GemmForm) -> bool:
    """Whether ``cfg``'s tiles leave part of a tile outside ``form``'s product."""
    return padded_extents(cfg, form) != (form.M, form.N, form.K)


def gemm_shared_bytes(cfg: TensorCoreConfig, form: GemmForm, c_tile: bool = True) -> int:
    """Shared memory of one block of ``cfg`` (:func:`shared_bytes`)."""
    return int(shared_bytes(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.pad, form,
                            c_tile))


def shared_bytes(block_m, block_n, block_k, stages, pad, form: GemmForm, c_tile=True):
    """Shared memory of one mma.sync block (ints or arrays): ``stages`` A and B tiles (rows
    padded by ``pad``) and, with ``c_tile``, the float32 C tile (rows padded by 4)."""
    a = block_m * (block_k + pad)
    b = block_k * (block_n + pad) if form.b_kn else block_n * (block_k + pad)
    c = np.where(c_tile, block_m * (block_n + 4) * C_TILE_BYTES, 0)
    return np.maximum(stages, 1) * (a + b) * form.elem_bytes + c


def _int(v) -> bool:
    """Whether ``v`` is an int (not a bool) or an array of ints."""
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "iu"
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def holds(rules, n: int) -> np.ndarray:
    """Where every rule of ``rules`` holds over a population of ``n``."""
    valid = np.ones(n, dtype=bool)
    for ok, _ in rules:
        valid &= ok
    return valid


def first_broken(rules):
    """The text of the first rule that does not hold (in order: a rule may assume those
    before it), or None."""
    for ok, rule in rules:
        if not ok:
            return rule()
    return None


def knob_rules_mma(k, M, N, K, mma_k: int, eb: int, split_k_ok: bool = True):
    """The rules of mma.sync knobs ``k`` (a :class:`TensorCoreConfig`, or an object of
    arrays) on an ``M x N x K`` product its tiles divide: ``(ok, rule)`` pairs, ``rule()``
    the end of a "need ..." sentence."""
    bm, bn, bk, wm, wn, vec = k.block_m, k.block_n, k.block_k, k.warps_m, k.warps_n, k.vec
    threads = 32 * wm * wn
    yield (np.equal(k.split_k, 1) | split_k_ok,
           lambda: f"split_k 1 (split_k {k.split_k}: this schedule has no split-K)")
    yield M % bm == 0, lambda: f"block_m {bm} divides M {M}"
    yield N % bn == 0, lambda: f"block_n {bn} divides N {N}"
    yield K % bk == 0, lambda: f"block_k {bk} divides K {K}"
    yield bk % mma_k == 0, lambda: f"block_k {bk} is a multiple of {mma_k}"
    yield ((bm % wm == 0) & (bm // wm % 16 == 0),
           lambda: f"the warp tile's rows (block_m / warps_m = {bm}/{wm}) are a multiple of 16")
    yield ((bn % wn == 0) & (bn // wn % 8 == 0),
           lambda: f"the warp tile's columns (block_n / warps_n = {bn}/{wn}) are a multiple "
                   "of 8")
    yield threads <= 1024, lambda: "at most 32 warps per block"
    yield _int(k.pad) and (k.pad >= 0) & (k.pad * eb % 16 == 0), lambda: (
        f"pad {k.pad} is a multiple of {16 // eb} elements of {eb} bytes (16-byte rows)")
    yield ((k.stages == 1) | ((k.stages >= 2) & (k.stages <= 5)),
           lambda: f"stages {k.stages} is 1 to 5")
    yield (not k.async_copy or vec * eb in (4, 8, 16),
           lambda: f"vec {vec} elements of {eb} bytes make a cp.async of 4, 8 or 16 bytes")
    yield (k.frag_load in ("ldmatrix", "load"),
           lambda: f"frag_load is 'ldmatrix' or 'load', not {k.frag_load!r}")
    for n_el in (bm * bk, bn * bk):
        yield n_el % (threads * vec) == 0, lambda n_el=n_el: (
            f"the threads x vec ({threads} x {vec}) divide a shared tile of {n_el} elements")


def _steps_rule(k, K: int):
    """At least ``stages`` ``block_k`` steps (in each split-K part) where pipelined."""
    part = k.block_k * k.split_k
    steps = -(-K // part)
    return (k.stages <= 1) | (steps >= k.stages), lambda: (
        f"need at least {k.stages} block_k steps for {k.stages} pipeline stages (K = {K} "
        f"padded to {steps * part} gives {steps}"
        f"{' per split_k part' if k.split_k > 1 else ''})")


def _positive(k, names: tuple, how: str):
    for what in names:
        v = getattr(k, what)
        yield _int(v) and v >= 1, lambda v=v, what=what: how.format(what=what, v=v)


def gemm_rules(k, form: GemmForm, target: Target | str | None = None, c_tile: bool = True):
    """The rules of mma.sync knobs ``k`` for product ``form`` (``rule()`` a whole clause):
    TF32 asked for; positive ints; no split-K over a broadcast batch (which is not padded);
    :func:`knob_rules_mma` on the padded product; copies that do not straddle two rows;
    at least ``stages`` steps a split-K part; shared memory within the opt-in limit."""
    t = as_target(target)
    yield (not form.tf32 or k.tf32, lambda: "float32 inputs are multiplied in TF32 only "
           "with TensorCoreConfig(tf32=True)")
    yield from _positive(k, ("block_m", "block_n", "block_k", "vec"),
                         "{what} must be a positive int, got {v!r}")
    yield from _positive(k, ("split_k",), "need split_k to be a positive int, got {v!r}")
    yield (np.logical_or(form.paddable, np.equal(k.split_k, 1)), lambda: (
        f"need split_k 1 on a broadcast batch (split_k {k.split_k}: the split-K parts are "
        "computed through implicit_gemm, whose batch axis both operands must read; one "
        "operand here has batch 1)"))
    bm, bn, bk, split = k.block_m, k.block_n, k.block_k, k.split_k
    if form.paddable:
        ext = (-(-form.M // bm) * bm, -(-form.N // bn) * bn,
               -(-form.K // (bk * split)) * (bk * split))
    else:
        ext = (form.M, form.N, form.K)
    for ok, rule in knob_rules_mma(k, *ext, form.mma_k, form.elem_bytes):
        yield ok, lambda rule=rule: f"need {rule()}"
    b_row = ("N", form.N) if form.b_kn else ("K", form.K)
    for (name, n), t_name in ((("K", form.K), "A"), (b_row, "B")):
        yield n % k.vec == 0, lambda name=name, n=n, t_name=t_name: (
            f"need vec {k.vec} to divide {name} = {n} (a copy of vec elements must not "
            f"straddle two rows of {t_name})")
    yield _steps_rule(k, form.K)
    smem = shared_bytes(bm, bn, bk, k.stages, k.pad, form, c_tile)
    limit = t.max_shared_memory_per_block_optin
    yield smem <= limit, lambda: (f"need the block's shared tiles ({smem} bytes) to fit the "
                                  f"{limit} bytes a block of {t.arch} may use")


def check_gemm_config(cfg: TensorCoreConfig, form: GemmForm, where: str = "",
                      target: Target | str | None = None, c_tile: bool = True) -> None:
    """Raise :class:`ScheduleError` naming the first rule of :func:`gemm_rules` broken."""
    why = first_broken(gemm_rules(cfg, form, target, c_tile))
    if why is not None:
        raise ScheduleError(f"{where or 'tensor-core GEMM'}: {why}")


def conv_shared_bytes(cfg, elem_bytes: int):
    """Shared memory of one mma.sync conv block: ``stages`` A and B tiles and the C tile."""
    a = cfg.block_m * (cfg.block_k + cfg.pad)
    b = cfg.block_k * (cfg.block_n + cfg.pad)
    return (np.maximum(cfg.stages, 1) * (a + b) * elem_bytes
            + cfg.block_m * cfg.block_n * C_TILE_BYTES)


def copy_vectors(cfg: TensorCoreConfig, C_in: int, N: int, tf32: bool) -> tuple[int, int]:
    """Elements per copy of the mma.sync conv's A tile (as many of ``cfg.vec`` as divide
    ``C_in``) and B tile (of ``N``; TF32 keeps B as ``[n, k]``: one)."""
    from math import gcd

    return gcd(cfg.vec, C_in), 1 if tf32 else gcd(cfg.vec, N)


def conv_rules(k, M: int, N: int, K: int, tf32: bool, target: Target | str | None = None):
    """The rules of mma.sync knobs ``k`` for a conv's implicit GEMM ``M x N x K``: positive
    ints, :func:`knob_rules_mma` on the padded product, the tiles within the block's shared
    memory, at least ``stages`` steps a split-K part."""
    t = as_target(target)
    mma_k, eb = (8, 4) if tf32 else (16, 2)
    yield from _positive(k, ("block_m", "block_n", "block_k"), "need {what} to be a positive int")
    yield from _positive(k, ("split_k",), "need split_k to be a positive int, got {v!r}")
    ext = [-(-x // b) * b for x, b in ((M, k.block_m), (N, k.block_n),
                                        (K, k.block_k * k.split_k))]
    yield from knob_rules_mma(k, *ext, mma_k, eb)
    smem = conv_shared_bytes(k, eb)
    limit = t.max_shared_memory_per_block
    yield smem <= limit, lambda: (f"need the A, B and C tiles ({smem} bytes of shared "
                                  f"memory) to fit the block's {limit}")
    yield _steps_rule(k, K)


def check_conv_config(cfg: TensorCoreConfig, op, target: Target | str | None = None) -> None:
    """Raise ScheduleError naming the first rule of :func:`conv_rules` broken."""
    from .forms import conv_gemm_shape

    M, N, K, _ = conv_gemm_shape(op)
    why = first_broken(conv_rules(cfg, M, N, K, op.input_tensors[0].dtype == "float32",
                                  target))
    if why is not None:
        raise ScheduleError(f"tensor-core conv2d {op.name} (GEMM {M}x{N}x{K}) with {cfg}: "
                            f"{why}")


# -- wgmma ------------------------------------------------------------------------------


def block_k(form) -> int:
    """The K step of ``form``'s wgmma tiles: one 128-byte row (64 fp16, 128 fp8)."""
    return ROW_BYTES // form.elem_bytes


C_TILE_ALIASED = "aliased"
"""The ``c_tile`` of :func:`wgmma_shared_bytes`, :func:`wgmma_rules` and the estimates for
a C tile placed over the operand stages (:func:`aliased_shared_bytes`); ``True`` counts it
beside them, as the choosers' rules and ties were fitted to and as every legality check
keeps counting it (a kernel that fits that way fits either way)."""


def wgmma_shared_bytes(cfg, c_tile=False, target=None):
    """Shared memory of the wgmma schedule: ``stages`` A and B tiles of 128-byte rows and,
    with ``c_tile``, the float32 C tile (rows padded by 4): beside them (``True``) or over
    them (:data:`C_TILE_ALIASED`, :func:`aliased_shared_bytes`)."""
    aliased = isinstance(c_tile, str) and c_tile == C_TILE_ALIASED
    c = np.where(True if aliased else c_tile, cfg.block_m * (cfg.block_n + 4) * C_TILE_BYTES, 0)
    operands = cfg.stages * (cfg.block_m + cfg.block_n) * ROW_BYTES
    return aliased_shared_bytes(operands, c, target) if aliased else operands + c


def aliased_shared_bytes(operands, c_tile, target=None):
    """Shared memory of a block whose C tile (``c_tile`` bytes, 0 for none) is written after
    its main loop, as the wgmma schedule writes it: where the two exceed the static limit,
    plan_dynamic_shared places the C tile over the operand stages (dead by then: the copies
    and the wgmmas waited for, a barrier passed), so the block takes the larger of the two;
    under the limit they are static buffers side by side."""
    limit = as_target(target).max_shared_memory_per_block
    total = np.asarray(operands) + c_tile
    return np.where(total > limit, np.maximum(operands, c_tile), total)


def wgmma_rules(k, form, target=None, c_tile=True, steps: bool = True):
    """The rules of wgmma knobs ``k`` for a product ``form`` wgmma runs (convolutions' too):
    the knobs' ranges (``block_n`` 192 too where B is read K-major); no split-K over a
    broadcast batch, whose tiles divide it; a ``raster`` dividing the row blocks (none on a
    convolution); at least ``stages`` steps a split-K part (unless not ``steps``); shared
    memory (with the C tile where ``c_tile``) within the opt-in limit."""
    t = as_target(target)
    widths = BLOCK_N if (form.b_kn or form.conv) else BLOCK_N_K_MAJOR
    yield np.isin(k.block_n, widths), lambda: f"need block_n in {widths} (got {k.block_n})"
    yield (np.isin(k.warpgroups, (1, 2)),
           lambda: f"need warpgroups 1 or 2 (got {k.warpgroups})")
    yield (_int(k.stages) and (k.stages >= 1) & (k.stages <= 5),
           lambda: f"need stages 1 to 5 (got {k.stages})")
    yield np.isin(k.in_flight, (0, 1)), lambda: f"need in_flight 0 or 1 (got {k.in_flight})"
    staged = getattr(k, "staged_epilogue", False)
    yield isinstance(staged, (bool, np.bool_)), lambda: (
        f"need staged_epilogue True or False (got {staged!r})")
    yield not (staged and form.conv), lambda: (
        "need staged_epilogue False on a convolution (its output always goes through the C "
        "tile)")
    yield (k.in_flight == 0) | (k.stages >= 3), lambda: (
        f"need 3 stages or more for in_flight=1 (got {k.stages}: the copies run stages - 2 "
        "tiles ahead)")
    yield from _positive(k, ("split_k",), "need split_k a positive int (got {v!r})")
    yield np.logical_or(form.paddable, np.equal(k.split_k, 1)), lambda: (
        "need split_k 1 on a broadcast batch (the split-K parts are computed through "
        "implicit_gemm, whose batch axis both operands must read)")
    bm, bk = 64 * k.warpgroups, block_k(form)
    if not form.paddable:
        for axis, ext, tile, name in (("M", form.M, bm, "64 * warpgroups ="),
                                      ("N", form.N, k.block_n, "block_n"),
                                      ("K", form.K, bk, "the K step")):
            yield ext % tile == 0, lambda axis=axis, ext=ext, tile=tile, name=name: (
                f"need {name} {tile} to divide {axis} {ext} (the product is not padded)")
    raster = getattr(k, "raster", 1)
    yield from _positive(SimpleNamespace(raster=raster), ("raster",),
                         "need raster a positive int (got {v!r})")
    row_blocks = -(-form.M // bm)
    if form.conv:
        yield np.equal(raster, 1), lambda: (
            f"need raster 1 on a convolution (got {raster}: its output has no row blocks)")
    else:
        yield row_blocks % raster == 0, lambda: (
            f"need raster {raster} to divide the {row_blocks} row blocks of {bm} rows "
            f"(M = {form.M})")
    part = bk * k.split_k
    n_steps = -(-form.K // part)
    yield (not steps) | (k.stages <= 1) | (n_steps >= k.stages), lambda: (
        f"need at least {k.stages} steps of {bk} for {k.stages} pipeline stages (K = "
        f"{form.K} padded to {n_steps * part} gives {n_steps}"
        f"{' per split_k part' if k.split_k > 1 else ''})")
    smem = wgmma_shared_bytes(k, c_tile, t)
    optin = t.max_shared_memory_per_block_optin
    yield smem <= optin, lambda: (
        f"need at most {optin} bytes of shared memory per block ({k.stages} stages of "
        f"{bm}x{bk} and {k.block_n}x{bk} tiles{' and the f32 C tile' if c_tile else ''} "
        f"take {smem})")
    yield from persistent_rules(k, form, t, c_tile)


PERSISTENT_REGISTERS = 40
"""Registers a wgmma thread holds besides its ``block_n / 2`` accumulators (ptxas: 100 at
128 x 128, 128 at 128 x 192, 162 at 128 x 256, two warpgroups): what several persistent
blocks an SM must leave room for."""
SHARED_RESERVED_PER_BLOCK = 1024
"""Shared memory the hardware reserves for each resident block (sm_80 on)."""


def persistent_rules(k, form, target, c_tile=True):
    """The rules of the ``persistent`` knob: 0 (off) to :data:`PERSISTENT_BLOCKS`' largest;
    none on a convolution; the C tile beside the operand stages (a persistent block's next
    tile fills the stages while this tile's epilogue reads the C tile, so the two never
    share bytes), and that many blocks' shared memory and registers on one SM."""
    from .knobs import PERSISTENT_BLOCKS

    per_sm = getattr(k, "persistent", 0)
    yield np.isin(per_sm, PERSISTENT_BLOCKS) & _int(per_sm), lambda: (
        f"need persistent in {PERSISTENT_BLOCKS} (blocks an SM; got {per_sm!r})")
    if not np.any(np.greater(per_sm, 0)):
        return  # (the populations of the tuners, which have no such knob)
    on = np.greater(per_sm, 0)
    yield ~on | (not form.conv), lambda: (
        "need persistent 0 on a convolution (its implicit GEMM keeps one tile a block)")
    beside = wgmma_shared_bytes(k, True if isinstance(c_tile, str) else c_tile, target)
    optin = target.max_shared_memory_per_block_optin
    yield ~on | (beside <= optin), lambda: (
        f"need the C tile beside the operand stages in a persistent block (the next tile's "
        f"copies fill the stages during this tile's epilogue): {beside} bytes, more than "
        f"the {optin} a block may use; use fewer stages, a narrower tile or persistent 0")
    per_sm_bytes = np.maximum(per_sm, 1) * (beside + SHARED_RESERVED_PER_BLOCK)
    yield ~on | (per_sm_bytes <= target.shared_memory_per_sm), lambda: (
        f"need {per_sm} persistent blocks of {beside} bytes of shared memory (and "
        f"{SHARED_RESERVED_PER_BLOCK} reserved each) to fit the "
        f"{target.shared_memory_per_sm} of an SM of {target.arch}")
    threads = 128 * np.asarray(k.warpgroups)
    regs = np.minimum(target.max_registers_per_thread,
                      target.registers_per_sm // (np.maximum(per_sm, 1) * threads))
    need = np.asarray(k.block_n) // 2 + PERSISTENT_REGISTERS
    yield ~on | (need <= regs), lambda: (
        f"need {per_sm} persistent blocks of {threads} threads to fit one SM's registers: "
        f"{regs} a thread, where {k.block_n // 2} accumulators and about "
        f"{PERSISTENT_REGISTERS} more take {need}; use persistent 1 or a narrower tile")


def check_wgmma_gemm(cfg, form, where: str = "", target=None, c_tile: bool = True) -> None:
    """Raise :class:`ScheduleError` for :func:`~.choice.wgmma_refusal`, then
    :func:`check_wgmma_knobs`."""
    from .choice import wgmma_refusal

    where = where or "wgmma GEMM"
    why = wgmma_refusal(form, target)
    if why is not None:
        raise ScheduleError(f"{where}: {why}")
    check_wgmma_knobs(cfg, form, where, target, c_tile)


def check_wgmma_knobs(cfg, form, where: str, target=None, c_tile: bool = True) -> None:
    """Raise :class:`ScheduleError` naming the first rule of :func:`wgmma_rules` broken."""
    why = first_broken(wgmma_rules(cfg, form, target, c_tile))
    if why is not None:
        raise ScheduleError(f"{where} with {cfg}: {why}")


def needs_c_tile(cfg, form, epilogue_tile: bool) -> bool:
    """Whether the wgmma schedule stores through the C tile: the epilogue reads one
    (``epilogue_tile``), the tiles pad the product or split K, or ``cfg`` asks for it
    (``staged_epilogue``)."""
    return epilogue_tile or pads(cfg, form) or bool(getattr(cfg, "staged_epilogue", False))


def pads(knobs, form) -> bool:
    """Whether ``knobs`` (either kind) pad ``form``'s product or split its reduction (the
    schedule then goes through ``implicit_gemm`` and the C tile)."""
    split = knobs.split_k if isinstance(knobs.split_k, int) else 1
    ext = padded_extents(knobs, form)
    return form.paddable and (split > 1 or ext != (form.M, form.N, form.K))


def check_wgmma_conv(cfg, op, target: Target | str | None = None) -> None:
    """Raise ScheduleError for :func:`~.choice.wgmma_conv_refusal`, then
    :func:`check_wgmma_knobs` on the implicit GEMM (with the C tile)."""
    from .choice import wgmma_conv_refusal
    from .forms import conv_gemm_form

    target = as_target(target)
    why = wgmma_conv_refusal(op, target)
    if why is not None:
        raise ScheduleError(f"wgmma conv2d: {why}")
    form = conv_gemm_form(op)
    check_wgmma_knobs(cfg, form, f"wgmma conv2d {op.name} (GEMM {form.M}x{form.N}x{form.K})",
                      target, c_tile=True)
