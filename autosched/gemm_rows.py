"""The row-epilogue sketch rule: a tensor-core product and a softmax over its rows in one
kernel.

A task whose DAG is a row epilogue (:func:`~ptxforge.ops.schedules.gemm_rows.row_epilogue`:
one tensor-core product, element-wise stages, row reductions over the product's last axis
and an output element-wise in the product, as ``fuse_ops`` makes of an attention's scores
and their softmax) gets the sketch ``gemm_rows(product)``. The general rules see a product
with several readers and only offer CUDA-core kernels for each stage; the tensor-core
rules want element-wise epilogues. Its one step, :class:`RowGemmStep`, samples one of the
tile configurations the default schedule chooses among
(:func:`~ptxforge.ops.schedules.gemm_rows.row_configs`: wgmma on sm_90a where it runs the
product, mma.sync tiles of every warp grid, each with ``block_n = N``) and emits the
default row-epilogue schedule with it (:func:`~ptxforge.ops.schedules.gemm_rows.
schedule_gemm_rows`), so a state is recorded, printed and replayed like any other.
:func:`gemm_rows_model` ranks the states by :func:`~ptxforge.ops.schedules.gemm_rows.
row_time`, the default chooser's estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..passes.schedule.names import slot_name
from .sketch import ChoiceSlot, Sketch


@dataclass(frozen=True)
class RowGemmStep:
    """The product ``stage`` with its row epilogue ending in ``output``; ``configs``: the
    tile configurations a state chooses among (by index); ``form``: the product's
    :class:`~ptxforge.ops.schedules.gemm.forms.GemmForm`; ``tensors``: the task's
    output tensor (not compared)."""

    stage: str
    output: str
    configs: tuple
    form: object = field(compare=False, hash=False)
    target: object = field(default=None, compare=False, hash=False)
    tensors: tuple = field(default=(), compare=False, hash=False)

    def slot(self, kind: str) -> str:
        return slot_name(self.stage, "rows", kind)

    def slots(self) -> list:
        return [ChoiceSlot(self.slot("config"), tuple(range(len(self.configs))))]

    def schedule(self, cfg):
        """The te schedule of the task with tile configuration ``cfg``."""
        return schedule_row_gemm(self, cfg)

    def emit(self, vals, out) -> None:
        cfg = self.configs[int(vals[self.slot("config")])]
        out["structure"].extend(self.schedule(cfg).pipeline)


def _plan(out):
    """A fresh schedule of ``out`` and the row epilogue of its DAG (or None)."""
    from .. import te
    from ..ir.te import ComputeOp
    from ..ops.schedules.gemm_rows import row_epilogue

    s = te.create_schedule(out.op)
    ops = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
    return s, row_epilogue(ops, [out])


def schedule_row_gemm(step: RowGemmStep, cfg):
    """The default row-epilogue schedule of ``step``'s task with configuration ``cfg``."""
    from ..ops.schedules.gemm_rows import schedule_gemm_rows

    (out,) = step.tensors
    s, rows = _plan(out)
    schedule_gemm_rows(s, rows, step.target, cfg)
    return s


def row_gemm_step(task) -> RowGemmStep | None:
    """The row-epilogue step of ``task``, or None when the rule does not apply (not a row
    epilogue, no tensor-core product on the task's target, no tile covering the row)."""
    from ..ops.schedules.gemm.forms import gemm_form
    from ..ops.schedules.gemm_rows import row_configs

    outs = list(task.ir_dag.outputs)
    if len(outs) != 1:
        return None
    (out,) = outs
    _, rows = _plan(out)
    if rows is None:
        return None
    form = gemm_form(rows.product, task.target)
    if form is None:
        return None
    configs = tuple(row_configs(form, task.target))
    if not configs:
        return None
    names = {id(st.op): n for n, st in task.analysis.stages.items()}
    if id(rows.product) not in names or id(rows.output) not in names:
        return None
    return RowGemmStep(names[id(rows.product)], names[id(rows.output)], configs, form,
                       task.target, (out,))


def gemm_rows_sketches(task) -> list:
    """The row-epilogue sketch of ``task`` (empty when the rule does not apply)."""
    step = row_gemm_step(task)
    return [Sketch(f"gemm_rows({step.stage})", [step])] if step is not None else []


def gemm_rows_model(step: RowGemmStep, V, hw, n: int) -> dict:
    """Validity, resource use and the analytical time of row-epilogue states (vectorized
    over the configurations a population picks): every configuration is legal (the rule
    offers only those), the time is :func:`~ptxforge.ops.schedules.gemm_rows.row_time`."""
    from ..ops.schedules.gemm.knobs import WgmmaScheduleConfig
    from ..ops.schedules.gemm.rules import gemm_shared_bytes, wgmma_shared_bytes
    from ..ops.schedules.gemm_rows import row_threads_of, row_time
    from .kernel_model import _occupancy

    f = step.form
    table = []
    for c in step.configs:
        wg = isinstance(c, WgmmaScheduleConfig)
        threads = int(np.prod([x for x, _ in row_threads_of(c)]))
        shared = wgmma_shared_bytes(c, True) if wg else gemm_shared_bytes(c, f, True)
        blocks = f.batch * (f.M // c.block_m)
        table.append((row_time(c, f, step.target), threads, shared, blocks,
                      c.stages, threads // 32, c.block_m * c.block_n // threads))
    T = np.array(table, dtype=np.float64)
    pick = T[np.asarray(V[step.slot("config")], dtype=np.int64)]
    est, threads, shared, blocks = pick[:, 0], pick[:, 1], pick[:, 2], pick[:, 3]
    accum = pick[:, 6]
    regs = np.minimum(255, 48 + accum)
    occ = _occupancy(threads.astype(np.int64), regs, shared, blocks.astype(np.int64), hw)
    flop = 2.0 * f.batch * f.M * f.N * f.K
    unique = f.batch * ((f.M + f.N) * f.K * f.elem_bytes + f.M * f.N * 2)
    return {"valid": np.ones(n, dtype=bool), "blocks": blocks, "threads": threads,
            "accum": accum, "shared_bytes": shared, "global_bytes": np.full(n, float(unique)),
            "unique_bytes": np.full(n, float(unique)), "conflict": np.ones(n), "regs": regs,
            "est": est, "tc_mma_k": np.full(n, f.mma_k), "tc_warps": pick[:, 5],
            "tc_stages": pick[:, 4], "tc_bytes_per_mma": np.zeros(n),
            "tc_flop": np.full(n, flop), "split_k": np.ones(n), **occ}
