"""A row-wise epilogue of the tensor-core GEMM: a softmax over the product's last axis in
the product's kernel.

An attention's scores ``softmax(Q K^T * scale)`` are a batch matmul whose rows (``N``
columns, the sequence length) fit one block tile. :func:`row_epilogue` recognizes such a
DAG: one tensor-core product ``P`` (:func:`~.gemm.forms.gemm_form`), an output stage
element-wise in ``P``, row reductions (softmax's maximum and exponential sum: one reduce
axis running over the last axis of ``P``, the output's leading axes as their own), and
element-wise stages between them (the scale, casts, the exponential), which are inlined.

:func:`schedule_gemm_rows` runs ``P`` on the tensor cores (wgmma on sm_90a where it takes
the product, else mma.sync) with ``block_n`` covering the whole row, and ``block_m``
dividing ``M``: each block stores its accumulators to the float32 C tile in shared memory
(the GEMM's tile epilogue, :func:`~.gemm.pieces.schedule_tile_epilogue`), then computes
every row reduction over the tile (:func:`schedule_row_reductions`: the tile's rows spread
over the block's threads, each row reduced by one thread or, where threads are left, by a
cross-thread reduction over the remaining thread index) into a small shared buffer, and
finally all threads run the output stage (the normalization with its rounding) over the
tile. One kernel writes the probabilities; the scores never reach global memory.

A product whose row does not fit (``N`` above :data:`MAX_ROW`, or no tile of the tables
covering it), or a DAG of another shape, is not a row epilogue: the default schedule then
schedules each stage on its own (several kernels, as before the graph fused them).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.simplify import simplify
from ...ir.te import ComputeOp
from ...passes.schedule.common import ScheduleError
from ...target import Target, as_target
from .analysis import is_epilogue_of, reads_through
from .gemm.knobs import TensorCoreConfig

MAX_ROW = 256
"""The longest row (the product's ``N``) one block tile covers: wgmma's widest tile, and
the widest mma.sync tile :func:`row_gemm_configs` offers."""


@dataclass
class RowEpilogue:
    """A product stage ``product``, the output stage ``output`` element-wise in it, and the
    row ``reductions`` (producers first) the output reads; ``inlined``: the other stages."""

    product: ComputeOp
    output: ComputeOp
    reductions: list
    inlined: list


def _reads_rows_of(red: ComputeOp, product: ComputeOp, inlined: set) -> bool:
    """Whether reduction ``red`` reads ``product`` only at ``[lead..., k]``: its own axes
    as the product's leading ones and its reduce axis as the last."""
    lead = [a.var for a in red.axis]
    (k,) = red.reduce_axis
    found = False
    for t, idx in reads_through(red, inlined):
        if t.op is not product:
            continue
        found = True
        if len(idx) != len(lead) + 1:
            return False
        if any(simplify(e) is not v for e, v in zip(idx, lead + [k.var])):
            return False
    return found


def row_epilogue(compute_ops: list, outputs: list) -> RowEpilogue | None:
    """The :class:`RowEpilogue` of a DAG (its compute stages in topological order and its
    output tensors), or None when it is not one (see the module doc)."""
    from .gemm.forms import GEMM_TAGS

    if len(outputs) != 1 or outputs[0].op.num_outputs != 1:
        return None
    out = outputs[0].op
    if out.reduce_axis:
        return None
    products = [op for op in compute_ops if op.reduce_axis and op.tag in GEMM_TAGS]
    if len(products) != 1:
        return None
    (product,) = products
    if tuple(product.shape) != tuple(out.shape):
        return None
    n = int(product.shape[-1])
    inlined_ops = [op for op in compute_ops if not op.reduce_axis and op is not out]
    if any(op.num_outputs != 1 for op in inlined_ops):
        return None
    inlined = {id(op) for op in inlined_ops}
    reductions = []
    for op in compute_ops:
        if not op.reduce_axis or op is product:
            continue
        if (len(op.reduce_axis) != 1 or int(op.reduce_axis[0].extent) != n
                or op.num_outputs != 1 or tuple(op.shape) != tuple(out.shape[:-1])):
            return None
        if not _reads_rows_of(op, product, inlined):
            return None
        for t, _ in reads_through(op, inlined):
            if isinstance(t.op, ComputeOp) and t.op is not product and not t.op.reduce_axis:
                return None  # reads a stage that is not inlined
        reductions.append(op)
    if not reductions or not is_epilogue_of(out, product, inlined):
        return None
    # every reduction is read by the output (directly or through another reduction), and
    # only at the output's leading axes
    lead = [a.var for a in out.axis[:-1]]
    read = set()
    for t, idx in reads_through(out, inlined):
        if any(t.op is r for r in reductions):
            if len(idx) != len(lead) or any(simplify(e) is not v for e, v in zip(idx, lead)):
                return None
            read.add(id(t.op))
    for r in reductions:
        own = [a.var for a in r.axis]
        for t, idx in reads_through(r, inlined):
            if any(t.op is q for q in reductions):
                # the block computes each reduction for its own rows only
                if any(simplify(e) is not v for e, v in zip(idx, own)):
                    return None
                read.add(id(t.op))
    if read != {id(r) for r in reductions}:
        return None
    return RowEpilogue(product, out, reductions, inlined_ops)


BARRIER_STEP = 24
"""What one step of a cross-thread reduction's tree (a shared store and a barrier) costs
:func:`row_threads` in units of one serial step along a row."""

SHUFFLE_STEP = 8
"""What one butterfly step of a shuffled cross-thread reduction (a dependent ``shfl.sync``
and the combining op) costs :func:`row_threads`, in the same units."""


def _reduce_steps(red: tuple, cols: int, threads: tuple) -> int:
    """Serial steps of one row reduced across the ``(extent, tag)`` thread index ``red``
    of a block of ``threads``: each thread's part of the row, then warp shuffles where
    ``cross_thread_reduction`` uses them (threadIdx.x, a power of two, whole warps: a
    barrier above a warp), else a tree of barriers; one barrier before the readers."""
    n, tag = red
    levels = (n - 1).bit_length()
    total = 1
    for ext, _ in threads:
        total *= ext
    shuffled = tag == "threadIdx.x" and n & (n - 1) == 0 and total % 32 == 0
    if shuffled:
        sync = SHUFFLE_STEP * levels + BARRIER_STEP * (1 + (n > 32))
    else:
        sync = BARRIER_STEP * (1 + levels)
    return -(-cols // n) + sync


def row_threads(rows: int, threads: tuple, cols: int = 128) -> tuple | None:
    """How the block's ``threads`` (``(extent, tag)``, innermost first) cover the ``rows``
    of a tile for a reduction along its rows of ``cols``: ``(row_tags, reduce_tag)``, the
    ``(extent, tag)`` the rows are split over (innermost first; the innermost may be
    shorter than its thread index, which is then guarded) and the ``(extent, tag)`` of the
    thread index left for a cross-thread reduction along the row (or None: each thread
    reduces its rows alone). Of the plans where every other thread index divides the rows
    left, the cheapest by a count of serial steps (rows per thread times the row's steps,
    :data:`BARRIER_STEP` per level of a reduction tree, :data:`SHUFFLE_STEP` per butterfly
    step where the reduction is shuffled); None where there is none. A
    guarded row index never goes with a cross-thread reduction, whose barriers every
    thread must reach."""
    tags = [(n, tag) for n, tag in threads if n > 1]
    best = None
    for red in [None] + tags:
        left = rows
        row_tags = []
        ok = True
        for n, tag in tags:
            if red is not None and tag == red[1]:
                continue
            if left % n == 0:
                row_tags.append((n, tag))
                left //= n
            elif not row_tags and red is None and n > left:
                row_tags.append((left, tag))  # guarded: the tile has fewer rows
                left = 1
            else:
                ok = False
                break
        if not ok:
            continue
        if red is None:
            cost = left * cols
        else:
            cost = left * _reduce_steps(red, cols, threads)
        if best is None or cost < best[0]:
            best = (cost, row_tags, red)
    return None if best is None else (best[1], best[2])


def schedule_row_reductions(s, o, at, reductions: list, rows: int, threads: tuple,
                            cols: int = 128) -> None:
    """Compute each row reduction (``reductions``, producers first) at loop ``at`` of
    output stage ``o`` (the block's tile loop) into a shared buffer: the tile's ``rows``
    (of ``cols``) spread over the ``threads`` (:func:`row_threads`), the reduce axis
    serial per thread, or split over the thread index left for a cross-thread
    reduction."""
    plan = row_threads(rows, threads, cols)
    if plan is None:
        raise ScheduleError(f"the row reductions of {o.op.name}: {rows} rows do not fit the "
                            f"block's threads {threads}")
    row_tags, red_tag = plan
    for red in reversed(reductions):  # a stage goes inside after all its readers
        # a serial reduction accumulates in a register (a shared accumulator would be a
        # barrier per step); the cross-thread one has its own register partials
        acc = s.cache_write(red.output(0), "local") if red_tag is None else None
        st = s[red]
        st.set_scope("shared")
        st.compute_at(o, at)
        *lead, r = st.op.axis
        loops = []
        for ext, tag in row_tags:
            r, t = st.split(r, factor=ext)
            loops.append((t, tag))
        order = list(lead) + [r] + [t for t, _ in reversed(loops)]
        if red_tag is not None:
            (k,) = st.op.reduce_axis
            ko, kt = st.split(k, factor=red_tag[0])
            order += [kt, ko]
        st.reorder(*order)
        for t, tag in loops:
            st.bind(t, tag)
        if red_tag is not None:
            st.bind(kt, red_tag[1])
        else:
            s[acc].compute_at(st, loops[0][0] if loops else r)


def row_gemm_configs(form, target: Target | str | None = None) -> list:
    """The mma.sync tiles a row epilogue may take for ``form``: ``block_n = N`` (one tile
    covers the row), ``block_m`` of 128 down to 16 dividing ``M``, 1 to 4 warps along
    each side (warp tiles of 16 to 64 rows, 8 to 128 columns), at most 256 threads, each
    with the first legal ``block_k`` and stages of
    :func:`~.gemm.chooser._first_legal`, no split-K."""
    from .gemm.chooser import _first_legal

    target = as_target(target)
    bn = form.N
    out = []
    if bn > MAX_ROW or bn % 8:
        return out
    for bm in (128, 64, 32, 16):
        if form.M % bm:
            continue
        for wm in (1, 2, 4):
            for wn in (1, 2, 4, 8):
                tm, tn = bm // wm, bn // wn
                if bm % wm or bn % wn or tm % 16 or tn % 8 or not 16 <= tm <= 64:
                    continue
                if not 8 <= tn <= 128 or wm * wn > 8:
                    continue
                for bk in (64, 32, 16):
                    if bk < form.mma_k or -(-form.K // bk) * bk - form.K > max(form.K // 8, 15):
                        continue
                    steps = -(-form.K // bk)
                    for stages in range(min(4, steps), 0, -1):
                        cfg = _first_legal(form, target, bm, bn, bk, wm, wn, stages)
                        if cfg is not None:
                            out.append(cfg)
                            break
                    else:
                        continue
                    break
    return out


def _mma_threads(cfg: TensorCoreConfig) -> tuple:
    return ((32, "threadIdx.x"), (cfg.warps_n, "threadIdx.y"), (cfg.warps_m, "threadIdx.z"))


def _wgmma_threads(cfg) -> tuple:
    from ...ir.intrin.wgmma import WARPGROUP

    return ((WARPGROUP, "threadIdx.x"), (cfg.warpgroups, "threadIdx.y"))


def row_threads_of(cfg) -> tuple:
    """The block's threads (``(extent, tag)``, innermost first) of a row epilogue's config
    (wgmma or mma.sync)."""
    from .gemm.knobs import WgmmaScheduleConfig

    return _wgmma_threads(cfg) if isinstance(cfg, WgmmaScheduleConfig) else _mma_threads(cfg)


def row_configs(form, target: Target | str | None = None) -> list:
    """Every tile configuration a row epilogue over ``form`` may take on ``target``: the
    wgmma ones (:func:`~.gemm.chooser.wgmma_candidates` with ``block_n = N``, the C
    tile, no split-K and ``block_m`` dividing ``M``) where wgmma runs the product, then
    the mma.sync ones of :func:`row_gemm_configs`; each with threads that fit the row
    reductions (:func:`row_threads`)."""
    from .gemm.chooser import wgmma_candidates
    from .gemm.rules import padded_extents

    target = as_target(target)
    if form.N > MAX_ROW:
        return []
    wg = [c for c in wgmma_candidates(form, target, epilogue_tile=True, split_k=False)
          if c.block_n == form.N and padded_extents(c, form)[0] == form.M]
    cands = wg + row_gemm_configs(form, target)
    return [c for c in cands if row_threads(c.block_m, row_threads_of(c), form.N) is not None]


ROW_STEP_CYCLES = 4
"""Cycles of one serial step of a row reduction (a shared load and an add or max, several
threads of a warp in flight) in :func:`row_time`."""


def row_time(cfg, form, target: Target | str | None = None) -> float:
    """A rough estimate in seconds of the row epilogue with ``cfg``: the product's
    (:func:`~.gemm.estimate.wgmma_time` with the C tile, or
    :func:`~.gemm.estimate.gemm_time`) plus, per wave of blocks, the two row reductions
    (:func:`row_threads`' serial steps at :data:`ROW_STEP_CYCLES`) and the normalization
    (the tile's elements over the block's threads)."""
    from .gemm.estimate import gemm_time, wgmma_time
    from .gemm.knobs import WgmmaScheduleConfig

    t = as_target(target)
    if isinstance(cfg, WgmmaScheduleConfig):
        base = wgmma_time(cfg, form, t, True)
    else:
        base = gemm_time(cfg, form, t)
    threads = row_threads_of(cfg)
    nthreads = 1
    for n, _ in threads:
        nthreads *= n
    row_tags, red = row_threads(cfg.block_m, threads, form.N)
    covered = 1
    for ext, _ in row_tags:
        covered *= ext
    left = -(-cfg.block_m // covered)
    steps = left * form.N if red is None else left * _reduce_steps(red, form.N, threads)
    norm = cfg.block_m * form.N // nthreads
    blocks = form.batch * (form.M // cfg.block_m)
    waves = -(-blocks // t.num_sms)
    return base + waves * (2 * steps + norm) * ROW_STEP_CYCLES / t.clock_hz


def choose_row_config(form, target: Target | str | None = None):
    """The tiles of a row epilogue over ``form`` on ``target``: of :func:`row_configs`,
    the one :func:`row_time` expects fastest (ties to the taller tile), or None where no
    tile covers the row with threads that fit the reductions."""
    target = as_target(target)
    cands = row_configs(form, target)
    if not cands:
        return None
    return min(cands, key=lambda c: (row_time(c, form, target), -c.block_m))


def schedule_gemm_rows(s, rows: RowEpilogue, target: Target | str | None = None, cfg=None):
    """Schedule the DAG of ``rows`` (:func:`row_epilogue`) in one kernel (see the module
    doc); ``cfg`` overrides :func:`choose_row_config`. Returns the config used; raises
    :class:`ScheduleError` where no tile covers the product's rows."""
    from .gemm.forms import gemm_form
    from .gemm.knobs import WgmmaScheduleConfig
    from .gemm.schedule import schedule_gemm_tensorcore, schedule_gemm_wgmma

    target = as_target(target)
    p = rows.product
    form = gemm_form(p, target)
    if form is None:
        raise ScheduleError(f"stage {p.name}: not a product the tensor cores of "
                            f"{target.arch} run, which a row epilogue needs")
    cfg = cfg or choose_row_config(form, target)
    if cfg is None:
        raise ScheduleError(f"stage {p.name}: no tensor-core tile covers its rows of "
                            f"{form.N} (at most {MAX_ROW}) with block_m dividing {form.M}")
    if cfg.block_n != form.N:
        raise ScheduleError(f"stage {p.name}: a row epilogue needs block_n = N = {form.N}, "
                            f"got {cfg.block_n}")
    if form.M % cfg.block_m or getattr(cfg, "split_k", 1) != 1:
        raise ScheduleError(f"stage {p.name}: a row epilogue needs block_m dividing "
                            f"M = {form.M} and no split-K, got {cfg}")
    # the stages the product reads (its operands' layout chains) are inlined into its
    # shared-memory copies after the GEMM schedule made them; the others (the scale, the
    # casts, the exponential) first, so the epilogue and the reductions read the C tile
    operands = {id(t.op) for t in p.input_tensors}
    for op in reversed(rows.inlined):
        if id(op) not in operands:
            s[op].compute_inline()
    if isinstance(cfg, WgmmaScheduleConfig):
        schedule_gemm_wgmma(s, p, rows.output, cfg, target=target, form=form,
                            row_reductions=rows.reductions)
    else:
        schedule_gemm_tensorcore(s, p, rows.output, cfg, target=target, form=form,
                                 row_reductions=rows.reductions)
    for op in reversed(rows.inlined):
        if id(op) in operands:
            s[op].compute_inline()
    return cfg
