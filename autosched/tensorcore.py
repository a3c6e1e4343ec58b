"""The tensor-core sketch rule: matrix products of float16 / bfloat16 inputs on sm_80+.

A task whose computation is a dense product ``C[i, j] = sum(A[i, k] * B[j, k])`` (or
``B[k, j]``), accumulated in float32 (or float16) and optionally cast, gets one extra
sketch, ``tensorcore(C)``, next to the CUDA-core ones (which stay and compete). Its one
step, :class:`TensorCoreStep`, samples the block tile (``block_m x block_n``), the warp
grid (``warps_m x warps_n``: the warp tile is their quotient), ``block_k`` (a multiple of
the intrinsic's k = 16), the number of cp.async pipeline stages, the shared-row padding
(0 or 8 elements: 8 removes ldmatrix bank conflicts) and the copy width; the intrinsic
level is ``mma.sync m16n8k16``. It emits the passes of
:func:`~ptxforge.ops.schedules.tensorcore.schedule_dense_tensorcore` (cache_read /
cache_write to shared and warp scope, split, bind, storage_align, async_copy,
software_pipeline, tensorize), so a state is recorded, printed and replayed like any other.

Tasks with awkward extents (M or K not a multiple of 16, N of 8), other epilogues, other
dtypes (float32 / TF32 is never chosen silently) or targets without mma.sync get no
tensor-core sketch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..passes.schedule.common import ScheduleError
from ..passes.schedule.names import slot_name
from .sketch import ChoiceSlot, Sketch

BLOCK_CHOICES = (16, 32, 64, 128)
BLOCK_K_CHOICES = (16, 32, 64)
WARP_CHOICES = (1, 2, 4)
STAGE_CHOICES = (1, 2, 3, 4)
PAD_CHOICES = (8, 0)
VEC_CHOICES = (8, 4, 2)
MMA_SHAPE = (16, 8, 16)


@dataclass(frozen=True)
class TensorCoreStep:
    """The whole product ``stage`` (and its cast ``output``) on tensor cores."""

    stage: str
    output: str
    M: int
    N: int
    K: int
    in_dtype: str
    out_bytes: int
    tensors: tuple = field(default=(), compare=False, hash=False)   # (A, B, out) te tensors

    def slot(self, kind: str) -> str:
        return slot_name(self.stage, "tc", kind)

    def _divisors(self, choices, extent) -> tuple:
        return tuple(c for c in choices if extent % c == 0) or (choices[0],)

    def slots(self) -> list:
        return [ChoiceSlot(self.slot("block_m"), self._divisors(BLOCK_CHOICES, self.M)),
                ChoiceSlot(self.slot("block_n"), self._divisors(BLOCK_CHOICES, self.N)),
                ChoiceSlot(self.slot("block_k"), self._divisors(BLOCK_K_CHOICES, self.K)),
                ChoiceSlot(self.slot("warps_m"), WARP_CHOICES),
                ChoiceSlot(self.slot("warps_n"), WARP_CHOICES),
                ChoiceSlot(self.slot("stages"), STAGE_CHOICES),
                ChoiceSlot(self.slot("pad"), PAD_CHOICES),
                ChoiceSlot(self.slot("vec"), VEC_CHOICES)]

    def config(self, vals):
        """The :class:`TensorCoreConfig` of one state's values."""
        from ..ops.schedules.tensorcore import TensorCoreConfig

        stages = int(vals[self.slot("stages")])
        return TensorCoreConfig(
            block_m=int(vals[self.slot("block_m")]), block_n=int(vals[self.slot("block_n")]),
            block_k=int(vals[self.slot("block_k")]), warps_m=int(vals[self.slot("warps_m")]),
            warps_n=int(vals[self.slot("warps_n")]), vec=int(vals[self.slot("vec")]),
            pad=int(vals[self.slot("pad")]), stages=stages, async_copy=True)

    def emit(self, vals, out) -> None:
        from ..ops.schedules.tensorcore import schedule_dense_tensorcore

        s = schedule_dense_tensorcore(list(self.tensors), self.config(vals))
        out["structure"].extend(s.pipeline)


def _reads_of(expr) -> list:
    from ..ir.expr import TensorRead, children

    out, stack = [], [expr]
    while stack:
        x = stack.pop()
        if isinstance(x, TensorRead):
            out.append(x)
        stack.extend(children(x))
    return out


def tensorcore_step(task) -> TensorCoreStep | None:
    """The tensor-core step for ``task``, or None when the rule does not apply."""
    from ..ir.te import ComputeOp, PlaceholderOp
    from ..ops.schedules.tensorcore import _is_cast

    an = task.analysis
    target = task.target
    outs = list(task.ir_dag.outputs)
    if len(outs) != 1:
        return None
    out = outs[0]
    c = out.op.input_tensors[0] if _is_cast(out) else out
    if not isinstance(c.op, ComputeOp) or len(c.op.axis) != 2 or len(c.op.reduce_axis) != 1:
        return None
    ins = list(c.op.input_tensors)
    if len(ins) != 2 or not all(isinstance(t.op, PlaceholderOp) for t in ins):
        return None
    dt = ins[0].dtype
    if dt not in ("float16", "bfloat16") or ins[1].dtype != dt:
        return None
    if c.dtype not in ("float32", "float16") or not target.has_mma("m16n8k16", dt):
        return None
    i_var = c.op.axis[0].var
    a = next((r.tensor for r in _reads_of(c.op.body)
              if r.tensor in ins and len(r.indices) == 2 and r.indices[0] is i_var), None)
    if a is None:
        return None
    b = ins[1] if a is ins[0] else ins[0]
    M, N = (int(x.extent) for x in c.op.axis)
    K = int(c.op.reduce_axis[0].extent)
    if M % 16 or N % 8 or K % 16:
        return None
    c_name = next(n for n, st in an.stages.items() if st.op is c.op)
    o_name = next(n for n, st in an.stages.items() if st.op is out.op)
    from ..ir.dtype import nbytes

    step = TensorCoreStep(c_name, o_name, M, N, K, dt, nbytes(out.dtype),
                          (a, b, out))
    try:  # the smallest configuration must schedule (the computation is a plain product)
        from ..ops.schedules.tensorcore import TensorCoreConfig, schedule_dense_tensorcore

        schedule_dense_tensorcore([a, b, out], TensorCoreConfig(16, 8, 16, 1, 1, vec=2,
                                                                 pad=8))
    except ScheduleError:
        return None
    return step


def tensorcore_sketches(task) -> list:
    """The tensor-core sketches of ``task`` (empty when the rule does not apply)."""
    step = tensorcore_step(task)
    if step is None:
        return []
    return [Sketch(f"tensorcore({step.stage})", [step])]


def bank_conflict(row_bytes) -> np.ndarray:
    """The ways an ldmatrix phase (8 rows of 16 bytes at a stride of ``row_bytes``) is
    serialized over the 32 four-byte banks: 1 when the rows fall on distinct 16-byte bank
    groups, 8 when they all hit the same one."""
    rb = np.asarray(row_bytes, dtype=np.int64)
    distinct = np.minimum(8, 128 // np.gcd(rb, 128))
    return 8 // np.maximum(distinct, 1)


def tensorcore_model(step: TensorCoreStep, V, hw, n: int) -> dict:
    """Validity, resource use and an analytical time of tensor-core states (vectorized)."""
    from .kernel_model import _occupancy

    bm, bn, bk = V[step.slot("block_m")], V[step.slot("block_n")], V[step.slot("block_k")]
    wm_, wn_ = V[step.slot("warps_m")], V[step.slot("warps_n")]
    stages, pad, vec = V[step.slot("stages")], V[step.slot("pad")], V[step.slot("vec")]
    warps = wm_ * wn_
    threads = warps * 32
    wm, wn = bm // wm_, bn // wn_
    eb = 2
    valid = ((step.M % bm == 0) & (step.N % bn == 0) & (step.K % bk == 0)
             & (bm % wm_ == 0) & (wm % 16 == 0) & (bn % wn_ == 0) & (wn % 8 == 0)
             & ((bm * bk) % (threads * vec) == 0) & ((bn * bk) % (threads * vec) == 0))
    shared = np.maximum(stages, 1) * (bm + bn) * (bk + pad) * eb
    valid &= shared <= hw.max_shared_memory_per_block
    blocks = (step.M // np.maximum(bm, 1)) * (step.N // np.maximum(bn, 1))
    k_iters = step.K // np.maximum(bk, 1)
    valid &= (stages == 1) | (k_iters >= stages)
    accum = (wm * wn) // 32               # fp32 accumulators per lane
    regs = 32 + accum + (wm // 16) * 4 + (wn // 8) * 2
    valid &= accum <= hw.max_accumulators_per_thread
    occ = _occupancy(threads, regs, shared, blocks, hw)
    flop = 2.0 * step.M * step.N * step.K
    mmas_per_warp_k = (wm // 16) * (wn // 8)          # per k step of 16
    bytes_per_mma = ((wm // 16) * 512 + (wn // 8) * 256) / np.maximum(mmas_per_warp_k, 1)
    conflict = bank_conflict((bk + pad) * eb)
    # tensor-core time: the GPU's tensor rate over the SMs the launch fills, throttled when
    # a warp has few independent MMAs to hide their latency
    tc_rate = hw.tensor_flops_per_sm_per_clock * hw.clock_hz
    per_sm_blocks = -(-blocks // hw.num_sms)
    per_block_flop = 2.0 * bm * bn * step.K
    ilp = np.minimum(1.0, occ["warps_per_sm"] * np.minimum(mmas_per_warp_k, 8) / 32.0)
    mma = per_sm_blocks * per_block_flop / (tc_rate * np.maximum(ilp, 0.05))
    # fragments from shared memory: ldmatrix bytes per block, serialized by bank conflicts
    lds_bytes = per_block_flop / 2.0 / 16.0 * (1.0 / wn + 1.0 / wm) * 16.0 * eb
    lds = per_sm_blocks * lds_bytes * conflict / (hw.shared_words_per_sm_per_clock * 4.0
                                                  * hw.clock_hz)
    global_bytes = blocks * (bm + bn) * step.K * eb
    unique = (step.M + step.N) * step.K * eb + step.M * step.N * step.out_bytes
    mem = np.maximum(unique / hw.dram_bytes_per_s, global_bytes / hw.l2_bytes_per_s)
    # each k step waits for its tiles unless the pipeline keeps stages - 1 loads in flight
    latency = hw.global_latency_cycles / np.maximum(stages - 1, 1) + hw.barrier_cycles
    sync = occ["waves"] * k_iters * latency / hw.clock_hz
    est = np.maximum(np.maximum(mma, lds), mem) + sync + hw.launch_s
    return {"valid": valid, "blocks": blocks, "threads": threads, "accum": accum,
            "shared_bytes": shared, "global_bytes": global_bytes,
            "unique_bytes": np.full(n, float(unique)), "conflict": conflict,
            "regs": regs, "r0": k_iters, "est": est, "tc_mma_k": np.full(n, MMA_SHAPE[2]),
            "tc_warps": warps, "tc_stages": stages, "tc_bytes_per_mma": bytes_per_mma,
            "tc_flop": np.full(n, flop), **occ}
