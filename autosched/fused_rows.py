"""The fused-rows sketch rule: row-wise normalizations (softmax, layer norm) in one kernel.

A task whose output is element-wise over rows ``out[..., j]`` and whose reductions all
reduce one axis per row (their shape is the output's leading axes, optionally with a
trailing axis of extent 1, as layer norm's mean and variance are), every other stage
element-wise, gets the sketch ``fused_rows(out)``: one block per row, the output's row
elements spread over the block's threads, and every reduction computed at that row's block
as a cross-thread reduction (each thread sums a strided part of the row, then warp
shuffles combine the threads' parts: every thread count offered is a power of two of whole
warps on threadIdx.x, see ``passes/lower/cross_thread_reduction.py``). Softmax's
maximum, exponential sum and normalization, or layer norm's mean, variance and scaling,
are then one kernel instead of one per reduction. The output may be narrower than the
reductions (a float32 softmax with ``out_dtype="float16"``): it is
one more element-wise expression of the output stage, and the model counts the output's
bytes in its own dtype.

Its one step, :class:`FusedRowsStep`, samples the threads per block and whether the
threads' strided loops are unrolled. The passes come from the te schedule facade
(:func:`schedule_fused_rows`), so a state is recorded, printed and replayed like any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..passes.schedule.names import slot_name
from .sketch import ChoiceSlot, Sketch

THREAD_CHOICES = (32, 64, 128, 256, 512, 1024)
UNROLL_CHOICES = (0, 1)

ROW_ELEMENTS_PER_THREAD = 8
"""Elements of a row each thread of the default row kernel takes (:func:`default_threads`)."""


def default_threads(cols: int) -> int:
    """Threads a row of the default row kernel (``graph.build`` without records, and the
    default candidate of a tuning run) for rows of ``cols`` elements: the fewest whole
    warps, a power of two of at most 1,024, that leave each thread at most
    :data:`ROW_ELEMENTS_PER_THREAD` elements. Measured on an H200 (``bench/bench_rows.py``,
    768 columns of float16, 128 to 4,096 rows): 128 threads came within 13% of the best of
    every thread count, 16-byte vectors or not, for layer norms, RMS norms and softmaxes,
    where the fused-rows time model's pick took up to 2.2x the best (docs/graph_kernels.md)."""
    threads = 32
    while threads < 1024 and threads * ROW_ELEMENTS_PER_THREAD < cols:
        threads *= 2
    return threads


@dataclass(frozen=True)
class FusedRowsStep:
    """The output ``stage`` (``rows`` rows of ``cols`` elements) and the ``reductions``
    computed in each row's block (names, consumers first). ``unique``: bytes the kernel
    moves at least; ``passes``: the row's reads in all (one per reduction, one for the
    output). ``tensors``: ``(output, reductions, inlined)`` te tensors (not compared)."""

    stage: str
    rows: int
    cols: int
    reductions: tuple
    unique: float
    passes: int
    tensors: tuple = field(default=(), compare=False, hash=False)

    def slot(self, kind: str) -> str:
        return slot_name(self.stage, "rows", kind)

    def threads(self) -> tuple:
        return tuple(t for t in THREAD_CHOICES if t < 2 * max(32, self.cols)) or (32,)

    def slots(self) -> list:
        return [ChoiceSlot(self.slot("threads"), self.threads()),
                ChoiceSlot(self.slot("unroll"), UNROLL_CHOICES)]

    def emit(self, vals, out) -> None:
        s = schedule_fused_rows(self, int(vals[self.slot("threads")]),
                                bool(vals[self.slot("unroll")]))
        out["structure"].extend(s.pipeline)


def schedule_fused_rows(step: FusedRowsStep, threads: int, unroll: bool = False):
    """The te schedule of ``step`` with ``threads`` threads per row: the element-wise
    stages inlined, the output's rows on ``blockIdx.x`` and its columns strided over
    ``threadIdx.x``, each reduction (consumers first) computed at the row's block with its
    reduce axis split by the thread count, the thread part outermost (coalesced reads) and
    reduced across the threads."""
    from .. import te

    out, reductions, inlined = step.tensors
    s = te.create_schedule(out.op)
    for t in inlined:
        s[t].compute_inline()
    o = s[out]
    *lead, j = o.op.axis
    row = o.fuse(*lead) if len(lead) > 1 else lead[0]
    o.bind(row, te.thread_axis("blockIdx.x"))
    jo, ji = o.split(j, factor=threads)
    o.bind(ji, te.thread_axis("threadIdx.x"))
    if unroll:
        o.unroll(jo)
    for r in reductions:
        st = s[r]
        st.compute_at(o, row)
        (k,) = st.op.reduce_axis
        ko, ki = st.split(k, factor=threads)
        st.reorder(ki, ko)
        st.bind(ki, te.thread_axis("threadIdx.x"))
        if unroll:
            st.unroll(ko)
    return s


def fused_rows_step(task) -> FusedRowsStep | None:
    """The fused-rows step of ``task``, or None when the rule does not apply (see the
    module's docstring); the smallest state must lower, else the rule stays off."""
    from .. import lower

    an = task.analysis
    outs = list(task.ir_dag.outputs)
    if len(outs) != 1:
        return None
    out = outs[0]
    names = {id(st.op): n for n, st in an.stages.items()}
    out_name = names.get(id(out.op))
    if out_name is None or an.stages[out_name].reduce or len(out.shape) < 2:
        return None
    lead = tuple(int(x) for x in out.shape[:-1])
    cols = int(out.shape[-1])
    reds, inlined = [], []
    for name in reversed(an.order()):  # consumers first
        st = an.stages[name]
        if name == out_name:
            continue
        if st.reduce:
            shape = tuple(int(x) for x in st.shape)
            if len(st.reduce) != 1 or shape not in (lead, lead + (1,)):
                return None
            if st.ordered:  # a sum that must run serially: no cross-thread reduction
                return None
            reds.append(st.op.output(0))
        else:
            inlined.append(st.op.output(0))
    if not reds:
        return None
    rows = int(np.prod(lead))
    step = FusedRowsStep(out_name, rows, cols, tuple(names[id(r.op)] for r in reds),
                         an.io_bytes(out), len(reds) + 1, (out, tuple(reds), tuple(inlined)))
    try:
        lower(schedule_fused_rows(step, min(step.threads())), list(task.tensors))
    except Exception:  # noqa: BLE001 - any refusal (schedule, lowering) keeps the rule off
        return None
    return step


def fused_rows_sketches(task) -> list:
    """The fused-rows sketch of ``task`` (empty when the rule does not apply)."""
    step = fused_rows_step(task)
    return [Sketch(f"fused_rows({step.stage})", [step])] if step is not None else []


def fused_rows_model(step: FusedRowsStep, V, hw, n: int) -> dict:
    """Validity, resource use and an analytical time of fused-rows states (vectorized):
    the row's reads (cached after the first pass) at the bandwidth the loads in flight
    allow, the shuffles and barriers of each reduction and the strided loop of each
    thread, over the waves of row blocks."""
    from .kernel_model import _occupancy

    threads = V[step.slot("threads")]
    unroll = V[step.slot("unroll")]
    blocks = np.full(n, step.rows)
    regs = np.full(n, 32) + 8 * unroll
    # a value per warp and the result, per reduction
    shared = (threads // 32 + 1) * 4 * len(step.reductions)
    occ = _occupancy(threads, regs, shared, blocks, hw)
    per_thread = -(-step.cols // threads)
    # strided loops: a few cycles per element (latency hidden by unrolling); per
    # reduction log2(threads) butterfly steps, a barrier between the warps' shuffles
    # above one warp and one before the readers
    loop = step.passes * per_thread * np.where(unroll > 0, 4.0, 12.0)
    tree = len(step.reductions) * (np.log2(threads) * hw.shuffle_cycles
                                   + (1 + (threads > 32)) * hw.barrier_cycles)
    compute = occ["waves"] * (loop + tree) / hw.clock_hz
    # Little's law: a resident warp has one 32-element load of the row in flight per
    # iteration of its strided loop (a few when the loop is unrolled), so few warps with
    # plain loops cannot keep DRAM busy (GPT-2's 1,024-wide softmax rows, one warp each
    # and not unrolled, ran at a fifth of the bandwidth on an H100)
    per_elem = step.unique / max(1, step.rows * step.cols)
    ilp = np.where(unroll > 0, np.minimum(per_thread, 4), 1)
    in_flight = occ["warps_per_sm"] * 32 * per_elem * ilp
    bandwidth = np.minimum(hw.dram_bytes_per_s,
                           hw.num_sms * in_flight * hw.clock_hz / hw.global_latency_cycles)
    mem = step.unique / bandwidth
    valid = (threads <= 1024) & (per_thread >= 1)
    est = np.maximum(compute, mem) + hw.launch_s
    return {"valid": valid, "blocks": blocks, "threads": threads, "regs": regs,
            "shared_bytes": shared, "unique_bytes": np.full(n, step.unique),
            "global_bytes": np.full(n, step.unique), "est": est, **occ}
